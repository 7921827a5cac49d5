{{/*
Chart name, truncated to a DNS label.
*/}}
{{- define "tf-multiworker.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name of the release's resources (StatefulSet, headless Service, ...). At most 52
characters: the StatefulSet's controller-revision-hash label is "<name>-<10 char hash>"
and must fit in 63. It also names the headless Service, a DNS-1035 label, so it must
start with a letter.
*/}}
{{- define "tf-multiworker.fullname" -}}
{{- $name := "" }}
{{- if .Values.fullnameOverride }}
{{- $name = .Values.fullnameOverride }}
{{- else }}
{{- $base := default .Chart.Name .Values.nameOverride }}
{{- if contains $base .Release.Name }}
{{- $name = .Release.Name }}
{{- else }}
{{- $name = printf "%s-%s" .Release.Name $base }}
{{- end }}
{{- end }}
{{- $name = $name | trunc 52 | trimSuffix "-" }}
{{- if not (regexMatch "^[a-z]([-a-z0-9]*[a-z0-9])?$" $name) }}
{{- fail (printf "fullname %q is not a DNS-1035 label (it names the headless Service and must start with a letter): set fullnameOverride" $name) }}
{{- end }}
{{- $name }}
{{- end }}

{{/*
Chart label value.
*/}}
{{- define "tf-multiworker.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels every resource carries (pods take podLabels instead).
*/}}
{{- define "tf-multiworker.labels" -}}
helm.sh/chart: {{ include "tf-multiworker.chart" . }}
{{ include "tf-multiworker.podLabels" . }}
{{- if .Chart.AppVersion }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
{{- end }}

{{/*
Labels of pods and pod templates: the standard labels without helm.sh/chart and
app.kubernetes.io/version. A pod template that changed with the chart's version would make
an upgrade that bumps only the chart restart every worker mid-training.
*/}}
{{- define "tf-multiworker.podLabels" -}}
{{ include "tf-multiworker.selectorLabels" . }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: tf-multiworker
{{- end }}

{{/*
Labels shared by every pod of the release (workers, TensorBoard, helm test pods): the
NetworkPolicy admits gRPC traffic from exactly these.
*/}}
{{- define "tf-multiworker.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tf-multiworker.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
Selector of the worker pods only. The component label keeps the StatefulSet from
claiming the release's other pods (TensorBoard, helm test hooks).
*/}}
{{- define "tf-multiworker.workerSelectorLabels" -}}
{{ include "tf-multiworker.selectorLabels" . }}
app.kubernetes.io/component: worker
{{- end }}

{{/*
Labels of the worker resources (StatefulSet, Service, ConfigMap, ...).
*/}}
{{- define "tf-multiworker.workerLabels" -}}
{{ include "tf-multiworker.labels" . }}
app.kubernetes.io/component: worker
{{- end }}

{{/*
Labels of the worker pods (the StatefulSet's pod template).
*/}}
{{- define "tf-multiworker.workerPodLabels" -}}
{{ include "tf-multiworker.podLabels" . }}
app.kubernetes.io/component: worker
{{- end }}

{{/*
Name of the headless Service giving every worker a stable DNS name.
*/}}
{{- define "tf-multiworker.serviceName" -}}
{{- include "tf-multiworker.fullname" . }}
{{- end }}

{{/*
Name of the ConfigMap holding the trainer's config.
*/}}
{{- define "tf-multiworker.trainingConfigName" -}}
{{- printf "%s-training" (include "tf-multiworker.fullname" .) }}
{{- end }}

{{/*
Where the training ConfigMap is mounted, and the file the trainer reads.
*/}}
{{- define "tf-multiworker.trainingConfigDir" -}}
/etc/tf-multiworker
{{- end }}
{{- define "tf-multiworker.trainingConfigPath" -}}
{{- printf "%s/training.yaml" (include "tf-multiworker.trainingConfigDir" .) }}
{{- end }}

{{/*
The trainer's config as the ConfigMap holds it. The workers' checksum annotation hashes
this, not the whole ConfigMap, whose labels carry the chart version.
*/}}
{{- define "tf-multiworker.trainingConfigYaml" -}}
{{- toYaml .Values.training.config }}
{{- end }}

{{/*
Run id: training.runId, or the release name.
*/}}
{{- define "tf-multiworker.runId" -}}
{{- default .Release.Name .Values.training.runId }}
{{- end }}

{{/*
Fully qualified DNS name of worker `index`: the address TF_CONFIG lists for it.
Usage: include "tf-multiworker.peerHost" (dict "root" $ "index" 0)
*/}}
{{- define "tf-multiworker.peerHost" -}}
{{- $root := .root }}
{{- printf "%s-%d.%s.%s.svc.%s" (include "tf-multiworker.fullname" $root) (int .index) (include "tf-multiworker.serviceName" $root) $root.Release.Namespace $root.Values.clusterDomain }}
{{- end }}

{{/*
Container image reference: the digest wins over the tag. An empty tag means the image
`make image` builds for these workers: `<appVersion>` (VARIANT=gpu) when workers.gpus > 0,
`<appVersion>-cpu` (VARIANT=cpu, tensorflow-cpu) when workers.gpus is 0.
Usage: include "tf-multiworker.image" (dict "image" .Values.image "appVersion" .Chart.AppVersion "gpus" .Values.workers.gpus)
*/}}
{{- define "tf-multiworker.image" -}}
{{- $image := .image }}
{{- if $image.digest }}
{{- printf "%s@%s" $image.repository $image.digest }}
{{- else }}
{{- $variantTag := ternary (printf "%s" .appVersion) (printf "%s-cpu" .appVersion) (gt (int .gpus) 0) }}
{{- printf "%s:%s" $image.repository (default $variantTag $image.tag) }}
{{- end }}
{{- end }}

{{/*
Shared storage path as the workers see it (TFMW_SHARED_DIR).
*/}}
{{- define "tf-multiworker.sharedDir" -}}
{{- if eq .Values.storage.type "objectStore" }}
{{- .Values.storage.objectStore.uri | trimSuffix "/" }}
{{- else }}
{{- .Values.storage.mountPath }}
{{- end }}
{{- end }}

{{/*
ServiceAccount of every pod of the release.
*/}}
{{- define "tf-multiworker.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "tf-multiworker.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
Name of the PodGroup (Volcano, coscheduling) / Kueue pod group of the workers.
*/}}
{{- define "tf-multiworker.podGroupName" -}}
{{- include "tf-multiworker.fullname" . }}
{{- end }}

{{/*
schedulerName of the workers: the explicit value, else the gang choice's scheduler.
Empty means the cluster's default scheduler (the field is then not rendered).
*/}}
{{- define "tf-multiworker.schedulerName" -}}
{{- $gang := .Values.scheduling.gang }}
{{- if .Values.scheduling.schedulerName }}
{{- .Values.scheduling.schedulerName }}
{{- else if eq $gang "volcano" }}volcano
{{- else if eq $gang "coscheduling" }}scheduler-plugins-scheduler
{{- else if eq $gang "runai" }}runai-scheduler
{{- end }}
{{- end }}

{{/*
Pod-level settings every pod of the chart shares: its own ServiceAccount without an API
token (only the worker container gets one, projected, with API access on), no service-link variables (a Service named
like a TFMW_* prefix would otherwise inject look-alike variables), the restricted security
context.
*/}}
{{- define "tf-multiworker.podCommon" -}}
serviceAccountName: {{ include "tf-multiworker.serviceAccountName" . }}
automountServiceAccountToken: false
enableServiceLinks: false
{{- with .Values.podSecurityContext }}
securityContext:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/*
Volumes and mounts of the writable directories in the read-only root filesystem.
*/}}
{{- define "tf-multiworker.writableVolumes" -}}
{{- range $i, $dir := .Values.writableDirs }}
- name: writable-{{ $i }}
  emptyDir: {}
{{- end }}
{{- end }}
{{- define "tf-multiworker.writableMounts" -}}
{{- range $i, $dir := .Values.writableDirs }}
- name: writable-{{ $i }}
  mountPath: {{ $dir }}
{{- end }}
{{- end }}

