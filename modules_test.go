package floodgate_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// maxGoLine is the go line of the root module: the oldest Go release the
// Go team still supports when it was set (1.25; distributed's code needs
// 1.24 for maphash.Comparable, its tests 1.25 for testing/synctest.Test).
// Raising it raises the go line of every module that imports Floodgate, so
// it is a decision to make here, not a side effect of using a newer API.
const maxGoLine = "1.25.0"

// userModule writes a module that uses Floodgate from this checkout (a
// replace directive), and the Floodgate modules in the directories mods,
// with main.go as its one file, tidies it and returns its directory.
func userModule(t *testing.T, mainGo string, mods ...string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds a module of its own")
	}
	repo, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	goMod := "module example.com/user\n\ngo 1.21\n\n"
	for _, m := range append([]string{"."}, mods...) {
		path := strings.TrimSuffix("github.com/floodgate-dev/floodgate/"+m, "/.")
		goMod += "require " + path + " v0.0.0-00010101000000-000000000000\n" +
			"replace " + path + " => " + filepath.Join(repo, m) + "\n"
	}
	// The checksums of the modules' requirements come from their own
	// go.sum files, so tidying verifies the module cache against them and
	// never asks the checksum database (the test runs offline).
	goSum := ""
	for _, m := range mods {
		sum, err := os.ReadFile(filepath.Join(repo, m, "go.sum"))
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		goSum += string(sum)
	}
	for name, text := range map[string]string{"go.mod": goMod, "go.sum": goSum, "main.go": mainGo} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	goCmd(t, dir, "mod", "tidy")
	return dir
}

// goCmd runs the go command in dir, on its own module (GOWORK=off) and
// with no network: no module proxy (GOPROXY=off: the modules come from the
// module cache the checkout's own builds filled) and no checksum database
// (GOSUMDB=off: the checksums come from the go.sum userModule wrote), and
// returns its output.
func goCmd(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOPROXY=off", "GOSUMDB=off", "GOFLAGS=-mod=mod")
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

// TestLimitByLinksNoRuleEngine holds the promise of httplimit: a program
// that limits requests with LimitBy (and calls with LimiterTransport)
// links no rule engine, YAML, regexp or file watcher, and no
// encoding/json but what log/slog brings; its module graph holds no other
// module and its go line is the root module's.
func TestLimitByLinksNoRuleEngine(t *testing.T) {
	dir := userModule(t, `package main

import (
	"net/http"
	"time"

	"github.com/floodgate-dev/floodgate"
	"github.com/floodgate-dev/floodgate/httplimit"
)

func main() {
	l, err := floodgate.New(floodgate.Limit{Limit: 10, Window: time.Minute})
	if err != nil {
		panic(err)
	}
	http.DefaultClient.Transport = &httplimit.LimiterTransport{Limiter: l}
	_ = http.ListenAndServe("127.0.0.1:0", httplimit.LimitBy(l, httplimit.KeyByIP(nil))(http.NotFoundHandler()))
}
`)
	checkLinks(t, dir, []string{"encoding/json"}, []string{"regexp"})
	if mods := strings.Fields(goCmd(t, dir, "list", "-m", "-f", "{{.Path}}", "all")); len(mods) != 2 {
		t.Errorf("the module graph of a module that uses httplimit is %q, want the user's and the root", mods)
	}
	if goLine := strings.TrimSpace(goCmd(t, dir, "list", "-m", "-f", "{{.GoVersion}}")); goLine != maxGoLine {
		t.Errorf("a go 1.21 module that uses httplimit is raised to go %s, want %s", goLine, maxGoLine)
	}
}

// TestGRPCLimitLinksNoRuleEngine holds the promise of grpclimit: its
// interceptors write the rate-limit fields without the net/http
// middleware, the rule engine or YAML.
func TestGRPCLimitLinksNoRuleEngine(t *testing.T) {
	dir := userModule(t, `package main

import (
	"net"
	"time"

	"google.golang.org/grpc"

	"github.com/floodgate-dev/floodgate"
	"github.com/floodgate-dev/floodgate/grpclimit"
)

func main() {
	l, err := floodgate.New(floodgate.Limit{Limit: 10, Window: time.Minute})
	if err != nil {
		panic(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	_ = grpc.NewServer(grpc.ChainUnaryInterceptor(grpclimit.Unary(l, nil))).Serve(lis)
}
`, "grpclimit")
	checkLinks(t, dir, nil, []string{"github.com/floodgate-dev/floodgate/httplimit"})
}

// checkLinks fails when the program in dir depends on a rule engine
// package, YAML, fsnotify or any of the packages refused, or when a
// package other than log/slog imports one of onlyFromSlog; then it builds
// the program.
func checkLinks(t *testing.T, dir string, onlyFromSlog, refused []string) {
	t.Helper()
	refused = append(refused, "github.com/floodgate-dev/floodgate/rules", "go.yaml.in/yaml", "gopkg.in/yaml", "github.com/fsnotify")
	for _, line := range strings.Split(strings.TrimSpace(goCmd(t, dir, "list", "-deps", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", ".")), "\n") {
		pkg, imports, _ := strings.Cut(line, " ")
		for _, r := range refused {
			if pkg == r || strings.HasPrefix(pkg, r+"/") || strings.HasPrefix(pkg, r+".") {
				t.Errorf("the program links %s", pkg)
			}
		}
		if pkg == "log/slog" {
			continue
		}
		for _, imp := range strings.Fields(imports) {
			for _, o := range onlyFromSlog {
				if imp == o {
					t.Errorf("%s imports %s", pkg, o)
				}
			}
		}
	}
	goCmd(t, dir, "build", "-o", filepath.Join(dir, "user"), ".")
}
