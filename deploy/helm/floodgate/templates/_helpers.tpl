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
{{- if hasKey .Values.tls "adminPort" }}
{{- fail "tls.adminPort is admin.port: the admin listener is always on, with TLS when tls.existingSecret is set" }}
{{- end }}
{{- if has (int .Values.admin.port) (list 0 8080 8081) }}
{{- fail (printf "admin.port %v: want a port of its own (not 8080 or 8081)" .Values.admin.port) }}
{{- end }}
{{- $policies := list "volatile-lru" "allkeys-lru" "volatile-lfu" "allkeys-lfu" "volatile-ttl" "volatile-random" "allkeys-random" "noeviction" }}
{{- if not (has .Values.store.redis.maxmemoryPolicy $policies) }}
{{- fail (printf "store.redis.maxmemoryPolicy %q: want one of %s" .Values.store.redis.maxmemoryPolicy (join ", " $policies)) }}
{{- end }}
{{- end }}

{{- define "floodgate.storeURL" -}}
{{- if eq .Values.store.mode "memory" }}memory{{ else if .Values.store.redis.deploy }}redis://{{ .Release.Name }}-redis:6379{{ else }}{{ .Values.store.redis.url }}{{ end }}
{{- end }}

{{- /* The admin listener's scheme: https when the chart serves TLS. */ -}}
{{- define "floodgate.adminScheme" -}}
{{- if .Values.tls.existingSecret }}https{{ else }}http{{ end }}
{{- end }}
