{{/* workers.initContainers / workers.sidecars, IPC_LOCK, one worker per node and the built-in trainer's training.args. Each define prints its problems, one per line (_validate.tpl). */}}

{{/* Names: unique across the pod (the API server refuses a duplicate), never the chart's `worker`;
mounts only of volumes the pod has. */}}
{{- define "tf-multiworker.validate.extraContainerNames" -}}
{{- $problems := list }}
{{- $workers := .Values.workers }}
{{- $seen := dict "worker" "the chart's worker container" }}
{{- $volumes := list "shared" "dshm" "training-config" }}
{{- range $i, $dir := .Values.writableDirs }}{{ $volumes = append $volumes (printf "writable-%d" $i) }}{{ end }}
{{- range $workers.extraVolumes }}{{ $volumes = append $volumes (toString .name) }}{{ end }}
{{- range $kind := list "initContainers" "sidecars" }}
{{- range $i, $c := default (list) (get $workers $kind) }}
{{- $where := printf "workers.%s[%d]" $kind $i }}
{{- if hasKey $seen (toString $c.name) }}
{{- $problems = append $problems (printf "%s.name=%s: %s has that name already (names are unique in a pod); choose another" $where $c.name (get $seen (toString $c.name))) }}
{{- end }}
{{- $_ := set $seen (toString $c.name) $where }}
{{- range $j, $m := $c.volumeMounts }}
{{- if not (has (toString $m.name) $volumes) }}
{{- $problems = append $problems (printf "%s.volumeMounts[%d].name=%s names no volume of the worker pods (%s); add it to workers.extraVolumes" $where $j $m.name (join ", " $volumes)) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- join "\n" $problems }}
{{- end }}

{{/* Pod Security "restricted" for each extra container, its own securityContext merged over the
chart's containerSecurityContext as rendered (tf-multiworker.extraContainers). */}}
{{- define "tf-multiworker.validate.extraContainerSecurity" -}}
{{- $problems := list }}
{{- if not (default (dict) .Values.security).allowUnsafe }}
{{- $optIn := include "tf-multiworker.securityOptIn" . }}
{{- $rendered := concat (include "tf-multiworker.extraContainers" (dict "root" . "containers" .Values.workers.initContainers) | fromYamlArray) (include "tf-multiworker.extraContainers" (dict "root" . "containers" .Values.workers.sidecars) | fromYamlArray) }}
{{- $wheres := list }}
{{- range $i, $c := .Values.workers.initContainers }}{{ $wheres = append $wheres (printf "workers.initContainers[%d]" $i) }}{{ end }}
{{- range $i, $c := .Values.workers.sidecars }}{{ $wheres = append $wheres (printf "workers.sidecars[%d]" $i) }}{{ end }}
{{- range $i, $c := $rendered }}
{{- $where := index $wheres $i }}
{{- $sc := $c.securityContext }}
{{- if or (eq (toJson $sc.privileged) "true") (ne (toJson $sc.allowPrivilegeEscalation) "false") (eq (toJson $sc.runAsNonRoot) "false") (eq (toJson $sc.runAsUser) "0") }}
{{- $problems = append $problems (printf "%s.securityContext=%s: privileged, privilege escalation or root; %s" $where (toJson $sc) $optIn) }}
{{- end }}
{{- if or (without (default (list) (default (dict) $sc.capabilities).add) "NET_BIND_SERVICE") (not (has "ALL" (default (list) (default (dict) $sc.capabilities).drop))) (has (toString (default (dict) $sc.seccompProfile).type) (list "Unconfined")) }}
{{- $problems = append $problems (printf "%s.securityContext.capabilities=%s, seccompProfile=%s: drop ALL, add at most NET_BIND_SERVICE, no Unconfined seccomp; %s" $where (toJson $sc.capabilities) (toJson $sc.seccompProfile) $optIn) }}
{{- end }}
{{- range $port := $c.ports }}{{ if $port.hostPort }}
{{- $problems = append $problems (printf "%s.ports: hostPort %v binds the node's port; %s" $where $port.hostPort $optIn) }}
{{- end }}{{ end }}
{{- end }}
{{- end }}
{{- join "\n" $problems }}
{{- end }}

