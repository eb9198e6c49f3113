package server

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestTLSHandshakeFailuresLogThrottled: 2,000 connections that send five
// junk bytes instead of a TLS handshake, spread over the HTTPS, admin and
// gateway listeners, write at most 20 log lines (one per listener within
// errorLogEvery), each naming its listener and the count it stands for.
func TestTLSHandshakeFailuresLogThrottled(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer up.Close()
	cert, key := selfSigned(t, t.TempDir())
	cfg := testConfig()
	tlsCfg := TLS{Cert: cert, Key: key}
	cfg.HTTP.TLS, cfg.Gateway.TLS, cfg.Admin.TLS = tlsCfg, tlsCfg, tlsCfg
	cfg.Admin.Addr = "127.0.0.1:0"
	cfg.Gateway.Routes = []Route{{Prefix: "/", Upstream: up.URL}}
	r := start(t, cfg)
	listeners := []string{ListenerHTTP, ListenerAdmin, ListenerGateway}
	d := net.Dialer{LocalAddr: attacker, Timeout: 5 * time.Second}
	for i := 0; i < 2000; i++ {
		c, err := d.Dial("tcp", r.srv.Addr(listeners[i%3]))
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		c.Write([]byte("junk\n"))
		io.Copy(io.Discard, c) // the server's alert, then its close
		c.Close()
	}
	var lines []string
	for _, l := range strings.Split(r.logs.String(), "\n") {
		if strings.Contains(l, "TLS handshake") {
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 || len(lines) > 20 {
		t.Fatalf("%d log lines about failed TLS handshakes, want 1 to 20:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	for _, name := range listeners {
		found := false
		for _, l := range lines {
			if strings.Contains(l, "listener="+name+" ") && strings.Contains(l, "count=") {
				found = true
			}
		}
		if !found {
			t.Errorf("no line for the %s listener with its count:\n%s", name, strings.Join(lines, "\n"))
		}
	}
}

func TestErrorKind(t *testing.T) {
	for line, want := range map[string]string{
		"http: TLS handshake error from 127.0.0.2:41234: tls: first record does not look like a TLS handshake":                                                     "http: TLS handshake error",
		"http2: server: error reading preface from client 127.0.0.2:5: bogus greeting":                                                                             "http2: server: error reading preface",
		"http: URL query contains semicolon, which is no longer a supported separator; parts of the query may be stripped when parsed; see golang.org/issue/25192": "http: URL query contains semicolon, which is no longer a supported separator; pa",
		"http: Accept error: accept tcp: too many open files; retrying in 5ms":                                                                                     "http: Accept error",
		"no prefix at all": "no prefix at all",
	} {
		if got := errorKind(line); got != want {
			t.Errorf("errorKind(%q) = %q, want %q", line, got, want)
		}
	}
}
