// Package nginxtest starts a real nginx on a free loopback port for tests
// that need an upstream which normalises paths as production upstreams do.
package nginxtest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/internal/testkit/testtier"
)

// Start runs nginx in the foreground with its own prefix in a temporary
// directory, serving the server-block directives in locations (location
// blocks and the like) on a free 127.0.0.1 port, and returns that address
// once nginx accepts connections. nginx is stopped when tb's test ends.
// The test is skipped, saying so, when nginx is not installed, and fails
// then in the integration tier (scripts/test installs nginx).
func Start(tb testing.TB, locations string) string {
	tb.Helper()
	bin, err := exec.LookPath("nginx")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/nginx"); serr != nil {
			msg := fmt.Sprintf("nginxtest: nginx is not installed (%v); install it, e.g. `apt-get install -y nginx`", err)
			if testtier.Integration() {
				tb.Fatal(msg) // scripts/test installs it: a miss there is a fault
			}
			tb.Skip(msg + "; skipping the test")
		}
		bin = "/usr/sbin/nginx"
	}
	dir := tb.TempDir()
	for attempt := 0; ; attempt++ {
		addr, err := freeAddr()
		if err != nil {
			tb.Fatalf("nginxtest: finding a free port: %v", err)
		}
		conf := fmt.Sprintf(`daemon off;
master_process off;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 256; }
http {
	access_log off;
	client_body_temp_path %[1]s/body;
	proxy_temp_path %[1]s/proxy;
	fastcgi_temp_path %[1]s/fastcgi;
	uwsgi_temp_path %[1]s/uwsgi;
	scgi_temp_path %[1]s/scgi;
	default_type text/plain;
	server {
		listen %[2]s;
%[3]s
	}
}
`, dir, addr, locations)
		file := filepath.Join(dir, "nginx.conf")
		if err := os.WriteFile(file, []byte(conf), 0o644); err != nil {
			tb.Fatal(err)
		}
		cmd := exec.Command(bin, "-p", dir, "-c", file, "-e", filepath.Join(dir, "error.log"))
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			tb.Fatalf("nginxtest: starting nginx: %v", err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		err = waitListening(addr, exited)
		if err == nil {
			tb.Cleanup(func() {
				cmd.Process.Kill()
				<-exited
			})
			return addr
		}
		cmd.Process.Kill()
		log, _ := os.ReadFile(filepath.Join(dir, "error.log"))
		if attempt < 3 && strings.Contains(string(log)+out.String(), "Address already in use") {
			continue // the free port was taken in between
		}
		tb.Fatalf("nginxtest: nginx did not start: %v\n%s%s", err, out.String(), log)
	}
}

// waitListening waits up to 10 s for addr to accept a connection, or for
// the process to exit.
func waitListening(addr string, exited <-chan error) error {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			return fmt.Errorf("nginx exited: %v", err)
		default:
		}
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return errors.New("nginx does not accept connections after 10 s")
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