{{/* IPC_LOCK is for InfiniBand under NCCL: GPU workers only. */}}
{{- define "tf-multiworker.validate.ipcLock" -}}
{{- $problems := list }}
{{- if and .Values.workers.nccl.ipcLock (eq (int .Values.workers.gpus) 0) }}
{{- $problems = append $problems "workers.nccl.ipcLock=true with workers.gpus=0: IPC_LOCK is for InfiniBand under NCCL, which runs on GPU workers only; set workers.gpus, or leave workers.nccl.ipcLock false" }}
{{- end }}
{{- join "\n" $problems }}
{{- end }}

{{/* workers.podAntiAffinity renders the workers' podAntiAffinity: not two of them. */}}
{{- define "tf-multiworker.validate.podAntiAffinity" -}}
{{- $problems := list }}
{{- if and .Values.workers.podAntiAffinity (default (dict) .Values.workers.affinity).podAntiAffinity }}
{{- $problems = append $problems (printf "workers.podAntiAffinity=%s and workers.affinity.podAntiAffinity are both set: the chart renders the first as the second; keep one" .Values.workers.podAntiAffinity) }}
{{- end }}
{{- join "\n" $problems }}
{{- end }}

{{/* The built-in trainer's command-line flags (entrypoint/training/__main__.py, parse_args), every one
of them (a test keeps this list equal to the trainer's parser): `value` names the argument a flag
takes; `owner` marks a flag refused in training.args, saying why (the chart sets it another way, or
it keeps the workers from training). */}}
{{- define "tf-multiworker.trainerFlags" -}}
{
"--config": {"value": "PATH"},
"--set": {"value": "KEY=VALUE"},
"--shared-dir": {"value": "PATH", "owner": "the chart sets the trainer's shared dir from storage.mountPath (storage.objectStore.uri with an object store), where the launcher looks for the run's checkpoints and COMPLETED marker: a trainer writing elsewhere would never end the run"},
"--run-id": {"value": "ID", "owner": "the chart sets the run id from training.runId, which the launcher, the status and the evaluator use: a trainer writing another run's directory would never end this one"},
"--check": {"owner": "it only validates the config and exits, so the workers would never train; check a config with `python -m entrypoint.training --check` or make template"},
"--evaluate": {"owner": "the workers train; evaluation is evaluator.enabled, a pod beside them"},
"-h": {"owner": "it prints the trainer's help and exits, so the workers would never train"},
"--help": {"owner": "it prints the trainer's help and exits, so the workers would never train"}
}
{{- end }}

{{/* training.args with the built-in trainer: each a flag of its own (tf-multiworker.trainerFlags) with
its value, else every worker exits 2 on its first start (after pulling the image). A user's own
training.command takes its args unchecked. With the evaluator on, the config is training.config
alone: the evaluator reads that, not the workers' --config / --set. */}}
{{- define "tf-multiworker.validate.trainerArgs" -}}
{{- $problems := list }}
{{- $training := .Values.training }}
{{- if eq (join " " $training.command) "python -m entrypoint.training" }}
{{- $flags := include "tf-multiworker.trainerFlags" . | fromJson }}
{{- $own := list }}
{{- range $flag := keys $flags | sortAlpha }}{{ if not (get $flags $flag).owner }}{{ $own = append $own (printf "%s %s" $flag (get $flags $flag).value) }}{{ end }}{{ end }}
{{- $usage := printf "its flags are %s (a config key goes through --set, e.g. --set steps=100; docs/training.md); for flags of your own script set training.command" (join ", " $own) }}
{{- $state := dict "expect" "" "config" (list) }}
{{- range $i, $arg := $training.args }}
{{- $state = include "tf-multiworker.trainerArg" (dict "where" (printf "training.args[%d]" $i) "arg" (toString $arg) "expect" $state.expect "config" $state.config "flags" $flags "usage" $usage) | fromJson }}
{{- with $state.problem }}{{ $problems = append $problems . }}{{ end }}
{{- end }}
{{- if and $state.expect (ne $state.expect "?") }}
{{- $problems = append $problems (printf "training.args ends with %s, which takes a value (%s), so every worker would exit 2; add it" $state.expect (get $flags $state.expect).value) }}
{{- end }}
{{- if and $state.config .Values.evaluator.enabled }}
{{- $problems = append $problems (printf "training.args has %s with evaluator.enabled=true: the evaluator reads training.config alone, so it would evaluate with another config than the workers train with; put the settings in training.config" (join " and " (uniq $state.config))) }}
{{- end }}
{{- end }}
{{- join "\n" $problems }}
{{- end }}

