package distributed

import (
	"errors"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/internal/redistest"
	"github.com/floodgate-dev/floodgate/store"
)

// A centralized node holds concurrency leases in Redis, so a lease taken
// through one node is released through another, once; split and delayed
// nodes hold none and say so with store.ErrNoLeases.
func TestLeasesCentralizedOverRedis(t *testing.T) {
	srv := redistest.Start(t)
	shared := redisShared(t, srv, true)
	alg := mustAlg(t, algorithm.Config{Algorithm: algorithm.Concurrency, Limit: 1, Window: time.Minute})
	a := mustNode(t, Options{Arrangement: Centralized, Shared: shared, ManualSync: true, Deadline: time.Second})
	b := mustNode(t, Options{Arrangement: Centralized, Shared: shared, ManualSync: true, Deadline: time.Second})
	now := time.Now().UnixNano()
	reqs := []store.Request{{Algorithm: alg, Key: "job", Cost: 1}}
	out := make([]algorithm.Decision, 1)
	id := algorithm.NewLeaseID()
	if err := a.Acquire(ctx, now, id, reqs, out); err != nil || !out[0].Allowed {
		t.Fatalf("acquire through node a: %+v %v", out[0], err)
	}
	if err := b.Acquire(ctx, now, algorithm.NewLeaseID(), reqs, out); err != nil || out[0].Allowed {
		t.Fatalf("a second holder through node b: %+v %v, want rejected", out[0], err)
	}
	if held, err := b.ReleaseLease(ctx, now, algorithm.NewLeaseID(), reqs); held || err != nil {
		t.Fatalf("release of a lease never taken: %v %v", held, err)
	}
	if held, err := b.ReleaseLease(ctx, now, id, reqs); !held || err != nil {
		t.Fatalf("release through node b of node a's lease: %v %v", held, err)
	}
	if held, err := a.ReleaseLease(ctx, now, id, reqs); held || err != nil {
		t.Fatalf("second release: %v %v", held, err)
	}
	for _, arr := range []string{Split, Delayed} {
		n := mustNode(t, Options{Arrangement: arr, Shared: shared, ManualSync: true})
		if err := n.Acquire(ctx, now, algorithm.NewLeaseID(), reqs, out); !errors.Is(err, store.ErrNoLeases) {
			t.Errorf("%v node: Acquire err = %v, want ErrNoLeases", arr, err)
		}
	}
}
