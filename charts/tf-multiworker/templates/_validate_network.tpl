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

{{/* An egress rule to DNS without destinations would allow port 53 to any address. */}}
{{- define "tf-multiworker.validate.dnsTo" -}}
{{- $np := .Values.networkPolicy }}
{{- if and $np.enabled $np.egress.restrict $np.egress.allowDns (not $np.egress.dnsTo) }}
{{- print "networkPolicy.egress.dnsTo is empty: DNS would be allowed to any address; list the cluster DNS (NetworkPolicyPeer list, default the kube-dns pods of kube-system), or set networkPolicy.egress.allowDns=false" }}
{{- end }}
{{- end }}

{{/* networkPolicy.egress.apiServer.required: an install or upgrade (where lookup runs) that
neither finds the API server's endpoints nor is given them is refused, rather than letting the
workers reach its ports at any address. Offline renders pass (_network.tpl, apiServerEgress). */}}
{{- define "tf-multiworker.validate.apiServerFound" -}}
{{- $np := .Values.networkPolicy }}
{{- if and $np.enabled $np.egress.restrict (not $np.egress.apiServer.to) (include "tf-multiworker.apiAccess" .) $np.egress.apiServer.required }}
{{- $found := include "tf-multiworker.apiServerEndpoints" . | fromJson }}
{{- if and $found.online (not $found.rules) }}
{{- print "networkPolicy.egress.apiServer.required=true but the cluster's `kubernetes` Service has no EndpointSlice in namespace default to take the API server's addresses from: list them in networkPolicy.egress.apiServer.to (kubectl get endpointslices -n default -l kubernetes.io/service-name=kubernetes), or set networkPolicy.egress.apiServer.required=false to allow its ports to any address" }}
{{- end }}
{{- end }}
{{- end }}

{{/* A NetworkPolicyPeer is an ipBlock or selectors, never both (the API server refuses the
policy at install). A `--set key[0].ipBlock...` over an overlay's list merges into its entry. */}}
{{- define "tf-multiworker.validate.peerShape" -}}
{{- $np := .Values.networkPolicy }}
{{- $lists := dict "networkPolicy.egress.dnsTo" $np.egress.dnsTo "networkPolicy.egress.apiServer.to" $np.egress.apiServer.to "networkPolicy.metricsFrom" $np.metricsFrom "networkPolicy.tensorboardFrom" $np.tensorboardFrom }}
{{- range $i, $rule := $np.egress.extraRules }}{{ $_ := set $lists (printf "networkPolicy.egress.extraRules[%d].to" $i) $rule.to }}{{ end }}
{{- $problems := list }}
{{- range $key := keys $lists | sortAlpha }}
{{- range $i, $peer := get $lists $key | default list }}
{{- if and (kindIs "map" $peer) (hasKey $peer "ipBlock") (or (hasKey $peer "podSelector") (hasKey $peer "namespaceSelector")) }}
{{- $problems = append $problems (printf "%s[%d] has an ipBlock and a selector: a NetworkPolicyPeer is one or the other (the API server refuses both); make them two entries, and replace an overlay's list whole (a values file or --set-json, not --set %s[%d]...)" $key $i $key $i) }}
{{- end }}
{{- end }}
{{- end }}
{{- join "\n" $problems }}
{{- end }}
