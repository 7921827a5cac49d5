{{/* Resources and sizes: relations the schema cannot express. Each define prints its problems, one per line (_validate.tpl). */}}

{{/* A Kubernetes quantity as a plain number (bytes, cores, a count), printed as a float:
"4Gi" -> 4294967296, "500m" -> 0.5, "1e3" -> 1000. The schema has checked its form. */}}
{{- define "tf-multiworker.quantityValue" -}}
{{- $q := toString . | trim }}
{{- $number := regexFind "^[+]?([0-9]+(\\.[0-9]*)?|\\.[0-9]+)" $q }}
{{- $suffix := trimPrefix $number $q }}
{{- $factors := dict "" "1" "m" "0.001" "k" "1000" "M" "1000000" "G" "1000000000" "T" "1000000000000" "P" "1000000000000000" "E" "1000000000000000000" "Ki" "1024" "Mi" "1048576" "Gi" "1073741824" "Ti" "1099511627776" "Pi" "1125899906842624" "Ei" "1152921504606846976" }}
{{- $factor := 1.0 }}
{{- if hasKey $factors $suffix }}
{{- $factor = float64 (get $factors $suffix) }}
{{- else if regexMatch "^[eE][-+]?[0-9]+$" $suffix }}
{{- $exponent := trimPrefix "+" (substr 1 -1 $suffix) }}
{{- $down := hasPrefix "-" $exponent }}
{{- range until (int (trimPrefix "-" $exponent)) }}{{ $factor = ternary (divf $factor 10) (mulf $factor 10) $down }}{{ end }}
{{- end }}
{{- printf "%f" (mulf (float64 (default "0" $number)) $factor) }}
{{- end }}

{{/* Every request no larger than its limit, in each resources block the chart renders. */}}
{{- define "tf-multiworker.validate.requestsWithinLimits" -}}
{{- $problems := list }}
{{- $blocks := dict "workers.resources" .Values.workers.resources "tensorboard.resources" .Values.tensorboard.resources "evaluator.resources" .Values.evaluator.resources "tests.resources" .Values.tests.resources }}
{{- range $where := keys $blocks | sortAlpha }}
{{- $block := default (dict) (get $blocks $where) }}
{{- $limits := default (dict) $block.limits }}
{{- range $name, $request := default (dict) $block.requests }}
{{- if and (hasKey $limits $name) (gt (float64 (include "tf-multiworker.quantityValue" $request)) (float64 (include "tf-multiworker.quantityValue" (get $limits $name)))) }}
{{- $problems = append $problems (printf "%s.requests.%s=%v is more than %s.limits.%s=%v: a request may not exceed its limit (the API server refuses the pods); raise the limit or lower the request" $where $name $request $where $name (get $limits $name)) }}
{{- end }}
{{- end }}
{{- end }}
{{- join "\n" $problems }}
{{- end }}

{{/* /dev/shm is memory: it counts against the container's memory limit. */}}
{{- define "tf-multiworker.validate.shmWithinMemory" -}}
{{- $problems := list }}
{{- $workers := .Values.workers }}
{{- $memory := (default (dict) (default (dict) $workers.resources).limits).memory }}
{{- if and $workers.shm.enabled $memory (gt (float64 (include "tf-multiworker.quantityValue" $workers.shm.sizeLimit)) (float64 (include "tf-multiworker.quantityValue" $memory))) }}
{{- $problems = append $problems (printf "workers.shm.sizeLimit=%v is more than workers.resources.limits.memory=%v: /dev/shm is memory counted against the container's limit, so a full /dev/shm would OOM-kill the worker; use at most the memory limit (half of it leaves room for training)" $workers.shm.sizeLimit $memory) }}
{{- end }}
{{- join "\n" $problems }}
{{- end }}

{{/* The writable dirs (/tmp: the training scratch) are emptyDirs, each up to writableDirsSizeLimit, on the
node's ephemeral storage: their limits together within the worker's ephemeral-storage limit, else the kubelet
evicts the pod (and, before it notices, a full node evicts its neighbours) before a dir reaches its own limit. */}}
{{- define "tf-multiworker.validate.writableDirsWithinEphemeralStorage" -}}
{{- $problems := list }}
{{- $limit := toString (default "" .Values.writableDirsSizeLimit) }}
{{- $storage := get (default (dict) (default (dict) .Values.workers.resources).limits) "ephemeral-storage" }}
{{- $dirs := len (default (list) .Values.writableDirs) }}
{{- if and $limit $storage $dirs }}
{{- $total := mulf (float64 (include "tf-multiworker.quantityValue" $limit)) $dirs }}
{{- if gt $total (float64 (include "tf-multiworker.quantityValue" $storage)) }}
{{- $problems = append $problems (printf "writableDirsSizeLimit=%s for each of the %d writableDirs is more than workers.resources.limits.ephemeral-storage=%v: the kubelet would evict the worker before its scratch reached the dirs' limit; raise the ephemeral-storage limit to at least %d x writableDirsSizeLimit, or lower writableDirsSizeLimit (docs/chart.md, scratch on the node)" $limit $dirs $storage $dirs) }}
{{- end }}
{{- end }}
{{- join "\n" $problems }}
{{- end }}

