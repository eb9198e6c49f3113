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
{{- end }}

{{- define "floodgate.storeURL" -}}
{{- if eq .Values.store.mode "memory" }}memory{{ else if .Values.store.redis.deploy }}redis://{{ .Release.Name }}-redis:6379{{ else }}{{ .Values.store.redis.url }}{{ end }}
{{- end }}
