{{/*
Every check of the values the schema cannot express: one small define per rule, in the
_validate_<topic>.tpl files, each printing its problems one per line and naming the key and
the fix. validateValues collects them all and fails once, listing each problem on a line of
its own (Bitnami's pattern). The StatefulSet, which is always rendered, includes it first.
*/}}
{{- define "tf-multiworker.validateValues" -}}
{{- $rules := list "namespace" "fullname" "extraEnv" "extraEnvFrom" "gpuVisibility" "podLabels" "commonLabels" "podAnnotations" "metricsPort" "tensorboardStorage" "completionStorage" "objectStoreScheme" "requestsWithinLimits" "shmWithinMemory" "gpuWorkerResources" "writableDirsWithinEphemeralStorage" "gpusInOnePlace" "completionRbac" "serviceAccount" "podRights" "admissionPolicy" "mounts" "extraVolumes" "extraVolumeMounts" "files" "evaluator" "subPath" "createClaim" "existingClaim" "disruptionBudget" "gangScheduler" "egressRules" "dnsTo" "apiServerFound" "peerShape" "securityContexts" "containerSecurity" "securityFields" "capabilities" "sysctlsAppArmor" "extraContainerNames" "extraContainerSecurity" "trainerArgs" "ipcLock" "podAntiAffinity" "tfConfigSize" "kueueInPlace" "imageRepository" "imageDigest" "elastic" "elasticNeeds" }}
{{- $problems := list }}
{{- range $rule := $rules }}
{{- with include (printf "tf-multiworker.validate.%s" $rule) $ | trim }}
{{- $problems = append $problems . }}
{{- end }}
{{- end }}
{{- if $problems }}
{{- fail (join "\n" $problems) }}
{{- end }}
{{- end }}
