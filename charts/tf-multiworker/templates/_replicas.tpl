{{/*
How many workers the StatefulSet asks for: workers.replicas, or 0 when the run is suspended
(suspend: true) or has already Succeeded with completion.onSuccess=scaleToZero (`idle` keeps
its pods by choice).

A Succeeded run: the chief scales its StatefulSet to 0 when the run completes, and a later
render must not ask for the workers again. A GitOps controller re-renders on every change of
the values it holds (Flux's HelmRelease upgrade, an Argo CD sync), and `make deploy` of the
same values does too: with workers.replicas here, each would bring N pods back, claim their
GPUs, and see the chief scale them away again. So the status the chief records (the status
ConfigMap, read with `lookup` during install and upgrade) decides: Succeeded for this run id
means 0. A new training.runId is a new run (its own record): N. A Failed run keeps N (its
workers idle, their logs readable; `training.retry` trains it again). Offline (helm template,
lint, --dry-run=client) lookup finds nothing and the render asks for workers.replicas.
A GitOps controller that corrects drift without re-rendering (Flux's driftDetection,
Argo CD's selfHeal) still applies what the release recorded: docs/operations.md, "GitOps".
*/}}
{{- define "tf-multiworker.succeededAlready" -}}
{{- if and (include "tf-multiworker.apiAccess" .) (eq (include "tf-multiworker.onSuccess" .) "scaleToZero") }}
{{- $status := lookup "v1" "ConfigMap" .Release.Namespace (include "tf-multiworker.statusConfigMapName" .) }}
{{- $data := dig "data" (dict) $status }}
{{- if and (eq (get $data "phase") "Succeeded") (eq (get $data "runId") (include "tf-multiworker.runId" .)) }}true{{ end }}
{{- end }}
{{- end }}

{{- define "tf-multiworker.replicas" -}}
{{- if or (eq (toString .Values.suspend) "true") (include "tf-multiworker.succeededAlready" .) }}0{{ else }}{{ int .Values.workers.replicas }}{{ end }}
{{- end }}
