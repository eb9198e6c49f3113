package main

import (
	"bufio"
	"errors"
	"flag"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/internal/testkit/testmain"

	"github.com/floodgate-dev/floodgate/cmd/floodgate/server"
)

// Bare floodgate prints the usage and fails; -h on every command prints its
// synopsis and succeeds.
func TestUsageAndHelp(t *testing.T) {
	var out, errb strings.Builder
	err := dispatch(nil, &out, &errb)
	var exit exitError
	if !errors.As(err, &exit) || exit.code != 2 || !strings.Contains(errb.String(), "usage: floodgate COMMAND") {
		t.Fatalf("bare floodgate: %v, stderr %q", err, errb.String())
	}
	for _, args := range [][]string{{"-h"}, {"--help"}, {"help"}, {"sim", "-h"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			out.Reset()
			if err := dispatch(args, &out, &errb); err != nil || !strings.Contains(out.String(), "usage: floodgate") {
				t.Errorf("%v: %v, stdout %q", args, err, out.String())
			}
		})
	}
	var cmds [][]string
	for name := range commands {
		if name != "sim" {
			cmds = append(cmds, []string{name})
		}
	}
	for name := range simCommands {
		cmds = append(cmds, []string{"sim", name})
	}
	for _, c := range cmds {
		errb.Reset()
		err := dispatch(append(c, "-h"), &out, &errb)
		if err != nil && !errors.Is(err, flag.ErrHelp) {
			t.Errorf("%v -h: %v", c, err)
		}
		if want := "usage: floodgate " + strings.Join(c, " "); !strings.HasPrefix(errb.String(), want) {
			t.Errorf("%v -h: synopsis does not start with %q:\n%s", c, want, errb.String())
		}
	}
}

func TestVersionText(t *testing.T) {
	info := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/floodgate-dev/floodgate", Version: "v1.2.3"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.time", Value: "2026-12-01T00:00:00Z"}, {Key: "vcs.modified", Value: "true"}}}
	want := "floodgate v1.2.3\nmodule    github.com/floodgate-dev/floodgate\nrevision  abc123 2026-12-01T00:00:00Z (modified)\ngo        go1.26.8\n"
	if got := versionText(info); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	info.Settings = nil
	if got := versionText(info); !strings.Contains(got, "revision  unknown") {
		t.Errorf("no VCS information: %s", got)
	}
}

// Every serve error names the flag or file it is about.
func TestServeErrorsNameFlagOrFile(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("domain: x\nrules:\n  - name: r\n    limit: -1\n"), 0o644)
	cfgWithMissingRules := filepath.Join(dir, "cfg.yaml")
	os.WriteFile(cfgWithMissingRules, []byte("rules: gone.yaml\n"), 0o644)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--rules", "nothere.yaml"}, "--rules: rule file nothere.yaml: no such file"},
		{[]string{"--config", cfgWithMissingRules}, "rules: in the configuration: rule file " + filepath.Join(dir, "gone.yaml")},
		{[]string{"--rules", bad}, bad + ":"},
		{[]string{"--config", "none.yaml"}, "--config: configuration file: open none.yaml"},
		{[]string{"--http", "8080"}, `--http: "8080": want host:port`},
		{[]string{"--grpc", "127.0.0.1:99999"}, `--grpc: "127.0.0.1:99999": the port must be`},
		{[]string{"--gateway", "off"}, `--gateway: "off"`},
		{[]string{"--store", "mysql://u:secret@h:1"}, `--store: Redis address "mysql://REDACTED@h:1": unknown scheme`},
		{[]string{"--store", "localhost"}, `--store: Redis address "localhost"`},
		{[]string{"--log-level", "loud"}, "--log-level"},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			var out, errb strings.Builder
			err := runServe(c.args, &out, &errb)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("serve %v: %v, want an error containing %q", c.args, err, c.want)
			}
			if err != nil && strings.Contains(err.Error(), "secret") {
				t.Errorf("serve %v: the error shows the password: %v", c.args, err)
			}
		})
	}
}