{{/*
The shared storage volume (absent for objectStore: TensorFlow writes to the URI itself).
*/}}
{{- define "tf-multiworker.sharedVolume" -}}
{{- $storage := .Values.storage }}
{{- if eq $storage.type "emptyDir" }}
- name: shared
  {{- if $storage.emptyDir.sizeLimit }}
  emptyDir:
    sizeLimit: {{ $storage.emptyDir.sizeLimit | quote }}
  {{- else }}
  emptyDir: {}
  {{- end }}
{{- else if eq $storage.type "existingClaim" }}
- name: shared
  persistentVolumeClaim:
    claimName: {{ $storage.existingClaim.claimName }}
{{- else if eq $storage.type "createClaim" }}
- name: shared
  persistentVolumeClaim:
    claimName: {{ include "tf-multiworker.claimName" . }}
{{- end }}
{{- end }}
{{- define "tf-multiworker.sharedMount" -}}
{{- $storage := .Values.storage }}
{{- if ne $storage.type "objectStore" }}
- name: shared
  mountPath: {{ $storage.mountPath }}
  {{- if and (eq $storage.type "existingClaim") $storage.existingClaim.subPath }}
  subPath: {{ $storage.existingClaim.subPath }}
  {{- end }}
{{- end }}
{{- end }}

