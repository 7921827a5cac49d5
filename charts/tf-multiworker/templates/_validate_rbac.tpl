{{/* API access: what needs RBAC and whose account gets it. Each define prints its problems, one per line (_validate.tpl). */}}

{{- define "tf-multiworker.validate.completionRbac" -}}
{{- $problems := list }}
{{- if not .Values.rbac.create }}
{{- range $key := list "onSuccess" "onFailure" }}
{{- if eq (toString (get $.Values.completion $key)) "scaleToZero" }}
{{- $problems = append $problems (printf "completion.%s=scaleToZero needs rbac.create=true (the workers scale their own StatefulSet): set rbac.create=true or completion.%s=idle" $key $key) }}
{{- end }}
{{- end }}
{{- end }}
{{- join "\n" $problems }}
{{- end }}

{{- define "tf-multiworker.validate.serviceAccount" -}}
{{- $problems := list }}
{{- $apiAccess := include "tf-multiworker.apiAccess" . }}
{{- if and $apiAccess (not .Values.serviceAccount.create) (not .Values.serviceAccount.name) }}
{{- $problems = append $problems "serviceAccount.name is empty with serviceAccount.create=false: the workers' Role (completion.onSuccess/onFailure=scaleToZero) would be bound to the namespace's default ServiceAccount; set serviceAccount.name to an account of these workers' own, or serviceAccount.create=true" }}
{{- end }}
{{- join "\n" $problems }}
{{- end }}
