package redisstore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/distributed"
	"github.com/floodgate-dev/floodgate/internal/testkit/disttest"
	"github.com/floodgate-dev/floodgate/internal/testkit/redistest"
	"github.com/floodgate-dev/floodgate/store"
)

// TestDelayedFloodNewKeysOverRedis: a delayed node on a real redis-server,
// its table bounded to 1,024 keys, rule 5 per hour. 2,000 victims use
// their 5 (pushed), then 60,000 one-hit keys flood the node (a sync every
// 500), then 500 new clients send their 5 each before any sync, as a
// client's burst does. The eviction summary charges some new keys for
// cells they share with the flood's keys; a request only that charge
// rejects reads the key's shared count, so every new client gets its 5,
// while every victim (most evicted, charged from the summary) stays
// rejected: Redis holds their 5. Without the read the summary's
// over-charge rejects about 100 of the new clients' 2,500 requests.
func TestDelayedFloodNewKeysOverRedis(t *testing.T) {
	srv := redistest.Start(t)
	shared := redisShared(t, srv, true)
	rule := disttest.MustAlg(t, algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: 5, Window: time.Hour})
	clk := disttest.NewClock()
	n := mustNode(t, distributed.Options{Arrangement: distributed.Delayed, Shared: shared, Clock: clk.Now, ManualSync: true, MaxKeys: 1024,
		Deadline: time.Second, MaxDeadline: 5 * time.Second, SyncDeadline: 5 * time.Second, ID: t.Name()})
	sync := func() {
		t.Helper()
		clk.Add(time.Millisecond)
		if err := n.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	decide := func(key string) bool {
		t.Helper()
		d, err := n.DecideOne(ctx, clk.NS(), store.Request{Algorithm: rule, Key: key, Cost: 1})
		if err != nil {
			t.Fatal(err)
		}
		return d.Allowed
	}
	const victims, flood, clients = 2000, 60000, 500
	for v := range victims {
		for range 5 {
			if !decide(fmt.Sprint("victim-", v)) {
				t.Fatalf("victim %d rejected below its limit", v)
			}
		}
		if v%100 == 99 {
			sync()
		}
	}
	sync()
	for i := range flood {
		decide(fmt.Sprint("flood-", i))
		if i%500 == 499 {
			sync()
		}
	}
	sync()
	admitted := 0
	for v := range victims {
		if decide(fmt.Sprint("victim-", v)) {
			admitted++
		}
	}
	rejected, first := 0, 0
	for c := range clients {
		for j := range 5 {
			if !decide(fmt.Sprint("new-", c)) {
				rejected++
				if j == 0 {
					first++
				}
			}
		}
	}
	h := n.Health()
	t.Logf("%d evicted, %d keys charged from the summary, %d reads, %d charges settled; victims admitted %d of %d; new clients rejected %d of %d (%d first)",
		h.Evictions, h.EvictedCharged, h.ChargeReads, h.ChargesSettled, admitted, victims, rejected, 5*clients, first)
	if h.EvictedCharged == 0 {
		t.Fatal("the summary charged no key: the test proves nothing")
	}
	if admitted != 0 {
		t.Errorf("%d victims at their limit admitted after the flood", admitted)
	}
	if rejected != 0 {
		t.Errorf("new clients: %d of %d requests rejected (%d first), want none", rejected, 5*clients, first)
	}
	sync()
	for _, k := range []string{"victim-0", "victim-1999", "new-0", "new-499"} {
		if got := disttest.SharedCount(t, shared, rule, k, clk.NS()); got != 5 {
			t.Errorf("%s: shared count %d, want 5", k, got)
		}
	}
}

// TestDelayedChargeStandsWhileOrphaned: a key evicted before its count was
// pushed (on the orphan list) comes back charged; the shared count does not
// hold its count yet, so the charge stands and no read settles it: with a
// rule of 1 per hour every such key is rejected, before and after the
// orphans are pushed.
func TestDelayedChargeStandsWhileOrphaned(t *testing.T) {
	srv := redistest.Start(t)
	shared := redisShared(t, srv, true)
	rule := disttest.MustAlg(t, algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: 1, Window: time.Hour})
	clk := disttest.NewClock()
	n := mustNode(t, distributed.Options{Arrangement: distributed.Delayed, Shared: shared, Clock: clk.Now, ManualSync: true, MaxKeys: 64,
		Deadline: time.Second, MaxDeadline: 5 * time.Second, SyncDeadline: 5 * time.Second, ID: t.Name()})
	decide := func(key string) bool {
		t.Helper()
		clk.Add(time.Microsecond)
		d, err := n.DecideOne(ctx, clk.NS(), store.Request{Algorithm: rule, Key: key, Cost: 1})
		if err != nil {
			t.Fatal(err)
		}
		return d.Allowed
	}
	const keys = 400
	for i := range keys {
		if !decide(fmt.Sprint("k-", i)) {
			t.Fatalf("k-%d rejected on its first request", i)
		}
	}
	if h := n.Health(); h.OrphanedEvents == 0 {
		t.Fatal("nothing orphaned: the test proves nothing")
	}
	for round, when := range []string{"orphans not pushed", "orphans pushed"} {
		if round == 1 {
			for range 10 {
				clk.Add(time.Millisecond)
				if err := n.Sync(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}
		admitted := 0
		for i := range keys {
			if decide(fmt.Sprint("k-", i)) {
				admitted++
			}
		}
		if admitted != 0 {
			t.Errorf("%s: %d of %d keys at their limit admitted", when, admitted, keys)
		}
	}
	h := n.Health()
	t.Logf("%d orphaned, %d reads, %d charges settled", h.OrphanedEvents, h.ChargeReads, h.ChargesSettled)
}
