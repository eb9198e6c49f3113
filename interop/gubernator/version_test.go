package gubernator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/semver"
)

// referenceModule is gubernator's module path.
const referenceModule = "github.com/gubernator-io/gubernator/v2"

// moduleInfo is what `go list -m -json` says of a module.
type moduleInfo struct {
	Path, Version, Time, GoVersion string
	Error                          *struct{ Err string }
}

// goList runs `go list -m -json args...` in dir with env added.
func goList(ctx context.Context, dir string, env []string, args ...string) (moduleInfo, error) {
	cmd := exec.CommandContext(ctx, "go", append([]string{"list", "-m", "-json"}, args...)...)
	cmd.Dir, cmd.Env = dir, append(os.Environ(), env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var m moduleInfo
	if err != nil {
		return m, fmt.Errorf("%v: %s", err, strings.TrimSpace(stderr.String()))
	}
	if err := json.Unmarshal(out, &m); err != nil {
		return m, err
	}
	if m.Error != nil {
		return m, errors.New(m.Error.Err)
	}
	return m, nil
}

// goEnv is `go env name`.
func goEnv(name string) string {
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// TestReferenceVersionIsNewest names the newest gubernator the Go module
// proxy serves and fails when it is newer than the version go.mod pins
// and the Go toolchain running the test can build it: the differential
// here would then hold Floodgate to an old gubernator. A newer version
// that needs a newer Go than this toolchain is named in the log with the
// Go it needs, and the pin stays. When the proxy cannot be reached the
// module cache answers (the newest version downloaded); when neither can,
// the test is skipped, saying why.
func TestReferenceVersionIsNewest(t *testing.T) {
	pinned, err := goList(context.Background(), ".", []string{"GOWORK=off"}, referenceModule)
	if err != nil {
		t.Fatal(err)
	}
	// Asked from an empty module, so that no requirement of this one
	// answers instead of the proxy.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module probe\n\ngo 1.26\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	env := []string{"GOFLAGS=-mod=mod", "GOWORK=off"}
	latest, err := goList(ctx, dir, env, referenceModule+"@latest")
	source := "the module proxy (" + goEnv("GOPROXY") + ")"
	if err != nil {
		proxyErr := err
		cache := filepath.Join(goEnv("GOMODCACHE"), "cache", "download")
		latest, err = goList(ctx, dir, append(env, "GOPROXY=file://"+cache, "GONOSUMDB="+referenceModule, "GOSUMDB=off"), referenceModule+"@latest")
		if err != nil {
			t.Skipf("neither the module proxy (%v) nor the module cache (%v) names a version of %s", proxyErr, err, referenceModule)
		}
		source = fmt.Sprintf("the module cache %s (the proxy is unreachable: %v)", cache, proxyErr)
	}
	t.Logf("%s serves %s %s (%s, go %s); go.mod pins %s", source, referenceModule, latest.Version, latest.Time, latest.GoVersion, pinned.Version)
	if semver.Compare(latest.Version, pinned.Version) <= 0 {
		return
	}
	toolchain := strings.TrimPrefix(runtime.Version(), "go")
	if latest.GoVersion != "" && semver.Compare("v"+latest.GoVersion, "v"+toolchain) > 0 {
		t.Logf("%s %s needs go %s, newer than this toolchain's %s: the differential stays at %s until the toolchain moves",
			referenceModule, latest.Version, latest.GoVersion, toolchain, pinned.Version)
		return
	}
	t.Errorf("%s serves %s %s, newer than the %s go.mod pins, and go %s builds it: move the pin (go get %s@%s), run the tests and update docs/migration-gubernator.md's figures",
		source, referenceModule, latest.Version, pinned.Version, toolchain, referenceModule, latest.Version)
}
