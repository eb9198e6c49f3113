package gateway

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// BenchmarkGatewayForward is the gateway's own cost per bodiless request
// to a loopback upstream through the direct forwarder (no limiter), for a
// path already canonical and for one that is not.
func BenchmarkGatewayForward(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer up.Close()
	gw, err := New(Options{Routes: []Route{{Prefix: "/api/", Upstream: mustURL(b, up.URL)}}})
	if err != nil {
		b.Fatal(err)
	}
	defer gw.CloseIdleConnections()
	for _, path := range []string{"/api/v1/users/12345/orders", "/api//v1/./users/%7E12345/../12345/orders"} {
		b.Run(path, func(b *testing.B) {
			req := httptest.NewRequest("GET", "http://gw"+path, nil)
			req.RemoteAddr = "127.0.0.1:5000"
			b.ReportAllocs()
			for b.Loop() {
				rec := httptest.NewRecorder()
				gw.ServeHTTP(rec, req)
				if rec.Code != 200 {
					b.Fatalf("status %d", rec.Code)
				}
			}
		})
	}
}
