package main

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestServeExitStatusAfterCutShutdown runs the real binary, leaves one
// request running (its body never comes), and sends SIGTERM: with a short
// shutdown_timeout the request is cut, the log counts it, and the process
// exits with status 3 instead of 0.
func TestServeExitStatusAfterCutShutdown(t *testing.T) {
	bin := floodgateBinary(t)
	// The request must reach its handler before SIGTERM: the test cannot
	// see that from outside, so a run in which the server reports a clean
	// shutdown with no request in flight (its handler never started: the
	// machine stalled the server) is run again with a longer wait.
	for _, wait := range []time.Duration{200 * time.Millisecond, time.Second, 5 * time.Second} {
		all, err := cutShutdown(t, bin, wait)
		if err == nil && !strings.Contains(all, "http_requests_cut") {
			t.Logf("no request in flight at SIGTERM %v after it was sent (a stalled machine); again with a longer wait", wait)
			continue
		}
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != exitUncleanShutdown {
			t.Fatalf("serve after a cut shutdown: %v, want exit status %d\n%s", err, exitUncleanShutdown, all)
		}
		if !strings.Contains(all, "http_requests_cut=1") || !strings.Contains(all, "shutdown was not clean") {
			t.Fatalf("the log does not count the cut request:\n%s", all)
		}
		return
	}
	t.Fatal("the request never reached its handler before SIGTERM, in three runs")
}

// cutShutdown starts serve with a 300ms shutdown timeout, sends a request
// whose body never completes, waits wait and sends SIGTERM; it returns
// serve's log and how it exited.
func cutShutdown(t *testing.T, bin string, wait time.Duration) (string, error) {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "floodgate.yaml")
	os.WriteFile(cfg, []byte("http:\n  addr: 127.0.0.1:0\ngrpc:\n  addr: 127.0.0.1:0\nshutdown_timeout: 300ms\n"), 0o644)
	cmd := exec.Command(bin, "serve", "--config", cfg)
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
	addrRE := regexp.MustCompile(`listener=http addr=http://(127\.0\.0\.1:\d+)`)
	var addr string
	var seen []string
	for timeout := time.After(30 * time.Second); addr == ""; {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("serve exited early:\n%s", strings.Join(seen, "\n"))
			}
			seen = append(seen, l)
			if m := addrRE.FindStringSubmatch(l); m != nil {
				addr = m[1]
			}
		case <-timeout:
			t.Fatalf("no listening line:\n%s", strings.Join(seen, "\n"))
		}
	}
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	io.WriteString(conn, "POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
	time.Sleep(wait) // the request reaches the handler
	cmd.Process.Signal(syscall.SIGTERM)
	for l := range lines {
		seen = append(seen, l)
	}
	err = cmd.Wait()
	return strings.Join(seen, "\n"), err
}