{{/* One word of training.args (`arg`, at `where`) after the words before it: `expect` is the flag whose
value it is ("?": an unknown flag's, if it is no flag itself), `config` the config flags so far.
Prints JSON: the next expect and config, and the problem (empty when none). */}}
{{- define "tf-multiworker.trainerArg" -}}
{{- $a := .arg }}
{{- $where := printf "%s=%s" .where $a }}
{{- $flags := .flags }}
{{- $out := dict "expect" "" "config" .config "problem" "" }}
{{- $name := regexReplaceAll "=.*$" $a "" }}
{{- $flag := ternary (get $flags $name) (dict) (hasKey $flags $name) }}
{{- if and .expect (or (ne .expect "?") (not (hasPrefix "-" $a))) }}
{{- if and (eq .expect "--set") (not (regexMatch "^[^=]+=" $a)) }}
{{- $_ := set $out "problem" (printf "%s: --set takes KEY=VALUE (a dotted config key, e.g. steps=100 or model.name=mlp), else the trainer exits 2 on every worker; write it so" $where) }}
{{- end }}
{{- else if not (hasPrefix "-" $a) }}
{{- $_ := set $out "problem" (printf "%s: the built-in trainer (python -m entrypoint.training) takes no positional arguments, so every worker would exit 2 on it; %s" $where .usage) }}
{{- else if not (hasKey $flags $name) }}
{{- $close := list }}
{{- range $known := keys $flags | sortAlpha }}{{ if and (hasPrefix $name $known) (ne $name "-") (ne $name "--") }}{{ $close = append $close $known }}{{ end }}{{ end }}
{{- $_ := set $out "problem" (ternary (printf "%s: the built-in trainer (python -m entrypoint.training) takes its flags in full; write %s" $where (join " or " $close)) (printf "%s: the built-in trainer (python -m entrypoint.training) has no flag %s, so every worker would exit 2 on it; %s" $where $name .usage) (gt (len $close) 0)) }}
{{- $_ := set $out "expect" (ternary "" "?" (contains "=" $a)) }}
{{- else if $flag.owner }}
{{- $_ := set $out "problem" (printf "%s: %s; remove it from training.args" $where $flag.owner) }}
{{- $_ := set $out "expect" (ternary "?" "" (and (hasKey $flag "value") (not (contains "=" $a)))) }}
{{- else }}
{{- $_ := set $out "config" (append .config $name) }}
{{- $_ := set $out "expect" (ternary "" $name (contains "=" $a)) }}
{{- if and (eq $name "--set") (contains "=" $a) (not (regexMatch "^--set=[^=]+=" $a)) }}
{{- $_ := set $out "problem" (printf "%s: --set takes KEY=VALUE (a dotted config key, e.g. --set=steps=100), else the trainer exits 2 on every worker; write it so" $where) }}
{{- end }}
{{- end }}
{{- toJson $out }}
{{- end }}
