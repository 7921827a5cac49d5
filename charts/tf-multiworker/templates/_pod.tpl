{{/* What the pods are made of: image, volumes, mounts, security, API access. */}}

{{/*
The trainer's config as the ConfigMap holds it. The workers' checksum annotation hashes
this, not the whole ConfigMap, whose labels carry the chart version.
*/}}
{{- define "tf-multiworker.trainingConfigYaml" -}}
{{- toYaml .Values.training.config }}
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
Pull policy of an image (the .image of tf-multiworker.image): image.pullPolicy when set;
otherwise `IfNotPresent` for an image pinned by digest (its bytes cannot change) and `Always`
for one named by tag: a tag can move, and a node that kept an older pull of it would start
that older build beside workers on newer ones, one group training two images (Kubernetes'
own default does this only for `latest`).
Usage: include "tf-multiworker.pullPolicy" (dict "image" .Values.image)
*/}}
{{- define "tf-multiworker.pullPolicy" -}}
{{- .image.pullPolicy | default (ternary "IfNotPresent" "Always" (not (empty .image.digest))) }}
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
Volumes and mounts of the writable directories in the read-only root filesystem.
*/}}
{{- define "tf-multiworker.writableVolumes" -}}
{{- $limit := .Values.writableDirsSizeLimit }}
{{- range $i, $dir := .Values.writableDirs }}
- name: writable-{{ $i }}
  {{- if $limit }}
  emptyDir:
    sizeLimit: {{ $limit | quote }}
  {{- else }}
  emptyDir: {}
  {{- end }}
{{- end }}
{{- end }}
{{- define "tf-multiworker.writableMounts" -}}
{{- range $i, $dir := .Values.writableDirs }}
- name: writable-{{ $i }}
  mountPath: {{ $dir | quote }}
{{- end }}
{{- end }}

{{/*
The CUDA JIT cache of GPU workers (TensorFlow's wheels carry PTX the driver compiles for a newer
GPU, for minutes, at the first start): in a writable dir, an emptyDir of the pod, so a container
restart in the pod finds it warm; per pod, never shared storage (concurrent writers). Under the
home (the driver's own default place) when /home/tfmw is writable, else under the first writable
dir. CUDA_CACHE_MAXSIZE: the driver's largest, 4 GiB (its default, 256 MiB, is too small for
TensorFlow's kernels), but at most half of writableDirsSizeLimit when one is set: a cache that
outgrew its emptyDir's limit would get the pod evicted. A variable workers.extraEnv sets itself
is left to it.
*/}}
{{- define "tf-multiworker.cudaCacheEnv" -}}
{{- $dirs := .Values.writableDirs | default list }}
{{- $own := list }}
{{- range .Values.workers.extraEnv }}{{ $own = append $own .name }}{{ end }}
{{- if and $dirs (not (has "CUDA_CACHE_PATH" $own)) }}
- name: CUDA_CACHE_PATH
  value: {{ printf "%s/.nv/ComputeCache" (ternary "/home/tfmw" (first $dirs) (has "/home/tfmw" $dirs)) | quote }}
{{- end }}
{{- if not (has "CUDA_CACHE_MAXSIZE" $own) }}
{{- $size := 4294967296 }}
{{- with .Values.writableDirsSizeLimit }}
{{- $size = min $size (div (int64 (float64 (include "tf-multiworker.quantityValue" .))) 2) }}
{{- end }}
- name: CUDA_CACHE_MAXSIZE
  value: {{ $size | toString | quote }}
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
Object-store credentials: every key of the existing Secret as an env variable.
*/}}
{{- define "tf-multiworker.objectStoreEnvFrom" -}}
{{- if and (eq .Values.storage.type "objectStore") .Values.storage.objectStore.existingSecret }}
- secretRef:
    name: {{ .Values.storage.objectStore.existingSecret | quote }}
{{- end }}
{{- end }}

