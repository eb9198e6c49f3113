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
	data, err := os.ReadFile("../../examples/envoy-ratelimit-compat/ratelimit.yaml")
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