{{/*
Name of the PVC the chart creates (storage.type=createClaim).
*/}}
{{- define "tf-multiworker.claimName" -}}
{{- printf "%s-shared" (include "tf-multiworker.fullname" .) }}
{{- end }}

{{/*
Object-store credentials: every key of the existing Secret as an env variable.
*/}}
{{- define "tf-multiworker.objectStoreEnvFrom" -}}
{{- if and (eq .Values.storage.type "objectStore") .Values.storage.objectStore.existingSecret }}
- secretRef:
    name: {{ .Values.storage.objectStore.existingSecret }}
{{- end }}
{{- end }}

{{/*
checkov skips of a pod-owning resource, each with its reason (docs/security.md).
Usage: include "tf-multiworker.checkovSkips" (dict "root" $ "extra" (list "CKV_K8S_x=why" ...))
*/}}
{{- define "tf-multiworker.checkovSkips" -}}
{{- $root := .root }}
{{- $skips := list "CKV_K8S_40=the image's user tfmw is UID 1000 (Dockerfile); a high UID would not own its home or the shared files" }}
{{- if not $root.Values.image.digest }}
{{- $skips = append $skips "CKV_K8S_43=pinned by tag until the release pipeline sets image.digest (digest wins over tag when set)" }}
{{- end }}
{{- if ne $root.Values.image.pullPolicy "Always" }}
{{- $skips = append $skips "CKV_K8S_15=multi-GB GPU image pinned by tag or digest; re-pulling on every start only delays the gang" }}
{{- end }}
{{- if and .objectStoreEnv (include "tf-multiworker.objectStoreEnvFrom" $root) }}
{{- $skips = append $skips "CKV_K8S_35=object-store storage: the object-store SDKs read their credentials from environment variables (envFrom an existing Secret)" }}
{{- end }}
{{- $skips = concat $skips (default (list) .extra) }}
{{- range $i, $skip := $skips }}
checkov.io/skip{{ add1 $i }}: {{ $skip | quote }}
{{- end }}
{{- end }}

