{{/* The pod both kinds run: `rebalancer run --once` (CronJob) or `rebalancer serve` (Deployment). */}}
{{- define "rebalancer.args" -}}
- --log-level
- {{ .Values.logLevel }}
{{- if include "rebalancer.serve" . }}
- serve
{{- else }}
- run
- --once
{{- end }}
- --policy
- {{ include "rebalancer.policyDir" . }}/policy.yaml
{{- if ne .Values.dryRun "off" }}
- --dry-run={{ .Values.dryRun }}
{{- end }}
{{- end }}

{{- define "rebalancer.podSpec" -}}
serviceAccountName: {{ include "rebalancer.serviceAccountName" . }}
automountServiceAccountToken: true
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- if include "rebalancer.serve" . }}
terminationGracePeriodSeconds: {{ .Values.terminationGracePeriodSeconds }}
{{- else }}
restartPolicy: Never
{{- end }}
containers:
  - name: rebalancer
    image: {{ include "rebalancer.image" . | quote }}
    imagePullPolicy: {{ .Values.image.pullPolicy }}
    args:
      {{- include "rebalancer.args" . | nindent 6 }}
    env:
      # where the state ConfigMaps and the Lease are (policy state.namespace left out)
      - name: POD_NAMESPACE
        valueFrom:
          fieldRef:
            fieldPath: metadata.namespace
      {{- with .Values.extraEnv }}
      {{- toYaml . | nindent 6 }}
      {{- end }}
    {{- if include "rebalancer.serve" . }}
    ports:
      # POST /webhook/alertmanager only
      - name: webhook
        containerPort: {{ include "rebalancer.port" . }}
        protocol: TCP
      # /metrics and the probes /healthz, /readyz: no webhook client can keep them from answering
      - name: metrics
        containerPort: {{ include "rebalancer.metricsPort" . }}
        protocol: TCP
    livenessProbe:
      {{- toYaml .Values.livenessProbe | nindent 6 }}
    readinessProbe:
      {{- toYaml .Values.readinessProbe | nindent 6 }}
    {{- end }}
    resources:
      {{- toYaml .Values.resources | nindent 6 }}
    securityContext:
      {{- toYaml .Values.securityContext | nindent 6 }}
    volumeMounts:
      # whole directories, not subPath: a changed ConfigMap or Secret reaches the running pod
      - name: policy
        mountPath: {{ include "rebalancer.policyDir" . }}
        readOnly: true
      {{- if include "rebalancer.webhookToken" . }}
      - name: webhook-token
        mountPath: {{ include "rebalancer.tokenDir" . }}
        readOnly: true
      {{- end }}
      - name: tmp
        mountPath: /tmp
volumes:
  - name: policy
    configMap:
      name: {{ include "rebalancer.fullname" . }}-policy
  {{- if include "rebalancer.webhookToken" . }}
  - name: webhook-token
    secret:
      secretName: {{ include "rebalancer.webhookSecretName" . }}
      items:
        - key: {{ .Values.webhook.token.key }}
          path: {{ .Values.webhook.token.key }}
  {{- end }}
  - name: tmp
    emptyDir:
      sizeLimit: 64Mi
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{- define "rebalancer.podMetadata" -}}
labels:
  {{- include "rebalancer.selectorLabels" . | nindent 2 }}
  {{- with .Values.podLabels }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- $rolls := or .Values.rollOnPolicyChange (not (include "rebalancer.serve" .)) }}
{{- if or $rolls .Values.podAnnotations }}
annotations:
  {{- if $rolls }}
  checksum/policy: {{ include "rebalancer.policy" . | sha256sum }}
  {{- end }}
  {{- with .Values.podAnnotations }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end }}
{{- end }}
