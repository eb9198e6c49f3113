package server

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
)

// TestGatewayHTTP2AndUpstreamMetric: the gateway listener with TLS speaks
// HTTP/2 to clients, a route's transport settings are accepted, and
// /metrics reports the upstream connections the gateway opened.
func TestGatewayHTTP2AndUpstreamMetric(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer up.Close()
	dir := t.TempDir()
	cert, key := selfSigned(t, dir)
	cfg := testConfig()
	cfg.Gateway.TLS = TLS{Cert: cert, Key: key}
	cfg.Gateway.Routes = []Route{{Prefix: "/", Upstream: up.URL, Transport: RouteTransport{MaxIdleConns: 8, MaxConns: 8}}}
	r := start(t, cfg)
	pool := x509.NewCertPool()
	pemData, _ := os.ReadFile(cert)
	pool.AppendCertsFromPEM(pemData)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}}
	for range 20 {
		resp, err := client.Get("https://" + r.srv.Addr(ListenerGateway) + "/x")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.ProtoMajor != 2 || string(body) != "ok" {
			t.Fatalf("gateway over TLS: %s %d %q, want HTTP/2 200 ok", resp.Proto, resp.StatusCode, body)
		}
	}
	resp, err := http.Get("http://" + r.srv.Addr(ListenerHTTP) + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`floodgate_gateway_upstream_connections_opened_total{route="/",upstream="` + up.URL + `"} 1`,
		`floodgate_gateway_upstream_errors_total{cause="upstream_failed",route="/",upstream="` + up.URL + `"} 0`,
		`floodgate_gateway_upstream_errors_total{cause="client_canceled",route="/",upstream="` + up.URL + `"} 0`,
	} {
		if !strings.Contains(string(b), want) {
			t.Fatalf("metrics lack %s:\n%s", want, grepLines(string(b), "gateway"))
		}
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func TestGatewayTransportConfig(t *testing.T) {
	c, err := parseConfig("f.yaml", []byte("gateway:\n  routes:\n    - prefix: /\n      upstream: http://127.0.0.1:9\n      transport:\n        max_idle_conns: 64\n        dial_timeout: 2s\n        response_header_timeout: 5m\n"), DefaultConfig(), "")
	if err != nil {
		t.Fatal(err)
	}
	if tr := c.Gateway.Routes[0].Transport; tr.MaxIdleConns != 64 || tr.DialTimeout.Seconds() != 2 || tr.ResponseHeaderTimeout.Minutes() != 5 {
		t.Fatalf("transport %+v", tr)
	}
	_, err = parseConfig("f.yaml", []byte("gateway:\n  routes:\n    - prefix: /\n      upstream: http://127.0.0.1:9\n      transport:\n        max_conns: -1\n"), DefaultConfig(), "")
	if err == nil || !strings.Contains(err.Error(), "f.yaml:6: gateway route transport") {
		t.Fatalf("negative max_conns: %v", err)
	}
}

func TestGatewayRoutePathConfig(t *testing.T) {
	c, err := parseConfig("f.yaml", []byte("gateway:\n  routes:\n    - prefix: /\n      upstream: http://127.0.0.1:9\n      path:\n        semicolon: strip\n        case: lower\n"), DefaultConfig(), "")
	if err != nil {
		t.Fatal(err)
	}
	if p := c.Gateway.Routes[0].Path; p != (RoutePath{Semicolon: "strip", Case: "lower"}) {
		t.Fatalf("path %+v", p)
	}
	_, err = parseConfig("f.yaml", []byte("gateway:\n  routes:\n    - prefix: /\n      upstream: http://127.0.0.1:9\n      path:\n        case: upper\n"), DefaultConfig(), "")
	if err == nil || !strings.Contains(err.Error(), "f.yaml:6: gateway route path: case \"upper\": want sensitive or lower") {
		t.Fatalf("case upper: %v", err)
	}
}
