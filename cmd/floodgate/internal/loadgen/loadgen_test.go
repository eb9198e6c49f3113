package loadgen

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/floodgate-dev/floodgate/internal/testkit/syncbuf"

	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/httpapi"
)

// counter is the tests' rate limiter: each distinct descriptor list may pass
// limit times, ever. It records what it saw so the tests can hold the load
// generator's totals against the server's.
type counter struct {
	limit int
	delay time.Duration
	fail  func(key string) error

	mu       sync.Mutex
	seen     map[string]int
	domains  map[string]int
	allowed  int
	rejected int
}

func newCounter(limit int) *counter {
	return &counter{limit: limit, seen: map[string]int{}, domains: map[string]int{}}
}

// decide returns whether the call identified by key is allowed.
func (c *counter) decide(domain, key string) (bool, error) {
	if c.delay > 0 {
		time.Sleep(c.delay)
	}
	if c.fail != nil {
		if err := c.fail(key); err != nil {
			return false, err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.domains[domain]++
	c.seen[key]++
	if c.seen[key] <= c.limit {
		c.allowed++
		return true, nil
	}
	c.rejected++
	return false, nil
}

type rlsServer struct {
	rls.UnimplementedRateLimitServiceServer
	c       *counter
	unknown bool // answer overall_code UNKNOWN
}

func (s *rlsServer) ShouldRateLimit(ctx context.Context, req *rls.RateLimitRequest) (*rls.RateLimitResponse, error) {
	var parts []string
	for _, d := range req.Descriptors {
		for _, e := range d.Entries {
			parts = append(parts, e.Key+"="+e.Value)
		}
		parts = append(parts, "|")
	}
	ok, err := s.c.decide(req.Domain, strings.Join(parts, ","))
	if err != nil {
		return nil, err
	}
	code := rls.RateLimitResponse_OK
	if s.unknown {
		code = rls.RateLimitResponse_UNKNOWN
	} else if !ok {
		code = rls.RateLimitResponse_OVER_LIMIT
	}
	return &rls.RateLimitResponse{OverallCode: code}, nil
}

func startGRPC(t *testing.T, c *counter) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	rls.RegisterRateLimitServiceServer(srv, &rlsServer{c: c})
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	return "grpc://" + ln.Addr().String()
}

// startHTTP serves /v1/check; style picks how over-limit is said: "429" as a
// status code, "allowed" as {"allowed": false}.
func startHTTP(t *testing.T, c *counter, style string) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/check", func(w http.ResponseWriter, r *http.Request) {
		var req httpapi.CheckRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var parts []string
		for _, d := range req.Descriptors {
			for _, e := range d.Entries {
				parts = append(parts, e.Key+"="+e.Value)
			}
			parts = append(parts, "|")
		}
		ok, err := c.decide(req.Domain, strings.Join(parts, ","))
		if err != nil {
			http.Error(w, `{"error":"`+err.Error()+`"}`, http.StatusServiceUnavailable)
			return
		}
		if !ok && style == "429" {
			w.WriteHeader(http.StatusTooManyRequests)
			fmt.Fprint(w, `{"allowed":false}`)
			return
		}
		fmt.Fprintf(w, `{"allowed":%v,"statuses":[]}`, ok)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

// checkAgainstServer holds the summary's counts against the server's.
func checkAgainstServer(t *testing.T, s *Summary, c *counter, wantKeys []string) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if s.Errors != 0 {
		t.Fatalf("errors: %d %v", s.Errors, s.ErrorSamples)
	}
	if s.Allowed != uint64(c.allowed) || s.OverLimit != uint64(c.rejected) {
		t.Errorf("summary allowed %d over-limit %d; server allowed %d rejected %d",
			s.Allowed, s.OverLimit, c.allowed, c.rejected)
	}
	if s.Calls != s.Allowed+s.OverLimit || s.Calls == 0 {
		t.Errorf("calls %d != allowed %d + over-limit %d", s.Calls, s.Allowed, s.OverLimit)
	}
	var keys []string
	for k := range c.seen {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	slices.Sort(wantKeys)
	// Keys are drawn at random: with ten calls a key, missing one is a
	// chance below 1 in 20,000; with fewer (a slow machine, -race) the
	// server must still have seen only wanted keys.
	if s.Calls >= uint64(10*len(wantKeys)) && !slices.Equal(keys, wantKeys) {
		t.Errorf("server saw keys %v\nwant %v", keys, wantKeys)
	}
	for _, k := range keys {
		if !slices.Contains(wantKeys, k) {
			t.Errorf("server saw key %q, not one of %v", k, wantKeys)
		}
	}
	if s.Latency.P50 <= 0 || s.Latency.P50 > s.Latency.P99 || s.Latency.P99 > s.Latency.Max {
		t.Errorf("latency figures out of order: %+v", s.Latency)
	}
	if s.Throughput <= 0 {
		t.Errorf("throughput %v", s.Throughput)
	}
}

func keyList(format string, n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf(format, i))
	}
	return out
}

