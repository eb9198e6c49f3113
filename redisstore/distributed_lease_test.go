package redisstore_test

import (
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/distributed"
	"github.com/floodgate-dev/floodgate/internal/testkit/disttest"
	"github.com/floodgate-dev/floodgate/internal/testkit/redistest"
	"github.com/floodgate-dev/floodgate/lease"
	"github.com/floodgate-dev/floodgate/store"
)

// A centralized node holds concurrency leases in Redis, so a lease taken
// through one node is released through another, once.
func TestLeasesCentralizedOverRedis(t *testing.T) {
	srv := redistest.Start(t)
	shared := redisShared(t, srv, true)
	alg := disttest.MustAlg(t, algorithm.Config{Algorithm: algorithm.Concurrency, Limit: 1, Window: time.Minute})
	a := mustNode(t, distributed.Options{Arrangement: distributed.Centralized, Shared: shared, ManualSync: true, Deadline: time.Second})
	b := mustNode(t, distributed.Options{Arrangement: distributed.Centralized, Shared: shared, ManualSync: true, Deadline: time.Second})
	now := time.Now().UnixNano()
	reqs := []store.Request{{Algorithm: alg, Key: "job", Cost: 1}}
	out := make([]algorithm.Decision, 1)
	id := lease.New()
	if err := a.Acquire(ctx, now, id, reqs, out); err != nil || !out[0].Allowed {
		t.Fatalf("acquire through node a: %+v %v", out[0], err)
	}
	if err := b.Acquire(ctx, now, lease.New(), reqs, out); err != nil || out[0].Allowed {
		t.Fatalf("a second holder through node b: %+v %v, want rejected", out[0], err)
	}
	if held, err := b.ReleaseLease(ctx, now, lease.New(), reqs); held || err != nil {
		t.Fatalf("release of a lease never taken: %v %v", held, err)
	}
	if held, err := b.ReleaseLease(ctx, now, id, reqs); !held || err != nil {
		t.Fatalf("release through node b of node a's lease: %v %v", held, err)
	}
	if held, err := a.ReleaseLease(ctx, now, id, reqs); held || err != nil {
		t.Fatalf("second release: %v %v", held, err)
	}
}

// Split and delayed nodes hold concurrency leases in Redis too: acquiring
// through one node returns a lease, other nodes see the slot taken, and
// releasing the lease through another node frees exactly one slot, once.
// A request that a local limit rejects gives its concurrency unit back,
// and one whose concurrency limit rejects it counts nothing locally.
func TestLeasesSplitAndDelayedOverRedis(t *testing.T) {
	srv := redistest.Start(t)
	shared := redisShared(t, srv, true)
	conc := disttest.MustAlg(t, algorithm.Config{Algorithm: algorithm.Concurrency, Limit: 2, Window: time.Minute})
	rate := disttest.MustAlg(t, algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: 100, Window: time.Minute})
	for _, mode := range []distributed.Arrangement{distributed.Split, distributed.Delayed} {
		arr := string(mode)
		t.Run(arr, func(t *testing.T) {
			a := mustNode(t, distributed.Options{Arrangement: mode, Shared: shared, Nodes: 2, ManualSync: true, Deadline: time.Second})
			b := mustNode(t, distributed.Options{Arrangement: mode, Shared: shared, Nodes: 2, ManualSync: true, Deadline: time.Second})
			now := time.Now().UnixNano()
			job := "job-" + arr
			reqs := []store.Request{{Algorithm: conc, Key: job, Cost: 1}}
			acquire := func(n *distributed.Node, rs []store.Request) (lease.ID, []algorithm.Decision) {
				t.Helper()
				id := lease.New()
				out := make([]algorithm.Decision, len(rs))
				if err := n.Acquire(ctx, now, id, rs, out); err != nil {
					t.Fatalf("acquire: %v", err)
				}
				return id, out
			}
			first, out := acquire(a, reqs)
			if !out[0].Allowed {
				t.Fatalf("first holder through node a rejected: %+v", out[0])
			}
			if _, out = acquire(b, reqs); !out[0].Allowed {
				t.Fatalf("second holder through node b rejected: %+v", out[0])
			}
			if _, out = acquire(a, reqs); out[0].Allowed {
				t.Fatalf("third holder allowed over a limit of 2 held on two nodes: %+v", out[0])
			}
			if held, err := b.ReleaseLease(ctx, now, lease.New(), reqs); held || err != nil {
				t.Fatalf("release of a lease never taken: %v %v", held, err)
			}
			if held, err := b.ReleaseLease(ctx, now, first, reqs); !held || err != nil {
				t.Fatalf("release through node b of node a's lease: %v %v", held, err)
			}
			if held, err := a.ReleaseLease(ctx, now, first, reqs); held || err != nil {
				t.Fatalf("second release of the same lease: %v %v", held, err)
			}
			third, out := acquire(a, reqs)
			if !out[0].Allowed {
				t.Fatalf("after one release, a holder is rejected: %+v", out[0])
			}
			if _, out = acquire(b, reqs); out[0].Allowed {
				t.Fatalf("one release freed more than one slot: %+v", out[0])
			}
			// Mixed with a local limit: the concurrency limit rejects, so
			// the local limit counts nothing.
			mixed := []store.Request{{Algorithm: rate, Key: "rate-" + arr, Cost: 1}, {Algorithm: conc, Key: job, Cost: 1}}
			if _, out = acquire(a, mixed); out[1].Allowed || !out[0].Allowed {
				t.Fatalf("mixed request at the concurrency limit: %+v", out)
			}
			if held, err := a.ReleaseLease(ctx, now, third, reqs); !held || err != nil {
				t.Fatalf("release of the third lease: %v %v", held, err)
			}
			_, out = acquire(a, mixed)
			if !out[0].Allowed || !out[1].Allowed {
				t.Fatalf("mixed request with a slot free: %+v", out)
			}
			if got, want := out[0].Remaining, out[0].Limit-1; got != want {
				t.Fatalf("local limit's remaining %d after its first counted request, want %d (a rejected mixed request was counted)", got, want)
			}
			// A local limit that rejects gives the concurrency unit back.
			tight := disttest.MustAlg(t, algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: 2, Window: time.Minute})
			ownLimit := []store.Request{{Algorithm: tight, Key: "tight-" + arr, Cost: 5}, {Algorithm: conc, Key: "job2-" + arr, Cost: 1}}
			if _, out = acquire(a, ownLimit); out[0].Allowed || !out[1].Allowed {
				t.Fatalf("over the local limit: %+v", out)
			}
			single := []store.Request{{Algorithm: conc, Key: "job2-" + arr, Cost: 1}}
			for i := range 2 {
				if _, out = acquire(b, single); !out[0].Allowed {
					t.Fatalf("holder %d of job2 rejected: the rejected request kept its unit", i+1)
				}
			}
		})
	}
}