func TestServeOverridesApply(t *testing.T) {
	cfg := server.DefaultConfig()
	ov := serveOverrides{http: "0.0.0.0:9080", grpc: "off", gateway: "[::1]:9082"}
	if err := ov.apply(&cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.HTTP.Addr != "0.0.0.0:9080" || cfg.GRPC.Addr != "off" || cfg.Gateway.Addr != "[::1]:9082" {
		t.Fatalf("config after overrides: %+v", cfg)
	}
}

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// floodgateBinary builds the command once for the tests that run it.
func floodgateBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "floodgate-cli-test")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "floodgate")
		if out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput(); err != nil {
			binErr = errors.New("go build: " + err.Error() + "\n" + string(out))
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

func TestMain(m *testing.M) {
	testmain.Setup() // the sims log unmatched requests to the default logger
	code := m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

// The built binary's exit statuses and version, as a shell sees them.
func TestBinaryExitStatusAndVersion(t *testing.T) {
	bin := floodgateBinary(t)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "usage: floodgate COMMAND"},
		{[]string{"-h"}, 0, "usage: floodgate COMMAND"},
		{[]string{"load", "-h"}, 0, "usage: floodgate load"},
		{[]string{"serve", "--rules", "nothere.yaml"}, 2, "floodgate: --rules: rule file nothere.yaml"},
		{[]string{"version"}, 0, "module    github.com/floodgate-dev/floodgate/cmd/floodgate\nrevision  "},
		{[]string{"--version"}, 0, "\ngo        go1."},
		{[]string{"nope"}, 2, `unknown command "nope"`},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			out, err := exec.Command(bin, c.args...).CombinedOutput()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != c.code || !strings.Contains(string(out), c.want) {
				t.Errorf("floodgate %v: exit %d, want %d; output lacks %q:\n%s", c.args, code, c.code, c.want, out)
			}
		})
	}
}

// serve's address, store and rules flags win over the configuration file.
func TestServeFlagsOverrideConfig(t *testing.T) {
	bin := floodgateBinary(t)
	dir := t.TempDir()
	rulesFile := filepath.Join(dir, "rules.yaml")
	os.WriteFile(rulesFile, []byte("domain: flagged\nrules:\n  - name: r\n    match: {k: v}\n    count_by: global\n    limit: 1\n    window: 1s\n"), 0o644)
	cfg := filepath.Join(dir, "floodgate.yaml")
	// The file names addresses on a documentation network (192.0.2.0/24),
	// which cannot be bound, and a Redis there: serving at all shows the
	// flags won.
	os.WriteFile(cfg, []byte("http:\n  addr: 192.0.2.1:8080\ngrpc:\n  addr: 192.0.2.1:8081\nstore:\n  type: redis\n  addrs: [192.0.2.1:6379]\n"+
		"gateway:\n  addr: 192.0.2.1:8082\n  routes:\n    - {prefix: /, upstream: http://127.0.0.1:9}\n"), 0o644)
	cmd := exec.Command(bin, "serve", "--config", cfg, "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--gateway", "127.0.0.1:0",
		"--store", "memory", "--rules", rulesFile)
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	sc := bufio.NewScanner(stderr)
	addrRE := regexp.MustCompile(`listener=(\w+) addr=(\S+)`)
	addrs := map[string]string{}
	deadline := time.AfterFunc(30*time.Second, func() { cmd.Process.Kill() })
	defer deadline.Stop()
	var seen []string
	for len(addrs) < 3 && sc.Scan() {
		seen = append(seen, sc.Text())
		if m := addrRE.FindStringSubmatch(sc.Text()); m != nil {
			addrs[m[1]] = m[2]
		}
	}
	go io.Copy(io.Discard, stderr)
	for _, l := range []string{"http", "grpc", "gateway"} {
		if !strings.Contains(addrs[l], "127.0.0.1:") {
			t.Fatalf("listener %s at %q, want 127.0.0.1:\n%s", l, addrs[l], strings.Join(seen, "\n"))
		}
	}
	resp, err := http.Get(addrs["http"] + "/v1/rules")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `"domain":"flagged"`) {
		t.Errorf("/v1/rules: %s", body)
	}
	resp, err = http.Get(addrs["http"] + "/status.json")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `"type":"memory"`) {
		t.Errorf("store is not memory: %.300s", body)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
}

// FuzzServeOverrides feeds arbitrary listener flag values: nothing panics,
// and a value is either applied or refused with an error naming its flag.
func FuzzServeOverrides(f *testing.F) {
	for _, s := range []string{"127.0.0.1:6379", "a:1,b:2", ":", "[::1]:0", "off", "h:99999", "0.0.0.0:8080"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		cfg := server.DefaultConfig()
		err := serveOverrides{http: v, grpc: v, gateway: v}.apply(&cfg)
		if err != nil && !strings.HasPrefix(err.Error(), "--") {
			t.Fatalf("error does not name its flag: %v", err)
		}
		if err == nil && (cfg.HTTP.Addr != v || cfg.Gateway.Addr != v) {
			t.Fatalf("%q accepted but not applied: %+v", v, cfg)
		}
	})
}
