{{/* Names and sizes that end up in every worker's DNS name and TF_CONFIG. Each define prints its problems, one per line (_validate.tpl). */}}

{{/* The namespace is part of every worker's DNS name (TF_CONFIG). */}}
{{- define "tf-multiworker.validate.namespace" -}}
{{- $problems := list }}
{{- $ns := .Release.Namespace }}
{{- if not (and (le (len $ns) 63) (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" $ns)) }}
{{- $problems = append $problems (printf "namespace %q is not a DNS-1123 label (lowercase letters, digits and '-', at most 63 characters), and it is part of every worker's DNS name: install into another namespace (--namespace)" $ns) }}
{{- end }}
{{- join "\n" $problems }}
{{- end }}

{{/* The full name names the headless Service, a DNS-1035 label. */}}
{{- define "tf-multiworker.validate.fullname" -}}
{{- $problems := list }}
{{- $fullname := include "tf-multiworker.fullname" . }}
{{- if not (regexMatch "^[a-z]([-a-z0-9]*[a-z0-9])?$" $fullname) }}
{{- $problems = append $problems (printf "fullname %q is not a DNS-1035 label (it names the headless Service and must start with a letter): set fullnameOverride" $fullname) }}
{{- end }}
{{- join "\n" $problems }}
{{- end }}

{{/* TF_CONFIG, as the entrypoint serializes it (json.dumps, separators "," and ":") for the
last worker, must fit in one environment string: Linux's MAX_ARG_STRLEN (128 KiB)
less "TF_CONFIG=" and the NUL (entrypoint/cluster.py MAX_TF_CONFIG_BYTES). */}}
{{- define "tf-multiworker.validate.tfConfigSize" -}}
{{- $problems := list }}
{{- $v := .Values }}
{{- $workers := .Values.workers }}
{{- $replicas := int .Values.workers.replicas }}
{{- $ns := .Release.Namespace }}
{{- $fullname := include "tf-multiworker.fullname" . }}
{{- $service := include "tf-multiworker.serviceName" . }}
{{- $entry := add (len $fullname) (len $service) (len $ns) (len (toString $v.clusterDomain)) (len (toString (int $workers.port))) 11 }}
{{- $limit := sub (mul 128 1024) 11 }}
{{- /* the TF_CONFIG of n workers (the last pod's), for n up to the schema's maximum: the
largest n that fits is named, so the refusal and the schema say the same limit */}}
{{- $entries := 0 }}
{{- $fits := 0 }}
{{- $size := 0 }}
{{- range $j := until (max $replicas 1024 | int) }}
{{- $entries = add $entries $entry (len (toString $j)) }}
{{- $n := add $j 1 }}
{{- $total := add 22 $j 35 (len (toString $j)) 2 $entries }}
{{- if le (int $total) (int $limit) }}{{ $fits = $n }}{{ end }}
{{- if eq $n $replicas }}{{ $size = $total }}{{ end }}
{{- end }}
{{- if gt (int $size) (int $limit) }}
{{- $problems = append $problems (printf "workers.replicas=%d: TF_CONFIG would be %d bytes, over Linux's %d-byte limit for one environment variable (every pod would exit 2); with these names at most %d workers fit: use workers.replicas=%d or fewer, or shorter names (fullnameOverride, the namespace, clusterDomain)" $replicas (int $size) (int $limit) (int $fits) (int $fits)) }}
{{- end }}
{{- join "\n" $problems }}
{{- end }}
