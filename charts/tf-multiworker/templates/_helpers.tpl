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
Labels every resource carries.
*/}}
{{- define "tf-multiworker.labels" -}}
helm.sh/chart: {{ include "tf-multiworker.chart" . }}
{{ include "tf-multiworker.selectorLabels" . }}
{{- if .Chart.AppVersion }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
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
Container image reference: the digest wins over the tag; the tag defaults to appVersion.
Usage: include "tf-multiworker.image" .Values.image  (with .Chart in scope via dict)
*/}}
{{- define "tf-multiworker.image" -}}
{{- $image := .image }}
{{- if $image.digest }}
{{- printf "%s@%s" $image.repository $image.digest }}
{{- else }}
{{- printf "%s:%s" $image.repository (default .appVersion $image.tag) }}
{{- end }}
{{- end }}

{{/*
Shared storage path as the workers see it (TFMW_SHARED_DIR).
*/}}
{{- define "tf-multiworker.sharedDir" -}}
{{- .Values.storage.mountPath }}
{{- end }}