{{/*
TensorBoard's name and pod labels.
*/}}
{{- define "tf-multiworker.tensorboardName" -}}
{{- printf "%s-tensorboard" (include "tf-multiworker.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- define "tf-multiworker.tensorboardSelectorLabels" -}}
{{ include "tf-multiworker.selectorLabels" . }}
app.kubernetes.io/component: tensorboard
{{- end }}

{{/*
"API access": the workers talk to the Kubernetes API (record the run's status, create
Events, scale their own StatefulSet) when rbac.create and a completion action is
scaleToZero. "true" or empty.
*/}}
{{- define "tf-multiworker.apiAccess" -}}
{{- $completion := .Values.completion }}
{{- if and .Values.rbac.create (or (eq $completion.onSuccess "scaleToZero") (eq $completion.onFailure "scaleToZero")) -}}
true
{{- end }}
{{- end }}

{{/*
The ConfigMap the chief records the run's status in (rendered without data: the chief
patches it at run time, and rendered data would let `helm upgrade` overwrite the record).
*/}}
{{- define "tf-multiworker.statusConfigMapName" -}}
{{- printf "%s-status" (include "tf-multiworker.fullname" .) }}
{{- end }}

{{/*
Where the worker container finds its API credentials (token, ca.crt, namespace): apart
from the conventional serviceaccount directory, which stays empty (no automount).
*/}}
{{- define "tf-multiworker.apiDir" -}}
/var/run/secrets/tf-multiworker/api
{{- end }}

{{/*
Every check of the values the schema cannot express, in one place: one `fail` listing each
problem on a line of its own (rendered first thing by the StatefulSet, which is always there).
*/}}
{{- define "tf-multiworker.validateValues" -}}
{{- $problems := list }}
{{- /* Variables the chart or the entrypoint derives per pod: a user value would shadow them. */}}
{{- $chartEnv := list "TFMW_POD_NAME" "TFMW_NAMESPACE" "TFMW_STATEFULSET" "TFMW_SERVICE" "TFMW_REPLICAS" "TFMW_PORT" "TFMW_CLUSTER_DOMAIN" "TFMW_PEER_TIMEOUT_SECONDS" "TFMW_MAX_RESTARTS" "TFMW_HANG_TIMEOUT_SECONDS" "TFMW_TRAINING_CONFIG" "TFMW_SHARED_DIR" "TFMW_RUN_ID" "TFMW_ON_SUCCESS" "TFMW_ON_FAILURE" "TFMW_ACTIVE_DEADLINE_SECONDS" "TFMW_POD_REVISION" "TFMW_API_DIR" "TFMW_STATUS_CONFIGMAP" "TF_CONFIG" }}
{{- range $i, $env := .Values.workers.extraEnv }}
{{- if has $env.name $chartEnv }}
{{- $problems = append $problems (printf "workers.extraEnv[%d].name=%s: this variable is derived from values by the chart or the entrypoint (docs/contracts.md); set the matching value instead" $i $env.name) }}
{{- end }}
{{- end }}
{{- if and .Values.tensorboard.enabled (eq .Values.storage.type "emptyDir") }}
{{- $problems = append $problems "tensorboard.enabled=true needs shared storage: set storage.type to existingClaim, createClaim or objectStore (an emptyDir is private to each worker)" }}
{{- end }}
{{- /* TF 2.21 registers only file, ram and gs file systems (docs/image.md): s3 and hdfs moved to tensorflow-io, which has no TF 2.21 release. */}}
{{- $scheme := regexReplaceAll "://.*$" (lower .Values.storage.objectStore.uri) "" }}
{{- if and (eq .Values.storage.type "objectStore") (has $scheme (list "s3" "hdfs")) }}
{{- $problems = append $problems (printf "storage.objectStore.uri=%s: the image's TensorFlow has no %s:// file system (it moved to tensorflow-io, which has no release for TF 2.21); use gs://, or a ReadWriteMany claim (storage.type=existingClaim or createClaim)" .Values.storage.objectStore.uri $scheme) }}
{{- end }}
{{- if not .Values.rbac.create }}
{{- range $key := list "onSuccess" "onFailure" }}
{{- if eq (get $.Values.completion $key) "scaleToZero" }}
{{- $problems = append $problems (printf "completion.%s=scaleToZero needs rbac.create=true (the workers scale their own StatefulSet): set rbac.create=true or completion.%s=idle" $key $key) }}
{{- end }}
{{- end }}
{{- end }}
{{- if and (include "tf-multiworker.apiAccess" .) (not .Values.serviceAccount.create) (not .Values.serviceAccount.name) }}
{{- $problems = append $problems "serviceAccount.name is empty with serviceAccount.create=false: the workers' Role (completion.onSuccess/onFailure=scaleToZero) would be bound to the namespace's default ServiceAccount; set serviceAccount.name to an account of these workers' own, or serviceAccount.create=true" }}
{{- end }}
{{- if $problems }}
{{- fail (join "\n" $problems) }}
{{- end }}
{{- end }}
