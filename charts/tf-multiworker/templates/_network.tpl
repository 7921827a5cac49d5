{{/* The NetworkPolicies' egress peers that come from the cluster or from values. */}}

{{/*
The API server's endpoints, as the `kubernetes` Service's EndpointSlices in `default` list them
(`lookup`, so only where Helm talks to the cluster: install, upgrade, --dry-run=server), one
egress rule per slice: an ipBlock /32 (IPv4) or /128 (IPv6) per address, on the slice's
ports. JSON {"online": whether the lookup could run, "rules": [...]}: offline (helm template,
lint) lookup answers an empty map, online a list, even an empty one.
*/}}
{{- define "tf-multiworker.apiServerEndpoints" -}}
{{- $slices := lookup "discovery.k8s.io/v1" "EndpointSlice" "default" "" }}
{{- $rules := list }}
{{- range $slice := dig "items" (list) $slices }}
{{- $bits := get (dict "IPv4" "32" "IPv6" "128") (toString $slice.addressType) }}
{{- if and $bits (eq (dig "metadata" "labels" "kubernetes.io/service-name" "" $slice) "kubernetes") }}
{{- $peers := list }}
{{- range $endpoint := $slice.endpoints | default list }}
{{- range $address := $endpoint.addresses }}{{ $peers = append $peers (dict "ipBlock" (dict "cidr" (printf "%s/%s" $address $bits))) }}{{ end }}
{{- end }}
{{- $ports := list }}
{{- range $port := $slice.ports | default list }}{{ $ports = append $ports (dict "port" (int $port.port) "protocol" ($port.protocol | default "TCP")) }}{{ end }}
{{- if and $peers $ports }}{{ $rules = append $rules (dict "to" $peers "ports" $ports) }}{{ end }}
{{- end }}
{{- end }}
{{- dict "online" (hasKey $slices "items") "rules" $rules | toJson }}
{{- end }}

{{/*
The workers' (and evaluator's) egress rules to the API server, a JSON list: to
networkPolicy.egress.apiServer.to on its ports when given; else to the endpoints found;
else, not required, its ports to any address; else none (offline and required: the workers
cannot reach the API server; online, validate.apiServerFound has refused already).
*/}}
{{- define "tf-multiworker.apiServerEgress" -}}
{{- $api := .Values.networkPolicy.egress.apiServer }}
{{- $ports := list }}
{{- range $api.ports }}{{ $ports = append $ports (dict "port" (int .) "protocol" "TCP") }}{{ end }}
{{- $rules := list }}
{{- if $api.to }}
{{- $rules = list (dict "to" $api.to "ports" $ports) }}
{{- else }}
{{- $rules = (include "tf-multiworker.apiServerEndpoints" . | fromJson).rules }}
{{- if and (not $rules) (not $api.required) }}{{ $rules = list (dict "ports" $ports) }}{{ end }}
{{- end }}
{{- $rules | toJson }}
{{- end }}
