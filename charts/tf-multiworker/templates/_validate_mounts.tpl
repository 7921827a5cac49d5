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

{{/*
The image's own paths the launcher and the trainer need (Dockerfile, docs/image.md): a volume at one,
or above it, hides it. The official python base installs CPython into /usr/local (interpreter in
/usr/local/bin; standard library, TensorFlow, the CUDA wheels and the launcher under /usr/local/lib);
`make image BASE=debian` uses Debian's Python in /usr/bin and /usr/lib/python3.11. The Python trees
are refused below too (`inside`): a volume there shadows or hides modules. */}}
{{- define "tf-multiworker.imagePaths" -}}
[
{"path": "/usr/local/bin", "what": "the image's Python interpreter"},
{"path": "/usr/local/lib", "what": "the image's Python: its standard library, TensorFlow, the CUDA wheels and the launcher", "inside": true},
{"path": "/usr/lib/python3.11", "what": "the standard library of a Debian-based image's Python", "inside": true},
{"path": "/usr/lib/python3", "what": "a Debian-based image's Python packages", "inside": true},
{"path": "/usr/bin", "what": "the image's programs"},
{"path": "/usr/sbin", "what": "the image's programs"},
{"path": "/usr/lib", "what": "the image's system libraries"},
{"path": "/bin", "what": "the image's programs"},
{"path": "/sbin", "what": "the image's programs"},
{"path": "/lib", "what": "the image's system libraries"},
{"path": "/lib64", "what": "the dynamic loader"},
{"path": "/etc/ld.so.cache", "what": "the dynamic linker's cache, which lists the CUDA wheels' libraries"},
{"path": "/etc/ld.so.conf.d", "what": "the dynamic linker's list of the CUDA wheels' libraries"},
{"path": "/etc/passwd", "what": "the image's user tfmw"},
{"path": "/etc/group", "what": "the image's group tfmw"},
{"path": "/etc/ssl", "what": "the CA certificates TLS to an object store needs"},
{"path": "/app", "what": "the working directory, where an image built on this one keeps its code"},
{"path": "/var", "what": "the image's and the kubelet's files"},
{"path": "/dev", "what": "the container's devices (its GPUs among them)"},
{"path": "/proc", "what": "the kernel's files", "inside": true},
{"path": "/sys", "what": "the kernel's files", "inside": true}
]
{{- end }}

{{/* What a volume at the clean absolute path (the argument) would hide of tf-multiworker.imagePaths,
as the rest of a sentence; empty when nothing. */}}
{{- define "tf-multiworker.imagePathHidden" -}}
{{- $p := . }}
{{- $hit := "" }}
{{- range $image := include "tf-multiworker.imagePaths" . | fromJsonArray }}
{{- if not $hit }}
{{- if or (eq $p $image.path) (eq $p "/") (hasPrefix (printf "%s/" $p) $image.path) }}
{{- $hit = printf "hide %s (%s)" $image.path $image.what }}
{{- else if and $image.inside (hasPrefix (printf "%s/" $image.path) $p) }}
{{- $hit = printf "shadow or hide part of %s (%s)" $image.path $image.what }}
{{- end }}
{{- end }}
{{- end }}
{{- $hit }}
{{- end }}

{{- define "tf-multiworker.validate.mounts" -}}
{{- $problems := list }}
{{- $table := include "tf-multiworker.mountTable" . | fromJson }}
{{- range $i, $m := $table.user }}
{{- $p := $m.path }}
{{- if ne (clean $p) $p }}
{{- $problems = append $problems (printf "%s=%s: not a clean absolute path (no '.' or '..' segments); write it as %s" $m.key $p (clean $p)) }}
{{- else if include "tf-multiworker.imagePathHidden" $p }}
{{- $problems = append $problems (printf "%s=%s: a volume there would %s; choose a directory of its own (e.g. /shared, /data)" $m.key $p (include "tf-multiworker.imagePathHidden" $p)) }}
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
