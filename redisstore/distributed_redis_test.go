package redisstore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/distributed"
	"github.com/floodgate-dev/floodgate/internal/testkit/disttest"
	"github.com/floodgate-dev/floodgate/internal/testkit/redistest"
	"github.com/floodgate-dev/floodgate/redisstore"
	"github.com/floodgate-dev/floodgate/store"
)

// redisShared connects a store to srv. With clientTime the nodes' virtual
// clock is Redis's clock too.
func redisShared(t *testing.T, srv *redistest.Server, clientTime bool) *redisstore.Store {
	t.Helper()
	rs, err := redisstore.New(ctx, redisstore.Options{Addrs: []string{srv.Addr()}, ClientTime: clientTime, Timeout: time.Second})
	if err != nil {
		t.Fatalf("redisstore.New: %v", err)
	}
	t.Cleanup(func() { rs.Close() })
	return rs
}

func redisDelayedNodes(t *testing.T, shared *redisstore.Store, clk *disttest.Clock, count int) []*distributed.Node {
	nodes := make([]*distributed.Node, count)
	for k := range nodes {
		nodes[k] = mustNode(t, distributed.Options{
			Arrangement: distributed.Delayed, Nodes: count, Shared: shared, Clock: clk.Now, ManualSync: true,
			Deadline: time.Second, SyncDeadline: 500 * time.Millisecond, ID: fmt.Sprintf("%s-%d", t.Name(), k),
		})
	}
	return nodes
}

// TestRedisDelayedKeepsThePromise: 8 delayed nodes on a real Redis, sync
// every 200ms, bounded-log 600/60s. At 90/s for two minutes no 60 s holds
// more than 660 accepted; at 10/s nothing is rejected; no breaker opens.
func TestRedisDelayedKeepsThePromise(t *testing.T) {
	srv := redistest.Start(t)
	shared := redisShared(t, srv, true)
	rule := disttest.MustAlg(t, algorithm.Config{Algorithm: algorithm.BoundedLog, Limit: 600, Window: time.Minute})
	for _, rate := range []int{90, 10} {
		clk := disttest.NewClock()
		nodes := redisDelayedNodes(t, shared, clk, 8)
		key := fmt.Sprintf("promise-%d", rate)
		acc, rej := disttest.Drive(t, clk, nodes, rate, 2*time.Minute, 200*time.Millisecond, func(n *distributed.Node, now int64) bool {
			d, err := n.DecideOne(ctx, now, store.Request{Algorithm: rule, Key: key, Cost: 1})
			if err != nil {
				t.Fatalf("DecideOne: %v", err)
			}
			return d.Allowed
		}, nil)
		for _, n := range nodes {
			// A sync may miss its 500 ms on a loaded machine (a store
			// error, answered late); with Redis up the breaker never
			// opens, so no decision goes to the failure policy.
			if h := n.Health(); h.BreakerOpenings != 0 {
				t.Fatalf("breaker opened with Redis up: %+v", h)
			}
		}
		b := disttest.Busiest(acc, time.Minute)
		t.Logf("redis %d/s: accepted %d, rejected %d, busiest 60 s %d", rate, len(acc), rej, b)
		if b > 660 {
			t.Errorf("%d/s: busiest 60 s = %d, want at most 660", rate, b)
		}
		if rate == 10 && rej != 0 {
			t.Errorf("10/s: %d rejects, want 0", rej)
		}
	}
}

