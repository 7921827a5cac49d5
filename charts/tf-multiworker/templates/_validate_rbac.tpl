{{/* API access: what needs RBAC and whose account gets it. Each define prints its problems, one per line (_validate.tpl). */}}

{{- define "tf-multiworker.validate.completionRbac" -}}
{{- $problems := list }}
{{- if not .Values.rbac.create }}
{{- range $key := list "onSuccess" "onFailure" }}
{{- if eq (toString (get $.Values.completion $key)) "scaleToZero" }}
{{- $problems = append $problems (printf "completion.%s=scaleToZero needs rbac.create=true (the workers scale their own StatefulSet): set rbac.create=true or completion.%s=idle" $key $key) }}
{{- end }}
{{- end }}
{{- else if not .Values.rbac.scale }}
{{- range $key := list "onSuccess" "onFailure" }}
{{- if eq (toString (get $.Values.completion $key)) "scaleToZero" }}
{{- $problems = append $problems (printf "completion.%s=scaleToZero needs rbac.scale=true (the Role's patch on statefulsets/scale): set rbac.scale=true or completion.%s=idle" $key $key) }}
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

{{- define "tf-multiworker.validate.podRights" -}}
{{- $problems := list }}
{{- $pods := .Values.rbac.pods }}
{{- if and (not $pods.get) $pods.delete }}
{{- $problems = append $problems "rbac.pods.delete=true needs rbac.pods.get=true: a survivor deletes only a peer it has read and found lost with its node; set rbac.pods.get=true or rbac.pods.delete=false" }}
{{- end }}
{{- if and (not $pods.get) $pods.list }}
{{- $problems = append $problems "rbac.pods.list=true needs rbac.pods.get=true: a list reads every pod of the namespace, more than get by name; set rbac.pods.get=true or rbac.pods.list=false" }}
{{- end }}
{{- join "\n" $problems }}
{{- end }}

{{- define "tf-multiworker.validate.admissionPolicy" -}}
{{- $problems := list }}
{{- if .Values.rbac.admissionPolicy.enabled }}
{{- if not (include "tf-multiworker.apiAccess" .) }}
{{- $problems = append $problems "rbac.admissionPolicy.enabled=true guards the workers' API access, which is off (rbac.create=false, or both completion actions idle): set rbac.admissionPolicy.enabled=false" }}
{{- else if not (include "tf-multiworker.admissionPolicyServed" .) }}
{{- $problems = append $problems (printf "rbac.admissionPolicy.enabled=true needs admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy (Kubernetes 1.30+), which the cluster (Kubernetes %s) does not serve: set rbac.admissionPolicy.enabled=false" .Capabilities.KubeVersion.Version) }}
{{- end }}
{{- end }}
{{- join "\n" $problems }}
{{- end }}

{{/* "true" where the cluster serves ValidatingAdmissionPolicy v1 (GA in 1.30; the chart supports
1.27+). Helm learns the served kinds from the cluster at install and upgrade; an offline render
(helm template, make template, the checks before make deploy) knows none, not even
apps/v1/StatefulSet, and is held to its Kubernetes version alone: the install decides. */}}
{{- define "tf-multiworker.admissionPolicyServed" -}}
{{- $apis := .Capabilities.APIVersions }}
{{- $known := $apis.Has "apps/v1/StatefulSet" }}
{{- if and (semverCompare ">=1.30-0" .Capabilities.KubeVersion.Version) (or (not $known) ($apis.Has "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy")) -}}
true
{{- end }}
{{- end }}
