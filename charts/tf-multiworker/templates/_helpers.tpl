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
start with a letter (validateValues refuses a name that does not).
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
{{- $name | trunc 52 | trimSuffix "-" }}
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
helm.sh/chart: {{ include "tf-multiworker.chart" . | quote }}
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
app.kubernetes.io/managed-by: {{ .Release.Service | quote }}
app.kubernetes.io/part-of: tf-multiworker
{{- end }}

{{/*
Labels shared by every pod of the release (workers, TensorBoard, helm test pods): the
NetworkPolicy admits gRPC traffic from exactly these.
*/}}
{{- define "tf-multiworker.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tf-multiworker.name" . | quote }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
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
serviceAccountName: {{ include "tf-multiworker.serviceAccountName" . | quote }}
{{ include "tf-multiworker.podSecurity" . }}
{{- end }}
{{- define "tf-multiworker.podSecurity" -}}
automountServiceAccountToken: false
enableServiceLinks: false
{{- with .Values.podSecurityContext }}
securityContext:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/*
The API credentials of one container alone (the pod's automount stays off): a short-lived
token for the API server's own audience, the cluster CA, the namespace. Mounted at apiDir.
*/}}
{{- define "tf-multiworker.apiAccessVolume" -}}
- name: api-access
  projected:
    sources:
      - serviceAccountToken:
          path: token
          expirationSeconds: {{ .Values.completion.tokenExpirationSeconds }}
      - configMap:
          name: kube-root-ca.crt
          items:
            - key: ca.crt
              path: ca.crt
      - downwardAPI:
          items:
            - path: namespace
              fieldRef:
                fieldPath: metadata.namespace
{{- end }}

