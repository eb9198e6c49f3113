package redisstore_test

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/distributed"
	"github.com/floodgate-dev/floodgate/internal/testkit/disttest"
	"github.com/floodgate-dev/floodgate/internal/testkit/redistest"
)

// TestRedisEvictedCountsReachRedis: one delayed node on a real Redis with
// a tiny table (256 KiB, about 600 keys) and a 10 ms sync interval,
// under a flood of one-hit keys far beyond the table (2 goroutines, 64 new
// keys per call, for 1 s), while 20 ledger keys are hit now and then
// (each one every ~40 ms, so between its hits the flood evicts it and it
// comes back as a new key with one request queued). The full table evicts
// keys whose one count is not yet pushed; those counts go on the orphan
// list and later syncs push them. Once nothing is pending, Redis holds
// exactly the node's allowed count for every ledger key and in total for
// the flood's keys.
func TestRedisEvictedCountsReachRedis(t *testing.T) {
	evictionFlood(t, false)
}

// TestRedisWipeKeepsEvictedLedger is TestRedisEvictedCountsReachRedis with
// redis-server killed and restarted without persistence halfway through
// the flood: the node finds the store lost its counts and pushes again
// what it pushed before, including the counts of keys it has evicted since
// (pushed orphans and keys with more than one request, kept on a bounded
// list; a ledger key evicted after one pushed hit takes its kept history
// back when it returns). No key's Redis count is above its allowed count,
// and every ledger key's count equals its allowed count, exactly.
func TestRedisWipeKeepsEvictedLedger(t *testing.T) {
	evictionFlood(t, true)
}

// evictionFlood runs the flood of TestRedisEvictedCountsReachRedis, with
// a Redis kill and restart halfway if wipe is set.
func evictionFlood(t *testing.T, wipe bool) {
	srv := redistest.Start(t)
	shared := redisShared(t, srv, false)
	var losses lossLog
	n := mustNode(t, distributed.Options{
		Arrangement: distributed.Delayed, Shared: shared, ID: "orphans",
		Interval: 10 * time.Millisecond, SyncDeadline: time.Second,
		MaxBytes: 256 << 10, Logger: slog.New(&losses),
	})
	rule := disttest.CounterRule(t)
	const workers, perCall, ledgerKeys = 2, 64, 20
	led := &ledger{ok: map[string]int64{}}
	stop := time.Now().Add(time.Second)
	var wg sync.WaitGroup
	fl := startKeyFlood(t, n, rule, "", workers, perCall, stop, &wg)
	wg.Add(1)
	go led.hit(t, n, rule, &wg,
		func() string { return fmt.Sprintf("ledger-%d", rand.IntN(ledgerKeys)) },
		func() bool { return time.Now().Before(stop) })
	if wipe {
		time.Sleep(500 * time.Millisecond)
		// Something must have reached Redis for the wipe to lose it: on a
		// loaded machine the first sync may come late.
		for deadline := time.Now().Add(10 * time.Second); n.Health().Syncs < 2 && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
		srv.Kill()
		time.Sleep(200 * time.Millisecond)
		srv.Restart()
	}
	wg.Wait()
	closeSettled(t, n, 30*time.Second)
	h := n.Health()
	flood := fl.all()
	total := redisTotal(t, shared, flood)
	t.Logf("flood: %d keys, %d allowed, Redis total %d; %d evictions, %d orphaned, %d dropped, %d overfull; table %d keys %d bytes; retained %d keys %d bytes, %d forgotten; kept views %d",
		len(flood), fl.allowed.Load(), total, h.Evictions, h.OrphanedEvents, h.DroppedEvents, h.TableOverfull, h.Keys, h.TableBytes,
		h.RetainedKeys, h.RetainedBytes, h.RetainForgotten, h.KeptViews)
	if h.OrphanedEvents == 0 {
		t.Error("no count was orphaned: the table never evicted a key with a count to push, the test proves nothing")
	}
	if h.DroppedEvents != 0 {
		t.Errorf("%d events dropped with the default pending queue", h.DroppedEvents)
	}
	if total > fl.allowed.Load() || !wipe && total != fl.allowed.Load() {
		t.Errorf("flood: Redis holds %d for %d allowed requests", total, fl.allowed.Load())
	}
	if wipe && losses.n.Load() == 0 {
		t.Error("the node never found that the store lost its data: the wipe was not seen, the test proves nothing")
	}
	led.check(t, shared)
}
