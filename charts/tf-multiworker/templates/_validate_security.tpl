{{/*
Pod Security Standards "restricted" (the real admission's rules, as values can break them),
unless security.allowUnsafe opts out. Each define prints its problems, one per line
(_validate.tpl).
*/}}
{{- define "tf-multiworker.securityOptIn" -}}
restore the chart's default, or set security.allowUnsafe=true to run weaker pods on purpose (docs/security.md)
{{- end }}

{{/* Neither security context may be emptied. */}}
{{- define "tf-multiworker.validate.securityContexts" -}}
{{- $problems := list }}
{{- if not (default (dict) .Values.security).allowUnsafe }}
{{- $optIn := include "tf-multiworker.securityOptIn" . }}
{{- $psc := default (dict) .Values.podSecurityContext }}
{{- $csc := default (dict) .Values.containerSecurityContext }}
{{- if not $psc }}
{{- $problems = append $problems (printf "podSecurityContext is empty (null): the pods would run with the runtime's defaults (root allowed, no seccomp); %s" $optIn) }}
{{- end }}
{{- if not $csc }}
{{- $problems = append $problems (printf "containerSecurityContext is empty (null): the containers would run privileged-escalatable, with a writable root and default capabilities; %s" $optIn) }}
{{- end }}
{{- end }}
{{- join "\n" $problems }}
{{- end }}

{{/* The container's own settings: no privilege escalation, a read-only root, non-root. */}}
{{- define "tf-multiworker.validate.containerSecurity" -}}
{{- $problems := list }}
{{- if not (default (dict) .Values.security).allowUnsafe }}
{{- $optIn := include "tf-multiworker.securityOptIn" . }}
{{- $psc := default (dict) .Values.podSecurityContext }}
{{- $csc := default (dict) .Values.containerSecurityContext }}
{{- if $csc }}
{{- if eq (toJson $csc.privileged) "true" }}
{{- $problems = append $problems (printf "containerSecurityContext.privileged=true: a privileged container is root on the node; %s" $optIn) }}
{{- end }}
{{- if ne (toJson $csc.allowPrivilegeEscalation) "false" }}
{{- $problems = append $problems (printf "containerSecurityContext.allowPrivilegeEscalation=%s: must be false (setuid binaries could gain privileges); %s" (toJson $csc.allowPrivilegeEscalation) $optIn) }}
{{- end }}
{{- if ne (toJson $csc.readOnlyRootFilesystem) "true" }}
{{- $problems = append $problems (printf "containerSecurityContext.readOnlyRootFilesystem=%s: must be true (writableDirs are the writable places); %s" (toJson $csc.readOnlyRootFilesystem) $optIn) }}
{{- end }}
{{- $nonRoot := toJson $csc.runAsNonRoot }}
{{- if or (eq $nonRoot "false") (and (eq $nonRoot "null") (ne (toJson $psc.runAsNonRoot) "true")) }}
{{- $problems = append $problems (printf "containerSecurityContext.runAsNonRoot=%s: must be true (here or in podSecurityContext); %s" $nonRoot $optIn) }}
{{- end }}
{{- end }}
{{- end }}
{{- join "\n" $problems }}
{{- end }}

{{/* Settings both contexts have: never root, seccomp, AppArmor, SELinux, host processes. */}}
{{- define "tf-multiworker.validate.securityFields" -}}
{{- $problems := list }}
{{- if not (default (dict) .Values.security).allowUnsafe }}
{{- $optIn := include "tf-multiworker.securityOptIn" . }}
{{- $psc := default (dict) .Values.podSecurityContext }}
{{- $csc := default (dict) .Values.containerSecurityContext }}
{{- range $where, $sc := dict "podSecurityContext" $psc "containerSecurityContext" $csc }}
{{- if eq (toJson $sc.runAsUser) "0" }}
{{- $problems = append $problems (printf "%s.runAsUser=0: root; the image's user is 1000; %s" $where $optIn) }}
{{- end }}
{{- $seccomp := toString (default (dict) $sc.seccompProfile).type }}
{{- if and $sc.seccompProfile (not (has $seccomp (list "RuntimeDefault" "Localhost"))) }}
{{- $problems = append $problems (printf "%s.seccompProfile.type=%s: must be RuntimeDefault or Localhost; %s" $where $seccomp $optIn) }}
{{- end }}
{{- if eq (toString (default (dict) $sc.appArmorProfile).type) "Unconfined" }}
{{- $problems = append $problems (printf "%s.appArmorProfile.type=Unconfined: %s" $where $optIn) }}
{{- end }}
{{- with $sc.seLinuxOptions }}
{{- if or .user .role (not (has (toString (default "" .type)) (list "" "container_t" "container_init_t" "container_kvm_t" "container_engine_t"))) }}
{{- $problems = append $problems (printf "%s.seLinuxOptions=%s: only the container_* types are allowed, no user or role; %s" $where (toJson .) $optIn) }}
{{- end }}
{{- end }}
{{- if eq (toJson (default (dict) $sc.windowsOptions).hostProcess) "true" }}
{{- $problems = append $problems (printf "%s.windowsOptions.hostProcess=true: %s" $where $optIn) }}
{{- end }}
{{- end }}
{{- end }}
{{- join "\n" $problems }}
{{- end }}

