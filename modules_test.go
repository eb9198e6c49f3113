package floodgate_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// maxGoLine is the go line of the root module: what its code needs. The
// library needs Go 1.22 (range over an integer); its tests need the timers
// of Go 1.23, without which testing/synctest refuses to run (the go line
// sets the GODEBUG defaults of the module's own tests). Raising it raises
// the go line of every module that imports Floodgate, so it is a decision
// to make here, not a side effect of using a newer API: a test file that
// needs a newer Go says so in a //go:build line instead (docs/modules.md).
const maxGoLine = "1.23.0"

// userModule writes a module that uses Floodgate from this checkout (a
// replace directive) with main.go as its one file, tidies it and returns
// its directory.
func userModule(t *testing.T, mainGo string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds a module of its own")
	}
	repo, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	goMod := "module example.com/user\n\ngo 1.21\n\n" +
		"require github.com/floodgate-dev/floodgate v0.0.0-00010101000000-000000000000\n\n" +
		"replace github.com/floodgate-dev/floodgate => " + repo + "\n"
	for name, text := range map[string]string{"go.mod": goMod, "main.go": mainGo} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	goCmd(t, dir, "mod", "tidy")
	return dir
}

// goCmd runs the go command in dir, on its own module (GOWORK=off) and
// with no network (GOPROXY=off: a user module that needs no third-party
// module needs no download), and returns its output.
func goCmd(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOPROXY=off", "GOFLAGS=-mod=mod")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestUserModuleGetsNoDependency holds the promise of the root module: a
// module that imports the root package gets no third-party module in its
// module graph, and a go line no higher than maxGoLine.
func TestUserModuleGetsNoDependency(t *testing.T) {
	dir := userModule(t, `package main

import (
	"context"
	"time"

	"github.com/floodgate-dev/floodgate"
)

func main() {
	l, err := floodgate.New(floodgate.Limit{Limit: 10, Window: time.Minute})
	if err != nil {
		panic(err)
	}
	_, _ = l.Allow(context.Background(), "k")
}
`)
	mods := strings.Fields(goCmd(t, dir, "list", "-m", "-f", "{{.Path}}", "all"))
	if want := []string{"example.com/user", "github.com/floodgate-dev/floodgate"}; strings.Join(mods, " ") != strings.Join(want, " ") {
		t.Errorf("the module graph of a module that imports the root package is %q, want %q", mods, want)
	}
	goLine := strings.TrimSpace(goCmd(t, dir, "list", "-m", "-f", "{{.GoVersion}}"))
	if goLine != maxGoLine {
		t.Errorf("a go 1.21 module that imports the root package is raised to go %s, want %s", goLine, maxGoLine)
	}
	goCmd(t, dir, "build", "-o", filepath.Join(dir, "user"), ".")
}
