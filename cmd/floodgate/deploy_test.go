package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/floodgate-dev/floodgate/cmd/floodgate/server"
	"github.com/floodgate-dev/floodgate/rules"
)

// yamlDocs reads every YAML document of a file as generic values.
func yamlDocs(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	dec := yaml.NewDecoder(f)
	for {
		var m map[string]any
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, m)
	}
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

// The Kubernetes manifests hold together: the rules in the ConfigMap parse,
// the Deployment's serve flags are valid and point at the mounted
// ConfigMap (as a directory, so that updates reach the pod), its probes
// use /readyz and /healthz, it requests resources, runs as the image's
// non-root user, and the Service exposes gRPC and HTTP.
func TestKubernetesManifests(t *testing.T) {
	dir := filepath.Join("..", "..", "deploy", "kubernetes")
	byKind := map[string]map[string]any{}
	for _, f := range []string{"configmap-rules.yaml", "deployment.yaml", "service.yaml"} {
		for _, d := range yamlDocs(t, filepath.Join(dir, f)) {
			byKind[d["kind"].(string)] = d
		}
	}
	cm, dep, svc := byKind["ConfigMap"], byKind["Deployment"], byKind["Service"]
	if cm == nil || dep == nil || svc == nil {
		t.Fatalf("want a ConfigMap, a Deployment and a Service; got %v", byKind)
	}
	configMap := yamlDocs(t, filepath.Join(dir, "configmap-config.yaml"))[0]
	text, _ := dig(cm, "data", "rules.yaml").(string)
	set, err := rules.Parse("configmap rules.yaml", []byte(text))
	if err != nil {
		t.Fatalf("the ConfigMap's rules: %v", err)
	}
	pod := dig(dep, "spec", "template", "spec")
	c := dig(pod, "containers", 0)
	var ov serveOverrides
	rulesPath, store, configPath := "", "", ""
	for i, a := range dig(c, "args").([]any) {
		s := a.(string)
		if i == 0 {
			if s != "serve" {
				t.Fatalf("first argument %q, want serve", s)
			}
			continue
		}
		k, v, _ := strings.Cut(s, "=")
		switch k {
		case "--http":
			ov.http = v
		case "--grpc":
			ov.grpc = v
		case "--store":
			store = v
		case "--rules":
			rulesPath = v
		case "--config":
			configPath = v
		default:
			t.Errorf("unexpected argument %q", s)
		}
	}
	// The configuration file is the config ConfigMap's, mounted as a
	// directory; serve accepts it.
	if configPath != "/etc/floodgate/config/floodgate.yaml" || dig(pod, "volumes", 1, "configMap", "name") != dig(configMap, "metadata", "name") ||
		dig(c, "volumeMounts", 1, "mountPath") != "/etc/floodgate/config" {
		t.Errorf("--config %s is not the config ConfigMap's floodgate.yaml: %v", configPath, dig(c, "volumeMounts"))
	}
	text, _ = dig(configMap, "data", "floodgate.yaml").(string)
	cfg, err := server.ParseConfig("configmap floodgate.yaml", []byte(text))
	if err != nil {
		t.Fatalf("the config ConfigMap: %v", err)
	}
	// The admin endpoints have a listener of their own (the probes' port)
	// and a token from a Secret.
	if !cfg.Admin.Enabled() || cfg.Admin.TokenEnv == "" || envSecret(c, cfg.Admin.TokenEnv) == "" {
		t.Errorf("admin %+v: want a listener of its own and a token from a Secret (env %v)", cfg.Admin, dig(c, "env"))
	}
	if port := dig(c, "ports", 2); dig(port, "name") != "admin" || !strings.HasSuffix(cfg.Admin.Addr, fmt.Sprintf(":%v", dig(port, "containerPort"))) {
		t.Errorf("admin listener %s, container port %v", cfg.Admin.Addr, port)
	}
	if err := ov.apply(&cfg); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Store.SetURL(store); err != nil {
		t.Fatalf("--store=%s: %v", store, err)
	}
	if cfg.HTTP.Addr != "0.0.0.0:8080" || cfg.GRPC.Addr != "0.0.0.0:8081" {
		t.Errorf("listeners %s %s, want every interface", cfg.HTTP.Addr, cfg.GRPC.Addr)
	}
	mount := dig(c, "volumeMounts", 0)
	if dig(mount, "subPath") != nil || rulesPath != dig(mount, "mountPath").(string)+"/rules.yaml" ||
		dig(pod, "volumes", 0, "configMap", "name") != dig(cm, "metadata", "name") {
		t.Errorf("--rules %s is not the ConfigMap's rules.yaml in a directory mount: %v", rulesPath, mount)
	}
	if dig(c, "readinessProbe", "httpGet", "path") != "/readyz" || dig(c, "livenessProbe", "httpGet", "path") != "/healthz" ||
		dig(c, "readinessProbe", "httpGet", "port") != "admin" {
		t.Errorf("probes: %v %v", dig(c, "readinessProbe"), dig(c, "livenessProbe"))
	}
	if dig(c, "resources", "requests", "cpu") == nil || dig(c, "resources", "requests", "memory") == nil {
		t.Errorf("no resource requests: %v", dig(c, "resources"))
	}
	if dig(pod, "securityContext", "runAsUser") != 65532 || dig(pod, "securityContext", "runAsNonRoot") != true {
		t.Errorf("pod security context: %v", dig(pod, "securityContext"))
	}
	ports := map[string]bool{}
	for _, p := range dig(svc, "spec", "ports").([]any) {
		ports[dig(p, "name").(string)] = true
	}
	if !ports["grpc"] || !ports["http"] || !ports["admin"] {
		t.Errorf("service ports %v, want grpc, http and admin", ports)
	}
	// The descriptors deploy/envoy/envoy.yaml's route actions send meet
	// both rules.
	res, err := rules.NewEngine(set, nil).Check(context.Background(), rules.Request{Domain: "edge", Descriptors: []rules.Descriptor{
		{{Key: "remote_address", Value: "192.0.2.7"}},
		{{Key: "path", Value: "/login"}, {Key: "remote_address", Value: "192.0.2.7"}},
	}})
	if err != nil || set.Domain() != "edge" || len(res.Statuses) != 2 || res.Unmatched != "" {
		t.Errorf("Envoy's descriptors through the ConfigMap rules: %+v %v", res, err)
	}
	// The Redis variant (generated from the same chart) points --store at
	// its Redis, with the password from a Secret.
	var redisDep map[string]any
	for _, d := range yamlDocs(t, filepath.Join(dir, "redis", "deployment.yaml")) {
		if d["kind"] == "Deployment" {
			redisDep = d
		}
	}
	redisStore := ""
	for _, a := range dig(redisDep, "spec", "template", "spec", "containers", 0, "args").([]any) {
		if v, ok := strings.CutPrefix(a.(string), "--store="); ok {
			redisStore = v
		}
	}
	if err := cfg.Store.SetURL(redisStore); err != nil || cfg.Store.Type != server.StoreRedis {
		t.Errorf("the redis variant's --store=%s: %v (type %s)", redisStore, err, cfg.Store.Type)
	}
	if envSecret(dig(redisDep, "spec", "template", "spec", "containers", 0), server.PasswordEnv) == "" {
		t.Errorf("the redis variant's Redis password does not come from a Secret in %s", server.PasswordEnv)
	}
}

