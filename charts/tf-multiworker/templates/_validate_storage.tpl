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

{{/* The pods that mount the shared claim: the workers, TensorBoard, the evaluator. */}}
{{- define "tf-multiworker.claimMounters" -}}
{{- $v := .Values }}
{{- add (int $v.workers.replicas) (ternary 1 0 (eq (toString $v.tensorboard.enabled) "true")) (ternary 1 0 (eq (toString $v.evaluator.enabled) "true")) }}
{{- end }}

{{/* "true" when every pod that mounts the claim must run on one node, so that a ReadWriteOnce
volume (one node at a time) serves them all: the workers are the only mounters (no TensorBoard,
no evaluator: they are placed on their own) and they are pinned to one node by name, through
workers.nodeSelector `kubernetes.io/hostname`, or a required nodeAffinity of one term that
requires `kubernetes.io/hostname` In exactly one node. Anything else (labels several nodes share,
pod affinity, a scheduler's choice) may spread them. */}}
{{- define "tf-multiworker.claimOnOneNode" -}}
{{- $v := .Values }}
{{- if eq (int (include "tf-multiworker.claimMounters" .)) (int $v.workers.replicas) }}
{{- $pinned := hasKey (default (dict) $v.workers.nodeSelector) "kubernetes.io/hostname" }}
{{- $terms := dig "nodeAffinity" "requiredDuringSchedulingIgnoredDuringExecution" "nodeSelectorTerms" (list) (default (dict) $v.workers.affinity) }}
{{- if eq (len $terms) 1 }}
{{- range $e := default (list) (index $terms 0).matchExpressions }}
{{- if and (eq (toString $e.key) "kubernetes.io/hostname") (eq (toString $e.operator) "In") (eq (len (default (list) $e.values)) 1) }}
{{- $pinned = true }}
{{- end }}
{{- end }}
{{- end }}
{{- if $pinned }}true{{ end }}
{{- end }}
{{- end }}

{{/* A claim every worker mounts at once must be ReadWriteMany, or ReadWriteOnce with every
mounter on one node (claimOnOneNode). */}}
{{- define "tf-multiworker.validate.createClaim" -}}
{{- $problems := list }}
{{- $v := .Values }}
{{- $replicas := int .Values.workers.replicas }}
{{- $storage := .Values.storage }}
{{- if eq $storage.type "createClaim" }}
{{- $modes := default (list) $storage.createClaim.accessModes }}
{{- $mounters := include "tf-multiworker.claimMounters" . }}
{{- $oneNode := and (has "ReadWriteOnce" $modes) (include "tf-multiworker.claimOnOneNode" .) }}
{{- if not (or (has "ReadWriteMany" $modes) $oneNode) }}
{{- if or (gt (int $mounters) 1) (not (or (has "ReadWriteOnce" $modes) (has "ReadWriteOncePod" $modes))) }}
{{- $problems = append $problems (printf "storage.createClaim.accessModes=%v: %d pods (workers%s) write to the claim at once, and without ReadWriteMany the volume attaches to one node (ReadWriteOncePod: one pod; ReadOnlyMany: read-only); use [ReadWriteMany] with a StorageClass that supports it, or with ReadWriteOnce pin every worker to one node (workers.nodeSelector kubernetes.io/hostname: <node>, no TensorBoard or evaluator)" $modes (int $mounters) (ternary " and TensorBoard or the evaluator" "" (gt (int $mounters) $replicas))) }}
{{- end }}
{{- end }}
{{- end }}
{{- join "\n" $problems }}
{{- end }}

{{/* An existing claim is looked up (install and upgrade: `lookup`; an offline render, `helm
template` or --dry-run=client, sees nothing and checks nothing here) and held to what its volume
allows: a ReadWriteOnce volume attaches to one node, and workers on other nodes would stay in
ContainerCreating (Multi-Attach) while the group holds its GPUs for peers.timeoutSeconds. The
modes are the bound volume's (status.accessModes), else those the claim asks for; ReadWriteOncePod
is the claim's own (spec). A claim that is not there is refused only when the namespace is seen
(its `default` ServiceAccount, which every namespace has): offline, both lookups are empty. */}}
{{- define "tf-multiworker.validate.existingClaim" -}}
{{- $problems := list }}
{{- $storage := .Values.storage }}
{{- $name := toString $storage.existingClaim.claimName }}
{{- if and (eq $storage.type "existingClaim") $name }}
{{- $claim := lookup "v1" "PersistentVolumeClaim" .Release.Namespace $name }}
{{- $what := printf "storage.existingClaim.claimName=%s" $name }}
{{- if not $claim }}
{{- if lookup "v1" "ServiceAccount" .Release.Namespace "default" }}
{{- $problems = append $problems (printf "%s: there is no PersistentVolumeClaim %s in namespace %s (every worker would wait in Pending for it): create it first (ReadWriteMany), fix the name, or use storage.type=createClaim" $what $name .Release.Namespace) }}
{{- end }}
{{- else }}
{{- $spec := default (list) (dig "spec" "accessModes" (list) $claim) }}
{{- $modes := default $spec (dig "status" "accessModes" (list) $claim) }}
{{- $mounters := int (include "tf-multiworker.claimMounters" .) }}
{{- $who := printf "%d pods (workers%s)" $mounters (ternary " and TensorBoard or the evaluator" "" (gt $mounters (int .Values.workers.replicas))) }}
{{- if and (gt $mounters 1) (or (has "ReadWriteOncePod" $spec) (has "ReadWriteOncePod" $modes)) }}
{{- $problems = append $problems (printf "%s: the claim is ReadWriteOncePod (accessModes %v): one pod may mount it, and %s do; use a ReadWriteMany claim" $what $modes $who) }}
{{- else if not (has "ReadWriteMany" $modes) }}
{{- if not (or (has "ReadWriteOnce" $modes) (has "ReadWriteOncePod" $modes)) }}
{{- $problems = append $problems (printf "%s: the claim's accessModes %v let no pod write, and the workers write checkpoints to it; use a ReadWriteMany claim" $what $modes) }}
{{- else if and (has "ReadWriteOnce" $modes) (gt $mounters 1) (not (include "tf-multiworker.claimOnOneNode" .)) }}
{{- $problems = append $problems (printf "%s: the claim is ReadWriteOnce (accessModes %v): its volume attaches to one node, and %s on other nodes would stay in ContainerCreating (Multi-Attach) while the group waits for peers.timeoutSeconds; use a ReadWriteMany claim, or pin every worker to one node (workers.nodeSelector kubernetes.io/hostname: <node>, no TensorBoard or evaluator)" $what $modes $who) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- join "\n" $problems }}
{{- end }}
