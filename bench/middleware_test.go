package bench

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"syscall"
	"testing"
	"time"

	sethhttplimit "github.com/sethvargo/go-limiter/httplimit"
	"github.com/sethvargo/go-limiter/memorystore"

	"github.com/floodgate-dev/floodgate"
	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/httplimit"
	"github.com/floodgate-dev/floodgate/memstore"
	"github.com/floodgate-dev/floodgate/rules"
	"github.com/floodgate-dev/floodgate/rules/httprules"
)

// The net/http middleware's added cost per request, in the same run as a
// bare handler and as sethvargo/go-limiter's httplimit middleware: every
// request passes through the middleware to a handler that writes nothing;
// 1,000 client addresses, one limit per address, never reached. Both
// middlewares set their rate-limit headers on every response.
//
//	cd bench && go test -run '^$' -bench 'Middleware' -count 5 .

const middlewareClients = 1000

func middlewareRequests() []*http.Request {
	reqs := make([]*http.Request, middlewareClients)
	for i := range reqs {
		reqs[i] = httptest.NewRequest("GET", "/api/x", nil)
		reqs[i].RemoteAddr = "10.0." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256) + ":1234"
	}
	return reqs
}

var noop = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})

func floodgateMiddleware(b *testing.B) http.Handler {
	set, err := rules.Parse("bench.yaml", []byte(`
domain: web
rules:
  - name: per-ip
    match: {ip: "*"}
    count_by: [ip]
    limit: 1000000000
    window: 1h
    algorithm: token-bucket
`))
	if err != nil {
		b.Fatal(err)
	}
	mw, err := httprules.Middleware(httprules.Options{Checker: rules.NewEngine(set, memstore.New(memstore.Options{})),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	return mw(noop)
}

func sethvargoMiddleware(b *testing.B) http.Handler {
	s, err := memorystore.New(&memorystore.Config{Tokens: 1 << 30, Interval: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close(b.Context()) })
	m, err := sethhttplimit.NewMiddleware(s, sethhttplimit.IPKeyFunc())
	if err != nil {
		b.Fatal(err)
	}
	return m.Handle(noop)
}

// processCPU is the CPU time the process has used (user and system).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the process CPU time per operation since before, GC
// included: on a shared machine it is steadier than wall time per op.
func reportCPU(b *testing.B, before time.Duration) {
	if b.N > 0 {
		b.ReportMetric(float64(processCPU()-before)/float64(b.N), "cpu-ns/op")
	}
}

// headerWriter is a ResponseWriter that keeps headers and discards the rest.
type headerWriter struct{ h http.Header }

func (w *headerWriter) Header() http.Header         { return w.h }
func (w *headerWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *headerWriter) WriteHeader(int)             {}

var middlewares = []struct {
	name string
	new  func(*testing.B) http.Handler
}{
	{"bare", func(*testing.B) http.Handler { return noop }},
	{"floodgate-httplimit", floodgateMiddleware},
	{"sethvargo-httplimit", sethvargoMiddleware},
	{"floodgate-limitby", limitByMiddleware},
	{"floodgate-limiter-minimal", minimalMiddleware},
}

// limitByMiddleware is Floodgate's counterpart of go-limiter's middleware:
// httplimit.LimitBy over a single-limit Limiter, keyed by the client
// address, with every header the rule-set middleware writes (X-RateLimit-*,
// RateLimit and RateLimit-Policy).
func limitByMiddleware(b *testing.B) http.Handler {
	l, err := floodgate.New(floodgate.Limit{Algorithm: algorithm.TokenBucket, Limit: 1 << 30, Window: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	return httplimit.LimitBy(l, httplimit.KeyByIP(nil))(noop)
}

// minimalMiddleware is the smallest experiment against go-limiter's
// middleware: Floodgate's single-limit Limiter (no rule set, no
// descriptor) keyed by the peer address, setting the same three
// X-RateLimit headers go-limiter sets. It shows what the rule engine and
// the draft RateLimit headers add on top of the decision.
func minimalMiddleware(b *testing.B) http.Handler {
	l, err := floodgate.New(floodgate.Limit{Algorithm: algorithm.TokenBucket, Limit: 1 << 30, Window: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			host = r.RemoteAddr
		}
		d, err := l.Allow(r.Context(), host)
		if err != nil {
			noop.ServeHTTP(w, r)
			return
		}
		var buf [64]byte
		b := strconv.AppendInt(buf[:0], d.Limit, 10)
		n1 := len(b)
		b = strconv.AppendInt(b, d.Remaining, 10)
		n2 := len(b)
		b = strconv.AppendInt(b, int64((d.ResetAfter+time.Second-1)/time.Second), 10)
		all := string(b)
		vals := [...]string{all[:n1], all[n1:n2], all[n2:]}
		h := w.Header()
		h["X-Ratelimit-Limit"] = vals[0:1:1]
		h["X-Ratelimit-Remaining"] = vals[1:2:2]
		h["X-Ratelimit-Reset"] = vals[2:3:3]
		if !d.Allowed {
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		noop.ServeHTTP(w, r)
	})
}

func BenchmarkMiddleware(b *testing.B) {
	reqs := middlewareRequests()
	for _, m := range middlewares {
		b.Run(m.name, func(b *testing.B) {
			h := m.new(b)
			w := &headerWriter{h: http.Header{}}
			b.ReportAllocs()
			cpu := processCPU()
			i := 0
			for b.Loop() {
				clear(w.h)
				h.ServeHTTP(w, reqs[i%len(reqs)])
				i++
			}
			reportCPU(b, cpu)
		})
	}
}

func BenchmarkMiddlewareParallel(b *testing.B) {
	reqs := middlewareRequests()
	for _, m := range middlewares {
		b.Run(m.name, func(b *testing.B) {
			h := m.new(b)
			b.ReportAllocs()
			cpu := processCPU()
			defer reportCPU(b, cpu)
			b.RunParallel(func(pb *testing.PB) {
				w := &headerWriter{h: http.Header{}}
				i := 0
				for pb.Next() {
					clear(w.h)
					h.ServeHTTP(w, reqs[i%len(reqs)])
					i++
				}
			})
		})
	}
}
