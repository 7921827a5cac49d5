{{/* Mount paths of the worker container. Each define prints its problems, one per line (_validate.tpl). */}}

{{/*
Every mount of the worker container: the kubelet refuses a duplicate mountPath, a mount
inside a read-only volume cannot be created, and one above a chart mount hides the
image's files (/etc, /var). */}}
{{- define "tf-multiworker.mountTable" -}}
{{- $v := .Values }}
{{- $workers := .Values.workers }}
{{- $storage := .Values.storage }}
{{- $apiAccess := include "tf-multiworker.apiAccess" . }}
{{- $fixed := list (dict "path" (include "tf-multiworker.trainingConfigDir" .) "key" "the training config (read-only, fixed)" "readOnly" true) }}
{{- if $workers.shm.enabled }}{{ $fixed = append $fixed (dict "path" "/dev/shm" "key" "workers.shm.enabled (/dev/shm)" "readOnly" false) }}{{ end }}
{{- if $apiAccess }}{{ $fixed = append $fixed (dict "path" (include "tf-multiworker.apiDir" .) "key" "the API credentials (read-only, fixed)" "readOnly" true) }}{{ end }}
{{- range $path := splitList " " (include "tf-multiworker.kubeletMounts" .) }}{{ $fixed = append $fixed (dict "path" $path "key" "the kubelet's own file" "readOnly" true) }}{{ end }}
{{- if $v.training.files }}{{ $fixed = append $fixed (dict "path" (include "tf-multiworker.filesDir" .) "key" "training.files (read-only, fixed)" "readOnly" true) }}{{ end }}
{{- $user := list }}
{{- if ne $storage.type "objectStore" }}{{ $user = append $user (dict "path" (toString $storage.mountPath) "key" "storage.mountPath") }}{{ end }}
{{- range $i, $dir := $v.writableDirs }}{{ $user = append $user (dict "path" (toString $dir) "key" (printf "writableDirs[%d]" $i)) }}{{ end }}
{{- range $i, $m := $workers.extraVolumeMounts }}{{ $user = append $user (dict "path" (toString $m.mountPath) "key" (printf "workers.extraVolumeMounts[%d].mountPath" $i)) }}{{ end }}
{{- toJson (dict "fixed" $fixed "user" $user) }}
{{- end }}

{{- define "tf-multiworker.validate.mounts" -}}
{{- $problems := list }}
{{- $table := include "tf-multiworker.mountTable" . | fromJson }}
{{- range $i, $m := $table.user }}
{{- $p := $m.path }}
{{- if ne (clean $p) $p }}
{{- $problems = append $problems (printf "%s=%s: not a clean absolute path (no '.' or '..' segments); write it as %s" $m.key $p (clean $p)) }}
{{- else if or (has $p (list "/" "/dev" "/etc" "/var" "/usr" "/bin" "/lib")) (regexMatch "^/(proc|sys)(/|$)" $p) }}
{{- $problems = append $problems (printf "%s=%s: a volume there would hide the image's or the kernel's files; choose a directory of its own (e.g. /shared, /data)" $m.key $p) }}
{{- else }}
{{- with include "tf-multiworker.mountCollisions" (dict "i" $i "m" $m "table" $table) | trim }}
{{- $problems = append $problems . }}
{{- end }}
{{- end }}
{{- end }}
{{- join "\n" $problems }}
{{- end }}

{{/* A clean user mount path `m` (the i-th) against the chart's mounts and the earlier user mounts. */}}
{{- define "tf-multiworker.mountCollisions" -}}
{{- $problems := list }}
{{- $m := .m }}
{{- $p := $m.path }}
{{- range $f := .table.fixed }}
{{- if eq $p $f.path }}
{{- $problems = append $problems (printf "%s=%s: %s is mounted there already (the kubelet refuses duplicate mount paths); choose another path" $m.key $p $f.key) }}
{{- else if and $f.readOnly (hasPrefix (printf "%s/" $f.path) $p) }}
{{- $problems = append $problems (printf "%s=%s: inside %s, mounted read-only at %s (the mount point cannot be created); choose another path" $m.key $p $f.key $f.path) }}
{{- else if hasPrefix (printf "%s/" $p) $f.path }}
{{- $problems = append $problems (printf "%s=%s: above %s at %s, it would hide the image's files there; choose a directory of its own" $m.key $p $f.key $f.path) }}
{{- end }}
{{- end }}
{{- range $j, $other := .table.user }}
{{- if and (lt $j $.i) (eq $p $other.path) }}
{{- $problems = append $problems (printf "%s=%s: %s is mounted there already (the kubelet refuses duplicate mount paths); choose another path" $m.key $p $other.key) }}
{{- end }}
{{- end }}
{{- join "\n" $problems }}
{{- end }}
