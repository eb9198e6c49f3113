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
		if dep == nil || objs["Service/floodgate"] == nil || objs["ConfigMap/floodgate-rules"] == nil || len(objs) != 3 {
			t.Fatalf("objects %v: want the Deployment, Service and rules ConfigMap only", keys(objs))
		}
		if dig(dep, "spec", "replicas") != 1 || !strings.Contains(args(dep), "--store=memory") {
			t.Errorf("replicas %v, args %s", dig(dep, "spec", "replicas"), args(dep))
		}
		c := container(dep)
		for probe, path := range map[string]string{"startupProbe": "/healthz", "readinessProbe": "/readyz", "livenessProbe": "/healthz"} {
			if dig(c, probe, "httpGet", "path") != path {
				t.Errorf("%s: %v, want %s", probe, dig(c, probe), path)
			}
		}
		if dig(c, "resources", "limits", "memory") != "512Mi" || dig(c, "env") != nil {
			t.Errorf("resources %v env %v: want a 512Mi limit and no GOMEMLIMIT (serve derives it)", dig(c, "resources"), dig(c, "env"))
		}
		text := dig(objs["ConfigMap/floodgate-rules"], "data", "rules.yaml").(string)
		if _, err := rules.Parse("rules.yaml", []byte(text)); err != nil {
			t.Errorf("the chart's rules: %v", err)
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
		if dig(c, "env", 0, "name") != "FLOODGATE_REDIS_PASSWORD" || dig(c, "env", 0, "valueFrom", "secretKeyRef", "name") != "floodgate-redis" {
			t.Errorf("floodgate's Redis password: %v", dig(c, "env"))
		}
		rc := container(objs["Deployment/floodgate-redis"])
		if cmd, _ := dig(rc, "command", 2).(string); !strings.Contains(cmd, `--requirepass "$REDIS_PASSWORD"`) ||
			dig(rc, "env", 0, "valueFrom", "secretKeyRef", "key") != "password" {
			t.Errorf("Redis without the password: %v %v", dig(rc, "command"), dig(rc, "env"))
		}
		if dig(objs["NetworkPolicy/floodgate"], "spec", "ingress", 0, "from", 0, "podSelector", "matchLabels", "app") != "envoy" ||
			dig(objs["NetworkPolicy/floodgate-redis"], "spec", "ingress", 0, "from", 0, "podSelector", "matchLabels", "app.kubernetes.io/name") != "floodgate" {
			t.Errorf("network policies: %v %v", objs["NetworkPolicy/floodgate"], objs["NetworkPolicy/floodgate-redis"])
		}
		if dig(objs["ServiceMonitor/floodgate"], "spec", "endpoints", 0, "path") != "/metrics" {
			t.Errorf("ServiceMonitor %v", objs["ServiceMonitor/floodgate"])
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
		if dig(container(objs["Deployment/floodgate"]), "env") != nil {
			t.Errorf("a password variable without a Secret")
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
			if dig(c, probe, "httpGet", "port") != "admin" {
				t.Errorf("%s on %v: the kubelet has no client certificate, want the admin port", probe, dig(c, probe, "httpGet", "port"))
			}
		}
		if dig(objs["ServiceMonitor/floodgate"], "spec", "endpoints", 0, "port") != "admin" ||
			dig(objs["Service/floodgate"], "spec", "ports", 2, "port") != 9090 ||
			dig(objs["NetworkPolicy/floodgate"], "spec", "ingress", 0, "ports", 2, "port") != "admin" {
			t.Errorf("admin port: ServiceMonitor %v, Service %v, NetworkPolicy %v", dig(objs["ServiceMonitor/floodgate"], "spec"),
				dig(objs["Service/floodgate"], "spec", "ports"), dig(objs["NetworkPolicy/floodgate"], "spec", "ingress"))
		}
		if dig(dep, "spec", "template", "spec", "volumes", 2, "secret", "secretName") != "floodgate-tls" {
			t.Errorf("volumes %v", dig(dep, "spec", "template", "spec", "volumes"))
		}
		text, _ := dig(objs["ConfigMap/floodgate-config"], "data", "floodgate.yaml").(string)
		var cfg struct {
			HTTP, GRPC struct{ TLS map[string]string }
			Admin      struct{ Addr string }
		}
		if err := yaml.Unmarshal([]byte(text), &cfg); err != nil {
			t.Fatalf("floodgate.yaml: %v\n%s", err, text)
		}
		for _, l := range []map[string]string{cfg.HTTP.TLS, cfg.GRPC.TLS} {
			if l["client_ca"] != "/etc/floodgate/tls/ca.crt" || l["cert"] != "/etc/floodgate/tls/tls.crt" || l["client_auth"] != "required" {
				t.Errorf("listener TLS %v", l)
			}
		}
		if cfg.Admin.Addr != "0.0.0.0:9090" {
			t.Errorf("admin listener %q", cfg.Admin.Addr)
		}
	})
	for _, c := range []struct {
		name string
		set  []string
		want string
	}{
		{"tracing without an endpoint", []string{"tracing.enabled=true"}, "needs tracing.endpoint"},
		{"an unknown tracing protocol", []string{"tracing.enabled=true", "tracing.endpoint=http://c:4318", "tracing.protocol=zipkin"}, `tracing.protocol "zipkin"`},
		{"an unknown client certificate mode", []string{"tls.existingSecret=s", "tls.clientAuth=maybe"}, `tls.clientAuth "maybe"`},
		{"two replicas on the memory store", []string{"replicaCount=2"}, "counts in each replica alone"},
		{"an HPA on the memory store", []string{"autoscaling.enabled=true"}, "counts in each replica alone"},
		{"an unknown mode", []string{"store.mode=memcached"}, `store.mode "memcached"`},
		{"an external Redis without its URL", []string{"store.mode=redis", "store.redis.deploy=false"}, "needs store.redis.url"},
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

func keys(m map[string]map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
