{{/* workers.extraEnv against what the chart and the entrypoint set, and the GPU-visibility variables in any container's env. Each define prints its problems, one per line (_validate.tpl). */}}

{{/* Variables the chart or the entrypoint derives per pod, space-separated: a user value would
shadow them. $chartEnv is the entrypoint's contract (entrypoint/settings.py ENV, CHART_ENV): a
test keeps the two the same. */}}
{{- define "tf-multiworker.chartEnv" -}}
{{- $chartEnv := list "TFMW_POD_NAME" "TFMW_POD_UID" "TFMW_NAMESPACE" "TFMW_STATEFULSET" "TFMW_SERVICE" "TFMW_POD_SELECTOR" "TFMW_REPLICAS" "TFMW_PORT" "TFMW_METRICS_PORT" "TFMW_KEEP_LOG_MIB" "TFMW_CLUSTER_DOMAIN" "TFMW_PEER_TIMEOUT_SECONDS" "TFMW_MAX_RESTARTS" "TFMW_SAME_ERROR_LIMIT" "TFMW_HANG_TIMEOUT_SECONDS" "TFMW_HANG_DETECTION" "TFMW_ELASTIC_MIN_REPLICAS" "TFMW_ELASTIC_GRACE_SECONDS" "TFMW_ELASTIC_MICRO_BATCHES" "TFMW_TRAINING_CONFIG" "TFMW_SHARED_DIR" "TFMW_RUN_ID" "TFMW_ADOPT_RUN_DIR" "TFMW_ON_SUCCESS" "TFMW_ON_FAILURE" "TFMW_ACTIVE_DEADLINE_SECONDS" "TFMW_GRACE_SECONDS" "TFMW_WARM_STANDBY" "TFMW_POD_REVISION" "TFMW_API_DIR" "TFMW_STATUS_CONFIGMAP" "TFMW_RBAC_OFF" "TFMW_ENVFROM_PROBE" "TF_CONFIG" }}
{{- join " " $chartEnv }}
{{- end }}

{{/* workers.extraEnv may not set them. Names are compared case-insensitively; TFMW_* is reserved
as a whole. */}}
{{- define "tf-multiworker.validate.extraEnv" -}}
{{- $problems := list }}
{{- $workers := .Values.workers }}
{{- $chartEnv := splitList " " (include "tf-multiworker.chartEnv" .) }}
{{- $ncclEnv := splitList " " (include "tf-multiworker.ncclEnvNames" .) }}
{{- $seenEnv := dict }}
{{- range $i, $env := $workers.extraEnv }}
{{- $name := toString $env.name }}
{{- if has (upper $name) $chartEnv }}
{{- $problems = append $problems (printf "workers.extraEnv[%d].name=%s: this variable is derived from values by the chart or the entrypoint (docs/contracts.md); set the matching value instead" $i $name) }}
{{- else if hasPrefix "TFMW_" (upper $name) }}
{{- $problems = append $problems (printf "workers.extraEnv[%d].name=%s: names starting with TFMW_ (any case) are reserved for the chart and the entrypoint (docs/contracts.md); rename the variable" $i $name) }}
{{- else if has $name $ncclEnv }}
{{- $problems = append $problems (printf "workers.extraEnv[%d].name=%s: the chart already sets it from workers.nccl; set it there only" $i $name) }}
{{- end }}
{{- if hasKey $seenEnv $name }}
{{- $problems = append $problems (printf "workers.extraEnv[%d].name=%s: duplicate of workers.extraEnv[%v] (the later would silently win); keep one" $i $name (get $seenEnv $name)) }}
{{- else }}
{{- $_ := set $seenEnv $name $i }}
{{- end }}
{{- end }}
{{- join "\n" $problems }}
{{- end }}

