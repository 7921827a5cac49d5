{{/* training.elastic: a group that can shrink, and what following its members needs. The same words as the launcher's refusal (entrypoint/membership.py bounds_problem, entrypoint/launcher.py elastic_problem). */}}
{{- define "tf-multiworker.validate.elastic" -}}
{{- $problems := list }}
{{- $min := .Values.training.elastic.minReplicas }}
{{- if not (kindIs "invalid" $min) }}
{{- $min = int $min }}
{{- $n := int .Values.workers.replicas }}
{{- $k := int (dig "gradientAccumulationSteps" 1 (.Values.training.config | default dict)) }}
{{- $where := printf "training.elastic.minReplicas=%d" $min }}
{{- if lt $min 1 }}
{{- $problems = append $problems (printf "%s must be at least 1 (leave it unset, null, to turn elastic training off)" $where) }}
{{- else if ge $min $n }}
{{- $problems = append $problems (printf "%s must be below workers.replicas=%d: a group that cannot shrink is not elastic (lower it, or leave it unset to turn elastic training off)" $where $n) }}
{{- else }}
{{- $total := mul $n $k }}
{{- $fit := list }}
{{- range $m := untilStep $min $n 1 }}
{{- if eq (mod $total $m) 0 }}{{- $fit = append $fit $m }}{{- end }}
{{- end }}
{{- if not $fit }}
{{- $sizes := list }}
{{- range $m := untilStep $min $n 1 }}{{- $sizes = append $sizes (toString $m) }}{{- end }}
{{- $problems = append $problems (printf "%s: no group of %s workers keeps the global batch of %d workers x %d micro-batches (%d micro-batches per step do not split evenly); set training.config.gradientAccumulationSteps to a multiple of %d, or minReplicas to a divisor of %d" $where (join ", " $sizes) $n $k $total (sub $n 1) $total) }}
{{- end }}
{{- end }}
{{- end }}
{{- join "\n" $problems }}
{{- end }}

{{/* What following an elastic group's members needs: the built-in trainer re-deals its input, the epochs live in the run directory. */}}
{{- define "tf-multiworker.validate.elasticNeeds" -}}
{{- $problems := list }}
{{- $min := .Values.training.elastic.minReplicas }}
{{- if not (kindIs "invalid" $min) }}
{{- $where := printf "training.elastic.minReplicas=%d" (int $min) }}
{{- if ne (join " " .Values.training.command) "python -m entrypoint.training" }}
{{- $problems = append $problems (printf "%s needs the built-in trainer (training.command unset): another command cannot re-deal its input over fewer workers" $where) }}
{{- end }}
{{- if not (has .Values.storage.type (list "existingClaim" "createClaim")) }}
{{- $problems = append $problems (printf "%s needs shared storage mounted in the pods (storage.type existingClaim or createClaim): the epochs live in the run directory" $where) }}
{{- end }}
{{- end }}
{{- join "\n" $problems }}
{{- end }}