func TestGRPCClosedLoop(t *testing.T) {
	c := newCounter(2)
	target := startGRPC(t, c)
	s, err := Run(context.Background(), Config{
		Target: target, Concurrency: 4, Duration: 400 * time.Millisecond, Keys: 3, Domain: "edge",
	})
	if err != nil {
		t.Fatal(err)
	}
	checkAgainstServer(t, s, c, keyList("client=client-%d,|", 3))
	if c.domains["edge"] != int(s.Calls) {
		t.Errorf("domain edge got %d calls of %d", c.domains["edge"], s.Calls)
	}
	// Each of the 3 keys passes twice: at most 6 allowed, and past 6 calls
	// some must be over the limit.
	if s.Allowed > 6 || (s.Calls > 6 && s.OverLimit == 0) {
		t.Errorf("allowed %d over-limit %d of %d calls, want at most 6 allowed and the rest over", s.Allowed, s.OverLimit, s.Calls)
	}
	if s.Mode != "closed-loop" {
		t.Errorf("mode %q", s.Mode)
	}
}

func TestHTTPTargets(t *testing.T) {
	for _, style := range []string{"429", "allowed"} {
		t.Run(style, func(t *testing.T) {
			c := newCounter(1)
			target := startHTTP(t, c, style)
			d, err := ParseDescriptor("client=acme,key=u")
			if err != nil {
				t.Fatal(err)
			}
			s, err := Run(context.Background(), Config{
				Target: target, Concurrency: 3, Duration: 400 * time.Millisecond, Keys: 4,
				Descriptors: []Descriptor{d, {{Key: "path", Value: "/x"}}},
			})
			if err != nil {
				t.Fatal(err)
			}
			checkAgainstServer(t, s, c, keyList("client=acme,key=u%d,|,path=/x,|", 4))
			if s.Allowed > 4 || (s.Calls > 4 && s.OverLimit == 0) {
				t.Errorf("allowed %d over-limit %d of %d calls, want at most 4 keys x 1 allowed", s.Allowed, s.OverLimit, s.Calls)
			}
		})
	}
}

