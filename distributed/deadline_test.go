package distributed

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/internal/redistest"
	"github.com/floodgate-dev/floodgate/store"
)

// TestRedisCentralizedAdaptiveDeadline runs a centralized node with default
// deadlines on a real redis-server under concurrent load (32 goroutines,
// fail-closed requests): while Redis is healthy no decision goes to the
// failure policy. Then Redis is stopped with SIGSTOP: every decision
// answers within the ceiling and the breaker opens.
func TestRedisCentralizedAdaptiveDeadline(t *testing.T) {
	srv := redistest.Start(t)
	shared := redisShared(t, srv, false)
	rule := mustAlg(t, algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: algorithm.MaxLimit, Window: time.Hour})
	n := mustNode(t, Options{Arrangement: Centralized, Shared: shared, ManualSync: true})
	var decided, storeRejects atomic.Int64
	var slowest atomic.Int64
	load := func(d time.Duration) {
		var wg sync.WaitGroup
		stop := time.Now().Add(d)
		for w := range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; time.Now().Before(stop); i++ {
					req := store.Request{Algorithm: rule, Key: fmt.Sprintf("w%d/k%d", w, i%50), Cost: 1, OnFailure: store.FailClosed}
					start := time.Now()
					dec, err := n.DecideOne(ctx, start.UnixNano(), req)
					took := int64(time.Since(start))
					for s := slowest.Load(); took > s && !slowest.CompareAndSwap(s, took); s = slowest.Load() {
					}
					if err != nil {
						t.Error(err)
						return
					}
					decided.Add(1)
					if dec.Reason == algorithm.ReasonStoreUnavailable {
						storeRejects.Add(1)
					}
					// Clients that wait a little between requests: 32
					// goroutines spinning on two cores would measure the
					// scheduler, not the deadline.
					time.Sleep(500 * time.Microsecond)
				}
			}()
		}
		wg.Wait()
	}
	load(3 * time.Second)
	h := n.Health()
	t.Logf("healthy Redis: %d decisions, %d sent to the failure policy, %d deadline misses, %d store errors, deadline now %v, slowest %v",
		decided.Load(), storeRejects.Load(), h.DeadlineMisses, h.StoreErrors, h.Deadline, time.Duration(slowest.Load()))
	if storeRejects.Load() != 0 || h.DeadlineMisses != 0 || h.StoreErrors != 0 || h.BreakerOpenings != 0 {
		t.Fatalf("healthy Redis: %d of %d decisions went to the failure policy: %+v", storeRejects.Load(), decided.Load(), h)
	}

	srv.Pause()
	defer srv.Resume()
	decided.Store(0)
	storeRejects.Store(0)
	slowest.Store(0)
	load(2 * time.Second)
	h = n.Health()
	t.Logf("stopped Redis: %d decisions, %d rejected as store unavailable, slowest %v, %+v",
		decided.Load(), storeRejects.Load(), time.Duration(slowest.Load()), h)
	if !h.BreakerOpen {
		t.Fatalf("breaker closed after 2 s of a stopped Redis: %+v", h)
	}
	// The ceiling plus slack for a loaded machine.
	if s := time.Duration(slowest.Load()); s > DefaultMaxDeadline+250*time.Millisecond {
		t.Fatalf("a decision took %v with a %v ceiling", s, DefaultMaxDeadline)
	}
}
