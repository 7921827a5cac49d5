{{/* Names of the release's objects and the paths the workers see. */}}

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
Name of the PVC the chart creates (storage.type=createClaim).
*/}}
{{- define "tf-multiworker.claimName" -}}
{{- printf "%s-shared" (include "tf-multiworker.fullname" .) }}
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
The ConfigMap the chief records the run's status in (rendered without data: the chief
patches it at run time, and rendered data would let `helm upgrade` overwrite the record).
*/}}
{{- define "tf-multiworker.statusConfigMapName" -}}
{{- printf "%s-status" (include "tf-multiworker.fullname" .) }}
{{- end }}