// TestOpenLoopCountsQueueing runs a server that takes 20 ms a call with one
// client at 200 calls/s: the server manages 50/s, so calls queue. A closed-
// loop measure would say every call took 20 ms; the open loop measures from
// the scheduled send time and must show the queue.
func TestOpenLoopCountsQueueing(t *testing.T) {
	c := newCounter(1 << 30)
	c.delay = 20 * time.Millisecond
	target := startGRPC(t, c)
	s, err := Run(context.Background(), Config{
		Target: target, Concurrency: 1, Rate: 200, Duration: 500 * time.Millisecond,
		Keys: 1, Timeout: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if s.Mode != "open-loop" || s.Rate != 200 {
		t.Errorf("mode %q rate %v", s.Mode, s.Rate)
	}
	if s.Calls+s.Missed != 100 {
		t.Errorf("calls %d + missed %d, want the 100 scheduled", s.Calls, s.Missed)
	}
	if s.Missed == 0 {
		t.Errorf("no call missed although the server is 4x too slow")
	}
	if s.Latency.Max < 300 || s.Latency.P99 < 200 {
		t.Errorf("latency p99 %.1f ms max %.1f ms: queueing behind a 20 ms server at 4x its rate must show hundreds of ms",
			s.Latency.P99, s.Latency.Max)
	}
	if s.Latency.Min < 19 {
		t.Errorf("min latency %.1f ms is below the server's 20 ms", s.Latency.Min)
	}
}

// TestOpenLoopRate checks that a fast server gets the scheduled number of
// calls, spread over the duration.
func TestOpenLoopRate(t *testing.T) {
	c := newCounter(1 << 30)
	target := startGRPC(t, c)
	s, err := Run(context.Background(), Config{
		Target: target, Concurrency: 4, Rate: 400, Duration: 500 * time.Millisecond, Keys: 50,
	})
	if err != nil {
		t.Fatal(err)
	}
	if s.Calls != 200 || s.Missed != 0 || s.Allowed != 200 {
		t.Errorf("calls %d missed %d allowed %d, want 200 calls all allowed", s.Calls, s.Missed, s.Allowed)
	}
	if s.Seconds < 0.45 || s.Seconds > 1.5 {
		t.Errorf("run took %.2fs, want about 0.5s", s.Seconds)
	}
}

func TestErrorsAreCounted(t *testing.T) {
	c := newCounter(1 << 30)
	c.fail = func(key string) error {
		if strings.HasSuffix(key, "client-0,|") {
			return status.Error(codes.Unavailable, "store down")
		}
		return nil
	}
	target := startGRPC(t, c)
	s, err := Run(context.Background(), Config{
		Target: target, Concurrency: 2, Duration: 200 * time.Millisecond, Keys: 2, Seed: 7,
	})
	if err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	served := c.allowed
	c.mu.Unlock()
	if s.Errors == 0 || s.Allowed != uint64(served) || s.Calls != s.Errors+s.Allowed {
		t.Fatalf("errors %d allowed %d (server %d) calls %d", s.Errors, s.Allowed, served, s.Calls)
	}
	if len(s.ErrorSamples) != 1 || !strings.Contains(s.ErrorSamples[0].Error, "store down") ||
		s.ErrorSamples[0].Count != s.Errors {
		t.Fatalf("error samples %+v", s.ErrorSamples)
	}
	var b strings.Builder
	s.WriteText(&b)
	if !strings.Contains(b.String(), "store down") || !strings.Contains(b.String(), "p99.9") {
		t.Errorf("text summary lacks the error or quantiles:\n%s", b.String())
	}
}

// TestUnknownCodeIsAnError: an RLS server must answer OK or OVER_LIMIT;
// UNKNOWN (Envoy's "no decision") is counted as a failed call.
func TestUnknownCodeIsAnError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	rls.RegisterRateLimitServiceServer(srv, &rlsServer{c: newCounter(10), unknown: true})
	go srv.Serve(ln)
	defer srv.Stop()
	s, err := Run(context.Background(), Config{
		Target: "grpc://" + ln.Addr().String(), Concurrency: 1, Duration: 100 * time.Millisecond, Keys: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	if s.Calls == 0 || s.Errors != s.Calls || len(s.ErrorSamples) != 1 || !strings.Contains(s.ErrorSamples[0].Error, "UNKNOWN") {
		t.Fatalf("calls %d errors %d samples %+v", s.Calls, s.Errors, s.ErrorSamples)
	}
	if s.ClientCPU <= 0 {
		t.Errorf("client CPU not measured: %v", s.ClientCPU)
	}
}

func TestUnreachableTargetCountsErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	s, err := Run(context.Background(), Config{
		Target: "http://" + addr, Concurrency: 1, Duration: 100 * time.Millisecond, Keys: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	if s.Calls == 0 || s.Errors != s.Calls {
		t.Fatalf("calls %d errors %d: every call to a closed port must fail", s.Calls, s.Errors)
	}
}

func TestProgressLine(t *testing.T) {
	c := newCounter(1 << 30)
	target := startGRPC(t, c)
	var b syncbuf.Buffer
	_, err := Run(context.Background(), Config{
		Target: target, Concurrency: 2, Duration: 350 * time.Millisecond, Keys: 5,
		Progress: &b, ProgressEvery: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) < 2 || !strings.Contains(lines[0], "calls") || !strings.Contains(lines[0], "/s") {
		t.Fatalf("progress output %q", b.String())
	}
}

func TestCancelStopsEarly(t *testing.T) {
	c := newCounter(1 << 30)
	target := startGRPC(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	s, err := Run(ctx, Config{Target: target, Concurrency: 2, Duration: time.Minute, Keys: 5})
	if err != nil {
		t.Fatal(err)
	}
	if s.Seconds > 5 || s.Calls == 0 {
		t.Fatalf("cancelled run took %.1fs with %d calls", s.Seconds, s.Calls)
	}
}

func TestKeyPlacement(t *testing.T) {
	for _, tc := range []struct {
		desc string
		keys int
		want string
	}{
		{"client=c", 3, "client=c2"},
		{"path=/x,key=u", 3, "path=/x,key=u2"},
		{"path=/catalog/search,member=m-{}", 3, "path=/catalog/search,member=m-2"},
		{"a={}-{},b=x", 3, "a=2-2,b=x"},
		{"client=c", 1, "client=c"},
		{"client=c{}", 1, "client=c0"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			d, err := ParseDescriptor(tc.desc)
			if err != nil {
				t.Fatal(err)
			}
			c := Config{Keys: tc.keys, Descriptors: []Descriptor{d}}
			k := min(2, tc.keys-1)
			var parts []string
			for _, e := range c.descriptorsFor(k)[0] {
				parts = append(parts, e.Key+"="+e.Value)
			}
			if got := strings.Join(parts, ","); got != tc.want {
				t.Errorf("%q with %d keys, key %d: %q, want %q", tc.desc, tc.keys, k, got, tc.want)
			}
			if c.Descriptors[0][0] != d[0] {
				t.Errorf("descriptorsFor changed the configured descriptor")
			}
		})
	}
}

func TestBadConfig(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Target: "127.0.0.1:8081"}, "scheme"},
		{Config{Target: "ftp://x:1"}, "unsupported scheme"},
		{Config{Target: "grpc://"}, "grpc://HOST:PORT"},
		{Config{Target: "grpc://x:1", Keys: -1}, "keys"},
		{Config{Target: "grpc://x:1", Concurrency: -3}, "concurrency"},
		{Config{Target: "grpc://x:1", Rate: -1}, "rate"},
		{Config{Target: "grpc://x:1", Descriptors: []Descriptor{{{Key: "", Value: "v"}}}}, "empty key"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			_, err := Run(context.Background(), tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%+v: error %v, want one mentioning %q", tc.cfg, err, tc.want)
			}
		})
	}
	for _, bad := range []string{"", "novalue", "=v", "a=1,,b=2"} {
		t.Run(bad, func(t *testing.T) {
			if _, err := ParseDescriptor(bad); err == nil {
				t.Errorf("ParseDescriptor(%q) accepted", bad)
			}
		})
	}
	d, err := ParseDescriptor("a=1, b = 2,c=")
	if err != nil || len(d) != 3 || d[1] != (Entry{"b", "2"}) || d[2] != (Entry{"c", ""}) {
		t.Errorf("ParseDescriptor = %v, %v", d, err)
	}
}

// TestHistogramQuantiles holds the histogram's quantiles against exact
// quantiles of the sorted samples.
func TestHistogramQuantiles(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var h, h1, h2 Histogram
	var samples []time.Duration
	for i := range 100_000 {
		// Log-normal-ish: most around 300µs, a tail to tens of ms.
		d := time.Duration(300e3 * (1 + r.ExpFloat64()*r.ExpFloat64()*3))
		if i%1000 == 0 {
			d = time.Duration(r.IntN(50)) // a few tiny values
		}
		samples = append(samples, d)
		h.Record(d)
		if i%2 == 0 {
			h1.Record(d)
		} else {
			h2.Record(d)
		}
	}
	h1.Merge(&h2)
	slices.Sort(samples)
	for _, q := range []float64{0.001, 0.5, 0.9, 0.99, 0.999, 1} {
		idx := int(float64(len(samples))*q+0.999999) - 1
		want := samples[max(idx, 0)]
		for name, hh := range map[string]*Histogram{"single": &h, "merged": &h1} {
			got := hh.Quantile(q)
			if got < want || float64(got) > float64(want)*1.01+1 {
				t.Errorf("%s q%v = %v, exact %v", name, q, got, want)
			}
		}
	}
	if h.Min() != samples[0] || h.Max() != samples[len(samples)-1] || h.Count() != 100_000 {
		t.Errorf("min %v max %v count %d", h.Min(), h.Max(), h.Count())
	}
	var empty Histogram
	if empty.Quantile(0.5) != 0 || empty.Mean() != 0 {
		t.Error("empty histogram reports values")
	}
	var huge Histogram
	huge.Record(1000 * time.Hour)
	huge.Record(-time.Second)
	if huge.Quantile(1) != 1000*time.Hour || huge.Quantile(0.1) != 0 {
		t.Errorf("clamping: q1 %v q0.1 %v", huge.Quantile(1), huge.Quantile(0.1))
	}
}

func BenchmarkHistogramRecord(b *testing.B) {
	var h Histogram
	for i := 0; b.Loop(); i++ {
		h.Record(time.Duration(i&0xfffff) * 100)
	}
}
