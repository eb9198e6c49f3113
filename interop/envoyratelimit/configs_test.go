package envoyratelimit

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/envoyproxy/ratelimit/src/config"
	"github.com/envoyproxy/ratelimit/src/settings"
	"github.com/envoyproxy/ratelimit/src/stats"
	gostats "github.com/lyft/gostats"
)

// configFile is one YAML rule file of the reference's: where it comes from
// (a path relative to the reference module, or README.md#N for the Nth
// YAML example of the README) and its text.
type configFile struct {
	origin string
	text   string
}

// configSet is what one server is started with: the files of one runtime
// config directory.
type configSet struct {
	name  string
	files []configFile
}

var (
	refDirOnce sync.Once
	refDir     string
	refDirErr  error
)

// referenceDir returns the reference module's directory in the module
// cache, as `go list -m` reports it: its configs are read from there.
func referenceDir(t testing.TB) string {
	t.Helper()
	refDirOnce.Do(func() {
		out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/envoyproxy/ratelimit").Output()
		if err != nil {
			refDirErr = fmt.Errorf("go list -m github.com/envoyproxy/ratelimit: %v", err)
			return
		}
		refDir = strings.TrimSpace(string(out))
		if refDir == "" {
			refDirErr = fmt.Errorf("go list -m: the reference module is not downloaded (run go mod download)")
		}
	})
	if refDirErr != nil {
		t.Fatal(refDirErr)
	}
	return refDir
}

func readConfig(t testing.TB, rel string) configFile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(referenceDir(t), rel))
	if err != nil {
		t.Fatal(err)
	}
	return configFile{origin: rel, text: string(b)}
}

func yamlFiles(t testing.TB, rel string) []configFile {
	t.Helper()
	matches, err := filepath.Glob(filepath.Join(referenceDir(t), rel, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(matches)
	var out []configFile
	for _, m := range matches {
		r, _ := filepath.Rel(referenceDir(t), m)
		out = append(out, readConfig(t, r))
	}
	return out
}

// yamlFence matches a fenced YAML block of a Markdown file, indented or not.
var yamlFence = regexp.MustCompile("(?ms)^[ \t]*```yaml[ \t]*\n(.*?)^[ \t]*```")

// readmeConfigs returns the README's YAML examples that are whole rule
// files (they name a domain); the others are fragments of one.
func readmeConfigs(t testing.TB) []configFile {
	t.Helper()
	readme := readConfig(t, "README.md")
	var out []configFile
	for i, m := range yamlFence.FindAllStringSubmatch(readme.text, -1) {
		text := m[1]
		if !regexp.MustCompile(`(?m)^domain:`).MatchString(text) {
			continue
		}
		out = append(out, configFile{origin: fmt.Sprintf("README.md#yaml%d", i+1), text: text})
	}
	return out
}

// allConfigFiles is every YAML rule file of the reference's: the example
// directory, the unit tests' configs, the integration test's runtime
// directory (and the file its reload test adds) and the README examples.
func allConfigFiles(t testing.TB) []configFile {
	t.Helper()
	var out []configFile
	out = append(out, yamlFiles(t, "examples/ratelimit/config")...)
	out = append(out, yamlFiles(t, "test/config")...)
	out = append(out, yamlFiles(t, "test/integration/runtime/current/ratelimit/config")...)
	out = append(out, readConfig(t, "test/integration/runtime/current/ratelimit/reload.yaml"))
	out = append(out, readmeConfigs(t)...)
	return out
}

// referenceLoads reports whether the reference's own loader accepts the
// files together (as one runtime config directory), and its error if not.
func referenceLoads(files []configFile) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	mgr := stats.NewStatManager(gostats.NewStore(gostats.NewNullSink(), false), settings.Settings{})
	var toLoad []config.RateLimitConfigToLoad
	for _, f := range files {
		toLoad = append(toLoad, config.RateLimitConfigToLoad{Name: f.origin, ConfigYaml: config.ConfigFileContentToYaml(f.origin, f.text)})
	}
	config.NewRateLimitConfigImpl(toLoad, mgr, false)
	return nil
}

// configSets are the runtime directories both servers are started with:
// the example directory and the integration runtime directory as they
// are, and every other file the reference loads on its own.
func configSets(t testing.TB) []configSet {
	t.Helper()
	sets := []configSet{
		{name: "examples/ratelimit/config", files: yamlFiles(t, "examples/ratelimit/config")},
		{name: "test/integration/runtime/current/ratelimit/config", files: yamlFiles(t, "test/integration/runtime/current/ratelimit/config")},
	}
	singles := append(yamlFiles(t, "test/config"), readConfig(t, "test/integration/runtime/current/ratelimit/reload.yaml"))
	singles = append(singles, readmeConfigs(t)...)
	for _, f := range singles {
		if referenceLoads([]configFile{f}) != nil {
			continue // an invalid file of the reference's own tests
		}
		sets = append(sets, configSet{name: f.origin, files: []configFile{f}})
	}
	return append(sets, ownSets(t)...)
}

// ownSets are Floodgate's own rule files (testdata/floodgate), where the
// reference's features meet, when the reference here has them all
// (wildcards inside a value and metadata).
func ownSets(t testing.TB) []configSet {
	if f := referenceFeatures(t); !f.wildcardsAnywhere || !f.metadata {
		return nil
	}
	b, err := os.ReadFile("testdata/floodgate/edge.yaml")
	if err != nil {
		t.Fatal(err)
	}
	f := configFile{origin: "floodgate/edge.yaml", text: string(b)}
	if err := referenceLoads([]configFile{f}); err != nil {
		t.Fatalf("the reference refuses %s: %v", f.origin, err)
	}
	return []configSet{{name: f.origin, files: []configFile{f}}}
}

// writeRuntime lays the set out as a runtime directory
// (ROOT/ratelimit/config/*.yaml) in a new temporary directory.
func writeRuntime(t testing.TB, set configSet) runtimeLayout {
	t.Helper()
	l := runtimeLayout{root: t.TempDir(), subdir: "ratelimit"}
	if err := os.MkdirAll(l.configDir(), 0o755); err != nil {
		t.Fatal(err)
	}
	for i, f := range set.files {
		name := fmt.Sprintf("%02d-%s.yaml", i, strings.NewReplacer("/", "_", "#", "_", ".yaml", "").Replace(f.origin))
		if err := os.WriteFile(filepath.Join(l.configDir(), name), []byte(f.text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return l
}
