{{/* The worker image: one name for the one build every worker of the group runs. Each define prints its problems, one per line (_validate.tpl). */}}

{{/* A tag inside a repository would render `<repo>:<tag>:<image.tag>`, an image no registry
has. Only a ':' after the last '/' is a tag: before it, it is the registry's port. A digest
('@') is refused by the schema's pattern already. */}}
{{- define "tf-multiworker.validate.imageRepository" -}}
{{- $problems := list }}
{{- range $key, $repository := dict "image.repository" .Values.image.repository "tests.image.repository" ((.Values.tests).image).repository "tensorboard.image.repository" ((.Values.tensorboard).image).repository }}
{{- $last := regexReplaceAll "^.*/" (toString (default "" $repository)) "" }}
{{- if contains ":" $last }}
{{- $parts := splitn ":" 2 $last }}
{{- $problems = append $problems (printf "%s=%s: the repository names a tag (%s); give the repository alone and the tag as %s=%s (a registry port is fine: registry:5000/ml/tf-multiworker)" $key $repository $parts._1 (trimSuffix ".repository" $key | printf "%s.tag") $parts._1) }}
{{- end }}
{{- end }}
{{- join "\n" $problems }}
{{- end }}

{{/* An overlay that requires a digest (values/prod.yaml) never runs a tag, which can point to
another build by the time the next node pulls it. */}}
{{- define "tf-multiworker.validate.imageDigest" -}}
{{- $problems := list }}
{{- if and .Values.image.requireDigest (not .Values.image.digest) }}
{{- $problems = append $problems "image.digest is empty and image.requireDigest is true: pin the image with image.digest=sha256:<64 hex> (make SET=... or helm --set; `make image PUSH=1` prints it; for an image already pushed, `crane digest <repository>:<tag>` or `skopeo inspect docker://<repository>:<tag>`)" }}
{{- end }}
{{- join "\n" $problems }}
{{- end }}
