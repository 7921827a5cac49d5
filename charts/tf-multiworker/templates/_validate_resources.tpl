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