{{/*
training.files: the ConfigMap holding them, where the workers see them (read-only), and
the text their checksum annotation hashes (a changed file rolls the workers).
*/}}
{{- define "tf-multiworker.filesName" -}}
{{- printf "%s-files" (include "tf-multiworker.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- define "tf-multiworker.filesDir" -}}
/opt/tf-multiworker/files
{{- end }}
{{- define "tf-multiworker.filesYaml" -}}
{{- toYaml (default (dict) .Values.training.files) }}
{{- end }}

{{/*
The evaluator (evaluator.enabled): its Job's name carries a hash of its pod template, because
a Job's template is immutable: a changed template is a new Job (helm deletes the old one)
instead of a failed `helm upgrade`.
*/}}
{{- define "tf-multiworker.evaluatorBaseName" -}}
{{- printf "%s-evaluator" (include "tf-multiworker.fullname" .) | trunc 54 | trimSuffix "-" }}
{{- end }}
{{- define "tf-multiworker.evaluatorSelectorLabels" -}}
{{ include "tf-multiworker.selectorLabels" . }}
app.kubernetes.io/component: evaluator
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
  mountPath: {{ $dir | quote }}
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
    claimName: {{ $storage.existingClaim.claimName | quote }}
{{- else if eq $storage.type "createClaim" }}
- name: shared
  persistentVolumeClaim:
    claimName: {{ include "tf-multiworker.claimName" . | quote }}
{{- end }}
{{- end }}
{{- define "tf-multiworker.sharedMount" -}}
{{- $storage := .Values.storage }}
{{- if ne $storage.type "objectStore" }}
- name: shared
  mountPath: {{ $storage.mountPath | quote }}
  {{- if and (eq $storage.type "existingClaim") $storage.existingClaim.subPath }}
  subPath: {{ $storage.existingClaim.subPath | quote }}
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
    name: {{ .Values.storage.objectStore.existingSecret | quote }}
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
Mounts outside the chart's own volumes: the kubelet's per-container files. A user mount at
one of these paths would collide with them.
*/}}
{{- define "tf-multiworker.kubeletMounts" -}}
/etc/hosts /etc/hostname /etc/resolv.conf /dev/termination-log
{{- end }}

{{/*
Every check of the values the schema cannot express, in one place: one `fail` listing each
problem on a line of its own (rendered first thing by the StatefulSet, which is always there).
Each line names the key and the fix.
*/}}
{{- define "tf-multiworker.validateValues" -}}
{{- $problems := list }}
{{- $v := .Values }}
{{- $workers := $v.workers }}
{{- $gpus := int $workers.gpus }}
{{- $replicas := int $workers.replicas }}
{{- $apiAccess := include "tf-multiworker.apiAccess" . }}
{{- /* The namespace is part of every worker's DNS name (TF_CONFIG). */}}
{{- $ns := .Release.Namespace }}
{{- if not (and (le (len $ns) 63) (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" $ns)) }}
{{- $problems = append $problems (printf "namespace %q is not a DNS-1123 label (lowercase letters, digits and '-', at most 63 characters), and it is part of every worker's DNS name: install into another namespace (--namespace)" $ns) }}
{{- end }}
{{- /* The full name names the headless Service, a DNS-1035 label. */}}
{{- $fullname := include "tf-multiworker.fullname" . }}
{{- if not (regexMatch "^[a-z]([-a-z0-9]*[a-z0-9])?$" $fullname) }}
{{- $problems = append $problems (printf "fullname %q is not a DNS-1035 label (it names the headless Service and must start with a letter): set fullnameOverride" $fullname) }}
{{- end }}
{{- /* Variables the chart or the entrypoint derives per pod: a user value would shadow them.
       Names are compared case-insensitively; TFMW_* is reserved as a whole. */}}
{{- $chartEnv := list "TFMW_POD_NAME" "TFMW_NAMESPACE" "TFMW_STATEFULSET" "TFMW_SERVICE" "TFMW_REPLICAS" "TFMW_PORT" "TFMW_METRICS_PORT" "TFMW_KEEP_LOG_MIB" "TFMW_CLUSTER_DOMAIN" "TFMW_PEER_TIMEOUT_SECONDS" "TFMW_MAX_RESTARTS" "TFMW_HANG_TIMEOUT_SECONDS" "TFMW_HANG_DETECTION" "TFMW_TRAINING_CONFIG" "TFMW_SHARED_DIR" "TFMW_RUN_ID" "TFMW_ON_SUCCESS" "TFMW_ON_FAILURE" "TFMW_ACTIVE_DEADLINE_SECONDS" "TFMW_WARM_STANDBY" "TFMW_POD_REVISION" "TFMW_API_DIR" "TFMW_STATUS_CONFIGMAP" "TF_CONFIG" }}
{{- $ncclEnv := list }}
{{- if gt $gpus 0 }}
{{- with $workers.nccl }}
{{- if .debug }}{{ $ncclEnv = append $ncclEnv "NCCL_DEBUG" }}{{ end }}
{{- if .socketIfname }}{{ $ncclEnv = append $ncclEnv "NCCL_SOCKET_IFNAME" }}{{ end }}
{{- if .ibDisable }}{{ $ncclEnv = append $ncclEnv "NCCL_IB_DISABLE" }}{{ end }}
{{- $ncclEnv = concat $ncclEnv (keys (default (dict) .extraEnv)) }}
{{- end }}
{{- end }}
{{- $seenEnv := dict }}
{{- range $i, $env := $workers.extraEnv }}
{{- $name := toString $env.name }}
{{- if has (upper $name) $chartEnv }}
{{- $problems = append $problems (printf "workers.extraEnv[%d].name=%s: this variable is derived from values by the chart or the entrypoint (docs/contracts.md); set the matching value instead" $i $name) }}
{{- else if hasPrefix "TFMW_" (upper $name) }}
{{- $problems = append $problems (printf "workers.extraEnv[%d].name=%s: names starting with TFMW_ (any case) are reserved for the chart and the entrypoint (docs/contracts.md); rename the variable" $i $name) }}
{{- else if has $name $ncclEnv }}
{{- $problems = append $problems (printf "workers.extraEnv[%d].name=%s: the chart already sets it from workers.nccl; set it there only" $i $name) }}
{{- end }}
{{- if hasKey $seenEnv $name }}
{{- $problems = append $problems (printf "workers.extraEnv[%d].name=%s: duplicate of workers.extraEnv[%v] (the later would silently win); keep one" $i $name (get $seenEnv $name)) }}
{{- else }}
{{- $_ := set $seenEnv $name $i }}
{{- end }}
{{- end }}
{{- /* Labels the chart sets on the worker pods: a podLabels entry would move the pods out of
       the StatefulSet's selector, the Service and the NetworkPolicy. */}}
{{- $gang := $v.scheduling.gang }}
{{- $chartLabels := list "app.kubernetes.io/name" "app.kubernetes.io/instance" "app.kubernetes.io/component" "app.kubernetes.io/managed-by" "app.kubernetes.io/part-of" "controller-revision-hash" "statefulset.kubernetes.io/pod-name" "apps.kubernetes.io/pod-index" }}
{{- if eq $gang "coscheduling" }}{{ $chartLabels = append $chartLabels "scheduling.x-k8s.io/pod-group" }}{{ end }}
{{- if eq $gang "kueue" }}{{ $chartLabels = concat $chartLabels (list "kueue.x-k8s.io/queue-name" "kueue.x-k8s.io/pod-group-name") }}{{ end }}
{{- if eq $gang "runai" }}{{ $chartLabels = concat $chartLabels (list "project" "kai.scheduler/queue") }}{{ end }}
{{- range $key := keys (default (dict) $workers.podLabels) | sortAlpha }}
{{- if has $key $chartLabels }}
{{- $problems = append $problems (printf "workers.podLabels.%s: the chart (or the StatefulSet controller) sets this label on the worker pods and selects them by it; choose another label key" $key) }}
{{- end }}
{{- end }}
{{- $chartAnnotations := list "checksum/training-config" }}
{{- if eq $gang "volcano" }}{{ $chartAnnotations = append $chartAnnotations "scheduling.k8s.io/group-name" }}{{ end }}
{{- if eq $gang "kueue" }}{{ $chartAnnotations = append $chartAnnotations "kueue.x-k8s.io/pod-group-total-count" }}{{ end }}
{{- range $key := keys (default (dict) $workers.podAnnotations) | sortAlpha }}
{{- if has $key $chartAnnotations }}
{{- $problems = append $problems (printf "workers.podAnnotations.%s: the chart sets this annotation on the worker pods; choose another annotation key" $key) }}
{{- end }}
{{- end }}
{{- if and $v.metrics.enabled (eq (int $v.metrics.port) (int $workers.port)) }}
{{- $problems = append $problems (printf "metrics.port=%d is workers.port, the unauthenticated gRPC port: set metrics.port to another port (default 9090)" (int $v.metrics.port)) }}
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
{{- if and $apiAccess (not .Values.serviceAccount.create) (not .Values.serviceAccount.name) }}
{{- $problems = append $problems "serviceAccount.name is empty with serviceAccount.create=false: the workers' Role (completion.onSuccess/onFailure=scaleToZero) would be bound to the namespace's default ServiceAccount; set serviceAccount.name to an account of these workers' own, or serviceAccount.create=true" }}
{{- end }}
{{- /* Every mount of the worker container: the kubelet refuses a duplicate mountPath, a mount
       inside a read-only volume cannot be created, and one above a chart mount hides the
       image's files (/etc, /var). */}}
{{- $storage := $v.storage }}
{{- $fixed := list (dict "path" (include "tf-multiworker.trainingConfigDir" .) "key" "the training config (read-only, fixed)" "readOnly" true) }}
{{- if $workers.shm.enabled }}{{ $fixed = append $fixed (dict "path" "/dev/shm" "key" "workers.shm.enabled (/dev/shm)" "readOnly" false) }}{{ end }}
{{- if $apiAccess }}{{ $fixed = append $fixed (dict "path" (include "tf-multiworker.apiDir" .) "key" "the API credentials (read-only, fixed)" "readOnly" true) }}{{ end }}
{{- range $path := splitList " " (include "tf-multiworker.kubeletMounts" .) }}{{ $fixed = append $fixed (dict "path" $path "key" "the kubelet's own file" "readOnly" true) }}{{ end }}
{{- if $v.training.files }}{{ $fixed = append $fixed (dict "path" (include "tf-multiworker.filesDir" .) "key" "training.files (read-only, fixed)" "readOnly" true) }}{{ end }}
{{- $user := list }}
{{- if ne $storage.type "objectStore" }}{{ $user = append $user (dict "path" (toString $storage.mountPath) "key" "storage.mountPath") }}{{ end }}
{{- range $i, $dir := $v.writableDirs }}{{ $user = append $user (dict "path" (toString $dir) "key" (printf "writableDirs[%d]" $i)) }}{{ end }}
{{- range $i, $m := $workers.extraVolumeMounts }}{{ $user = append $user (dict "path" (toString $m.mountPath) "key" (printf "workers.extraVolumeMounts[%d].mountPath" $i)) }}{{ end }}
{{- range $i, $m := $user }}
{{- $p := $m.path }}
{{- if ne (clean $p) $p }}
{{- $problems = append $problems (printf "%s=%s: not a clean absolute path (no '.' or '..' segments); write it as %s" $m.key $p (clean $p)) }}
{{- else if or (has $p (list "/" "/dev" "/etc" "/var" "/usr" "/bin" "/lib")) (regexMatch "^/(proc|sys)(/|$)" $p) }}
{{- $problems = append $problems (printf "%s=%s: a volume there would hide the image's or the kernel's files; choose a directory of its own (e.g. /shared, /data)" $m.key $p) }}
{{- else }}
{{- range $f := $fixed }}
{{- if eq $p $f.path }}
{{- $problems = append $problems (printf "%s=%s: %s is mounted there already (the kubelet refuses duplicate mount paths); choose another path" $m.key $p $f.key) }}
{{- else if and $f.readOnly (hasPrefix (printf "%s/" $f.path) $p) }}
{{- $problems = append $problems (printf "%s=%s: inside %s, mounted read-only at %s (the mount point cannot be created); choose another path" $m.key $p $f.key $f.path) }}
{{- else if hasPrefix (printf "%s/" $p) $f.path }}
{{- $problems = append $problems (printf "%s=%s: above %s at %s, it would hide the image's files there; choose a directory of its own" $m.key $p $f.key $f.path) }}
{{- end }}
{{- end }}
{{- range $j, $other := $user }}
{{- if and (lt $j $i) (eq $p $other.path) }}
{{- $problems = append $problems (printf "%s=%s: %s is mounted there already (the kubelet refuses duplicate mount paths); choose another path" $m.key $p $other.key) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- /* workers.extraVolumes / extraVolumeMounts (Bitnami's convention): their own names, the
       volume types Pod Security "restricted" allows, mounts of those volumes only. */}}
{{- $chartVolumes := list "training-config" "shared" "dshm" "api-access" "training-files" }}
{{- range $i, $dir := $v.writableDirs }}{{ $chartVolumes = append $chartVolumes (printf "writable-%d" $i) }}{{ end }}
{{- $restrictedTypes := list "configMap" "csi" "downwardAPI" "emptyDir" "ephemeral" "persistentVolumeClaim" "projected" "secret" }}
{{- $extraNames := list }}
{{- range $i, $vol := $workers.extraVolumes }}
{{- $name := toString $vol.name }}
{{- if has $name $chartVolumes }}
{{- $problems = append $problems (printf "workers.extraVolumes[%d].name=%s: the chart names one of its own volumes so; choose another name" $i $name) }}
{{- else if has $name $extraNames }}
{{- $problems = append $problems (printf "workers.extraVolumes[%d].name=%s: duplicate volume name; give each volume its own" $i $name) }}
{{- end }}
{{- $extraNames = append $extraNames $name }}
{{- if not (default (dict) $v.security).allowUnsafe }}
{{- range $type := without (keys $vol | sortAlpha) "name" }}
{{- if not (has $type $restrictedTypes) }}
{{- $problems = append $problems (printf "workers.extraVolumes[%d] (%s) is a %s volume: Pod Security \"restricted\" allows only %s; use one of those, or set security.allowUnsafe=true to run weaker pods on purpose (docs/security.md)" $i $name $type (join ", " $restrictedTypes)) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- range $i, $m := $workers.extraVolumeMounts }}
{{- if not (has (toString $m.name) $extraNames) }}
{{- $problems = append $problems (printf "workers.extraVolumeMounts[%d].name=%s names no entry of workers.extraVolumes; add the volume there (the chart's own volumes are mounted by the chart)" $i (toString $m.name)) }}
{{- end }}
{{- end }}
{{- /* training.files: ConfigMap keys, and what one ConfigMap can hold. */}}
{{- $filesBytes := 0 }}
{{- range $name, $text := default (dict) $v.training.files }}
{{- if not (regexMatch "^[-._a-zA-Z0-9]{1,253}$" $name) }}
{{- $problems = append $problems (printf "training.files.%s: a file name may hold only letters, digits, '-', '_' and '.' (a ConfigMap key); rename the file" $name) }}
{{- end }}
{{- $filesBytes = add $filesBytes (len $name) (len (toString $text)) }}
{{- end }}
{{- $filesLimit := sub 1048576 16384 }}
{{- if gt (int $filesBytes) (int $filesLimit) }}
{{- $problems = append $problems (printf "training.files: %d bytes, over a ConfigMap's 1 MiB limit (1048576 bytes, less 16384 for its metadata: at most %d); ship larger files in the image or on shared storage (storage.*)" (int $filesBytes) (int $filesLimit)) }}
{{- end }}
{{- /* The evaluator reads the run's checkpoints with the built-in trainer's model. */}}
{{- if $v.evaluator.enabled }}
{{- if eq $storage.type "emptyDir" }}
{{- $problems = append $problems "evaluator.enabled=true needs shared storage: set storage.type to existingClaim, createClaim or objectStore (an emptyDir is private to each pod, and the evaluator reads the chief's checkpoints)" }}
{{- end }}
{{- if ne (join " " $v.training.command) "python -m entrypoint.training" }}
{{- $problems = append $problems (printf "evaluator.enabled=true evaluates the built-in trainer's checkpoints with its model config, and training.command is %q: use the built-in trainer, or run your own evaluation" (join " " $v.training.command)) }}
{{- end }}
{{- end }}
{{- if and (eq $storage.type "existingClaim") (has ".." (splitList "/" (toString $storage.existingClaim.subPath))) }}
{{- $problems = append $problems (printf "storage.existingClaim.subPath=%s: '..' would leave the claim (the kubelet refuses it); name a directory inside the claim" $storage.existingClaim.subPath) }}
{{- end }}
{{- /* A claim every worker mounts at once must be ReadWriteMany. */}}
{{- if eq $storage.type "createClaim" }}
{{- $modes := default (list) $storage.createClaim.accessModes }}
{{- $mounters := add $replicas (ternary 1 0 (eq (toString $v.tensorboard.enabled) "true")) (ternary 1 0 (eq (toString $v.evaluator.enabled) "true")) }}
{{- if not (has "ReadWriteMany" $modes) }}
{{- if or (gt (int $mounters) 1) (not (or (has "ReadWriteOnce" $modes) (has "ReadWriteOncePod" $modes))) }}
{{- $problems = append $problems (printf "storage.createClaim.accessModes=%v: %d pods (workers%s) write to the claim at once, and without ReadWriteMany the volume attaches to one node (ReadWriteOncePod: one pod; ReadOnlyMany: read-only); use [ReadWriteMany] with a StorageClass that supports it" $modes (int $mounters) (ternary " and TensorBoard or the evaluator" "" (gt (int $mounters) $replicas))) }}
{{- end }}
{{- end }}
{{- end }}
{{- /* A drain may evict at most every worker. */}}
{{- if and $v.podDisruptionBudget.enabled (gt (int $v.podDisruptionBudget.maxUnavailable) $replicas) }}
{{- $problems = append $problems (printf "podDisruptionBudget.maxUnavailable=%v is more than workers.replicas=%d: use at most %d (1 drains one worker at a time)" $v.podDisruptionBudget.maxUnavailable $replicas $replicas) }}
{{- end }}
{{- /* A PodGroup gangs the workers only under the scheduler that reads it (Volcano's, or
       scheduler-plugins'); the cluster's default scheduler places them one by one. */}}
{{- if and (has $gang (list "volcano" "coscheduling")) (eq (toString $v.scheduling.schedulerName) "default-scheduler") }}
{{- $problems = append $problems (printf "scheduling.schedulerName=default-scheduler with scheduling.gang=%s: the default scheduler ignores the PodGroup and places the workers one by one (no gang); leave scheduling.schedulerName empty (%s) or name the %s scheduler as installed" $gang (include "tf-multiworker.schedulerName" (merge (dict "Values" (dict "scheduling" (dict "gang" $gang "schedulerName" ""))) (dict))) $gang) }}
{{- end }}
{{- /* An egress rule without destinations and ports allows all egress. */}}
{{- range $i, $rule := $v.networkPolicy.egress.extraRules }}
{{- if not (or $rule.to $rule.ports) }}
{{- $problems = append $problems (printf "networkPolicy.egress.extraRules[%d] has no 'to' and no 'ports': such a rule allows all egress, undoing networkPolicy.egress.restrict; list the destinations (to) and/or ports, or set networkPolicy.egress.restrict=false to allow all egress on purpose" $i) }}
{{- end }}
{{- end }}
{{- /* Pod Security Standards "restricted", unless security.allowUnsafe opts out. */}}
{{- if not (default (dict) $v.security).allowUnsafe }}
{{- $optIn := "restore the chart's default, or set security.allowUnsafe=true to run weaker pods on purpose (docs/security.md)" }}
{{- $psc := default (dict) $v.podSecurityContext }}
{{- $csc := default (dict) $v.containerSecurityContext }}
{{- if not $psc }}
{{- $problems = append $problems (printf "podSecurityContext is empty (null): the pods would run with the runtime's defaults (root allowed, no seccomp); %s" $optIn) }}
{{- end }}
{{- if not $csc }}
{{- $problems = append $problems (printf "containerSecurityContext is empty (null): the containers would run privileged-escalatable, with a writable root and default capabilities; %s" $optIn) }}
{{- end }}
{{- if $csc }}
{{- if eq (toJson $csc.privileged) "true" }}
{{- $problems = append $problems (printf "containerSecurityContext.privileged=true: a privileged container is root on the node; %s" $optIn) }}
{{- end }}
{{- if ne (toJson $csc.allowPrivilegeEscalation) "false" }}
{{- $problems = append $problems (printf "containerSecurityContext.allowPrivilegeEscalation=%s: must be false (setuid binaries could gain privileges); %s" (toJson $csc.allowPrivilegeEscalation) $optIn) }}
{{- end }}
{{- if ne (toJson $csc.readOnlyRootFilesystem) "true" }}
{{- $problems = append $problems (printf "containerSecurityContext.readOnlyRootFilesystem=%s: must be true (writableDirs are the writable places); %s" (toJson $csc.readOnlyRootFilesystem) $optIn) }}
{{- end }}
{{- $nonRoot := toJson $csc.runAsNonRoot }}
{{- if or (eq $nonRoot "false") (and (eq $nonRoot "null") (ne (toJson $psc.runAsNonRoot) "true")) }}
{{- $problems = append $problems (printf "containerSecurityContext.runAsNonRoot=%s: must be true (here or in podSecurityContext); %s" $nonRoot $optIn) }}
{{- end }}
{{- range $where, $sc := dict "podSecurityContext" $psc "containerSecurityContext" $csc }}
{{- if eq (toJson $sc.runAsUser) "0" }}
{{- $problems = append $problems (printf "%s.runAsUser=0: root; the image's user is 1000; %s" $where $optIn) }}
{{- end }}
{{- $seccomp := toString (default (dict) $sc.seccompProfile).type }}
{{- if and $sc.seccompProfile (not (has $seccomp (list "RuntimeDefault" "Localhost"))) }}
{{- $problems = append $problems (printf "%s.seccompProfile.type=%s: must be RuntimeDefault or Localhost; %s" $where $seccomp $optIn) }}
{{- end }}
{{- if eq (toString (default (dict) $sc.appArmorProfile).type) "Unconfined" }}
{{- $problems = append $problems (printf "%s.appArmorProfile.type=Unconfined: %s" $where $optIn) }}
{{- end }}
{{- with $sc.seLinuxOptions }}
{{- if or .user .role (not (has (toString (default "" .type)) (list "" "container_t" "container_init_t" "container_kvm_t" "container_engine_t"))) }}
{{- $problems = append $problems (printf "%s.seLinuxOptions=%s: only the container_* types are allowed, no user or role; %s" $where (toJson .) $optIn) }}
{{- end }}
{{- end }}
{{- if eq (toJson (default (dict) $sc.windowsOptions).hostProcess) "true" }}
{{- $problems = append $problems (printf "%s.windowsOptions.hostProcess=true: %s" $where $optIn) }}
{{- end }}
{{- end }}
{{- if not (or $csc.seccompProfile $psc.seccompProfile) }}
{{- $problems = append $problems (printf "containerSecurityContext.seccompProfile is unset here and in podSecurityContext: set type RuntimeDefault; %s" $optIn) }}
{{- end }}
{{- $caps := default (dict) $csc.capabilities }}
{{- with $caps.add }}
{{- $problems = append $problems (printf "containerSecurityContext.capabilities.add=%s: no capability may be added; %s" (toJson .) $optIn) }}
{{- end }}
{{- if not (has "ALL" (default (list) $caps.drop)) }}
{{- $problems = append $problems (printf "containerSecurityContext.capabilities.drop=%s: must include ALL; %s" (toJson $caps.drop) $optIn) }}
{{- end }}
{{- with $csc.procMount }}{{ if ne (toString .) "Default" }}
{{- $problems = append $problems (printf "containerSecurityContext.procMount=%s: must be Default; %s" . $optIn) }}
{{- end }}{{ end }}
{{- end }}
{{- range $i, $sysctl := $psc.sysctls }}
{{- if not (has (toString $sysctl.name) (list "kernel.shm_rmid_forced" "net.ipv4.ip_local_port_range" "net.ipv4.ip_unprivileged_port_start" "net.ipv4.tcp_syncookies" "net.ipv4.ping_group_range" "net.ipv4.ip_local_reserved_ports" "net.ipv4.tcp_keepalive_time" "net.ipv4.tcp_fin_timeout" "net.ipv4.tcp_keepalive_intvl" "net.ipv4.tcp_keepalive_probes")) }}
{{- $problems = append $problems (printf "podSecurityContext.sysctls[%d].name=%s: not a safe sysctl; %s" $i $sysctl.name $optIn) }}
{{- end }}
{{- end }}
{{- range $key, $value := default (dict) $workers.podAnnotations }}
{{- if and (hasPrefix "container.apparmor.security.beta.kubernetes.io/" $key) (not (or (eq $value "runtime/default") (hasPrefix "localhost/" $value))) }}
{{- $problems = append $problems (printf "workers.podAnnotations.%s=%s: AppArmor must be runtime/default or localhost/*; %s" $key $value $optIn) }}
{{- end }}
{{- end }}
{{- end }}
{{- /* TF_CONFIG, as the entrypoint serializes it (json.dumps, separators "," and ":") for the
       last worker, must fit in one environment string: Linux's MAX_ARG_STRLEN (128 KiB)
       less "TF_CONFIG=" and the NUL (entrypoint/cluster.py MAX_TF_CONFIG_BYTES). */}}
{{- $service := include "tf-multiworker.serviceName" . }}
{{- $entry := add (len $fullname) (len $service) (len $ns) (len (toString $v.clusterDomain)) (len (toString (int $workers.port))) 11 }}
{{- $size := add 22 (sub $replicas 1) 35 (len (toString (sub $replicas 1))) 2 }}
{{- range $j := until $replicas }}{{ $size = add $size $entry (len (toString $j)) }}{{ end }}
{{- $limit := sub (mul 128 1024) 11 }}
{{- if gt (int $size) (int $limit) }}
{{- $problems = append $problems (printf "workers.replicas=%d: TF_CONFIG would be %d bytes, over Linux's %d-byte limit for one environment variable (every pod would exit 2); use fewer workers.replicas or shorter names (fullnameOverride, the namespace, clusterDomain)" $replicas (int $size) (int $limit)) }}
{{- end }}
{{- if $problems }}
{{- fail (join "\n" $problems) }}
{{- end }}
{{- end }}
