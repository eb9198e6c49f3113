package gateway

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/floodgate-dev/floodgate/httplimit"
)

func backend(t *testing.T, name string) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Backend", name)
		w.Header().Set("X-Seen-Path", r.URL.Path)
		w.Header().Set("X-Seen-XFF", r.Header.Get("X-Forwarded-For"))
		io.WriteString(w, name)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func mustURL(t testing.TB, s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func TestGatewayUpstreamDown(t *testing.T) {
	dead := httptest.NewServer(http.NotFoundHandler())
	addr := dead.URL
	dead.Close()
	gw, err := New(Options{Routes: []Route{{Prefix: "/", Upstream: mustURL(t, addr)}},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	gw.ServeHTTP(rec, httptest.NewRequest("GET", "/x", nil))
	if rec.Code != http.StatusBadGateway {
		t.Fatalf("dead upstream: %d, want 502", rec.Code)
	}
}

func TestGatewayBadRoutes(t *testing.T) {
	u := mustURL(t, "http://127.0.0.1:1")
	for _, rs := range [][]Route{
		nil,
		{{Prefix: "x", Upstream: u}},
		{{Prefix: "/", Upstream: mustURL(t, "ftp://h")}},
		{{Prefix: "/", Upstream: u}, {Prefix: "/", Upstream: u}},
	} {
		t.Run(fmt.Sprint(rs), func(t *testing.T) {
			if _, err := New(Options{Routes: rs}); err == nil {
				t.Errorf("routes %v accepted", rs)
			}
		})
	}
}

func TestGatewayForwardsChainOnlyFromTrustedProxies(t *testing.T) {
	up := backend(t, "up")
	for _, c := range []struct {
		trust string
		want  string
	}{
		{"", "127.0.0.1"},                          // untrusted peer: its header is dropped
		{"127.0.0.0/8", "198.51.100.7, 127.0.0.1"}, // trusted peer: chain kept, peer appended
	} {
		t.Run("trust "+c.trust, func(t *testing.T) {
			var p *httplimit.Proxies
			if c.trust != "" {
				p, _ = httplimit.ParseProxies(c.trust)
			}
			gw, err := New(Options{Proxies: p, Routes: []Route{{Prefix: "/", Upstream: mustURL(t, up.URL)}}})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(gw)
			req, _ := http.NewRequest("GET", srv.URL+"/x", nil)
			req.Header.Set("X-Forwarded-For", "198.51.100.7")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			srv.Close()
			if got := resp.Header.Get("X-Seen-XFF"); got != c.want {
				t.Errorf("trust %q: upstream saw X-Forwarded-For %q, want %q", c.trust, got, c.want)
			}
		})
	}
}
