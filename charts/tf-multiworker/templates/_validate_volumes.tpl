{{/* workers.extraVolumes / extraVolumeMounts (Bitnami's convention). Each define prints its problems, one per line (_validate.tpl). */}}

{{/* workers.extraVolumes / extraVolumeMounts (Bitnami's convention): their own names, the
volume types Pod Security "restricted" allows, mounts of those volumes only. */}}
{{- define "tf-multiworker.validate.extraVolumes" -}}
{{- $problems := list }}
{{- $v := .Values }}
{{- $workers := .Values.workers }}
{{- $chartVolumes := list "training-config" "shared" "dshm" "api-access" "training-files" }}
{{- range $i, $dir := $v.writableDirs }}{{ $chartVolumes = append $chartVolumes (printf "writable-%d" $i) }}{{ end }}
{{- $restrictedTypes := list "configMap" "csi" "downwardAPI" "emptyDir" "ephemeral" "persistentVolumeClaim" "projected" "secret" }}
{{- $extraNames := list }}
{{- range $i, $vol := $workers.extraVolumes }}
{{- $name := toString $vol.name }}
{{- if has $name $chartVolumes }}
{{- $problems = append $problems (printf "workers.extraVolumes[%d].name=%s: the chart names one of its own volumes so; choose another name" $i $name) }}
{{- else if has $name $extraNames }}
{{- $problems = append $problems (printf "workers.extraVolumes[%d].name=%s: duplicate volume name; give each volume its own" $i $name) }}
{{- end }}
{{- $extraNames = append $extraNames $name }}
{{- if not (default (dict) $v.security).allowUnsafe }}
{{- range $type := without (keys $vol | sortAlpha) "name" }}
{{- if not (has $type $restrictedTypes) }}
{{- $problems = append $problems (printf "workers.extraVolumes[%d] (%s) is a %s volume: Pod Security \"restricted\" allows only %s; use one of those, or set security.allowUnsafe=true to run weaker pods on purpose (docs/security.md)" $i $name $type (join ", " $restrictedTypes)) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- join "\n" $problems }}
{{- end }}

{{- define "tf-multiworker.validate.extraVolumeMounts" -}}
{{- $problems := list }}
{{- $extraNames := list }}
{{- range .Values.workers.extraVolumes }}{{ $extraNames = append $extraNames (toString .name) }}{{ end }}
{{- $workers := .Values.workers }}
{{- range $i, $m := $workers.extraVolumeMounts }}
{{- if not (has (toString $m.name) $extraNames) }}
{{- $problems = append $problems (printf "workers.extraVolumeMounts[%d].name=%s names no entry of workers.extraVolumes; add the volume there (the chart's own volumes are mounted by the chart)" $i (toString $m.name)) }}
{{- end }}
{{- end }}
{{- join "\n" $problems }}
{{- end }}