// TestRedisDelayedKillFailOpen kills redis-server for 10 s (virtual) in the
// middle of two minutes and restarts it empty. The fail-open rule rejects
// nothing because of the store, no caller sees an error, and after the
// restart the shared count equals what the nodes accepted: the outage's
// counts are pushed, and the counts the restart wiped are pushed again.
func TestRedisDelayedKillFailOpen(t *testing.T) {
	srv := redistest.Start(t)
	shared := redisShared(t, srv, true)
	rule := disttest.MustAlg(t, algorithm.Config{Algorithm: algorithm.BoundedLog, Limit: 600, Window: time.Minute})
	count := disttest.CounterRule(t)
	for _, rate := range []int{10, 90} {
		clk := disttest.NewClock()
		nodes := redisDelayedNodes(t, shared, clk, 8)
		key := fmt.Sprintf("outage-%d", rate)
		down := false
		acc, rej := disttest.Drive(t, clk, nodes, rate, 2*time.Minute, 200*time.Millisecond, func(n *distributed.Node, now int64) bool {
			reqs := []store.Request{{Algorithm: rule, Key: key, Cost: 1}, {Algorithm: count, Key: key + "-count", Cost: 1}}
			out := make([]algorithm.Decision, 2)
			if err := n.Decide(ctx, now, reqs, out); err != nil {
				t.Fatalf("a caller saw an error (Redis down: %v): %v", down, err)
			}
			if out[0].Reason == algorithm.ReasonStoreUnavailable || out[1].Reason == algorithm.ReasonStoreUnavailable {
				t.Fatal("a fail-open rule was rejected because of the store")
			}
			return out[0].Allowed
		}, func(el time.Duration) {
			switch {
			case !down && el >= 55*time.Second && el < 65*time.Second:
				srv.Kill()
				down = true
			case down && el >= 65*time.Second:
				srv.Restart()
				down = false
			}
		})
		var errs uint64
		for _, n := range nodes {
			errs += n.Health().StoreErrors
			if err := n.Close(ctx); err != nil {
				t.Fatalf("Close: %v", err)
			}
		}
		if errs == 0 {
			t.Fatal("no node saw a store error: the kill did not happen")
		}
		got := disttest.SharedCount(t, shared, count, key+"-count", clk.NS())
		b := disttest.Busiest(acc, time.Minute)
		t.Logf("redis killed 10 s, %d/s: accepted %d, rejected %d, busiest 60 s %d, store errors %d, shared count %d",
			rate, len(acc), rej, b, errs, got)
		if rate == 10 && rej != 0 {
			t.Errorf("10/s: %d rejects, want 0", rej)
		}
		if got != int64(len(acc)) {
			t.Errorf("%d/s: shared count after restart = %d, want the %d accepted (no lost counts)", rate, got, len(acc))
		}
	}
}

// TestRedisCentralizedKill runs a centralized node in real time against a
// Redis that is killed: fail-open requests are allowed without error,
// fail-closed ones rejected; after the restart the counts taken during the
// outage are pushed.
func TestRedisCentralizedKill(t *testing.T) {
	srv := redistest.Start(t)
	shared := redisShared(t, srv, false)
	count := disttest.CounterRule(t)
	n := mustNode(t, distributed.Options{Arrangement: distributed.Centralized, Shared: shared, ManualSync: true,
		Deadline: 200 * time.Millisecond, BreakerCooldown: 100 * time.Millisecond})
	open := store.Request{Algorithm: count, Key: "central", Cost: 1}
	closed := store.Request{Algorithm: count, Key: "central-closed", Cost: 1, OnFailure: store.FailClosed}
	decide := func(r store.Request) algorithm.Decision {
		t.Helper()
		d, err := n.DecideOne(ctx, time.Now().UnixNano(), r)
		if err != nil {
			t.Fatalf("DecideOne: %v", err)
		}
		return d
	}
	for i := 0; i < 10; i++ {
		if !decide(open).Allowed || !decide(closed).Allowed {
			t.Fatal("rejected with Redis up")
		}
	}
	srv.Kill()
	for i := 0; i < 20; i++ {
		if d := decide(open); !d.Allowed {
			t.Fatalf("fail-open request %d rejected during the outage: %+v", i, d)
		}
		if d := decide(closed); d.Allowed || d.Reason != algorithm.ReasonStoreUnavailable {
			t.Fatalf("fail-closed request %d during the outage: %+v, want rejected with %q", i, d, algorithm.ReasonStoreUnavailable)
		}
	}
	if h := n.Health(); h.Up || h.PendingEvents != 20 {
		t.Fatalf("health during the outage = %+v, want down with 20 pending", h)
	}
	srv.Restart()
	deadline := time.Now().Add(10 * time.Second)
	for n.Health().PendingEvents > 0 && time.Now().Before(deadline) {
		time.Sleep(150 * time.Millisecond) // past the breaker's cooldown
		n.Sync(ctx)
	}
	if h := n.Health(); !h.Up || h.PendingEvents != 0 {
		t.Fatalf("health after the restart = %+v, want up with nothing pending", h)
	}
	// The restart wiped the 10 counted before the kill (no persistence);
	// the 20 taken during the outage are back in Redis.
	if got := disttest.SharedCount(t, shared, count, "central", time.Now().UnixNano()); got != 20 {
		t.Fatalf("shared count after the restart = %d, want the 20 accepted during the outage", got)
	}
}

