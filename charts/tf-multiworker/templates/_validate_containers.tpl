{{/* workers.initContainers / workers.sidecars, IPC_LOCK and one worker per node. Each define prints its problems, one per line (_validate.tpl). */}}

{{/* Names: unique across the pod (the API server refuses a duplicate), never the chart's `worker`;
mounts only of volumes the pod has. */}}
{{- define "tf-multiworker.validate.extraContainerNames" -}}
{{- $problems := list }}
{{- $workers := .Values.workers }}
{{- $seen := dict "worker" "the chart's worker container" }}
{{- $volumes := list "shared" "dshm" "training-config" }}
{{- range $i, $dir := .Values.writableDirs }}{{ $volumes = append $volumes (printf "writable-%d" $i) }}{{ end }}
{{- range $workers.extraVolumes }}{{ $volumes = append $volumes (toString .name) }}{{ end }}
{{- range $kind := list "initContainers" "sidecars" }}
{{- range $i, $c := default (list) (get $workers $kind) }}
{{- $where := printf "workers.%s[%d]" $kind $i }}
{{- if hasKey $seen (toString $c.name) }}
{{- $problems = append $problems (printf "%s.name=%s: %s has that name already (names are unique in a pod); choose another" $where $c.name (get $seen (toString $c.name))) }}
{{- end }}
{{- $_ := set $seen (toString $c.name) $where }}
{{- range $j, $m := $c.volumeMounts }}
{{- if not (has (toString $m.name) $volumes) }}
{{- $problems = append $problems (printf "%s.volumeMounts[%d].name=%s names no volume of the worker pods (%s); add it to workers.extraVolumes" $where $j $m.name (join ", " $volumes)) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- join "\n" $problems }}
{{- end }}

{{/* Pod Security "restricted" for each extra container, its own securityContext merged over the
chart's containerSecurityContext as rendered (tf-multiworker.extraContainers). */}}
{{- define "tf-multiworker.validate.extraContainerSecurity" -}}
{{- $problems := list }}
{{- if not (default (dict) .Values.security).allowUnsafe }}
{{- $optIn := include "tf-multiworker.securityOptIn" . }}
{{- $rendered := concat (include "tf-multiworker.extraContainers" (dict "root" . "containers" .Values.workers.initContainers) | fromYamlArray) (include "tf-multiworker.extraContainers" (dict "root" . "containers" .Values.workers.sidecars) | fromYamlArray) }}
{{- $wheres := list }}
{{- range $i, $c := .Values.workers.initContainers }}{{ $wheres = append $wheres (printf "workers.initContainers[%d]" $i) }}{{ end }}
{{- range $i, $c := .Values.workers.sidecars }}{{ $wheres = append $wheres (printf "workers.sidecars[%d]" $i) }}{{ end }}
{{- range $i, $c := $rendered }}
{{- $where := index $wheres $i }}
{{- $sc := $c.securityContext }}
{{- if or (eq (toJson $sc.privileged) "true") (ne (toJson $sc.allowPrivilegeEscalation) "false") (eq (toJson $sc.runAsNonRoot) "false") (eq (toJson $sc.runAsUser) "0") }}
{{- $problems = append $problems (printf "%s.securityContext=%s: privileged, privilege escalation or root; %s" $where (toJson $sc) $optIn) }}
{{- end }}
{{- if or (without (default (list) (default (dict) $sc.capabilities).add) "NET_BIND_SERVICE") (not (has "ALL" (default (list) (default (dict) $sc.capabilities).drop))) (has (toString (default (dict) $sc.seccompProfile).type) (list "Unconfined")) }}
{{- $problems = append $problems (printf "%s.securityContext.capabilities=%s, seccompProfile=%s: drop ALL, add at most NET_BIND_SERVICE, no Unconfined seccomp; %s" $where (toJson $sc.capabilities) (toJson $sc.seccompProfile) $optIn) }}
{{- end }}
{{- range $port := $c.ports }}{{ if $port.hostPort }}
{{- $problems = append $problems (printf "%s.ports: hostPort %v binds the node's port; %s" $where $port.hostPort $optIn) }}
{{- end }}{{ end }}
{{- end }}
{{- end }}
{{- join "\n" $problems }}
{{- end }}

{{/* IPC_LOCK is for InfiniBand under NCCL: GPU workers only. */}}
{{- define "tf-multiworker.validate.ipcLock" -}}
{{- $problems := list }}
{{- if and .Values.workers.nccl.ipcLock (eq (int .Values.workers.gpus) 0) }}
{{- $problems = append $problems "workers.nccl.ipcLock=true with workers.gpus=0: IPC_LOCK is for InfiniBand under NCCL, which runs on GPU workers only; set workers.gpus, or leave workers.nccl.ipcLock false" }}
{{- end }}
{{- join "\n" $problems }}
{{- end }}

{{/* workers.podAntiAffinity renders the workers' podAntiAffinity: not two of them. */}}
{{- define "tf-multiworker.validate.podAntiAffinity" -}}
{{- $problems := list }}
{{- if and .Values.workers.podAntiAffinity (default (dict) .Values.workers.affinity).podAntiAffinity }}
{{- $problems = append $problems (printf "workers.podAntiAffinity=%s and workers.affinity.podAntiAffinity are both set: the chart renders the first as the second; keep one" .Values.workers.podAntiAffinity) }}
{{- end }}
{{- join "\n" $problems }}
{{- end }}
