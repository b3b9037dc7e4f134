{{/* Names and labels. */}}
{{- define "rebalancer.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "rebalancer.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- /* A CronJob's name: at most 52 characters (its Jobs' names add 11, within 63). */}}
{{- define "rebalancer.cronJobName" -}}
{{- include "rebalancer.fullname" . | trunc 52 | trimSuffix "-" }}
{{- end }}

{{- define "rebalancer.selectorLabels" -}}
app.kubernetes.io/name: {{ include "rebalancer.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "rebalancer.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "rebalancer.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "rebalancer.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "rebalancer.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "rebalancer.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}
{{- end }}

{{/* The policy's settings the chart reads, with the code's defaults (rebalancer/policy/__init__.py). */}}
{{- define "rebalancer.port" -}}
{{- dig "service" "port" 8080 .Values.policy | int }}
{{- end }}

{{- define "rebalancer.metricsPort" -}}
{{- dig "service" "metricsPort" 9102 .Values.policy | int }}
{{- end }}

{{- define "rebalancer.leaderElection" -}}
{{- if dig "service" "leaderElection" "enabled" true .Values.policy }}true{{ end }}
{{- end }}

{{- /* "true" when an enabled strategy of the policy is DeletionCostSteering: it patches pods' annotations */}}
{{- define "rebalancer.steering" -}}
{{- range (.Values.policy.strategies | default list) }}
{{- if and (eq (.kind | toString) "DeletionCostSteering") (ne (toString .enabled) "false") }}true{{ end }}
{{- end }}
{{- end }}

{{- define "rebalancer.landingGuard" -}}
{{- if (dig "landingGuard" "pools" list .Values.policy) }}true{{ end }}
{{- end }}

{{- define "rebalancer.watchCache" -}}
{{- if and (eq .Values.kind "Deployment") (dig "service" "watchCache" "enabled" true .Values.policy) }}true{{ end }}
{{- end }}

{{- define "rebalancer.watchList" -}}
{{- if has (dig "kubernetes" "listMode" "cached" .Values.policy) (list "auto" "watchList") }}true{{ end }}
{{- end }}

{{- define "rebalancer.serve" -}}
{{- if eq .Values.kind "Deployment" }}true{{ end }}
{{- end }}

{{- define "rebalancer.webhookToken" -}}
{{- if and (eq .Values.kind "Deployment") .Values.webhook.token.enabled }}true{{ end }}
{{- end }}

{{- define "rebalancer.webhookSecretName" -}}
{{- .Values.webhook.token.existingSecret | default (printf "%s-webhook" (include "rebalancer.fullname" .)) }}
{{- end }}

{{- define "rebalancer.policyDir" -}}/etc/rebalancer/policy{{- end }}
{{- define "rebalancer.tokenDir" -}}/etc/rebalancer/webhook{{- end }}

{{/*
The policy file: the values' policy, with apiVersion and kind, and the webhook token file the chart mounts.
Values the chart cannot honour fail here with the value's path.
*/}}
{{- define "rebalancer.policy" -}}
{{- if hasKey .Values "deschedulerPolicy" }}
{{- fail "deschedulerPolicy: this chart reads a rebalancer policy under policy:, not a descheduler policy; convert it with `rebalancer import-policy descheduler-values.yaml --out policy.yaml` (it reads the descheduler chart's values as they are, and lists what has no equivalent), put the result under policy: and leave deschedulerPolicy out; docs/migrating-from-descheduler.md maps the descheduler chart's other values" }}
{{- end }}
{{- $policy := deepCopy .Values.policy }}
{{- $_ := set $policy "apiVersion" "rebalancer.io/v1alpha1" }}
{{- $_ := set $policy "kind" "RebalancerPolicy" }}
{{- $stateNamespace := dig "state" "namespace" "" .Values.policy }}
{{- if and $stateNamespace (ne $stateNamespace .Release.Namespace) }}
{{- fail (printf "policy.state.namespace: %q is not the release namespace %q; the Role for the state ConfigMaps and the Lease is made in the release namespace (leave state.namespace out)" $stateNamespace .Release.Namespace) }}
{{- end }}
{{- include "rebalancer.checkThresholds" $policy }}
{{- $_ := set $policy "protections" (include "rebalancer.protections" . | fromYaml) }}
{{- if include "rebalancer.webhookToken" . }}
{{- $service := get $policy "service" | default dict }}
{{- $webhook := get $service "webhook" | default dict }}
{{- $tokenFile := printf "%s/%s" (include "rebalancer.tokenDir" .) .Values.webhook.token.key }}
{{- $given := get $webhook "tokenFile" | default "" }}
{{- if and $given (ne $given $tokenFile) }}
{{- fail (printf "policy.service.webhook.tokenFile: the chart mounts the token at %s (webhook.token); leave tokenFile out, or set webhook.token.enabled: false to mount your own" $tokenFile) }}
{{- end }}
{{- $_ := set $webhook "tokenFile" $tokenFile }}
{{- $_ := set $service "webhook" $webhook }}
{{- $_ := set $policy "service" $service }}
{{- end }}
{{- toYaml $policy }}
{{- end }}

{{/* Values that only make sense together. */}}
{{- define "rebalancer.validate" -}}
{{- if and (eq .Values.kind "Deployment") (gt (int .Values.replicas) 1) (not (include "rebalancer.leaderElection" .)) }}
{{- fail (printf "replicas: %d needs leader election, or every replica evicts on its own: leave policy.service.leaderElection.enabled out (it is on by default) or set it to true" (int .Values.replicas)) }}
{{- end }}
{{- if and (eq .Values.kind "CronJob") (gt (int .Values.replicas) 1) }}
{{- fail "replicas: a CronJob runs one pod per run; replicas applies to kind: Deployment" }}
{{- end }}
{{- if and (eq .Values.kind "CronJob") .Values.serviceMonitor.enabled }}
{{- fail "serviceMonitor.enabled: a CronJob run serves no /metrics; use kind: Deployment" }}
{{- end }}
{{- if and (eq .Values.kind "Deployment") (eq (int .Values.service.webhookPort) (int .Values.service.metricsPort)) }}
{{- fail (printf "service.webhookPort and service.metricsPort: both %d; the Service needs a port for each (the webhook, /metrics)" (int .Values.service.webhookPort)) }}
{{- end }}
{{- $host := dig "service" "host" "0.0.0.0" .Values.policy }}
{{- if and (eq .Values.kind "Deployment") (or (hasPrefix "127." $host) (eq $host "localhost") (eq $host "::1")) }}
{{- fail (printf "policy.service.host: %s is reachable only from inside the pod: the Service and Alertmanager could not reach the webhook" $host) }}
{{- end }}
{{- $metricsHost := dig "service" "metricsHost" $host .Values.policy | default $host }}
{{- if and (eq .Values.kind "Deployment") (or (hasPrefix "127." $metricsHost) (eq $metricsHost "localhost") (eq $metricsHost "::1")) }}
{{- fail (printf "policy.service.metricsHost: %s is reachable only from inside the pod: the probes and Prometheus could not reach it" $metricsHost) }}
{{- end }}
{{- $webhook := dig "service" "webhook" dict .Values.policy }}
{{- if and (eq .Values.kind "Deployment") (not .Values.webhook.token.enabled) (not (get $webhook "tokenFile")) (not (get $webhook "allowUnauthenticated")) }}
{{- fail "webhook.token.enabled: false leaves the webhook without a token, and rebalancer serve refuses to start so: keep the chart's token (webhook.token.enabled: true, or existingSecret), or set policy.service.webhook.allowUnauthenticated: true to accept anyone who can reach the webhook port" }}
{{- end }}
{{- end }}

{{/*
The policy's protections with the chart's: kube-system, protect.namespaces and the release namespace never
evictable, whatever exclude list the policy gives (the union of both), and protect.monitoringPods as the
protectedLabelSelector unless the policy sets its own.
*/}}
{{- define "rebalancer.protections" -}}
{{- $protections := deepCopy (get .Values.policy "protections" | default dict) }}
{{- $namespaces := get $protections "evictableNamespaces" | default dict }}
{{- $protected := concat (list "kube-system") (.Values.protect.namespaces | default list) (list .Release.Namespace) | uniq }}
{{- $include := get $namespaces "include" | default list }}
{{- if $include }}
{{- range $protected }}
{{- if has . $include }}
{{- fail (printf "policy.protections.evictableNamespaces.include: lists %q, which the chart protects (kube-system, the release namespace and protect.namespaces): leave it out" .) }}
{{- end }}
{{- end }}
{{- $_ := unset $namespaces "exclude" }}
{{- else }}
{{- $exclude := get $namespaces "exclude" | default list }}
{{- $_ := set $namespaces "exclude" (concat $exclude $protected | uniq) }}
{{- end }}
{{- $_ := set $protections "evictableNamespaces" $namespaces }}
{{- if and .Values.protect.monitoringPods (not (get $protections "protectedLabelSelector")) }}
{{- $monitoring := dict "key" "app.kubernetes.io/name" "operator" "In" "values" (list "prometheus" "alertmanager") }}
{{- $_ := set $protections "protectedLabelSelector" (dict "matchExpressions" (list $monitoring)) }}
{{- end }}
{{- toYaml $protections }}
{{- end }}

{{/*
Absolute thresholds above their targetThresholds (per strategy and per pool) fail with the value's path,
as check-config would; a JSON schema cannot compare two values.
*/}}
{{- define "rebalancer.checkThresholds" -}}
{{- range $i, $strategy := (.strategies | default list) }}
{{- if has ($strategy.kind | toString) (list "LowNodeUtilization" "HighNodeUtilization") }}
{{- $deviation := eq (toString ($strategy.useDeviationThresholds | default false)) "true" }}
{{- $target := dig "targetThresholds" "cpu" 70 $strategy }}
{{- $bands := list (list (printf "policy.strategies.%d" $i) $strategy $deviation $target) }}
{{- range $pool, $settings := ($strategy.pools | default dict) }}
{{- $own := get $settings "useDeviationThresholds" }}
{{- $poolDeviation := ternary (eq (toString $own) "true") $deviation (kindIs "bool" $own) }}
{{- $bands = append $bands (list (printf "policy.strategies.%d.pools.%s" $i $pool) $settings $poolDeviation (dig "targetThresholds" "cpu" 70 $settings)) }}
{{- end }}
{{- range $bands }}
{{- $path := index . 0 }}{{- $low := dig "thresholds" "cpu" 0 (index . 1) }}{{- $high := index . 3 }}
{{- if and (not (index . 2)) (gt (float64 $low) (float64 $high)) }}
{{- fail (printf "%s.thresholds.cpu: %v must not be above targetThresholds.cpu (%v)" $path $low $high) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