// TestRedisPauseCostsAtMostTheDeadline stops redis-server with SIGSTOP: a
// decision waits at most the ceiling of the adaptive deadline, the breaker
// opens, and then none waits at all.
func TestRedisPauseCostsAtMostTheDeadline(t *testing.T) {
	srv := redistest.Start(t)
	shared := redisShared(t, srv, false)
	rule := disttest.MustAlg(t, algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: 1_000_000, Window: time.Hour})
	const floor, deadline = 10 * time.Millisecond, 60 * time.Millisecond
	n := mustNode(t, distributed.Options{Arrangement: distributed.Centralized, Shared: shared, ManualSync: true,
		Deadline: floor, MaxDeadline: deadline, BreakerCooldown: time.Hour})
	req := store.Request{Algorithm: rule, Key: "paused", Cost: 1}
	if _, err := n.DecideOne(ctx, time.Now().UnixNano(), req); err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	defer srv.Resume()
	var slowest time.Duration
	for i := 0; !n.Health().BreakerOpen && i < 20; i++ {
		start := time.Now()
		d, err := n.DecideOne(ctx, time.Now().UnixNano(), req)
		slowest = max(slowest, time.Since(start))
		if err != nil || !d.Allowed {
			t.Fatalf("decision during the stall: %+v, %v", d, err)
		}
	}
	if !n.Health().BreakerOpen {
		t.Fatalf("breaker still closed after 20 decisions on a stopped Redis: %+v", n.Health())
	}
	start := time.Now()
	for i := 0; i < 1000; i++ {
		if d, err := n.DecideOne(ctx, time.Now().UnixNano(), req); err != nil || !d.Allowed {
			t.Fatalf("decision with the breaker open: %+v, %v", d, err)
		}
	}
	open := time.Since(start)
	t.Logf("stalled Redis: slowest decision %v (deadline %v); 1000 decisions with the breaker open took %v", slowest, deadline, open)
	// Slack for a loaded machine; without the deadline a decision would
	// wait for the store's own 1 s timeout, and 1000 of them for 1000 s.
	if slowest > deadline+300*time.Millisecond {
		t.Errorf("a decision took %v with a %v deadline", slowest, deadline)
	}
	if open > deadline+300*time.Millisecond {
		t.Errorf("1000 decisions with the breaker open took %v: they should not wait for the store", open)
	}
}

