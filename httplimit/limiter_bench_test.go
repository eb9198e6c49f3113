package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate"
	"github.com/floodgate-dev/floodgate/httplimit"
)

type nopWriter struct{ h http.Header }

func (d *nopWriter) Header() http.Header         { return d.h }
func (d *nopWriter) Write(p []byte) (int, error) { return len(p), nil }
func (d *nopWriter) WriteHeader(int)             {}

// BenchmarkLimitBy measures LimitBy's own cost per request (no network):
// the client address, one Limiter decision on the memory store, the
// headers. 1,000 client addresses; compare BenchmarkMiddleware, the rule
// engine's middleware on the same traffic.
func BenchmarkLimitBy(b *testing.B) {
	lim, err := floodgate.New(floodgate.Limit{Limit: 1_000_000_000, Window: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	h := httplimit.LimitBy(lim, httplimit.KeyByIP(nil))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	reqs := make([]*http.Request, 1000)
	for i := range reqs {
		reqs[i] = httptest.NewRequest("GET", "/x", nil)
		reqs[i].RemoteAddr = "10.0." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256) + ":1234"
	}
	w := &nopWriter{h: http.Header{}}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		clear(w.h)
		h.ServeHTTP(w, reqs[i%len(reqs)])
	}
}
