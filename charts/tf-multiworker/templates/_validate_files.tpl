{{/* training.files. Each define prints its problems, one per line (_validate.tpl). */}}

{{/* training.files: ConfigMap keys, and what one ConfigMap can hold. */}}
{{- define "tf-multiworker.validate.files" -}}
{{- $problems := list }}
{{- $v := .Values }}
{{- $filesBytes := 0 }}
{{- range $name, $text := default (dict) $v.training.files }}
{{- if not (regexMatch "^[-._a-zA-Z0-9]{1,253}$" $name) }}
{{- $problems = append $problems (printf "training.files.%s: a file name may hold only letters, digits, '-', '_' and '.' (a ConfigMap key); rename the file" $name) }}
{{- end }}
{{- $filesBytes = add $filesBytes (len $name) (len (toString $text)) }}
{{- end }}
{{- $filesLimit := sub 1048576 16384 }}
{{- if gt (int $filesBytes) (int $filesLimit) }}
{{- $problems = append $problems (printf "training.files: %d bytes, over a ConfigMap's 1 MiB limit (1048576 bytes, less 16384 for its metadata: at most %d); ship larger files in the image or on shared storage (storage.*)" (int $filesBytes) (int $filesLimit)) }}
{{- end }}
{{- join "\n" $problems }}
{{- end }}
