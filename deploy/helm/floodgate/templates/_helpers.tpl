{{- define "floodgate.labels" -}}
app.kubernetes.io/name: floodgate
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: floodgate
{{- end }}

{{- define "floodgate.selector" -}}
app.kubernetes.io/name: floodgate
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "floodgate.redisSelector" -}}
app.kubernetes.io/name: floodgate-redis
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "floodgate.check" -}}
{{- if not (has .Values.store.mode (list "memory" "redis")) }}
{{- fail (printf "store.mode %q: want memory or redis" .Values.store.mode) }}
{{- end }}
{{- if and (eq .Values.store.mode "memory") (or (gt (int .Values.replicaCount) 1) .Values.autoscaling.enabled) }}
{{- fail "store.mode memory counts in each replica alone: use one replica without autoscaling, or store.mode redis" }}
{{- end }}
{{- if and (eq .Values.store.mode "redis") (not .Values.store.redis.deploy) (not .Values.store.redis.url) }}
{{- fail "store.mode redis with store.redis.deploy false needs store.redis.url" }}
{{- end }}
{{- if and .Values.tracing.enabled (not .Values.tracing.endpoint) }}
{{- fail "tracing.enabled needs tracing.endpoint, the OTLP collector's URL (http://collector:4318)" }}
{{- end }}
{{- if not (has .Values.tracing.protocol (list "http/protobuf" "grpc")) }}
{{- fail (printf "tracing.protocol %q: want http/protobuf or grpc" .Values.tracing.protocol) }}
{{- end }}
{{- if not (has .Values.tls.clientAuth (list "required" "optional")) }}
{{- fail (printf "tls.clientAuth %q: want required or optional" .Values.tls.clientAuth) }}
{{- end }}
{{- end }}

{{- define "floodgate.storeURL" -}}
{{- if eq .Values.store.mode "memory" }}memory{{ else if .Values.store.redis.deploy }}redis://{{ .Release.Name }}-redis:6379{{ else }}{{ .Values.store.redis.url }}{{ end }}
{{- end }}

{{- /* The port the probes and /metrics use: the plain admin listener when the
main listeners ask for client certificates, else http. */ -}}
{{- define "floodgate.probePort" -}}
{{- if .Values.tls.existingSecret }}admin{{ else }}http{{ end }}
{{- end }}
