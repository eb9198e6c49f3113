package envoycompat

import (
	"bytes"
	"errors"
	"io"
	"os"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestCompatExample holds examples/envoy-ratelimit-compat to what it
// claims: its Deployment runs /bin/ratelimit with an environment this mode
// accepts, on the runtime directory its ConfigMap is mounted at, and the
// rules there load.
func TestCompatExample(t *testing.T) {
	data, err := os.ReadFile("../../../examples/envoy-ratelimit-compat/ratelimit.yaml")
	if err != nil {
		t.Fatal(err)
	}
	type container struct {
		Image        string
		Command      []string
		Env          []struct{ Name, Value string }
		VolumeMounts []struct {
			MountPath string `yaml:"mountPath"`
		} `yaml:"volumeMounts"`
	}
	var env map[string]string
	var mount string
	var rules map[string]string
	var command []string
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var doc struct {
			Kind string
			Data map[string]string
			Spec struct {
				Template struct {
					Spec struct{ Containers []container }
				}
			}
		}
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		switch doc.Kind {
		case "ConfigMap":
			rules = doc.Data
		case "Deployment":
			for _, c := range doc.Spec.Template.Spec.Containers {
				if len(c.Command) == 0 {
					continue
				}
				command = c.Command
				env = map[string]string{}
				for _, e := range c.Env {
					env[e.Name] = e.Value
				}
				mount = c.VolumeMounts[0].MountPath
			}
		}
	}
	if len(command) != 1 || command[0] != "/bin/ratelimit" {
		t.Fatalf("command %v, want /bin/ratelimit", command)
	}
	set, err := ParseSettings(mapLookup(env))
	if err != nil {
		t.Fatalf("the example's environment: %v", err)
	}
	if want := set.RuntimePath + "/" + set.RuntimeSubdirectory + "/" + set.RuntimeAppDirectory; mount != want || set.RuntimeWatchRoot {
		t.Fatalf("rules mounted at %s; the environment reads %s", mount, want)
	}
	var files []File
	for name, text := range rules {
		files = append(files, File{Name: name, Text: []byte(text)})
	}
	cfg, err := LoadConfig(files, set.MergeDomainConfig, set.Wildcards)
	if err != nil {
		t.Fatal(err)
	}
	if m := cfg.lookup("ratelimit", []entry{{"PATH", "/productpage"}}); m.limit == nil || m.limit.perUnit != 1 {
		t.Fatalf("/productpage: %+v", m)
	}
}

// TestEnvoyGatewayExample holds examples/envoy-gateway to what it claims:
// the EnvoyGateway configuration and the Helm values point the rate-limit
// Deployment at the same Floodgate image and Redis, and the
// BackendTrafficPolicy sets a global limit of 3 an hour per x-user-id.
func TestEnvoyGatewayExample(t *testing.T) {
	read := func(name string, v any) {
		t.Helper()
		data, err := os.ReadFile("../../../examples/envoy-gateway/" + name)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(data, v); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	type rateLimit struct {
		Backend struct {
			Type  string
			Redis struct{ URL string }
		}
	}
	var cm struct {
		Kind string
		Data map[string]string
	}
	read("envoy-gateway-config.yaml", &cm)
	var eg struct {
		Kind     string
		Provider struct {
			Kubernetes struct {
				RateLimitDeployment struct {
					Container struct{ Image string }
				} `yaml:"rateLimitDeployment"`
			}
		}
		RateLimit rateLimit `yaml:"rateLimit"`
	}
	if err := yaml.Unmarshal([]byte(cm.Data["envoy-gateway.yaml"]), &eg); err != nil || cm.Kind != "ConfigMap" || eg.Kind != "EnvoyGateway" {
		t.Fatalf("envoy-gateway-config.yaml: %s holding %s, %v", cm.Kind, eg.Kind, err)
	}
	var values struct {
		Global struct {
			Images struct {
				Ratelimit struct{ Image string }
			}
		}
		Config struct {
			EnvoyGateway struct {
				RateLimit rateLimit `yaml:"rateLimit"`
			} `yaml:"envoyGateway"`
		}
	}
	read("helm-values.yaml", &values)
	const image = "REGISTRY/floodgate:TAG"
	if got := eg.Provider.Kubernetes.RateLimitDeployment.Container.Image; got != image {
		t.Errorf("EnvoyGateway rate-limit image %q, want %q", got, image)
	}
	if got := values.Global.Images.Ratelimit.Image; got != image {
		t.Errorf("Helm values rate-limit image %q, want %q", got, image)
	}
	for _, rl := range []rateLimit{eg.RateLimit, values.Config.EnvoyGateway.RateLimit} {
		if rl.Backend.Type != "Redis" || rl.Backend.Redis.URL != "redis.redis-system.svc.cluster.local:6379" {
			t.Errorf("rate limit backend %+v", rl.Backend)
		}
	}
	var btp struct {
		Kind string
		Spec struct {
			RateLimit struct {
				Global struct {
					Rules []struct {
						ClientSelectors []struct {
							Headers []struct{ Name, Type string }
						} `yaml:"clientSelectors"`
						Limit struct {
							Requests int
							Unit     string
						}
					}
				}
			} `yaml:"rateLimit"`
		}
	}
	read("backend-traffic-policy.yaml", &btp)
	rules := btp.Spec.RateLimit.Global.Rules
	if btp.Kind != "BackendTrafficPolicy" || len(rules) != 1 || rules[0].Limit.Requests != 3 || rules[0].Limit.Unit != "Hour" ||
		len(rules[0].ClientSelectors) != 1 || rules[0].ClientSelectors[0].Headers[0].Name != "x-user-id" {
		t.Fatalf("BackendTrafficPolicy: %+v", btp)
	}
}
