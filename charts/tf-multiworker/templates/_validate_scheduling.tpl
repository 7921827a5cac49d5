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

{{/* Kueue lets a StatefulSet it manages change size only to and from 0, and never its pods'
shape (sigs.k8s.io/kueue v0.19 statefulset_webhook.go ValidateUpdate: its webhook refuses
the upgrade mid-apply), and the Workload it keeps at 0 keeps the size it was made with. Both
are refused here, before anything is applied, with the way that works. `lookup` reads the
live StatefulSet during install and upgrade (nothing under helm template or
--dry-run=client, where this check cannot run); the shape is compared as the digest the chart
wrote on it (tf-multiworker/kueue-shape), chart output against chart output. */}}
{{- define "tf-multiworker.validate.kueueInPlace" -}}
{{- if eq .Values.scheduling.gang "kueue" }}
{{- $name := include "tf-multiworker.fullname" . }}
{{- $live := lookup "apps/v1" "StatefulSet" .Release.Namespace $name }}
{{- if hasKey (dig "metadata" "labels" (dict) $live) "kueue.x-k8s.io/queue-name" }}
{{- $problems := list }}
{{- $way := printf "make deploy goes through 0 for you (the group stops at its checkpoint, the StatefulSet is made anew, the run resumes), or with helm alone: upgrade with suspend=true, kubectl delete statefulset %s, then upgrade with the new values" $name }}
{{- $old := int (dig "spec" "replicas" 0 $live) }}
{{- $new := int (include "tf-multiworker.replicas" .) }}
{{- if and (gt $old 0) (gt $new 0) (ne $old $new) }}
{{- $problems = append $problems (printf "workers.replicas: %d -> %d under Kueue (scheduling.gang=kueue): Kueue lets a StatefulSet it manages change size only through 0 and keeps its Workload at the first size; %s" $old $new $way) }}
{{- end }}
{{- $shape := dig "metadata" "annotations" "tf-multiworker/kueue-shape" "" $live }}
{{- if and $shape (ne $shape (include "tf-multiworker.kueueShape" . | sha256sum | trunc 16)) }}
{{- $problems = append $problems (printf "the workers' pod shape under Kueue (scheduling.gang=kueue): Kueue keeps requests, ports, nodeSelector, affinity, tolerations, runtimeClassName, topology spread and the topology request (scheduling.topology) of a StatefulSet it manages as they were admitted, and this upgrade changes one of them; %s" $way) }}
{{- end }}
{{- join "\n" $problems }}
{{- end }}
{{- end }}
{{- end }}
