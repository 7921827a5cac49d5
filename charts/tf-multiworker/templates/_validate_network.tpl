{{/* Ports and NetworkPolicy rules. Each define prints its problems, one per line (_validate.tpl). */}}

{{- define "tf-multiworker.validate.metricsPort" -}}
{{- $problems := list }}
{{- $v := .Values }}
{{- $workers := .Values.workers }}
{{- if and $v.metrics.enabled (eq (int $v.metrics.port) (int $workers.port)) }}
{{- $problems = append $problems (printf "metrics.port=%d is workers.port, the unauthenticated gRPC port: set metrics.port to another port (default 9090)" (int $v.metrics.port)) }}
{{- end }}
{{- join "\n" $problems }}
{{- end }}

{{/* An egress rule without destinations and ports allows all egress. */}}
{{- define "tf-multiworker.validate.egressRules" -}}
{{- $problems := list }}
{{- $v := .Values }}
{{- range $i, $rule := $v.networkPolicy.egress.extraRules }}
{{- if not (or $rule.to $rule.ports) }}
{{- $problems = append $problems (printf "networkPolicy.egress.extraRules[%d] has no 'to' and no 'ports': such a rule allows all egress, undoing networkPolicy.egress.restrict; list the destinations (to) and/or ports, or set networkPolicy.egress.restrict=false to allow all egress on purpose" $i) }}
{{- end }}
{{- end }}
{{- join "\n" $problems }}
{{- end }}
