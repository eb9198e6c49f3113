package main

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// silentCollector accepts connections on a loopback port and never reads
// from them or answers: an OTLP collector that hangs. It returns the
// address.
func silentCollector(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// TestServeSIGTERMWithSilentCollector runs the real binary with tracing on
// and an OTLP collector, over each protocol, that accepts connections and
// never answers (the exporter's own timeout set to ten minutes), makes a
// decision so that a span is waiting to be exported, and sends SIGTERM:
// the process exits within shutdown_timeout (1 s here, and a generous
// allowance for a loaded machine), logging that the spans could not be
// exported, instead of waiting on the collector.
func TestServeSIGTERMWithSilentCollector(t *testing.T) {
	const (
		shutdownTimeout = time.Second
		allowance       = 10 * time.Second // for a loaded machine; the exporter alone would wait ten minutes
	)
	bin := floodgateBinary(t)
	for _, c := range []struct{ protocol, endpoint string }{
		{"http/protobuf", "http://%s/v1/traces"},
		{"grpc", "http://%s"},
	} {
		t.Run(strings.ReplaceAll(c.protocol, "/", "_"), func(t *testing.T) {
			dir := t.TempDir()
			cfg := filepath.Join(dir, "floodgate.yaml")
			os.WriteFile(cfg, []byte(fmt.Sprintf("http:\n  addr: 127.0.0.1:0\ngrpc:\n  addr: 127.0.0.1:0\nshutdown_timeout: %v\ntracing:\n  enabled: true\n  protocol: %s\n  endpoint: %s\n",
				shutdownTimeout, c.protocol, fmt.Sprintf(c.endpoint, silentCollector(t)))), 0o644)
			cmd := exec.Command(bin, "serve", "--config", cfg)
			cmd.Env = append(os.Environ(), "OTEL_EXPORTER_OTLP_TIMEOUT=600000", "OTEL_BSP_SCHEDULE_DELAY=600000")
			stderr, _ := cmd.StderrPipe()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill()
			lines := make(chan string, 100)
			go func() {
				for sc := bufio.NewScanner(stderr); sc.Scan(); {
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
			// A decision, whose span waits in the batch for the collector.
			resp, err := http.Post("http://"+addr+"/v1/check", "application/json",
				strings.NewReader(`{"domain":"default","descriptors":[{"entries":[{"key":"client","value":"acme"}]}]}`))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()

			start := time.Now()
			cmd.Process.Signal(syscall.SIGTERM)
			exited := make(chan error, 1)
			go func() {
				for l := range lines {
					seen = append(seen, l)
				}
				exited <- cmd.Wait()
			}()
			select {
			case err = <-exited:
			case <-time.After(shutdownTimeout + allowance):
				cmd.Process.Kill()
				<-exited
				t.Fatalf("serve still running %v after SIGTERM with shutdown_timeout %v: it waited on the silent collector\n%s",
					time.Since(start).Round(time.Millisecond), shutdownTimeout, strings.Join(seen, "\n"))
			}
			took := time.Since(start)
			t.Logf("%s: exited %v after SIGTERM (shutdown_timeout %v): %v", c.protocol, took.Round(time.Millisecond), shutdownTimeout, err)
			all := strings.Join(seen, "\n")
			if !strings.Contains(all, "spans could not be exported at shutdown") {
				t.Errorf("no log line for the spans the collector did not take:\n%s", all)
			}
			if err != nil {
				t.Errorf("serve exited with %v, want a clean exit (spans lost are logged, not an unclean shutdown)\n%s", err, all)
			}
		})
	}
}
