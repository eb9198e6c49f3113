package chartcheck

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
	"helm.sh/helm/v3/pkg/action"

	"github.com/floodgate-dev/floodgate/rules"
)

const root = "../../.."

// objects renders the chart and parses every document: "Kind/name" -> object.
func objects(t *testing.T, values []string, set ...string) map[string]map[string]any {
	t.Helper()
	files, err := Render(ChartDir, values, set...)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]any{}
	for name, text := range files {
		dec := yaml.NewDecoder(strings.NewReader(text))
		for {
			var m map[string]any
			if err := dec.Decode(&m); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v\n%s", name, err, text)
			}
			if m == nil {
				continue
			}
			out[m["kind"].(string)+"/"+dig(m, "metadata", "name").(string)] = m
		}
	}
	return out
}

// dig walks a generic YAML value by map keys and list indexes.
func dig(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			l, _ := v.([]any)
			if k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

func container(dep map[string]any) any {
	return dig(dep, "spec", "template", "spec", "containers", 0)
}

func args(dep map[string]any) string {
	var out []string
	for _, a := range dig(container(dep), "args").([]any) {
		out = append(out, a.(string))
	}
	return strings.Join(out, " ")
}

// TestChartRenders renders the chart with several values sets and checks
// the objects each one makes.
func TestChartRenders(t *testing.T) {
	t.Run("defaults: memory store", func(t *testing.T) {
		objs := objects(t, nil)
		dep := objs["Deployment/floodgate"]
		want := []string{"Deployment/floodgate", "Service/floodgate", "ConfigMap/floodgate-rules", "ConfigMap/floodgate-config", "NetworkPolicy/floodgate"}
		for _, k := range want {
			if objs[k] == nil {
				t.Errorf("no %s", k)
			}
		}
		if len(objs) != len(want) {
			t.Fatalf("objects %v: want %v", keys(objs), want)
		}
		if dig(dep, "spec", "replicas") != 1 || !strings.Contains(args(dep), "--store=memory") ||
			!strings.Contains(args(dep), "--config=/etc/floodgate/config/floodgate.yaml") {
			t.Errorf("replicas %v, args %s", dig(dep, "spec", "replicas"), args(dep))
		}
		c := container(dep)
		for probe, path := range map[string]string{"startupProbe": "/healthz", "readinessProbe": "/readyz", "livenessProbe": "/healthz"} {
			if dig(c, probe, "httpGet", "path") != path || dig(c, probe, "httpGet", "port") != "admin" || dig(c, probe, "httpGet", "scheme") != "HTTP" {
				t.Errorf("%s: %v, want %s on the admin port over HTTP", probe, dig(c, probe), path)
			}
		}
		if dig(c, "resources", "limits", "memory") != "512Mi" || len(env(c)) != 1 {
			t.Errorf("resources %v env %v: want a 512Mi limit and no GOMEMLIMIT (serve derives it)", dig(c, "resources"), dig(c, "env"))
		}
		// The admin endpoints: a listener of their own, behind a token
		// from the floodgate-admin Secret.
		tok := envVar(c, "FLOODGATE_ADMIN_TOKEN")
		if dig(tok, "valueFrom", "secretKeyRef", "name") != "floodgate-admin" || dig(tok, "valueFrom", "secretKeyRef", "key") != "token" {
			t.Errorf("admin token variable %v", tok)
		}
		cfg := serveConfig(t, objs)
		if cfg.Admin.Addr != "0.0.0.0:9090" || cfg.Admin.TokenEnv != "FLOODGATE_ADMIN_TOKEN" || cfg.Admin.TLS != nil {
			t.Errorf("admin section %+v: want its own listener on 9090, the token from FLOODGATE_ADMIN_TOKEN, no TLS", cfg.Admin)
		}
		if p := servicePort(objs["Service/floodgate"], "admin"); dig(p, "port") != 9090 || dig(p, "appProtocol") != "http" {
			t.Errorf("Service admin port %v", p)
		}
		// On by default: clients reach grpc and http, Prometheus the admin port.
		np := objs["NetworkPolicy/floodgate"]
		if dig(np, "spec", "ingress", 0, "ports", 0, "port") != "grpc" || dig(np, "spec", "ingress", 0, "ports", 1, "port") != "http" ||
			dig(np, "spec", "ingress", 0, "ports", 2) != nil {
			t.Errorf("client ingress %v: want grpc and http only", dig(np, "spec", "ingress", 0))
		}
		if dig(np, "spec", "ingress", 1, "ports", 0, "port") != "admin" ||
			dig(np, "spec", "ingress", 1, "from", 0, "podSelector", "matchLabels", "app.kubernetes.io/name") != "prometheus" {
			t.Errorf("admin ingress %v: want the admin port for Prometheus only", dig(np, "spec", "ingress", 1))
		}
		text := dig(objs["ConfigMap/floodgate-rules"], "data", "rules.yaml").(string)
		if _, err := rules.Parse("rules.yaml", []byte(text)); err != nil {
			t.Errorf("the chart's rules: %v", err)
		}
	})
	t.Run("an arrangement with a region", func(t *testing.T) {
		if a := serveConfig(t, objects(t, nil, "store.mode=redis", "autoscaling.enabled=true")).Arrangement; a != nil {
			t.Errorf("an HPA without arrangement renders arrangement %v: want serve's defaults (nodes: 0, live)", a)
		}
		values := filepath.Join(t.TempDir(), "region.yaml")
		err := os.WriteFile(values, []byte(`store: {mode: redis}
arrangement:
  region:
    name: us
    others: [{name: eu, store: {type: redis, addrs: ["redis.eu.internal:6379"]}}]
`), 0o644)
		if err != nil {
			t.Fatal(err)
		}
		a := serveConfig(t, objects(t, []string{values})).Arrangement
		if dig(a, "region", "name") != "us" || dig(a, "region", "others", 0, "store", "addrs", 0) != "redis.eu.internal:6379" {
			t.Errorf("arrangement %v: want the region as given", a)
		}
	})
	t.Run("redis with auth, PDB, HPA, ServiceMonitor, NetworkPolicy", func(t *testing.T) {
		objs := objects(t, nil, "store.mode=redis", "podDisruptionBudget.enabled=true", "autoscaling.enabled=true",
			"serviceMonitor.enabled=true", "networkPolicy.enabled=true", "networkPolicy.clientPodLabels.app=envoy",
			"resources.limits.memory=1Gi")
		for _, k := range []string{"Deployment/floodgate", "Deployment/floodgate-redis", "Service/floodgate-redis",
			"PodDisruptionBudget/floodgate", "HorizontalPodAutoscaler/floodgate", "ServiceMonitor/floodgate",
			"NetworkPolicy/floodgate", "NetworkPolicy/floodgate-redis"} {
			if objs[k] == nil {
				t.Errorf("no %s among %v", k, keys(objs))
			}
		}
		dep := objs["Deployment/floodgate"]
		if dig(dep, "spec", "replicas") != nil {
			t.Errorf("replicas %v set with an HPA", dig(dep, "spec", "replicas"))
		}
		if !strings.Contains(args(dep), "--store=redis://floodgate-redis:6379") {
			t.Errorf("args %s", args(dep))
		}
		c := container(dep)
		if dig(envVar(c, "FLOODGATE_REDIS_PASSWORD"), "valueFrom", "secretKeyRef", "name") != "floodgate-redis" {
			t.Errorf("floodgate's Redis password: %v", dig(c, "env"))
		}
		rc := container(objs["Deployment/floodgate-redis"])
		if cmd, _ := dig(rc, "command", 2).(string); !strings.Contains(cmd, `--requirepass "$REDIS_PASSWORD"`) ||
			dig(rc, "env", 0, "valueFrom", "secretKeyRef", "key") != "password" {
			t.Errorf("Redis without the password: %v %v", dig(rc, "command"), dig(rc, "env"))
		}
		// The bundled Redis's memory: maxmemory three quarters of its
		// container's limit, evicting the least frequently used counters
		// with an expiry (redisstore's TestKeyFloodOnAFullRedis).
		if cmd, _ := dig(rc, "command", 2).(string); !strings.Contains(cmd, "--maxmemory 384mb --maxmemory-policy volatile-lfu") ||
			dig(rc, "resources", "limits", "memory") != "512Mi" {
			t.Errorf("Redis memory: %v, resources %v", dig(rc, "command"), dig(rc, "resources"))
		}
		if dig(objs["NetworkPolicy/floodgate"], "spec", "ingress", 0, "from", 0, "podSelector", "matchLabels", "app") != "envoy" ||
			dig(objs["NetworkPolicy/floodgate-redis"], "spec", "ingress", 0, "from", 0, "podSelector", "matchLabels", "app.kubernetes.io/name") != "floodgate" {
			t.Errorf("network policies: %v %v", objs["NetworkPolicy/floodgate"], objs["NetworkPolicy/floodgate-redis"])
		}
		if ep := dig(objs["ServiceMonitor/floodgate"], "spec", "endpoints", 0); dig(ep, "path") != "/metrics" || dig(ep, "port") != "admin" ||
			dig(ep, "scheme") != "http" || dig(ep, "authorization", "credentials", "name") != "floodgate-admin" || dig(ep, "tlsConfig") != nil {
			t.Errorf("ServiceMonitor endpoint %v: want /metrics on the admin port with the admin token", ep)
		}
		if dig(c, "resources", "limits", "memory") != "1Gi" {
			t.Errorf("resources %v", dig(c, "resources"))
		}
	})
	t.Run("an external Redis without a password", func(t *testing.T) {
		objs := objects(t, nil, "store.mode=redis", "store.redis.deploy=false", "store.redis.url=rediss://redis.example:6380",
			"store.redis.auth.existingSecret=")
		if objs["Deployment/floodgate-redis"] != nil || !strings.Contains(args(objs["Deployment/floodgate"]), "--store=rediss://redis.example:6380") {
			t.Errorf("objects %v, args %s", keys(objs), args(objs["Deployment/floodgate"]))
		}
		if envVar(container(objs["Deployment/floodgate"]), "FLOODGATE_REDIS_PASSWORD") != nil {
			t.Errorf("a password variable without a Secret")
		}
	})
	t.Run("admin without a token, no network policy", func(t *testing.T) {
		objs := objects(t, nil, "admin.token.existingSecret=", "networkPolicy.enabled=false", "serviceMonitor.enabled=true")
		if c := container(objs["Deployment/floodgate"]); dig(c, "env") != nil {
			t.Errorf("env %v without a token Secret", dig(c, "env"))
		}
		if cfg := serveConfig(t, objs); cfg.Admin.TokenEnv != "" || cfg.Admin.Addr != "0.0.0.0:9090" {
			t.Errorf("admin section %+v", cfg.Admin)
		}
		if objs["NetworkPolicy/floodgate"] != nil || dig(objs["ServiceMonitor/floodgate"], "spec", "endpoints", 0, "authorization") != nil {
			t.Errorf("network policy %v, ServiceMonitor %v", objs["NetworkPolicy/floodgate"], objs["ServiceMonitor/floodgate"])
		}
	})
	t.Run("tracing and client certificates", func(t *testing.T) {
		objs := objects(t, nil, "tracing.enabled=true", "tracing.endpoint=http://collector:4318",
			"tls.existingSecret=floodgate-tls", "serviceMonitor.enabled=true", "networkPolicy.enabled=true")
		dep := objs["Deployment/floodgate"]
		c := container(dep)
		env := map[string]any{}
		for _, e := range dig(c, "env").([]any) {
			env[dig(e, "name").(string)] = dig(e, "value")
		}
		if env["OTEL_TRACES_EXPORTER"] != "otlp" || env["OTEL_EXPORTER_OTLP_ENDPOINT"] != "http://collector:4318" ||
			env["OTEL_EXPORTER_OTLP_PROTOCOL"] != "http/protobuf" {
			t.Errorf("tracing variables %v", env)
		}
		if !strings.Contains(args(dep), "--config=/etc/floodgate/config/floodgate.yaml") {
			t.Errorf("args %s: want the config file", args(dep))
		}
		for _, probe := range []string{"startupProbe", "readinessProbe", "livenessProbe"} {
			if dig(c, probe, "httpGet", "port") != "admin" || dig(c, probe, "httpGet", "scheme") != "HTTPS" {
				t.Errorf("%s %v: the kubelet has no client certificate, want the admin port over TLS", probe, dig(c, probe, "httpGet"))
			}
		}
		ep := dig(objs["ServiceMonitor/floodgate"], "spec", "endpoints", 0)
		if dig(ep, "port") != "admin" || dig(ep, "scheme") != "https" || dig(ep, "tlsConfig", "insecureSkipVerify") != true ||
			dig(ep, "authorization", "credentials", "key") != "token" {
			t.Errorf("ServiceMonitor endpoint %v: want the admin port over TLS with the token", ep)
		}
		if p := servicePort(objs["Service/floodgate"], "admin"); dig(p, "port") != 9090 || dig(p, "appProtocol") != "https" {
			t.Errorf("Service admin port %v", p)
		}
		if dig(objs["NetworkPolicy/floodgate"], "spec", "ingress", 1, "ports", 0, "port") != "admin" {
			t.Errorf("NetworkPolicy %v", dig(objs["NetworkPolicy/floodgate"], "spec", "ingress"))
		}
		if dig(dep, "spec", "template", "spec", "volumes", 2, "secret", "secretName") != "floodgate-tls" {
			t.Errorf("volumes %v", dig(dep, "spec", "template", "spec", "volumes"))
		}
		cfg := serveConfig(t, objs)
		for _, l := range []map[string]string{cfg.HTTP.TLS, cfg.GRPC.TLS} {
			if l["client_ca"] != "/etc/floodgate/tls/ca.crt" || l["cert"] != "/etc/floodgate/tls/tls.crt" || l["client_auth"] != "required" {
				t.Errorf("listener TLS %v", l)
			}
		}
		// The admin listener serves TLS too, without asking for a client
		// certificate (the kubelet has none; the token stands for it).
		if cfg.Admin.Addr != "0.0.0.0:9090" || cfg.Admin.TLS["cert"] != "/etc/floodgate/tls/tls.crt" ||
			cfg.Admin.TLS["key"] != "/etc/floodgate/tls/tls.key" || cfg.Admin.TLS["client_ca"] != "" || cfg.Admin.TokenEnv != "FLOODGATE_ADMIN_TOKEN" {
			t.Errorf("admin listener %+v: want TLS with the server's certificate, no client certificates, the token", cfg.Admin)
		}
	})
	t.Run("envoy-ratelimit mode", func(t *testing.T) {
		objs := objects(t, nil, "mode=envoy-ratelimit", "store.mode=redis", "admin.token.existingSecret=",
			"envoyRatelimit.env.LOG_LEVEL=info", "envoyRatelimit.env.USE_PROMETHEUS=true", "extraEnv[0].name=EXTRA", "extraEnv[0].value=x1",
			"tracing.enabled=true", "tracing.endpoint=http://collector:4317", "tracing.protocol=grpc")
		dep := objs["Deployment/floodgate"]
		c := container(dep)
		if cmd := dig(c, "command", 0); cmd != "/bin/ratelimit" || dig(c, "args") != nil {
			t.Errorf("command %v args %v: want /bin/ratelimit and no arguments", dig(c, "command"), dig(c, "args"))
		}
		env := map[string]any{}
		var names []string
		for _, e := range dig(c, "env").([]any) {
			n := dig(e, "name").(string)
			names = append(names, n)
			env[n] = dig(e, "value")
			if n == "REDIS_AUTH" {
				env[n] = dig(e, "valueFrom", "secretKeyRef", "name")
			}
		}
		for k, v := range map[string]string{"RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_WATCH_ROOT": "false",
			"RUNTIME_IGNOREDOTFILES": "true", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "floodgate-redis:6379", "REDIS_AUTH": "floodgate-redis",
			"USE_STATSD": "false", "USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": "0.0.0.0:9090", "DEBUG_HOST": "127.0.0.1", "LOG_LEVEL": "info",
			"TRACING_ENABLED": "true", "TRACING_EXPORTER_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317", "EXTRA": "x1"} {
			if env[k] != v {
				t.Errorf("%s = %v, want %q", k, env[k], v)
			}
		}
		if len(names) != len(env) || names[len(names)-1] != "EXTRA" {
			t.Errorf("variables %v: each once, extraEnv last", names)
		}
		for _, probe := range []string{"startupProbe", "readinessProbe", "livenessProbe"} {
			if dig(c, probe, "httpGet", "path") != "/healthcheck" || dig(c, probe, "httpGet", "port") != "http" {
				t.Errorf("%s: %v, want /healthcheck on http", probe, dig(c, probe))
			}
		}
		if dig(c, "volumeMounts", 0, "mountPath") != "/data/ratelimit/config" || objs["ConfigMap/floodgate-config"] != nil {
			t.Errorf("mounts %v, objects %v: want the rule files at RUNTIME_ROOT/ratelimit/config and no serve configuration", dig(c, "volumeMounts"), keys(objs))
		}
		text, _ := dig(objs["ConfigMap/floodgate-rules"], "data", "config.yaml").(string)
		if _, err := rules.Parse("config.yaml", []byte(text)); err != nil || !strings.Contains(text, "descriptors:") {
			t.Errorf("the chart's envoyproxy/ratelimit rules %q: %v", text, err)
		}
		ext := objects(t, nil, "mode=envoy-ratelimit", "store.mode=redis", "admin.token.existingSecret=", "store.redis.deploy=false",
			"store.redis.url=rediss://redis.example:6380", "store.redis.auth.existingSecret=", "envoyRatelimit.env.REDIS_TYPE=cluster")
		env = map[string]any{}
		for _, e := range dig(container(ext["Deployment/floodgate"]), "env").([]any) {
			env[dig(e, "name").(string)] = dig(e, "value")
		}
		if env["REDIS_URL"] != "redis.example:6380" || env["REDIS_TLS"] != "true" || env["REDIS_TYPE"] != "cluster" || env["REDIS_AUTH"] != nil {
			t.Errorf("an external Redis over TLS: %v", env)
		}
		tls := objects(t, nil, "mode=envoy-ratelimit", "store.mode=redis", "admin.token.existingSecret=", "tls.existingSecret=rl-tls",
			"serviceMonitor.enabled=true")
		tc := container(tls["Deployment/floodgate"])
		env = map[string]any{}
		for _, e := range dig(tc, "env").([]any) {
			env[dig(e, "name").(string)] = dig(e, "value")
		}
		if env["GRPC_SERVER_USE_TLS"] != "true" || env["GRPC_SERVER_TLS_CERT"] != "/etc/floodgate/tls/tls.crt" ||
			env["GRPC_SERVER_TLS_KEY"] != "/etc/floodgate/tls/tls.key" || env["GRPC_CLIENT_TLS_CACERT"] != "/etc/floodgate/tls/ca.crt" {
			t.Errorf("gRPC mutual TLS: %v", env)
		}
		if dig(tc, "volumeMounts", 1, "mountPath") != "/etc/floodgate/tls" ||
			dig(tls["Deployment/floodgate"], "spec", "template", "spec", "volumes", 1, "secret", "secretName") != "rl-tls" {
			t.Errorf("the Secret is not mounted: %v", dig(tc, "volumeMounts"))
		}
		// The http and admin ports stay plain in this mode.
		if dig(tls["ServiceMonitor/floodgate"], "spec", "endpoints", 0, "scheme") != "http" || dig(tls["ServiceMonitor/floodgate"], "spec", "endpoints", 0, "tlsConfig") != nil ||
			dig(tls["Service/floodgate"], "spec", "ports", 1, "appProtocol") != "http" {
			t.Errorf("plain http and metrics ports: ServiceMonitor %v, Service %v", dig(tls["ServiceMonitor/floodgate"], "spec"), dig(tls["Service/floodgate"], "spec", "ports"))
		}
	})
	t.Run("scheduling, pod metadata and service account, in either mode", func(t *testing.T) {
		set := []string{"nodeSelector.disk=ssd", "tolerations[0].key=dedicated", "tolerations[0].operator=Exists",
			"affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight=1",
			"affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].podAffinityTerm.topologyKey=kubernetes.io/hostname",
			"podAnnotations.example\\.com/team=edge", "podLabels.tier=limits", "serviceAccount.create=true",
			"serviceAccount.annotations.iam=role", "extraEnv[0].name=EXTRA", "extraEnv[0].value=x1"}
		for _, mode := range [][]string{nil, {"mode=envoy-ratelimit", "store.mode=redis", "admin.token.existingSecret="}} {
			objs := objects(t, nil, append(set, mode...)...)
			pod := dig(objs["Deployment/floodgate"], "spec", "template")
			if dig(pod, "spec", "nodeSelector", "disk") != "ssd" || dig(pod, "spec", "tolerations", 0, "key") != "dedicated" ||
				dig(pod, "spec", "affinity", "podAntiAffinity", "preferredDuringSchedulingIgnoredDuringExecution", 0, "weight") != 1 {
				t.Errorf("%v: scheduling %v", mode, dig(pod, "spec"))
			}
			if dig(pod, "metadata", "annotations", "example.com/team") != "edge" || dig(pod, "metadata", "labels", "tier") != "limits" ||
				dig(pod, "metadata", "labels", "app.kubernetes.io/name") != "floodgate" {
				t.Errorf("%v: pod metadata %v", mode, dig(pod, "metadata"))
			}
			sa := objs["ServiceAccount/floodgate"]
			if sa == nil || dig(sa, "metadata", "annotations", "iam") != "role" || dig(sa, "automountServiceAccountToken") != false ||
				dig(pod, "spec", "serviceAccountName") != "floodgate" || dig(pod, "spec", "automountServiceAccountToken") != false {
				t.Errorf("%v: service account %v, pod %v", mode, sa, dig(pod, "spec", "serviceAccountName"))
			}
			envs := dig(container(objs["Deployment/floodgate"]), "env").([]any)
			if last := envs[len(envs)-1]; dig(last, "name") != "EXTRA" || dig(last, "value") != "x1" {
				t.Errorf("%v: extraEnv not last: %v", mode, envs)
			}
		}
		objs := objects(t, nil, "serviceAccount.name=existing")
		if objs["ServiceAccount/existing"] != nil || dig(objs["Deployment/floodgate"], "spec", "template", "spec", "serviceAccountName") != "existing" {
			t.Errorf("an existing service account: %v", keys(objs))
		}
	})
	for _, c := range []struct {
		name string
		set  []string
		want string
	}{
		{"an unknown mode", []string{"mode=istio"}, `mode "istio": want floodgate or envoy-ratelimit`},
		{"envoy-ratelimit on the memory store", []string{"mode=envoy-ratelimit", "admin.token.existingSecret="}, "mode envoy-ratelimit counts in Redis"},
		{"envoy-ratelimit with optional client certificates", []string{"mode=envoy-ratelimit", "store.mode=redis", "admin.token.existingSecret=", "tls.existingSecret=s", "tls.clientAuth=optional"}, "tls.clientAuth optional"},
		{"envoy-ratelimit with an admin token", []string{"mode=envoy-ratelimit", "store.mode=redis"}, "admin.token is mode floodgate's"},
		{"envoy-ratelimit with an arrangement", []string{"mode=envoy-ratelimit", "store.mode=redis", "admin.token.existingSecret=", "arrangement.mode=split"}, "arrangement is mode floodgate's"},
		{"tracing without an endpoint", []string{"tracing.enabled=true"}, "needs tracing.endpoint"},
		{"an unknown tracing protocol", []string{"tracing.enabled=true", "tracing.endpoint=http://c:4318", "tracing.protocol=zipkin"}, `tracing.protocol "zipkin"`},
		{"an unknown client certificate mode", []string{"tls.existingSecret=s", "tls.clientAuth=maybe"}, `tls.clientAuth "maybe"`},
		{"two replicas on the memory store", []string{"replicaCount=2"}, "counts in each replica alone"},
		{"an HPA on the memory store", []string{"autoscaling.enabled=true"}, "counts in each replica alone"},
		{"an unknown mode", []string{"store.mode=memcached"}, `store.mode "memcached"`},
		{"an external Redis without its URL", []string{"store.mode=redis", "store.redis.deploy=false"}, "needs store.redis.url"},
		{"the admin port moved", []string{"tls.adminPort=9090"}, "tls.adminPort is admin.port"},
		{"the admin port on the http port", []string{"admin.port=8080"}, "admin.port 8080"},
		{"an unknown Redis eviction policy", []string{"store.redis.maxmemoryPolicy=lru"}, `store.redis.maxmemoryPolicy "lru"`},
	} {
		t.Run("refused: "+c.name, func(t *testing.T) {
			if _, err := Render(ChartDir, nil, c.set...); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
}

// TestChartLints runs helm's linter on the chart.
func TestChartLints(t *testing.T) {
	res := action.NewLint().Run([]string{ChartDir}, map[string]any{})
	for _, m := range res.Messages {
		if m.Severity > 1 { // warnings and errors; info is fine
			t.Errorf("helm lint: %s", m)
		}
	}
	for _, err := range res.Errors {
		t.Errorf("helm lint: %v", err)
	}
}

// TestManifestsMatchChart holds deploy/kubernetes to the chart: every file
// scripts/helm-manifests writes is there with the same text, and no other
// manifest is.
func TestManifestsMatchChart(t *testing.T) {
	for _, v := range Variants {
		files, err := Manifests(root, v)
		if err != nil {
			t.Fatal(err)
		}
		files["kustomization.yaml"] = Kustomization(v, files)
		for name, want := range files {
			got, err := os.ReadFile(filepath.Join(root, v.Dir, name))
			if err != nil || string(got) != want {
				t.Errorf("%s/%s differs from the chart (err %v): run scripts/helm-manifests", v.Dir, name, err)
			}
		}
		entries, err := os.ReadDir(filepath.Join(root, v.Dir))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if _, ok := files[e.Name()]; !ok && !e.IsDir() {
				t.Errorf("%s/%s is not generated from the chart: remove it, or add it to the chart", v.Dir, e.Name())
			}
		}
	}
}

// serveFile is what the chart's serve configuration file sets.
type serveFile struct {
	HTTP, GRPC  struct{ TLS map[string]string }
	Arrangement map[string]any
	Admin       struct {
		Addr     string
		TokenEnv string `yaml:"token_env"`
		TLS      map[string]string
	}
}

// serveConfig parses the serve configuration file the chart renders.
func serveConfig(t *testing.T, objs map[string]map[string]any) serveFile {
	t.Helper()
	text, _ := dig(objs["ConfigMap/floodgate-config"], "data", "floodgate.yaml").(string)
	var cfg serveFile
	if err := yaml.Unmarshal([]byte(text), &cfg); err != nil {
		t.Fatalf("floodgate.yaml: %v\n%s", err, text)
	}
	return cfg
}

// env is a container's environment variables.
func env(c any) []any {
	l, _ := dig(c, "env").([]any)
	return l
}

// envVar is the container's environment variable name, or nil.
func envVar(c any, name string) any {
	for _, e := range env(c) {
		if dig(e, "name") == name {
			return e
		}
	}
	return nil
}

// servicePort is the Service's port name, or nil.
func servicePort(svc map[string]any, name string) any {
	l, _ := dig(svc, "spec", "ports").([]any)
	for _, p := range l {
		if dig(p, "name") == name {
			return p
		}
	}
	return nil
}

func keys(m map[string]map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