{{/* The NCCL variables the chart sets from workers.nccl (GPU workers only), space-separated. */}}
{{- define "tf-multiworker.ncclEnvNames" -}}
{{- $gpus := int .Values.workers.gpus }}
{{- $workers := .Values.workers }}
{{- $ncclEnv := list }}
{{- if gt $gpus 0 }}
{{- with $workers.nccl }}
{{- if .debug }}{{ $ncclEnv = append $ncclEnv "NCCL_DEBUG" }}{{ end }}
{{- if .socketIfname }}{{ $ncclEnv = append $ncclEnv "NCCL_SOCKET_IFNAME" }}{{ end }}
{{- if .ibDisable }}{{ $ncclEnv = append $ncclEnv "NCCL_IB_DISABLE" }}{{ end }}
{{- $ncclEnv = concat $ncclEnv (keys (default (dict) .extraEnv)) }}
{{- end }}
{{- end }}
{{- join " " $ncclEnv }}
{{- end }}

{{/* The variables that choose the GPUs a container sees. NVIDIA_VISIBLE_DEVICES is how the device
plugin's default strategy (envvar) hands a container its allocated GPUs: one set by the user wins,
and `all` gives the pod every GPU of the node, those allocated to other pods included (and GPUs to
a CPU worker that asked for none). CUDA_VISIBLE_DEVICES can only hide allocated GPUs (TensorFlow then
trains on fewer, or on the CPU, without a word). Checked in the worker's env and in each extra container's;
security.allowUnsafe lets them through on purpose. */}}
{{- define "tf-multiworker.validate.gpuVisibility" -}}
{{- $problems := list }}
{{- if not (default (dict) .Values.security).allowUnsafe }}
{{- $workers := .Values.workers }}
{{- $reasons := dict "NVIDIA_VISIBLE_DEVICES" "the device plugin sets it to the GPUs workers.gpus allocates to the container; a value of yours, such as all, exposes GPUs of the node that other pods hold (or GPUs to a worker that asked for none)" "CUDA_VISIBLE_DEVICES" "the container sees exactly the GPUs workers.gpus allocates; a value of yours hides some of them and TensorFlow trains on fewer, or on the CPU, without a word" }}
{{- $lists := list (dict "where" "workers.extraEnv" "env" $workers.extraEnv) }}
{{- range $kind := list "initContainers" "sidecars" }}
{{- range $i, $c := default (list) (get $workers $kind) }}
{{- $lists = append $lists (dict "where" (printf "workers.%s[%d].env" $kind $i) "env" $c.env) }}
{{- end }}
{{- end }}
{{- range $list := $lists }}
{{- range $i, $env := default (list) $list.env }}
{{- $name := toString $env.name }}
{{- if hasKey $reasons $name }}
{{- $problems = append $problems (printf "%s[%d].name=%s: %s; remove it and set the GPU count with workers.gpus, or set security.allowUnsafe=true to do this on purpose (docs/security.md)" $list.where $i $env.name (get $reasons $name)) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- join "\n" $problems }}
{{- end }}

{{/* workers.extraEnvFrom: one Secret or ConfigMap per entry, as Kubernetes requires, and no prefix
in the chart's TFMW_ space. Its keys are known only at run time: the launcher refuses a reserved
one then (tf-multiworker.envFromProbe). */}}
{{- define "tf-multiworker.validate.extraEnvFrom" -}}
{{- $problems := list }}
{{- range $i, $source := .Values.workers.extraEnvFrom }}
{{- $refs := list }}
{{- if hasKey $source "secretRef" }}{{ $refs = append $refs "secretRef" }}{{ end }}
{{- if hasKey $source "configMapRef" }}{{ $refs = append $refs "configMapRef" }}{{ end }}
{{- if not $refs }}
{{- $problems = append $problems (printf "workers.extraEnvFrom[%d]: names no source; give it a secretRef: {name: <Secret>} or a configMapRef: {name: <ConfigMap>}" $i) }}
{{- else if gt (len $refs) 1 }}
{{- $problems = append $problems (printf "workers.extraEnvFrom[%d]: has both a secretRef and a configMapRef (Kubernetes takes one source per entry); make them two entries" $i) }}
{{- end }}
{{- if hasPrefix "TFMW_" (upper (toString (default "" $source.prefix))) }}
{{- $problems = append $problems (printf "workers.extraEnvFrom[%d].prefix=%s: names starting with TFMW_ (any case) are reserved for the chart and the entrypoint (docs/contracts.md); choose another prefix" $i $source.prefix) }}
{{- end }}
{{- end }}
{{- join "\n" $problems }}
{{- end }}