// TestRedisClusterDelayedCounts runs delayed nodes against a real
// three-master Redis Cluster with keys spread over many slots: every
// accepted request reaches the shared counts, and every node sees the
// others' counts.
func TestRedisClusterDelayedCounts(t *testing.T) {
	cl := redistest.StartCluster(t)
	shared, err := redisstore.New(ctx, redisstore.Options{Addrs: cl.Addrs(), Cluster: true, ClientTime: true})
	if err != nil {
		t.Fatalf("redisstore.New: %v", err)
	}
	t.Cleanup(func() { shared.Close() })
	count := disttest.CounterRule(t)
	clk := disttest.NewClock()
	nodes := redisDelayedNodes(t, shared, clk, 4)
	const keys = 64
	perKey := make([]int64, keys)
	i := 0
	disttest.Drive(t, clk, nodes, 200, 10*time.Second, 200*time.Millisecond, func(n *distributed.Node, now int64) bool {
		k := i % keys
		i++
		d, err := n.DecideOne(ctx, now, store.Request{Algorithm: count, Key: fmt.Sprintf("cluster-%d", k), Cost: 1})
		if err != nil {
			t.Fatalf("DecideOne: %v", err)
		}
		if d.Allowed {
			perKey[k]++
		}
		return d.Allowed
	}, nil)
	for _, n := range nodes {
		// A late sync on a loaded machine is a store error answered late;
		// a cluster that is up never opens the breaker.
		if h := n.Health(); h.BreakerOpenings != 0 {
			t.Fatalf("breaker opened against a cluster that is up: %+v", h)
		}
		if err := n.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for k := range perKey {
		if got := disttest.SharedCount(t, shared, count, fmt.Sprintf("cluster-%d", k), clk.NS()); got != perKey[k] {
			t.Errorf("key %d: shared count %d, want %d accepted", k, got, perKey[k])
		}
	}
}

// TestRedisDelayedPauseNeverBlocksDecisions stops redis-server with
// SIGSTOP under delayed nodes: decisions stay local and fast, syncs give up
// at their deadline, and after SIGCONT every accepted request is counted
// exactly once.
func TestRedisDelayedPauseNeverBlocksDecisions(t *testing.T) {
	srv := redistest.Start(t)
	shared := redisShared(t, srv, true)
	count := disttest.CounterRule(t)
	clk := disttest.NewClock()
	nodes := make([]*distributed.Node, 2)
	for k := range nodes {
		nodes[k] = mustNode(t, distributed.Options{Arrangement: distributed.Delayed, Nodes: 2, Shared: shared, Clock: clk.Now, ManualSync: true,
			SyncDeadline: 50 * time.Millisecond, ID: fmt.Sprintf("%s-%d", t.Name(), k)})
	}
	paused := false
	var slowest time.Duration
	acc, _ := disttest.Drive(t, clk, nodes, 50, 20*time.Second, 200*time.Millisecond, func(n *distributed.Node, now int64) bool {
		start := time.Now()
		d, err := n.DecideOne(ctx, now, store.Request{Algorithm: count, Key: "paused", Cost: 1})
		slowest = max(slowest, time.Since(start))
		if err != nil {
			t.Fatalf("DecideOne: %v", err)
		}
		return d.Allowed
	}, func(el time.Duration) {
		switch {
		case !paused && el >= 5*time.Second && el < 10*time.Second:
			srv.Pause()
			paused = true
		case paused && el >= 10*time.Second:
			srv.Resume()
			paused = false
		}
	})
	var errs uint64
	for _, n := range nodes {
		errs += n.Health().StoreErrors
		if err := n.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("paused Redis: %d sync errors, slowest decision %v", errs, slowest)
	if errs == 0 {
		t.Fatal("no sync failed while Redis was paused")
	}
	// A decision never waits for the store; the bound is generous for a
	// loaded machine, far below the 50 ms sync deadline times the syncs.
	if slowest > 50*time.Millisecond {
		t.Errorf("slowest decision %v while Redis was paused", slowest)
	}
	// The sync that timed out was queued in the stopped server and ran when
	// it resumed; the node sends it again under the same identity, which
	// the script skips, so the events are counted once.
	got := disttest.SharedCount(t, shared, count, "paused", clk.NS())
	t.Logf("accepted %d, shared count %d", len(acc), got)
	if got != int64(len(acc)) {
		t.Errorf("shared count %d after the pause, want the %d accepted", got, len(acc))
	}
}

// TestRedisMissedProbeFreesTheBreaker checks that a half-open probe that
// misses the adaptive deadline gives its slot back: Redis is killed (the
// breaker opens on refused connections while the deadline still follows
// the fast calls before), restarted and stopped with SIGSTOP, so that the
// probe after the cooldown misses the deadline; once Redis runs again, a
// later probe must close the breaker. A probe that kept its slot left the
// breaker open for good, and a node whose Redis restarted on a loaded
// machine rejected or let through everything by failure policy.
//
// The probe misses the adaptive deadline only if it is sent within two
// latency periods of the last answered call (the deadline is the ceiling
// after that): a machine that stalls the restart for longer is measured
// by the miss counter and the scenario is run again, up to three times.
func TestRedisMissedProbeFreesTheBreaker(t *testing.T) {
	rule := disttest.MustAlg(t, algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: 1_000_000, Window: time.Hour})
	req := store.Request{Algorithm: rule, Key: "probe", Cost: 1}
	const cooldown = 20 * time.Millisecond
	for attempt := 1; ; attempt++ {
		srv := redistest.Start(t)
		shared := redisShared(t, srv, false)
		n := mustNode(t, distributed.Options{Arrangement: distributed.Centralized, Shared: shared, ManualSync: true,
			Deadline: time.Millisecond, MaxDeadline: 5 * time.Second, BreakerCooldown: cooldown})
		if _, err := n.DecideOne(ctx, time.Now().UnixNano(), req); err != nil {
			t.Fatal(err)
		}
		srv.Kill()
		for i := 0; !n.Health().BreakerOpen && i < 100; i++ {
			n.DecideOne(ctx, time.Now().UnixNano(), req)
		}
		if !n.Health().BreakerOpen {
			t.Fatalf("breaker still closed after 100 decisions on a killed Redis: %+v", n.Health())
		}
		srv.Restart()
		srv.Pause()
		time.Sleep(2 * cooldown)
		missed := n.Health().DeadlineMisses
		n.DecideOne(ctx, time.Now().UnixNano(), req) // the probe, on a stopped Redis
		probeMissed := n.Health().DeadlineMisses > missed
		srv.Resume()
		if !probeMissed {
			if attempt == 3 {
				t.Fatalf("the probe never missed the adaptive deadline in %d attempts: the machine stalled each restart past two latency periods", attempt)
			}
			t.Logf("attempt %d: the probe reached the ceiling, not the adaptive deadline (a stalled restart); again", attempt)
			continue
		}
		deadline := time.Now().Add(30 * time.Second)
		for n.Health().BreakerOpen {
			if time.Now().After(deadline) {
				t.Fatalf("breaker still open 30s after Redis came back: the missed probe kept its slot (%+v)", n.Health())
			}
			time.Sleep(2 * cooldown)
			n.DecideOne(ctx, time.Now().UnixNano(), req)
		}
		return
	}
}
