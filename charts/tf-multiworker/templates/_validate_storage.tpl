{{/* Shared storage: what each kind can and cannot do. Each define prints its problems, one per line (_validate.tpl). */}}

{{/* A default install never deletes its own result: scaling an emptyDir's pods away deletes the model. */}}
{{- define "tf-multiworker.validate.completionStorage" -}}
{{- $problems := list }}
{{- if and (eq (toString .Values.completion.onSuccess) "scaleToZero") (eq .Values.storage.type "emptyDir") }}
{{- $problems = append $problems "completion.onSuccess=scaleToZero with storage.type=emptyDir would delete the exported model with the pods the moment the run succeeds: use storage that outlives them (storage.type=createClaim, existingClaim or objectStore), or completion.onSuccess=auto or idle (the workers idle; copy the model out with kubectl cp, then uninstall)" }}
{{- end }}
{{- join "\n" $problems }}
{{- end }}

{{- define "tf-multiworker.validate.tensorboardStorage" -}}
{{- $problems := list }}
{{- if and .Values.tensorboard.enabled (eq .Values.storage.type "emptyDir") }}
{{- $problems = append $problems "tensorboard.enabled=true needs shared storage: set storage.type to existingClaim, createClaim or objectStore (an emptyDir is private to each worker)" }}
{{- end }}
{{- join "\n" $problems }}
{{- end }}

{{/* TF 2.21 registers only file, ram and gs file systems (docs/image.md): s3 and hdfs moved to tensorflow-io, which has no TF 2.21 release. */}}
{{- define "tf-multiworker.validate.objectStoreScheme" -}}
{{- $problems := list }}
{{- $scheme := regexReplaceAll "://.*$" (lower .Values.storage.objectStore.uri) "" }}
{{- if and (eq .Values.storage.type "objectStore") (has $scheme (list "s3" "hdfs")) }}
{{- $problems = append $problems (printf "storage.objectStore.uri=%s: the image's TensorFlow has no %s:// file system (it moved to tensorflow-io, which has no release for TF 2.21); use gs://, or a ReadWriteMany claim (storage.type=existingClaim or createClaim)" .Values.storage.objectStore.uri $scheme) }}
{{- end }}
{{- join "\n" $problems }}
{{- end }}

{{/* The evaluator reads the run's checkpoints with the built-in trainer's model. */}}
{{- define "tf-multiworker.validate.evaluator" -}}
{{- $problems := list }}
{{- $v := .Values }}
{{- $storage := .Values.storage }}
{{- if $v.evaluator.enabled }}
{{- if eq $storage.type "emptyDir" }}
{{- $problems = append $problems "evaluator.enabled=true needs shared storage: set storage.type to existingClaim, createClaim or objectStore (an emptyDir is private to each pod, and the evaluator reads the chief's checkpoints)" }}
{{- end }}
{{- if ne (join " " $v.training.command) "python -m entrypoint.training" }}
{{- $problems = append $problems (printf "evaluator.enabled=true evaluates the built-in trainer's checkpoints with its model config, and training.command is %q: use the built-in trainer, or run your own evaluation" (join " " $v.training.command)) }}
{{- end }}
{{- end }}
{{- join "\n" $problems }}
{{- end }}

{{- define "tf-multiworker.validate.subPath" -}}
{{- $problems := list }}
{{- $storage := .Values.storage }}
{{- if and (eq $storage.type "existingClaim") (has ".." (splitList "/" (toString $storage.existingClaim.subPath))) }}
{{- $problems = append $problems (printf "storage.existingClaim.subPath=%s: '..' would leave the claim (the kubelet refuses it); name a directory inside the claim" $storage.existingClaim.subPath) }}
{{- end }}
{{- join "\n" $problems }}
{{- end }}

{{/* A claim every worker mounts at once must be ReadWriteMany. */}}
{{- define "tf-multiworker.validate.createClaim" -}}
{{- $problems := list }}
{{- $v := .Values }}
{{- $replicas := int .Values.workers.replicas }}
{{- $storage := .Values.storage }}
{{- if eq $storage.type "createClaim" }}
{{- $modes := default (list) $storage.createClaim.accessModes }}
{{- $mounters := add $replicas (ternary 1 0 (eq (toString $v.tensorboard.enabled) "true")) (ternary 1 0 (eq (toString $v.evaluator.enabled) "true")) }}
{{- if not (has "ReadWriteMany" $modes) }}
{{- if or (gt (int $mounters) 1) (not (or (has "ReadWriteOnce" $modes) (has "ReadWriteOncePod" $modes))) }}
{{- $problems = append $problems (printf "storage.createClaim.accessModes=%v: %d pods (workers%s) write to the claim at once, and without ReadWriteMany the volume attaches to one node (ReadWriteOncePod: one pod; ReadOnlyMany: read-only); use [ReadWriteMany] with a StorageClass that supports it" $modes (int $mounters) (ternary " and TensorBoard or the evaluator" "" (gt (int $mounters) $replicas))) }}
{{- end }}
{{- end }}
{{- end }}
{{- join "\n" $problems }}
{{- end }}
