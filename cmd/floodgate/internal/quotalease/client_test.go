package quotalease

import (
	"context"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/internal/testkit/redistest"
	"github.com/floodgate-dev/floodgate/memstore"
	"github.com/floodgate-dev/floodgate/redisstore"
	"github.com/floodgate-dev/floodgate/rls"
	"github.com/floodgate-dev/floodgate/rlsclient"
	"github.com/floodgate-dev/floodgate/rules"
	"github.com/floodgate-dev/floodgate/store"
)

const clientRules = `
domain: api
rules:
  - name: per-key
    match: {key: "*"}
    count_by: [key]
    limit: 300
    window: 2s
    leases: {ttl: 1s}
`

// serveBoth serves RLS and quota leases on one loopback listener.
func serveBoth(t *testing.T, text string) string {
	t.Helper()
	addr, _ := serveOn(t, text, memstore.New(memstore.Options{}))
	return addr
}

// serveOn is serveBoth over st; it also returns the gRPC server, to stop.
func serveOn(t *testing.T, text string, st store.Store) (string, *grpc.Server) {
	t.Helper()
	set, err := rules.Parse("t.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	e := rules.NewEngine(set, st)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	rls.New(e, log).Register(g)
	New(e, log).Register(g)
	go g.Serve(ln)
	t.Cleanup(g.Stop)
	return ln.Addr().String(), g
}

// TestClientsShareLimit: several clients with skewed traffic on one key
// through leases: the busiest window of the times requests were allowed,
// across all clients, stays within the rule's bound (bounded-log, 300 +
// 15 per 2 s).
func TestClientsShareLimit(t *testing.T) {
	shareLimit(t, serveBoth(t, clientRules))
}

// TestClientsShareLimitRedis is TestClientsShareLimit with two servers
// sharing one Redis, the clients split between them.
func TestClientsShareLimitRedis(t *testing.T) {
	srv := redistest.Start(t)
	var addrs []string
	for range 2 {
		rs, err := redisstore.New(context.Background(), redisstore.Options{Addrs: []string{srv.Addr()}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rs.Close() })
		addr, _ := serveOn(t, clientRules, rs)
		addrs = append(addrs, addr)
	}
	shareLimit(t, addrs...)
}

func shareLimit(t *testing.T, addrs ...string) {
	var mu sync.Mutex
	var allowed []time.Time
	var wg sync.WaitGroup
	var calls, decisions int64
	for i := range 4 {
		c, err := rlsclient.New(addrs[i%len(addrs)], rlsclient.Options{Domain: "api", Timeout: 5 * time.Second,
			Leases: &rlsclient.LeaseOptions{Horizon: 200 * time.Millisecond}})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			defer c.Close()
			gap := time.Duration(1<<i) * 500 * time.Microsecond // skewed: 2000, 1000, 500, 250 per second
			end := time.Now().Add(5 * time.Second)
			n := int64(0)
			for time.Now().Before(end) {
				d, err := c.Allow(context.Background(), "k")
				if err != nil {
					t.Error(err)
					return
				}
				n++
				if d.Allowed {
					mu.Lock()
					allowed = append(allowed, time.Now())
					mu.Unlock()
				}
				time.Sleep(gap)
			}
			mu.Lock()
			calls += c.Calls()
			decisions += n
			mu.Unlock()
		})
	}
	wg.Wait()
	slices.SortFunc(allowed, func(a, b time.Time) int { return a.Compare(b) })
	peak := 0
	for i, j := 0, 0; i < len(allowed); i++ {
		for allowed[i].Sub(allowed[j]) >= 2*time.Second {
			j++
		}
		peak = max(peak, i-j+1)
	}
	t.Logf("%d decisions, %d allowed, busiest 2 s window %d, %d server calls", decisions, len(allowed), peak, calls)
	if peak > 315 {
		t.Fatalf("busiest window %d, bound 315", peak)
	}
	if len(allowed) < 300 {
		t.Fatalf("only %d allowed in 5 s of a 300 per 2 s limit", len(allowed))
	}
}

// TestClientsFarFromLimit: far from the limit, decisions are local: at
// most one Lease call per hundred decisions, and no RLS call after the
// first ones.
func TestClientsFarFromLimit(t *testing.T) {
	addr := serveBoth(t, `
domain: api
rules:
  - name: per-key
    match: {key: "*"}
    count_by: [key]
    limit: 1000000000
    window: 1m
    leases: true
`)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var calls, decisions int64
	for range 4 {
		c, err := rlsclient.New(addr, rlsclient.Options{Domain: "api", Timeout: 5 * time.Second, Leases: &rlsclient.LeaseOptions{}})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			defer c.Close()
			n := int64(0)
			for end := time.Now().Add(time.Second); time.Now().Before(end); {
				for range 100 {
					if d, err := c.Allow(context.Background(), "k"); err != nil || !d.Allowed {
						t.Errorf("far from the limit: %+v, %v", d, err)
						return
					}
				}
				n += 100
			}
			mu.Lock()
			calls += c.Calls()
			decisions += n
			mu.Unlock()
		})
	}
	wg.Wait()
	t.Logf("%d decisions, %d lease calls: %.5f per decision", decisions, calls, float64(calls)/float64(decisions))
	if calls*100 > decisions {
		t.Fatalf("%d lease calls for %d decisions", calls, decisions)
	}
}

// TestServerUnreachable: a client whose server is gone keeps deciding on
// its lease until the lease expires, and then applies the rule's failure
// policy (closed: reject).
func TestServerUnreachable(t *testing.T) {
	addr, g := serveOn(t, `
domain: api
rules:
  - name: per-key
    match: {key: "*"}
    count_by: [key]
    limit: 1000000
    window: 1m
    leases: {ttl: 2s}
    failure: closed
`, memstore.New(memstore.Options{}))
	c, err := rlsclient.New(addr, rlsclient.Options{Domain: "api", Timeout: 500 * time.Millisecond,
		Leases: &rlsclient.LeaseOptions{Horizon: 5 * time.Second, MinUnits: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	// Take a lease: decisions become local.
	deadline := time.Now().Add(10 * time.Second)
	for c.Calls() < 2 || !localNow(ctx, c) {
		if time.Now().After(deadline) {
			t.Fatal("no lease taken in 10 s")
		}
		c.Allow(ctx, "k")
		time.Sleep(10 * time.Millisecond)
	}
	g.Stop()
	// The server is gone: the lease still decides, without a call.
	before := c.Calls()
	for range 100 {
		if d, err := c.Allow(ctx, "k"); err != nil || !d.Allowed {
			t.Fatalf("on the lease with the server gone: %+v %v", d, err)
		}
	}
	if c.Calls() != before {
		t.Fatalf("%d calls while the lease had units", c.Calls()-before)
	}
	// After the lease's ttl, the rule's policy: closed.
	time.Sleep(2500 * time.Millisecond)
	d, err := c.Allow(ctx, "k")
	if err != nil || d.Allowed || d.Reason != algorithm.ReasonStoreUnavailable {
		t.Fatalf("after the lease expired with the server gone: %+v %v, want store_unavailable", d, err)
	}
}

// localNow reports whether a decision for k is made without a call.
func localNow(ctx context.Context, c *rlsclient.Client) bool {
	before := c.Calls()
	c.Allow(ctx, "k")
	return c.Calls() == before
}
