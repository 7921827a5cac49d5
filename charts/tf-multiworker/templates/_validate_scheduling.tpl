{{/* Disruption budget and gang scheduling. Each define prints its problems, one per line (_validate.tpl). */}}

{{/* A drain may evict at most every worker. */}}
{{- define "tf-multiworker.validate.disruptionBudget" -}}
{{- $problems := list }}
{{- $v := .Values }}
{{- $replicas := int .Values.workers.replicas }}
{{- if and $v.podDisruptionBudget.enabled (gt (int $v.podDisruptionBudget.maxUnavailable) $replicas) }}
{{- $problems = append $problems (printf "podDisruptionBudget.maxUnavailable=%v is more than workers.replicas=%d: use at most %d (1 drains one worker at a time)" $v.podDisruptionBudget.maxUnavailable $replicas $replicas) }}
{{- end }}
{{- join "\n" $problems }}
{{- end }}

{{/* A PodGroup gangs the workers only under the scheduler that reads it (Volcano's, or
scheduler-plugins'); the cluster's default scheduler places them one by one. */}}
{{- define "tf-multiworker.validate.gangScheduler" -}}
{{- $problems := list }}
{{- $v := .Values }}
{{- $gang := .Values.scheduling.gang }}
{{- if and (has $gang (list "volcano" "coscheduling")) (eq (toString $v.scheduling.schedulerName) "default-scheduler") }}
{{- $problems = append $problems (printf "scheduling.schedulerName=default-scheduler with scheduling.gang=%s: the default scheduler ignores the PodGroup and places the workers one by one (no gang); leave scheduling.schedulerName empty (%s) or name the %s scheduler as installed" $gang (include "tf-multiworker.schedulerName" (merge (dict "Values" (dict "scheduling" (dict "gang" $gang "schedulerName" ""))) (dict))) $gang) }}
{{- end }}
{{- join "\n" $problems }}
{{- end }}
