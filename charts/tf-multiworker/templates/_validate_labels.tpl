{{/* Labels and annotations the chart owns on the worker pods. Each define prints its problems, one per line (_validate.tpl). */}}

{{/* Labels the chart sets on the worker pods: a podLabels entry would move the pods out of
the StatefulSet's selector, the Service and the NetworkPolicy. */}}
{{- define "tf-multiworker.chartLabelKeys" -}}
{{- $gang := .Values.scheduling.gang }}
{{- $chartLabels := list "app.kubernetes.io/name" "app.kubernetes.io/instance" "app.kubernetes.io/component" "app.kubernetes.io/managed-by" "app.kubernetes.io/part-of" "app.kubernetes.io/version" "helm.sh/chart" "controller-revision-hash" "statefulset.kubernetes.io/pod-name" "apps.kubernetes.io/pod-index" }}
{{- if eq $gang "coscheduling" }}{{ $chartLabels = append $chartLabels "scheduling.x-k8s.io/pod-group" }}{{ end }}
{{- if eq $gang "runai" }}{{ $chartLabels = concat $chartLabels (list "project" "kai.scheduler/queue") }}{{ end }}
{{- join " " $chartLabels }}
{{- end }}

{{- define "tf-multiworker.validate.podLabels" -}}
{{- $problems := list }}
{{- $chartLabels := splitList " " (include "tf-multiworker.chartLabelKeys" .) }}
{{- range $key := keys (default (dict) .Values.workers.podLabels) | sortAlpha }}
{{- if has $key $chartLabels }}
{{- $problems = append $problems (printf "workers.podLabels.%s: the chart (or the StatefulSet controller) sets this label on the worker pods and selects them by it; choose another label key" $key) }}
{{- else if include "tf-multiworker.kueueOwns" (list $ $key) }}
{{- $problems = append $problems (printf "workers.podLabels.%s: %s" $key (include "tf-multiworker.kueueOwns" (list $ $key))) }}
{{- end }}
{{- end }}
{{- join "\n" $problems }}
{{- end }}

{{/* commonLabels go on every object and pod: never a label the chart sets, nor one a pod's own
labels set again (the rendered metadata would hold the key twice). */}}
{{- define "tf-multiworker.validate.commonLabels" -}}
{{- $problems := list }}
{{- $chartLabels := splitList " " (include "tf-multiworker.chartLabelKeys" .) }}
{{- range $key := keys (default (dict) .Values.commonLabels) | sortAlpha }}
{{- if has $key $chartLabels }}
{{- $problems = append $problems (printf "commonLabels.%s: the chart sets this label itself; choose another label key" $key) }}
{{- else if include "tf-multiworker.kueueOwns" (list $ $key) }}
{{- $problems = append $problems (printf "commonLabels.%s: %s" $key (include "tf-multiworker.kueueOwns" (list $ $key))) }}
{{- else if hasKey (default (dict) $.Values.workers.podLabels) $key }}
{{- $problems = append $problems (printf "commonLabels.%s and workers.podLabels.%s are both set: every worker pod carries commonLabels already; keep one" $key $key) }}
{{- end }}
{{- end }}
{{- range $key := keys (default (dict) .Values.commonAnnotations) | sortAlpha }}
{{- if regexMatch "^(helm\\.sh|meta\\.helm\\.sh|checkov\\.io)/" $key }}
{{- $problems = append $problems (printf "commonAnnotations.%s: Helm and the chart own the helm.sh/, meta.helm.sh/ and checkov.io/ annotations; choose another key" $key) }}
{{- end }}
{{- end }}
{{- join "\n" $problems }}
{{- end }}

{{- define "tf-multiworker.validate.podAnnotations" -}}
{{- $problems := list }}
{{- $workers := .Values.workers }}
{{- $gang := .Values.scheduling.gang }}
{{- $chartAnnotations := list "checksum/training-config" "checksum/training-files" "tf-multiworker/retry" "cluster-autoscaler.kubernetes.io/safe-to-evict" "karpenter.sh/do-not-disrupt" "prometheus.io/scrape" "prometheus.io/port" "prometheus.io/path" }}
{{- if eq $gang "volcano" }}{{ $chartAnnotations = append $chartAnnotations "scheduling.k8s.io/group-name" }}{{ end }}
{{- range $key := keys (default (dict) $workers.podAnnotations) | sortAlpha }}
{{- if has $key $chartAnnotations }}
{{- $problems = append $problems (printf "workers.podAnnotations.%s: the chart sets this annotation on the worker pods (from training.retry, workers.disruption.*, metrics.annotations); set the value there, or choose another annotation key" $key) }}
{{- else if include "tf-multiworker.kueueOwns" (list $ $key) }}
{{- $problems = append $problems (printf "workers.podAnnotations.%s: %s" $key (include "tf-multiworker.kueueOwns" (list $ $key))) }}
{{- end }}
{{- end }}
{{- join "\n" $problems }}
{{- end }}

{{/* With gang=kueue, Kueue's webhooks and its StatefulSet reconciler write the kueue.x-k8s.io/
labels and annotations of the pods (the group's name and size, the queue, the priority, the
admission gate): one set by the chart's user would conflict (Kueue refuses a pod whose group
name changes, and such a pod stays gated). Prints why, or nothing. Called with (list $ key). */}}
{{- define "tf-multiworker.kueueOwns" -}}
{{- $root := index . 0 }}{{- $key := index . 1 }}
{{- if and (eq $root.Values.scheduling.gang "kueue") (hasPrefix "kueue.x-k8s.io/" $key) -}}
with scheduling.gang=kueue, Kueue sets the kueue.x-k8s.io/ labels and annotations of the pods itself from the StatefulSet (queue: scheduling.kueue.queueName, priority: scheduling.kueue.priorityClass); remove this key
{{- end }}
{{- end }}