// envSecret is the Secret container c's environment variable name comes
// from, "" when it does not come from one.
func envSecret(c any, name string) string {
	l, _ := dig(c, "env").([]any)
	for _, e := range l {
		if dig(e, "name") == name {
			s, _ := dig(e, "valueFrom", "secretKeyRef", "name").(string)
			return s
		}
	}
	return ""
}

// The Envoy example is a valid Envoy bootstrap (checked against Envoy's own
// API definitions and their validation rules) whose rate limit filter calls
// the floodgate cluster in the domain the Kubernetes rules have.
func TestEnvoyBootstrapExample(t *testing.T) {
	docs := yamlDocs(t, filepath.Join("..", "..", "deploy", "envoy", "envoy.yaml"))
	raw, err := json.Marshal(docs[0])
	if err != nil {
		t.Fatal(err)
	}
	var bs bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(raw, &bs); err != nil {
		t.Fatalf("not an Envoy bootstrap: %v", err)
	}
	if err := bs.ValidateAll(); err != nil {
		t.Fatalf("Envoy's validation: %v", err)
	}
	var hcm hcmv3.HttpConnectionManager
	if err := bs.StaticResources.Listeners[0].FilterChains[0].Filters[0].GetTypedConfig().UnmarshalTo(&hcm); err != nil {
		t.Fatal(err)
	}
	if err := hcm.ValidateAll(); err != nil {
		t.Fatalf("http_connection_manager: %v", err)
	}
	var rl ratelimitv3.RateLimit
	if err := hcm.HttpFilters[0].GetTypedConfig().UnmarshalTo(&rl); err != nil {
		t.Fatalf("first filter: %v", err)
	}
	if err := rl.ValidateAll(); err != nil {
		t.Fatalf("rate limit filter: %v", err)
	}
	if rl.Domain != "edge" || rl.RateLimitService.GetGrpcService().GetEnvoyGrpc().GetClusterName() != "floodgate" {
		t.Errorf("the filter calls %v in domain %q, want the floodgate cluster in edge", rl.RateLimitService, rl.Domain)
	}
}

// TestContainerfileTargets holds the Containerfile's two images: the
// default (last) target runs floodgate serve, and the ratelimit target,
// the drop-in for envoyproxy/ratelimit's image, runs /bin/ratelimit with
// no command, as that image's ENTRYPOINT does. scripts/container-test
// builds and runs both.
func TestContainerfileTargets(t *testing.T) {
	b, err := os.ReadFile("../../Containerfile")
	if err != nil {
		t.Fatal(err)
	}
	type stage struct{ from, entrypoint, cmd string }
	stages := map[string]*stage{}
	var order []string
	var cur *stage
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		switch strings.ToUpper(f[0]) {
		case "FROM":
			if len(f) != 4 || !strings.EqualFold(f[2], "AS") {
				t.Fatalf("FROM without a stage name: %q", line)
			}
			cur = &stage{from: f[1]}
			stages[f[3]] = cur
			order = append(order, f[3])
		case "ENTRYPOINT":
			cur.entrypoint = strings.Join(f[1:], " ")
		case "CMD":
			cur.cmd = strings.Join(f[1:], " ")
		}
	}
	if len(order) == 0 || order[len(order)-1] != "floodgate" {
		t.Fatalf("stages %v: the default (last) target must be floodgate", order)
	}
	if s := stages["floodgate"]; s.from != "base" || s.entrypoint != `["/floodgate"]` || !strings.HasPrefix(s.cmd, `["serve"`) {
		t.Errorf("floodgate target %+v: want floodgate serve from base", s)
	}
	if s := stages["ratelimit"]; s == nil || s.from != "base" || s.entrypoint != `["/bin/ratelimit"]` || s.cmd != "" {
		t.Errorf("ratelimit target %+v: want ENTRYPOINT [\"/bin/ratelimit\"] and no CMD, from base", s)
	}
	if !strings.Contains(string(b), "COPY bin/ /bin/") {
		t.Errorf("the image does not copy /bin (the ratelimit link)")
	}
}
