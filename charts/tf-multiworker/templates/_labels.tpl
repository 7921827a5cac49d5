{{/* Labels and annotations (pods carry no chart version: docs/chart.md). */}}

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
app.kubernetes.io/version, plus commonLabels (cost centre, team: what cost tools read). A pod template that changed with the chart's version would make
an upgrade that bumps only the chart restart every worker mid-training.
*/}}
{{- define "tf-multiworker.podLabels" -}}
{{ include "tf-multiworker.selectorLabels" . }}
app.kubernetes.io/managed-by: {{ .Release.Service | quote }}
app.kubernetes.io/part-of: tf-multiworker
{{- range $key, $value := .Values.commonLabels }}
{{ $key }}: {{ $value | quote }}
{{- end }}
{{- end }}

{{/*
commonAnnotations as the lines of a resource's metadata.annotations (pods take
workers.podAnnotations instead); "tf-multiworker.annotationsBlock" is the whole
`annotations:` key for a resource with none of its own, empty without commonAnnotations.
*/}}
{{- define "tf-multiworker.commonAnnotations" -}}
{{- range $key, $value := .Values.commonAnnotations }}
{{ $key }}: {{ $value | quote }}
{{- end }}
{{- end }}
{{- define "tf-multiworker.annotationsBlock" -}}
{{- with include "tf-multiworker.commonAnnotations" . | trim }}
annotations:
  {{- . | nindent 2 }}
{{- end }}
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
checkov skips of a pod-owning resource, each with its reason (docs/security.md).
Usage: include "tf-multiworker.checkovSkips" (dict "root" $ "extra" (list "CKV_K8S_x=why" ...))
*/}}
{{- define "tf-multiworker.checkovSkips" -}}
{{- $root := .root }}
{{- $skips := list "CKV_K8S_40=the image's user tfmw is UID 1000 (Dockerfile); a high UID would not own its home or the shared files" }}
{{- /* Only an explicit image.allowMutableTag skips the digest check: an empty digest alone is
what the check is there to catch. */}}
{{- if and (not $root.Values.image.digest) $root.Values.image.allowMutableTag }}
{{- $skips = append $skips "CKV_K8S_43=named by tag on purpose (image.allowMutableTag: true in this overlay); pulled Always unless the overlay chose a pull policy" }}
{{- end }}
{{- if ne (include "tf-multiworker.pullPolicy" (dict "image" $root.Values.image)) "Always" }}
{{- $skips = append $skips "CKV_K8S_15=multi-GB GPU image pinned by digest, or an overlay's explicit pull policy (images imported into the nodes); re-pulling on every start only delays the gang" }}
{{- end }}
{{- if and .objectStoreEnv (include "tf-multiworker.objectStoreEnvFrom" $root) }}
{{- $skips = append $skips "CKV_K8S_35=object-store storage: the object-store SDKs read their credentials from environment variables (envFrom an existing Secret)" }}
{{- else if and .extraEnvFrom (include "tf-multiworker.extraEnvFromSecrets" $root) }}
{{- $skips = append $skips "CKV_K8S_35=workers.extraEnvFrom: the release's own Secrets given whole as environment (W&B, MLflow, cloud keys read from env), on purpose" }}
{{- end }}
{{- $skips = concat $skips (default (list) .extra) }}
{{- range $i, $skip := $skips }}
checkov.io/skip{{ add1 $i }}: {{ $skip | quote }}
{{- end }}
{{- end }}

{{/*
A label map as a selector string ("k=v,k=v", keys sorted): how the workers list their peers.
*/}}
{{- define "tf-multiworker.selectorString" -}}
{{- $terms := list }}
{{- range $key := keys . | sortAlpha }}
{{- $terms = append $terms (printf "%s=%s" $key (get $ $key)) }}
{{- end }}
{{- join "," $terms }}
{{- end }}