{{/* The GPU count has one place, workers.gpus: the chart sets the nvidia.com/gpu limit from it. */}}
{{- define "tf-multiworker.validate.gpusInOnePlace" -}}
{{- $problems := list }}
{{- $resources := default (dict) .Values.workers.resources }}
{{- range $kind := list "limits" "requests" }}
{{- with get (default (dict) (get $resources $kind)) "nvidia.com/gpu" }}
{{- $problems = append $problems (printf "workers.resources.%s.nvidia.com/gpu=%v: the GPU count is workers.gpus (the chart sets the limit from it, and would replace this one); remove it here and set workers.gpus=%v" $kind . .) }}
{{- end }}
{{- end }}
{{- join "\n" $problems }}
{{- end }}

{{/* A GPU worker's resources, which the GPU limit alone leaves unset (a BestEffort pod: first to be
evicted, /dev/shm unbounded). Memory: a limit of at least 2Gi plus /dev/shm (which counts against it)
and a request of at least 2Gi. The floor is the process memory before the first batch: TensorFlow's
import alone holds 0.7 GiB resident (measured, CPU build, no CUDA library loaded yet) and the warm
standby about 0.6 GiB more; the CUDA libraries and the input pipeline come on top. CPU: a request,
without which the worker gets the kernel's smallest CPU share and a busy node starves its input
pipeline and collectives while the GPUs wait. A request left out takes its limit's value (as the
API server does). CPU workers (make local, a laptop) are not held to this. */}}
{{- define "tf-multiworker.validate.gpuWorkerResources" -}}
{{- $problems := list }}
{{- $gpus := int .Values.workers.gpus }}
{{- if gt $gpus 0 }}
{{- $resources := default (dict) .Values.workers.resources }}
{{- $limits := default (dict) $resources.limits }}
{{- $requests := merge (deepCopy (default (dict) $resources.requests)) $limits }}
{{- $fix := "(docs/chart.md, \"GPUs and nodes\")" }}
{{- $cpu := index $requests "cpu" }}
{{- if not (or $limits $requests) }}
{{- $problems = append $problems (printf "workers.resources is empty with workers.gpus=%d: the pod would get only the GPU limit (BestEffort: evicted first, /dev/shm unbounded); set requests.cpu, requests.memory (at least 2Gi) and limits.memory (at least 2Gi%s) %s" $gpus (include "tf-multiworker.shmTerm" .) $fix) }}
{{- else }}
{{- with include "tf-multiworker.gpuWorkerMemory" (dict "root" . "limits" $limits "requests" $requests "fix" $fix) }}
{{- $problems = append $problems . }}
{{- end }}
{{- if or (kindIs "invalid" $cpu) (eq (float64 (include "tf-multiworker.quantityValue" $cpu)) 0.0) }}
{{- $problems = append $problems (printf "workers.resources.requests.cpu%s with workers.gpus=%d: a GPU worker needs a CPU request, else it gets the kernel's smallest CPU share and a busy node starves its input pipeline while the GPUs wait; set it, e.g. 4 %s" (ternary " is not set" (printf "=%v" $cpu) (kindIs "invalid" $cpu)) $gpus $fix) }}
{{- end }}
{{- end }}
{{- end }}
{{- join "\n" $problems }}
{{- end }}

{{/* " + workers.shm.sizeLimit=<size>" when /dev/shm is mounted (it counts against the memory limit), else empty. */}}
{{- define "tf-multiworker.shmTerm" -}}
{{- if .Values.workers.shm.enabled }} + workers.shm.sizeLimit={{ .Values.workers.shm.sizeLimit }}{{ end }}
{{- end }}

{{/* A GPU worker's memory limit and request (requests filled from limits) against the floor: 2Gi,
beside /dev/shm for the limit. Problems one per line. */}}
{{- define "tf-multiworker.gpuWorkerMemory" -}}
{{- $problems := list }}
{{- $workers := .root.Values.workers }}
{{- $gpus := int $workers.gpus }}
{{- $floor := 2147483648.0 }}
{{- $shm := ternary (float64 (include "tf-multiworker.quantityValue" $workers.shm.sizeLimit)) 0.0 (eq (toString $workers.shm.enabled) "true") }}
{{- $shmTerm := include "tf-multiworker.shmTerm" .root }}
{{- $limit := index .limits "memory" }}
{{- $request := index .requests "memory" }}
{{- if kindIs "invalid" $limit }}
{{- $problems = append $problems (printf "workers.resources.limits.memory is not set with workers.gpus=%d: a GPU worker without a memory limit has /dev/shm and the trainer unbounded and is evicted first under memory pressure; set it to at least 2Gi%s %s" $gpus $shmTerm .fix) }}
{{- else if and (lt (float64 (include "tf-multiworker.quantityValue" $limit)) (addf $floor $shm)) (le $shm (float64 (include "tf-multiworker.quantityValue" $limit))) }}
{{- $problems = append $problems (printf "workers.resources.limits.memory=%v with workers.gpus=%d is below 2Gi%s: the launcher, the trainer with TensorFlow and CUDA loaded and the warm standby need 2Gi beside /dev/shm, which counts against the limit; raise the limit %s" $limit $gpus $shmTerm .fix) }}
{{- end }}
{{- if kindIs "invalid" $request }}
{{- $problems = append $problems (printf "workers.resources.requests.memory is not set with workers.gpus=%d: the scheduler would place the worker as if it needed no memory; set it to at least 2Gi %s" $gpus .fix) }}
{{- else if lt (float64 (include "tf-multiworker.quantityValue" $request)) $floor }}
{{- $problems = append $problems (printf "workers.resources.requests.memory=%v with workers.gpus=%d is below 2Gi, what a GPU worker holds before its first batch; raise it %s" $request $gpus .fix) }}
{{- end }}
{{- join "\n" $problems }}
{{- end }}