{{/*
The envFrom of the worker container and the evaluator's: the object-store credentials, then
workers.extraEnvFrom as given (a later source's key wins over an earlier one's).
*/}}
{{- define "tf-multiworker.envFrom" -}}
{{- with (include "tf-multiworker.objectStoreEnvFrom" .) }}{{ . | trim }}{{ "\n" }}{{ end }}
{{- with .Values.workers.extraEnvFrom }}{{ toYaml . }}{{ end }}
{{- end }}

{{/* "true" when a workers.extraEnvFrom entry is a Secret, else empty. */}}
{{- define "tf-multiworker.extraEnvFromSecrets" -}}
{{- range .Values.workers.extraEnvFrom }}{{ if .secretRef }}true{{ break }}{{ end }}{{ end }}
{{- end }}

{{/*
The worker's first env entry when it has an envFrom: which reserved names a Secret or ConfigMap
holds, told by the kubelet itself (no RBAC on Secrets). The kubelet expands `$(NAME)` in an env
value from the variables defined before it, envFrom's included, and leaves it as it is for a name
not defined (k8s.io/kubernetes pkg/kubelet/kubelet_pods.go makeEnvironmentVariables). First in
env, nothing of the chart's is defined yet: a part `NAME=$(NAME)` changed means an envFrom has
NAME; the launcher refuses the run then, naming the keys (entrypoint/envfrom.py reads it).
*/}}
{{- define "tf-multiworker.envFromProbe" -}}
{{- $names := include "tf-multiworker.envFromProbeNames" . | splitList " " }}
{{- $parts := list }}
{{- range $names }}{{ $parts = append $parts (printf "%s=$(%s)|" . .) }}{{ end }}
{{- printf "%s|%s" (join "," $names) (join "" $parts) }}
{{- end }}

{{/*
What the probe asks about: the names the chart reserves (tf-multiworker.chartEnv), the
launcher's inputs the chart never sets (entrypoint/settings.py ENV: a Secret's would steer the
launcher), and the CUDA and NCCL variables the chart sets on GPU workers.
*/}}
{{- define "tf-multiworker.envFromProbeNames" -}}
{{- $names := splitList " " (include "tf-multiworker.chartEnv" .) }}
{{- $names = concat $names (list "TFMW_LOOPBACK_PORTS" "TFMW_NO_API_SERVER" "JOB_COMPLETION_INDEX") }}
{{- if gt (int .Values.workers.gpus) 0 }}
{{- $names = concat $names (regexFindAll "CUDA_CACHE_[A-Z]+" (include "tf-multiworker.cudaCacheEnv" .) -1) }}
{{- with include "tf-multiworker.ncclEnvNames" . }}{{ $names = concat $names (splitList " " .) }}{{ end }}
{{- end }}
{{- join " " ($names | uniq) }}
{{- end }}

{{/*
The image of a pod that needs no GPU (the helm test pod, TensorBoard): `.own` (tests.image,
tensorboard.image) over the worker image; an empty tag is the CPU variant `<appVersion>-cpu`
unless image.tag or image.digest pin the one image there is.
Usage: include "tf-multiworker.auxImage" (dict "root" . "own" .Values.tests.image)
*/}}
{{- define "tf-multiworker.auxImage" -}}
{{- $image := include "tf-multiworker.auxImageValues" . | fromJson }}
{{- include "tf-multiworker.image" (dict "image" $image "appVersion" .root.Chart.AppVersion "gpus" 0) }}
{{- end }}

{{/* The pull policy of that image (tf-multiworker.pullPolicy): its own tag drops the digest.
Usage: include "tf-multiworker.auxPullPolicy" (dict "root" . "own" .Values.tests.image) */}}
{{- define "tf-multiworker.auxPullPolicy" -}}
{{- include "tf-multiworker.pullPolicy" (dict "image" (include "tf-multiworker.auxImageValues" . | fromJson)) }}
{{- end }}

