{{/*
The release's alert rules, one source for the PrometheusRule and the plain rules file
(metrics.alerts, docs/operations.md "Alerts"). Every selector is this release's worker pods by
the `namespace` and `pod` target labels; each alert carries the release's name.
*/}}
{{- define "tf-multiworker.alertRules" -}}
{{- $a := .Values.metrics.alerts }}
{{- $sel := printf "namespace=%q, pod=~%q" .Release.Namespace (printf "%s-[0-9]+" (include "tf-multiworker.fullname" .)) }}
{{- $labels := dict "severity" $a.severity "release" .Release.Name }}
{{- $rules := list
  (dict "alert" "TfmwTrainingStalled" "expr" (printf "max by (namespace) (changes(tfmw_step{%s}[%ds])) == 0 and on (namespace) max by (namespace) (tfmw_phase{%s, tfmw_phase=\"Running\"}) == 1" $sel (int $a.stalledSeconds) $sel) "labels" $labels "annotations" (dict "summary" "tf-multiworker run stalled" "description" (printf "Release %s is Running but no worker's step moved for %ds: a hung worker or a group waiting for one (make status, make logs)." .Release.Name (int $a.stalledSeconds))))
  (dict "alert" "TfmwRestartLoop" "expr" (printf "max by (namespace) (increase(tfmw_restarts{%s}[1h])) > %d" $sel (int $a.restartsPerHour)) "labels" $labels "annotations" (dict "summary" "tf-multiworker restarts climbing" "description" (printf "Release %s restarted training in place more than %d times in an hour (the status message says why)." .Release.Name (int $a.restartsPerHour))))
  (dict "alert" "TfmwGoodputLow" "expr" (printf "max by (namespace) (tfmw_goodput_ratio{%s}) < %v" $sel $a.goodputBelow) "for" "30m" "labels" $labels "annotations" (dict "summary" "tf-multiworker goodput low" "description" (printf "Release %s kept less than %v of its wall time as training for 30 min (badput by cause: tfmw_badput_seconds)." .Release.Name $a.goodputBelow)))
  (dict "alert" "TfmwRunFailed" "expr" (printf "max by (namespace) (tfmw_phase{%s, tfmw_phase=\"Failed\"}) == 1" $sel) "labels" $labels "annotations" (dict "summary" "tf-multiworker run Failed" "description" (printf "Release %s's run is Failed: its status ConfigMap says why (make status); make retry once the cause is fixed." .Release.Name)))
  (dict "alert" "TfmwWorkerNotScraped" "expr" (printf "up{%s} == 0" $sel) "for" (printf "%ds" (int $a.notScrapedSeconds)) "labels" $labels "annotations" (dict "summary" "tf-multiworker worker not scraped" "description" (printf "Worker {{ $labels.pod }} of release %s has not answered a metrics scrape for %ds." .Release.Name (int $a.notScrapedSeconds))))
}}
{{- toYaml (dict "groups" (list (dict "name" (printf "tf-multiworker.%s.%s" .Release.Namespace .Release.Name) "rules" $rules))) }}
{{- end }}
