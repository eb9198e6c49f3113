package httprules

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
)

// BenchmarkMiddleware measures the middleware's own cost per request (no
// network): describing the request, the engine's Check on a memory store,
// and writing the headers. 1,000 client addresses, one rule per address.
func BenchmarkMiddleware(b *testing.B) {
	eng := newEngine(b, `
domain: web
rules:
  - name: per-ip
    match: {ip: "*"}
    count_by: [ip]
    limit: 1000000000
    window: 1m
`)
	mw, err := Middleware(Options{Checker: eng, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	reqs := make([]*http.Request, 1000)
	for i := range reqs {
		reqs[i] = httptest.NewRequest("GET", "/x", nil)
		reqs[i].RemoteAddr = "10.0." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256) + ":1234"
	}
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		clear(w.h)
		h.ServeHTTP(w, reqs[i%len(reqs)])
	}
}

type discardWriter struct{ h http.Header }

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (d *discardWriter) WriteHeader(int)             {}