{{/* image.* as an auxiliary pod uses it, as JSON (tf-multiworker.auxImage). */}}
{{- define "tf-multiworker.auxImageValues" -}}
{{- $root := .root }}
{{- $own := default (dict) .own }}
{{- $image := deepCopy $root.Values.image }}
{{- with $own.repository }}{{ $_ := set $image "repository" . }}{{ end }}
{{- if $own.tag }}
{{- $_ := set $image "tag" $own.tag }}
{{- $_ := set $image "digest" "" }}
{{- end }}
{{- toJson $image }}
{{- end }}

{{/*
workers.initContainers / workers.sidecars as rendered: each container with the chart's
containerSecurityContext for every field it does not set itself (field by field: a `false` or
`0` of its own stays, which sprig's merge would overwrite) (validateValues then holds
the result to Pod Security "restricted").
Usage: include "tf-multiworker.extraContainers" (dict "root" . "containers" .Values.workers.sidecars)
*/}}
{{- define "tf-multiworker.extraContainers" -}}
{{- $out := list }}
{{- range .containers }}
{{- $container := deepCopy . }}
{{- $context := deepCopy (default (dict) .securityContext) }}
{{- range $field, $value := deepCopy (default (dict) $.root.Values.containerSecurityContext) }}
{{- if not (hasKey $context $field) }}{{ $_ := set $context $field $value }}{{ end }}
{{- end }}
{{- $_ := set $container "securityContext" $context }}
{{- $out = append $out $container }}
{{- end }}
{{- toYaml $out }}
{{- end }}

{{/*
The worker pods' affinity: workers.affinity, plus workers.podAntiAffinity (one worker per node),
plus, without Kueue, scheduling.topology as the workers' affinity to each other on its key: the
scheduler places each worker where most of the group already is, so the group fills one domain
before it opens the next (with Kueue, its topology-aware scheduling places the whole group at
once: tf-multiworker.topologyAnnotation).
*/}}
{{- define "tf-multiworker.workerAffinity" -}}
{{- $affinity := deepCopy (default (dict) .Values.workers.affinity) }}
{{- $mode := .Values.workers.podAntiAffinity }}
{{- $group := dict "matchLabels" (include "tf-multiworker.workerSelectorLabels" . | fromYaml) }}
{{- $term := dict "labelSelector" $group "topologyKey" "kubernetes.io/hostname" }}
{{- if eq $mode "hard" }}
{{- $_ := set $affinity "podAntiAffinity" (dict "requiredDuringSchedulingIgnoredDuringExecution" (list $term)) }}
{{- else if eq $mode "soft" }}
{{- $_ := set $affinity "podAntiAffinity" (dict "preferredDuringSchedulingIgnoredDuringExecution" (list (dict "weight" 100 "podAffinityTerm" $term))) }}
{{- end }}
{{- $topology := .Values.scheduling.topology | default dict }}
{{- if and $topology.key (ne .Values.scheduling.gang "kueue") }}
{{- $together := dict "labelSelector" $group "topologyKey" $topology.key }}
{{- $podAffinity := deepCopy (default (dict) $affinity.podAffinity) }}
{{- if eq $topology.mode "required" }}
{{- /* the first worker matches its own term, so it may go anywhere; the rest follow it */}}
{{- $_ := set $podAffinity "requiredDuringSchedulingIgnoredDuringExecution" (append (default list $podAffinity.requiredDuringSchedulingIgnoredDuringExecution) $together) }}
{{- else }}
{{- $_ := set $podAffinity "preferredDuringSchedulingIgnoredDuringExecution" (append (default list $podAffinity.preferredDuringSchedulingIgnoredDuringExecution) (dict "weight" 100 "podAffinityTerm" $together)) }}
{{- end }}
{{- $_ := set $affinity "podAffinity" $podAffinity }}
{{- end }}
{{- if $affinity }}{{ toYaml $affinity }}{{ end }}
{{- end }}

