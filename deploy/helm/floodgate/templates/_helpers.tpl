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
{{- if not (has .Values.mode (list "floodgate" "envoy-ratelimit")) }}
{{- fail (printf "mode %q: want floodgate or envoy-ratelimit" .Values.mode) }}
{{- end }}
{{- if eq .Values.mode "envoy-ratelimit" }}
{{- if ne .Values.store.mode "redis" }}
{{- fail "mode envoy-ratelimit counts in Redis, as envoyproxy/ratelimit does: set store.mode redis" }}
{{- end }}
{{- if and .Values.tls.existingSecret (ne .Values.tls.clientAuth "required") }}
{{- fail "tls.clientAuth optional: in mode envoy-ratelimit the gRPC listener asks every client for a certificate (required) or none (a Secret without ca.crt is not served: set tls.clientAuth required)" }}
{{- end }}
{{- if .Values.admin.token.existingSecret }}
{{- fail "admin.token is mode floodgate's: mode envoy-ratelimit serves its metrics on admin.port without a token; set admin.token.existingSecret to \"\" (networkPolicy.adminFrom says who reaches the port)" }}
{{- end }}
{{- if .Values.arrangement }}
{{- fail "arrangement is mode floodgate's: envoyproxy/ratelimit has no arrangement (every decision is a Redis call); leave arrangement empty" }}
{{- end }}
{{- end }}
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
{{- if and .Values.tls.existingSecret (ne .Values.mode "envoy-ratelimit") }}https{{ else }}http{{ end }}
{{- end }}

{{- /* The service account's name: the chart's own when it creates one. */ -}}
{{- define "floodgate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}{{ default .Release.Name .Values.serviceAccount.name }}{{ else }}{{ .Values.serviceAccount.name }}{{ end }}
{{- end }}

{{- /* The pod spec's account and scheduling fields, those values set. */ -}}
{{- define "floodgate.podScheduling" -}}
{{- with include "floodgate.serviceAccountName" . }}
serviceAccountName: {{ . }}
{{- end }}
{{- if or .Values.serviceAccount.create .Values.serviceAccount.name }}
automountServiceAccountToken: {{ .Values.serviceAccount.automountToken }}
{{- end }}
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

{{- /* envoyproxy/ratelimit's variables in mode envoy-ratelimit: the
chart's (the runtime directory, the store's Redis, Prometheus on the admin
port, the debug port on loopback, gRPC mutual TLS from tls.existingSecret,
tracing), then envoyRatelimit.env over them, by name. */ -}}
{{- define "floodgate.envoyRatelimitEnv" -}}
{{- $url := .Values.store.redis.url }}
{{- if .Values.store.redis.deploy }}{{ $url = printf "%s-redis:6379" .Release.Name }}{{ end }}
{{- $env := dict "RUNTIME_ROOT" "/data" "RUNTIME_SUBDIRECTORY" "ratelimit" "RUNTIME_WATCH_ROOT" "false" "RUNTIME_IGNOREDOTFILES" "true"
  "REDIS_SOCKET_TYPE" "tcp" "REDIS_URL" (regexReplaceAll "^rediss?://" $url "")
  "USE_STATSD" "false" "USE_PROMETHEUS" "true" "PROMETHEUS_ADDR" (printf "0.0.0.0:%v" .Values.admin.port)
  "DEBUG_HOST" "127.0.0.1" }}
{{- if hasPrefix "rediss://" $url }}{{ $_ := set $env "REDIS_TLS" "true" }}{{ end }}
{{- if .Values.tls.existingSecret }}
{{- $_ := set $env "GRPC_SERVER_USE_TLS" "true" }}
{{- $_ := set $env "GRPC_SERVER_TLS_CERT" "/etc/floodgate/tls/tls.crt" }}
{{- $_ := set $env "GRPC_SERVER_TLS_KEY" "/etc/floodgate/tls/tls.key" }}
{{- $_ := set $env "GRPC_CLIENT_TLS_CACERT" "/etc/floodgate/tls/ca.crt" }}
{{- end }}
{{- if .Values.tracing.enabled }}
{{- $_ := set $env "TRACING_ENABLED" "true" }}
{{- $_ := set $env "TRACING_SERVICE_NAME" .Release.Name }}
{{- $_ := set $env "TRACING_EXPORTER_PROTOCOL" (ternary "grpc" "http" (eq .Values.tracing.protocol "grpc")) }}
{{- $_ := set $env "OTEL_EXPORTER_OTLP_ENDPOINT" .Values.tracing.endpoint }}
{{- end }}
{{- range $k, $v := .Values.envoyRatelimit.env }}{{ $_ := set $env $k (toString $v) }}{{ end }}
{{- range $k := keys $env | sortAlpha }}
- name: {{ $k }}
  value: {{ get $env $k | quote }}
{{- end }}
{{- end }}
