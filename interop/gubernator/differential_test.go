package gubernator

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	guber "github.com/gubernator-io/gubernator/v2"
	"github.com/mailgun/holster/v4/clock"
	"github.com/sirupsen/logrus"
	"google.golang.org/protobuf/proto"

	"github.com/floodgate-dev/floodgate/cmd/floodgate/server"
	"github.com/floodgate-dev/floodgate/distributed"
	"github.com/floodgate-dev/floodgate/internal/testkit/redistest"
)

// The clock both servers read: frozen at start, moved by the tests.
var start = time.Date(2026, 3, 31, 23, 59, 50, 0, time.UTC)

func TestMain(m *testing.M) {
	logrus.SetLevel(logrus.ErrorLevel)
	clock.Freeze(start)
	os.Exit(m.Run())
}

// freeAddr returns a loopback address nothing listens on (gubernator
// dials its own gRPC address for its gateway, so it needs a real port).
func freeAddr(t testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// pair is a gubernator daemon and a Floodgate server, side by side.
type pair struct {
	guber, flood         guber.V1Client
	guberHTTP, floodHTTP string
	logs                 *lockedBuffer // Floodgate's log
	ext                  *external     // the reference, when not in this process
}

// advance moves both servers' clock by d.
func (p *pair) advance(t testing.TB, d time.Duration) {
	clock.Advance(d)
	if p.ext != nil {
		if err := p.ext.advance(d); err != nil {
			t.Fatalf("gubernator's clock: %v", err)
		}
	}
}

// lockedBuffer is a log's text, written by the server's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// storeKind is where the Floodgate server of a pair keeps its counts.
type storeKind string

const (
	onMemory  storeKind = "memory"
	onRedis   storeKind = "redis"         // one redis-server, centralized
	onCluster storeKind = "redis-cluster" // a Redis Cluster, centralized
)

// floodStore configures cfg's store as kind, starting the Redis it needs.
func floodStore(t *testing.T, cfg *server.Config, kind storeKind) {
	t.Helper()
	switch kind {
	case onRedis:
		cfg.Store = server.Store{Type: server.StoreRedis, Addrs: []string{redistest.Start(t).Addr()}, Prefix: "fg"}
	case onCluster:
		cfg.Store = server.Store{Type: server.StoreRedisCluster, Addrs: redistest.StartCluster(t).Addrs(), Prefix: "fg"}
	default:
		return
	}
	// Every decision in Redis, as gubernator decides each on its owner: a
	// slow call is waited for (a busy machine under -race), not answered by
	// the failure policy from the node's own view.
	cfg.Arrangement.Mode = distributed.Centralized
	cfg.Arrangement.Nodes = 1
	cfg.Arrangement.Deadline, cfg.Arrangement.MaxDeadline = 30*time.Second, 30*time.Second
}

func startPair(t *testing.T, kind storeKind) *pair {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := &pair{logs: &lockedBuffer{}}
	gaddr := ""
	if path := os.Getenv(envReference); path != "" {
		p.ext = startExternal(t, path)
		gaddr, p.guberHTTP = p.ext.grpc, "http://"+p.ext.http
		// Its clock starts where this process's is now.
		if err := p.ext.advance(clock.Now().Sub(start)); err != nil {
			t.Fatal(err)
		}
	} else {
		gaddr = freeAddr(t)
		d, err := guber.SpawnDaemon(ctx, guber.DaemonConfig{
			GRPCListenAddress: gaddr, HTTPListenAddress: freeAddr(t), AdvertiseAddress: gaddr,
			InstanceID: "reference", Logger: logrus.WithField("instance", "reference"),
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(d.Close)
		d.SetPeers([]guber.PeerInfo{{GRPCAddress: gaddr, HTTPAddress: d.HTTPListener.Addr().String()}})
		p.guberHTTP = "http://" + d.HTTPListener.Addr().String()
	}

	cfg := server.DefaultConfig()
	cfg.Gubernator.Version = floodVersion()
	cfg.HTTP.Addr, cfg.GRPC.Addr, cfg.Gateway.Addr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.ShutdownTimeout = 5 * time.Second
	floodStore(t, &cfg, kind)
	srv, err := server.New(ctx, cfg, slog.New(slog.NewTextHandler(p.logs, nil)), server.WithClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(sctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("floodgate: %v", err)
		}
	})
	p.floodHTTP = "http://" + srv.Addr(server.ListenerHTTP)
	// gubernator's own client, unchanged, for both.
	if p.guber, err = guber.DialV1Server(gaddr, nil); err != nil {
		t.Fatal(err)
	}
	if p.flood, err = guber.DialV1Server(srv.Addr(server.ListenerGRPC), nil); err != nil {
		t.Fatal(err)
	}
	return p
}

func pick[T any](r *rand.Rand, xs ...T) T { return xs[r.IntN(len(xs))] }

// genReq returns a request of the kinds users send: a few names and keys
// (including names and keys that join to the same key), parameters that
// change from request to request, every behaviour but GLOBAL, max_wait
// (v2.21.0's field: v2.13.0 ignores it) alone or with what gubernator
// refuses with it, and steady flows on keys of their own (genFlow).
func genReq(r *rand.Rand, now time.Time, keys int) *guber.RateLimitReq {
	if r.IntN(6) == 0 {
		return genFlow(r, now)
	}
	q := &guber.RateLimitReq{
		Name:      pick(r, "a", "b", "a_b"),
		UniqueKey: fmt.Sprintf("k%d", r.IntN(keys)),
		Algorithm: guber.Algorithm(r.IntN(2)),
		Limit:     pick(r, int64(1), 2, 3, 5, 10, 20, 100, 1000),
		Duration:  pick(r, int64(1), 7, 50, 1000, 10_000, 60_000, 3_600_000),
		Hits:      pick(r, int64(0), 1, 1, 1, 1, 2, 3, 5, -1, -3, 10, 100, 1001),
	}
	switch r.IntN(60) {
	case 0:
		q.UniqueKey = ""
	case 1:
		q.Name = ""
	case 2:
		q.UniqueKey = pick(r, "c", "b_c")
	}
	if q.Algorithm == guber.Algorithm_TOKEN_BUCKET && r.IntN(10) == 0 {
		q.Limit = 0
	}
	if q.Algorithm == guber.Algorithm_TOKEN_BUCKET && r.IntN(20) == 0 {
		q.Duration = 0
	}
	var b guber.Behavior
	for _, f := range []guber.Behavior{guber.Behavior_NO_BATCHING, guber.Behavior_DURATION_IS_GREGORIAN,
		guber.Behavior_RESET_REMAINING, guber.Behavior_MULTI_REGION, guber.Behavior_DRAIN_OVER_LIMIT} {
		if r.IntN(6) == 0 {
			b |= f
		}
	}
	if b&guber.Behavior_DURATION_IS_GREGORIAN != 0 {
		q.Duration = int64(r.IntN(7)) // 6 is an error; 3 (weeks) too in v2.13.0
		if r.IntN(3) > 0 {
			q.Duration = pick(r, int64(0), 1, 2)
		}
	}
	q.Behavior = b
	if r.IntN(3) == 0 {
		q.Burst = pick(r, int64(0), 1, 5, q.Limit, q.Limit*2)
	}
	if r.IntN(3) > 0 {
		ca := now.UnixMilli()
		if r.IntN(4) == 0 {
			ca += pick(r, int64(-5000), -1, 1, 999, 100_000)
		}
		q.CreatedAt = &ca
	}
	if r.IntN(5) == 0 {
		setMaxWait(q, pick(r, int64(1), 100, 1000, 6000, 60_000, 600_000, -1))
		if r.IntN(3) > 0 { // what gubernator accepts with max_wait
			q.Algorithm = guber.Algorithm_LEAKY_BUCKET
			q.Limit = max(q.Limit, 1)
			q.Behavior &^= guber.Behavior_DURATION_IS_GREGORIAN | guber.Behavior_RESET_REMAINING | guber.Behavior_DRAIN_OVER_LIMIT
			q.Hits = max(q.Hits, 0)
			if q.Behavior&guber.Behavior_DURATION_IS_GREGORIAN == 0 && q.Duration < 1000 {
				q.Duration = 1000
			}
		}
	}
	return q
}

// genFlow returns a request of a steady flow on a key of its own: a
// leaky bucket that books ahead with max_wait, with plain requests meeting
// its debt, or a token bucket around empty, whose stored status and limit
// changes matter.
func genFlow(r *rand.Rand, now time.Time) *guber.RateLimitReq {
	q := &guber.RateLimitReq{Name: "flow", UniqueKey: "token", Limit: pick(r, int64(3), 3, 5, 1), Duration: 60_000,
		Hits: pick(r, int64(0), 0, 1, 1, 2, -1), Behavior: pick(r, guber.Behavior(0), 0, 0, guber.Behavior_DRAIN_OVER_LIMIT, guber.Behavior_RESET_REMAINING)}
	if r.IntN(2) == 0 {
		q.UniqueKey, q.Algorithm, q.Limit, q.Burst = "leaky", guber.Algorithm_LEAKY_BUCKET, 10, pick(r, int64(0), 3, 10)
		if r.IntN(3) == 0 { // 714.29 ms a token: leaks land a hair under whole tokens
			q.UniqueKey, q.Limit, q.Duration = "leaky14", 14, 10_000
		}
		if mw := pick(r, int64(0), 6000, 60_000, 120_000, 600_000); mw > 0 {
			setMaxWait(q, mw)
			q.Hits, q.Behavior = pick(r, int64(0), 1, 1, 2, 4, 11), 0
		}
	}
	if r.IntN(3) == 0 {
		ca := now.UnixMilli() + pick(r, int64(-5000), 0, 5000)
		q.CreatedAt = &ca
	}
	return q
}

// saturated reports whether Floodgate reports q's reset_time saturated
// (docs/migration-gubernator.md): as v2.13.0, a leaky bucket by the
// calendar month or year, whose reset_time gubernator computes from a
// period of its own reckoning, millions of years ahead.
func saturated(q *guber.RateLimitReq) bool {
	return floodVersion() == "v2.13" && q.Algorithm == guber.Algorithm_LEAKY_BUCKET && q.Behavior&guber.Behavior_DURATION_IS_GREGORIAN != 0 &&
		(q.Duration == 4 || q.Duration == 5)
}

// TestDifferential compares gubernator with Floodgate on the memory store,
// and on Redis (one server, and a Cluster), where the script decides.
func TestDifferential(t *testing.T) {
	for _, c := range []struct {
		kind  storeKind
		seeds int
	}{{onMemory, 12}, {onRedis, 6}, {onCluster, 4}} {
		t.Run(string(c.kind), func(t *testing.T) {
			seeds, steps := c.seeds, 1500
			if testing.Short() {
				seeds, steps = 2, 500
			}
			differential(t, startPair(t, c.kind), seeds, steps)
		})
	}
}

func differential(t *testing.T, p *pair, seeds, steps int) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	compared, sat, scheduled, neverFits := 0, 0, 0, 0
	for seed := range seeds {
		r := rand.New(rand.NewPCG(uint64(seed), 35))
		keys := 1 + r.IntN(8)
		name := fmt.Sprintf("s%d", seed) // keys of one seed apart from the others'
		for step := range steps {
			now := clock.Now()
			n := 1
			if r.IntN(5) == 0 {
				n = 2 + r.IntN(4) // a batch, keys possibly repeated
			}
			req := &guber.GetRateLimitsReq{}
			for range n {
				q := genReq(r, now, keys)
				if q.Name != "" {
					q.Name = name + q.Name
				}
				req.Requests = append(req.Requests, q)
			}
			g, err := p.guber.GetRateLimits(ctx, req)
			if err != nil {
				t.Fatalf("gubernator: %v", err)
			}
			f, err := p.flood.GetRateLimits(ctx, req)
			if err != nil {
				t.Fatalf("floodgate: %v", err)
			}
			for i, q := range req.Requests {
				a, b := g.Responses[i], f.Responses[i]
				if saturated(q) && a.Error == "" && b.Error == "" {
					created := now.UnixMilli()
					if q.CreatedAt != nil {
						created = *q.CreatedAt
					}
					if off := b.ResetTime - created; off != 1<<43 && off != -(1<<43) && a.ResetTime != b.ResetTime {
						t.Fatalf("seed %d step %d: %v: reset_time %d, want gubernator's %d or saturated", seed, step, q, b.ResetTime, a.ResetTime)
					}
					if a.ResetTime != b.ResetTime {
						sat++
					}
					b.ResetTime = a.ResetTime
				}
				if a.Status != b.Status || a.Limit != b.Limit || a.Remaining != b.Remaining || a.ResetTime != b.ResetTime || a.Error != b.Error ||
					retryAfter(a) != retryAfter(b) {
					t.Fatalf("seed %d step %d at %d: %v max_wait %d\n gubernator %v retry_after %d\n floodgate  %v retry_after %d\nFloodgate's log:\n%s",
						seed, step, now.UnixMilli(), q, maxWait(q), a, retryAfter(a), b, retryAfter(b), p.logs)
				}
				compared++
				switch {
				case a.Status == guber.Status(3): // SCHEDULED
					scheduled++
				case a.Status == guber.Status(2): // NEVER_FITS
					neverFits++
				}
			}
			if r.IntN(3) == 0 {
				p.advance(t, pick(r, time.Millisecond, 3*time.Millisecond, 100*time.Millisecond, time.Second,
					7*time.Second, time.Minute, time.Hour))
			}
		}
	}
	t.Logf("%d answers equal as gubernator.version %s (%d reset_times saturated by design; %d SCHEDULED, %d NEVER_FITS)",
		compared, floodVersion(), sat, scheduled, neverFits)
}

// TestFlagsWithoutEffect: GLOBAL, NO_BATCHING and MULTI_REGION change
// nothing in Floodgate's answers (one node; arrangements decide sharing).
func TestFlagsWithoutEffect(t *testing.T) {
	p := startPair(t, onMemory)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range 20 {
		plain := &guber.RateLimitReq{Name: "flags", UniqueKey: fmt.Sprint("p", i%3), Hits: 1, Limit: 5, Duration: 60_000, Algorithm: guber.Algorithm(i % 2)}
		flagged := proto.Clone(plain).(*guber.RateLimitReq)
		flagged.UniqueKey = fmt.Sprint("f", i%3)
		flagged.Behavior = guber.Behavior_GLOBAL | guber.Behavior_NO_BATCHING | guber.Behavior_MULTI_REGION
		resp, err := p.flood.GetRateLimits(ctx, &guber.GetRateLimitsReq{Requests: []*guber.RateLimitReq{plain, flagged}})
		if err != nil {
			t.Fatal(err)
		}
		a, b := resp.Responses[0], resp.Responses[1]
		if a.Status != b.Status || a.Remaining != b.Remaining || a.ResetTime != b.ResetTime || a.Error != b.Error {
			t.Fatalf("request %d: without flags %v, with %v", i, a, b)
		}
	}
}