{{/*
With gang=kueue and scheduling.topology.key: the pod template annotation Kueue's StatefulSet
integration reads for the group's placement (sigs.k8s.io/kueue v0.19 statefulset_reconciler.go
constructWorkload, jobframework.NewPodSetTopologyRequest on spec.template.metadata), as
"key: value" YAML; nothing otherwise. Kueue gates each pod until it has placed the whole group,
then pins each ordinal to its node with a nodeSelector, consecutive ordinals in one domain.
*/}}
{{- define "tf-multiworker.topologyAnnotation" -}}
{{- $topology := .Values.scheduling.topology | default dict }}
{{- if and $topology.key (eq .Values.scheduling.gang "kueue") -}}
kueue.x-k8s.io/podset-{{ $topology.mode | default "preferred" }}-topology: {{ $topology.key | quote }}
{{- end }}
{{- end }}

{{/*
The worker container's securityContext: containerSecurityContext, plus IPC_LOCK for
InfiniBand on GPU workers when workers.nccl.ipcLock opts in.
*/}}
{{- define "tf-multiworker.workerSecurityContext" -}}
{{- $context := deepCopy (default (dict) .Values.containerSecurityContext) }}
{{- if and .Values.workers.nccl.ipcLock (gt (int .Values.workers.gpus) 0) }}
{{- $capabilities := default (dict) $context.capabilities }}
{{- $_ := set $capabilities "add" (append (default (list) $capabilities.add) "IPC_LOCK" | uniq) }}
{{- $_ := set $context "capabilities" $capabilities }}
{{- end }}
{{- if $context }}{{ toYaml $context }}{{ end }}
{{- end }}

{{/*
"API access": the workers talk to the Kubernetes API (record the run's status, create
Events, scale their own StatefulSet) when rbac.create and a completion action is
scaleToZero, or with rbac.scale=false (a Role without the scale: both actions idle). "true" or empty.
*/}}
{{- define "tf-multiworker.apiAccess" -}}
{{- if and .Values.rbac.create (or (eq (include "tf-multiworker.onSuccess" .) "scaleToZero") (eq .Values.completion.onFailure "scaleToZero") (not .Values.rbac.scale)) -}}
true
{{- end }}
{{- end }}

{{/*
The rights rbac.* leaves out of the workers' Role that the launcher would otherwise use, as
TFMW_RBAC_OFF names them (comma-separated; empty: none). `list` is told by TFMW_POD_SELECTOR,
the scale by the completion actions.
*/}}
{{- define "tf-multiworker.rbacOff" -}}
{{- $off := list }}
{{- if not .Values.rbac.events }}{{ $off = append $off "events" }}{{ end }}
{{- if not .Values.rbac.pods.get }}{{ $off = append $off "pods.get" }}{{ end }}
{{- if not .Values.rbac.pods.delete }}{{ $off = append $off "pods.delete" }}{{ end }}
{{- join "," $off }}
{{- end }}

{{/*
completion.onSuccess as the workers get it: `auto` is scaleToZero where the exported model
outlives the pods (shared storage that is not an emptyDir) and the workers may scale their
StatefulSet (rbac.create and rbac.scale), else idle: a default install never deletes its own result.
*/}}
{{- define "tf-multiworker.onSuccess" -}}
{{- $onSuccess := .Values.completion.onSuccess }}
{{- if ne $onSuccess "auto" }}
{{- $onSuccess }}
{{- else if and .Values.rbac.create .Values.rbac.scale (ne .Values.storage.type "emptyDir") }}scaleToZero
{{- else }}idle
{{- end }}
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