{{/* A seccomp profile in one of the contexts; no capability added, ALL dropped; the default procMount. */}}
{{- define "tf-multiworker.validate.capabilities" -}}
{{- $problems := list }}
{{- if not (default (dict) .Values.security).allowUnsafe }}
{{- $optIn := include "tf-multiworker.securityOptIn" . }}
{{- $psc := default (dict) .Values.podSecurityContext }}
{{- $csc := default (dict) .Values.containerSecurityContext }}
{{- if $csc }}
{{- if not (or $csc.seccompProfile $psc.seccompProfile) }}
{{- $problems = append $problems (printf "containerSecurityContext.seccompProfile is unset here and in podSecurityContext: set type RuntimeDefault; %s" $optIn) }}
{{- end }}
{{- $caps := default (dict) $csc.capabilities }}
{{- with $caps.add }}
{{- $problems = append $problems (printf "containerSecurityContext.capabilities.add=%s: no capability may be added; %s" (toJson .) $optIn) }}
{{- end }}
{{- if not (has "ALL" (default (list) $caps.drop)) }}
{{- $problems = append $problems (printf "containerSecurityContext.capabilities.drop=%s: must include ALL; %s" (toJson $caps.drop) $optIn) }}
{{- end }}
{{- with $csc.procMount }}{{ if ne (toString .) "Default" }}
{{- $problems = append $problems (printf "containerSecurityContext.procMount=%s: must be Default; %s" . $optIn) }}
{{- end }}{{ end }}
{{- end }}
{{- end }}
{{- join "\n" $problems }}
{{- end }}

{{/* Only safe sysctls; AppArmor annotations only runtime/default or localhost/*. */}}
{{- define "tf-multiworker.validate.sysctlsAppArmor" -}}
{{- $problems := list }}
{{- if not (default (dict) .Values.security).allowUnsafe }}
{{- $optIn := include "tf-multiworker.securityOptIn" . }}
{{- $psc := default (dict) .Values.podSecurityContext }}
{{- $csc := default (dict) .Values.containerSecurityContext }}
{{- range $i, $sysctl := $psc.sysctls }}
{{- if not (has (toString $sysctl.name) (list "kernel.shm_rmid_forced" "net.ipv4.ip_local_port_range" "net.ipv4.ip_unprivileged_port_start" "net.ipv4.tcp_syncookies" "net.ipv4.ping_group_range" "net.ipv4.ip_local_reserved_ports" "net.ipv4.tcp_keepalive_time" "net.ipv4.tcp_fin_timeout" "net.ipv4.tcp_keepalive_intvl" "net.ipv4.tcp_keepalive_probes")) }}
{{- $problems = append $problems (printf "podSecurityContext.sysctls[%d].name=%s: not a safe sysctl; %s" $i $sysctl.name $optIn) }}
{{- end }}
{{- end }}
{{- range $key, $value := default (dict) .Values.workers.podAnnotations }}
{{- if and (hasPrefix "container.apparmor.security.beta.kubernetes.io/" $key) (not (or (eq $value "runtime/default") (hasPrefix "localhost/" $value))) }}
{{- $problems = append $problems (printf "workers.podAnnotations.%s=%s: AppArmor must be runtime/default or localhost/*; %s" $key $value $optIn) }}
{{- end }}
{{- end }}
{{- end }}
{{- join "\n" $problems }}
{{- end }}
