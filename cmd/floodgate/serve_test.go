package main

import (
	"bufio"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestServeProcess runs the real binary, talks to it over loopback, and
// stops it with SIGTERM as an orchestrator would. Its environment holds
// envoyproxy/ratelimit's RUNTIME_ROOT, as a pod made for that image does:
// serve stays in its own mode and says, in one line, that it ignores it.
func TestServeProcess(t *testing.T) {
	bin := floodgateBinary(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "floodgate.yaml")
	os.WriteFile(cfg, []byte("http:\n  addr: 127.0.0.1:0\ngrpc:\n  addr: 127.0.0.1:0\nlog:\n  format: text\n"), 0o644)
	cmd := exec.Command(bin, "serve", "--config", cfg, "--log-level", "debug")
	cmd.Env = append(os.Environ(), "RUNTIME_ROOT="+dir)
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	addrRE := regexp.MustCompile(`listener=http addr=(http://127\.0\.0\.1:\d+)`)
	var base string
	var seen []string
	timeout := time.After(30 * time.Second)
	for base == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("serve exited early:\n%s", strings.Join(seen, "\n"))
			}
			seen = append(seen, l)
			if m := addrRE.FindStringSubmatch(l); m != nil {
				base = m[1]
			}
		case <-timeout:
			t.Fatalf("no listening line:\n%s", strings.Join(seen, "\n"))
		}
	}
	resp, err := http.Get(base + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/healthz %d", resp.StatusCode)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	for l := range lines {
		seen = append(seen, l)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("serve after SIGTERM: %v\n%s", err, strings.Join(seen, "\n"))
	}
	all := strings.Join(seen, "\n")
	if !strings.Contains(all, "shutting down") || !strings.Contains(all, "msg=stopped") {
		t.Fatalf("no graceful shutdown in the log:\n%s", all)
	}
	if n := strings.Count(all, "RUNTIME_ROOT is set and ignored"); n != 1 {
		t.Fatalf("%d lines say RUNTIME_ROOT is ignored, want 1:\n%s", n, all)
	}
}

func TestServeFlagErrors(t *testing.T) {
	var out, errb strings.Builder
	if err := runServe([]string{"--config", filepath.Join(t.TempDir(), "none.yaml")}, &out, &errb); err == nil {
		t.Fatal("missing config file accepted")
	}
	if err := runServe([]string{"--log-level", "loud"}, &out, &errb); err == nil || !strings.Contains(err.Error(), "log-level") {
		t.Fatalf("bad log level: %v", err)
	}
	if err := runServe([]string{"extra"}, &out, &errb); err == nil {
		t.Fatal("stray argument accepted")
	}
	if err := runServe([]string{"--store", "redis://:hunter2@nohost"}, &out, &errb); err == nil ||
		!strings.HasPrefix(err.Error(), "--store: ") || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("bad --store: %v", err)
	}
	out.Reset()
	if err := runServe([]string{"--print-config"}, &out, &errb); err != nil || !strings.Contains(out.String(), "127.0.0.1:8080") {
		t.Fatalf("--print-config: %v\n%s", err, out.String())
	}
}