{{/* The workers' tolerations: workers.tolerations, then a short NoExecute toleration for an
unreachable node (workers.nodeLossTolerationSeconds) unless the user's list has one for that
key: a lost node's worker is evicted in seconds, not Kubernetes' 300. A not-ready node (its
kubelet answers and stops its pods itself) keeps the cluster's default. */}}
{{- define "tf-multiworker.workerTolerations" -}}
{{- $tolerations := .Values.workers.tolerations | default list }}
{{- $keys := list }}
{{- range $tolerations }}
{{- $keys = append $keys (.key | default "") }}
{{- end }}
{{- $seconds := .Values.workers.nodeLossTolerationSeconds }}
{{- if not (kindIs "invalid" $seconds) }}
{{- if not (has "node.kubernetes.io/unreachable" $keys) }}
{{- $tolerations = append $tolerations (dict "key" "node.kubernetes.io/unreachable" "operator" "Exists" "effect" "NoExecute" "tolerationSeconds" (int $seconds)) }}
{{- end }}
{{- end }}
{{- toYaml $tolerations }}
{{- end }}

{{/* The worker container's resources: workers.resources, with the GPU count from
workers.gpus alone (the one place for it). */}}
{{- define "tf-multiworker.workerResources" -}}
{{- $workers := .Values.workers }}
{{- $resources := deepCopy (default (dict) $workers.resources) }}
{{- $limits := deepCopy (default (dict) $resources.limits) }}
{{- $requests := deepCopy (default (dict) $resources.requests) }}
{{- $_ := unset $limits "nvidia.com/gpu" }}
{{- $_ := unset $requests "nvidia.com/gpu" }}
{{- if gt (int $workers.gpus) 0 }}
{{- $_ := set $limits "nvidia.com/gpu" (int $workers.gpus) }}
{{- end }}
{{- $_ := unset $resources "limits" }}
{{- $_ := unset $resources "requests" }}
{{- if $limits }}{{ $_ := set $resources "limits" $limits }}{{ end }}
{{- if $requests }}{{ $_ := set $resources "requests" $requests }}{{ end }}
{{- toYaml $resources }}
{{- end }}

{{/* What of the worker pods Kueue keeps immutable on a StatefulSet it manages (sigs.k8s.io/kueue
v0.19 pkg/util/pod SpecShape: each container's requests and ports, nodeSelector, affinity,
tolerations, runtimeClassName, topology spread; and the topology request, read once when it
makes the Workload), as the values that render it. A pod
template carries no `priority` (the admission plugin resolves priorityClassName on pods
only), so a priority class change is not part of it. */}}
{{- define "tf-multiworker.kueueShape" -}}
{{- $workers := .Values.workers }}
{{- $ports := list (int $workers.port) }}
{{- if .Values.metrics.enabled }}{{ $ports = append $ports (int .Values.metrics.port) }}{{ end }}
{{- $extra := list }}
{{- range (concat (default list $workers.initContainers) (default list $workers.sidecars)) }}
{{- $extra = append $extra (dict "name" .name "requests" (merge (deepCopy (dig "resources" "requests" (dict) .)) (dig "resources" "limits" (dict) .)) "ports" (default list .ports)) }}
{{- end }}
{{- $resources := include "tf-multiworker.workerResources" . | fromYaml }}
{{- /* the API server gives a pod (not a template) a request for each limit without one, and
Kueue sizes the group from the pods: a GPU count, a limit only, is part of the shape */}}
{{- $requests := merge (deepCopy (default dict $resources.requests)) (default dict $resources.limits) }}
{{- $shape := dict
  "requests" $requests
  "ports" $ports
  "extraContainers" $extra
  "nodeSelector" (default dict $workers.nodeSelector)
  "tolerations" (include "tf-multiworker.workerTolerations" . | fromYamlArray)
  "affinity" (include "tf-multiworker.workerAffinity" . | fromYaml)
  "topologySpreadConstraints" (default list $workers.topologySpreadConstraints)
  "runtimeClassName" (toString (default "" $workers.runtimeClassName)) }}
{{- /* only when set: the digest of a release from before scheduling.topology stays what it was */}}
{{- with include "tf-multiworker.topologyAnnotation" . }}{{ $_ := set $shape "topology" . }}{{ end }}
{{- toJson $shape }}
{{- end }}
