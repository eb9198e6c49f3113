package distributed

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/internal/testkit/disttest"
	"github.com/floodgate-dev/floodgate/memstore"
	"github.com/floodgate-dev/floodgate/store"
)

var ctx = context.Background()

func TestNewRejectsBadOptions(t *testing.T) {
	m := memstore.New(memstore.Options{})
	cases := []struct {
		o    Options
		want string
	}{
		{Options{Arrangement: "gossip"}, `unknown arrangement "gossip"`},
		{Options{Arrangement: Centralized}, "needs a Shared store"},
		{Options{Arrangement: Delayed, Shared: noSync{m}}, "store.Syncer"},
		{Options{Arrangement: Split, Nodes: -1}, "Nodes must be at least 1"},
		{Options{Arrangement: Split, Deadline: -time.Second}, "must not be negative"},
	}
	for _, c := range cases {
		t.Run(c.want, func(t *testing.T) {
			_, err := New(c.o)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("New(%+v) = %v, want an error containing %q", c.o, err, c.want)
			}
		})
	}
}

// noSync hides a store's Syncer side.
type noSync struct{ store.Store }

func TestRequestWithoutAlgorithmIsAnError(t *testing.T) {
	n := mustNode(t, Options{Arrangement: Split, ManualSync: true})
	if _, err := n.DecideOne(ctx, 0, store.Request{Key: "k", Cost: 1}); err == nil {
		t.Fatal("DecideOne with no algorithm: no error")
	}
	out := make([]algorithm.Decision, 1)
	if err := n.Decide(ctx, 0, make([]store.Request, 2), out); err == nil {
		t.Fatal("Decide with len(out) != len(reqs): no error")
	}
}

func TestSplitEnforcesLimitOverNodes(t *testing.T) {
	alg := disttest.MustAlg(t, algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: 600, Window: time.Minute})
	n := mustNode(t, Options{Arrangement: Split, Nodes: 8, ManualSync: true})
	now := time.Date(2026, 7, 30, 0, 0, 0, 0, time.UTC).UnixNano()
	accepted := 0
	for i := 0; i < 100; i++ {
		d, err := n.DecideOne(ctx, now+int64(i), store.Request{Algorithm: alg, Key: "client", Cost: 1})
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			accepted++
		} else if d.Limit != 75 {
			t.Fatalf("rejection reports limit %d, want the node's share 75", d.Limit)
		}
	}
	if accepted != 75 {
		t.Fatalf("one split node of 8 accepted %d of 100, want 600/8 = 75", accepted)
	}
	if h := n.Health(); !h.Up || h.StoreErrors != 0 {
		t.Fatalf("split health = %+v, want up with no store errors", h)
	}
}

func TestSplitConfigNeverGrantsMoreThanTheWhole(t *testing.T) {
	c := splitConfig(algorithm.Config{Algorithm: algorithm.TokenBucket, Limit: 601, Capacity: 61, Rate: 10, Burst: 9}, 8)
	if c.Limit != 75 || c.Capacity != 7 || c.Rate != 1.25 || c.Burst != 1 {
		t.Fatalf("splitConfig = %+v, want limit 75, capacity 7, rate 1.25, burst 1", c)
	}
	if c := splitConfig(algorithm.Config{Limit: 3}, 8); c.Limit != 1 {
		t.Fatalf("limit 3 over 8 nodes = %d, want 1 (every node may accept something)", c.Limit)
	}
}

func delayedNodes(t *testing.T, shared *faultStore, clk *disttest.Clock, count int, extra func(*Options)) []*Node {
	nodes := make([]*Node, count)
	for k := range nodes {
		o := Options{
			Arrangement: Delayed, Nodes: count, Shared: shared, Clock: clk.Now,
			ManualSync: true, Deadline: time.Second, SyncDeadline: 5 * time.Second,
		}
		if extra != nil {
			extra(&o)
		}
		nodes[k] = mustNode(t, o)
	}
	return nodes
}

// TestDelayedKeepsThePromise runs the baseline's scale for one key: 8 delayed
// nodes syncing every 200ms, a bounded-log rule of 600 per 60s. A client at
// 90/s for two minutes gets at most 1.1 x 600 in any 60 s; a client at 10/s
// is never rejected.
func TestDelayedKeepsThePromise(t *testing.T) {
	rule := disttest.MustAlg(t, algorithm.Config{Algorithm: algorithm.BoundedLog, Limit: 600, Window: time.Minute})
	for _, c := range []struct {
		rate int
		name string
	}{{90, "burst"}, {10, "compliant"}} {
		t.Run(c.name, func(t *testing.T) {
			clk := disttest.NewClock()
			shared := newFaultStore()
			nodes := delayedNodes(t, shared, clk, 8, nil)
			acc, rej := disttest.Drive(t, clk, nodes, c.rate, 2*time.Minute, 200*time.Millisecond, func(n *Node, now int64) bool {
				d, err := n.DecideOne(ctx, now, store.Request{Algorithm: rule, Key: "client", Cost: 1})
				if err != nil {
					t.Fatalf("DecideOne: %v", err)
				}
				return d.Allowed
			}, nil)
			b := disttest.Busiest(acc, time.Minute)
			t.Logf("%d/s: accepted %d, rejected %d, busiest 60 s %d", c.rate, len(acc), rej, b)
			if b > 660 {
				t.Errorf("busiest 60 s = %d, want at most 660", b)
			}
			if c.rate == 10 && rej != 0 {
				t.Errorf("client at 10/s (600 per 60 s) was rejected %d times, want 0", rej)
			}
			if c.rate == 90 && len(acc) < 1200 {
				t.Errorf("client at 90/s got %d in two minutes, want at least the 1200 the limit grants", len(acc))
			}
		})
	}
}

// TestDelayedOutageFailOpen takes the store down for 10 s in the middle of
// two minutes: the fail-open rule rejects nothing because of the store, no
// caller sees an error, and once the store is back every accepted request is
// in the shared count.
func TestDelayedOutageFailOpen(t *testing.T) {
	rule := disttest.MustAlg(t, algorithm.Config{Algorithm: algorithm.BoundedLog, Limit: 600, Window: time.Minute})
	count := disttest.CounterRule(t)
	for _, rate := range []int{10, 90} {
		clk := disttest.NewClock()
		shared := newFaultStore()
		nodes := delayedNodes(t, shared, clk, 8, nil)
		wasDown := false
		acc, rej := disttest.Drive(t, clk, nodes, rate, 2*time.Minute, 200*time.Millisecond, func(n *Node, now int64) bool {
			reqs := []store.Request{
				{Algorithm: rule, Key: "client", Cost: 1},
				{Algorithm: count, Key: "client-count", Cost: 1},
			}
			out := make([]algorithm.Decision, 2)
			if err := n.Decide(ctx, now, reqs, out); err != nil {
				t.Fatalf("Decide during the test: %v", err)
			}
			for _, d := range out {
				if d.Reason == algorithm.ReasonStoreUnavailable {
					t.Fatalf("a fail-open rule was rejected because of the store")
				}
			}
			return out[0].Allowed
		}, func(el time.Duration) {
			down := el >= 55*time.Second && el < 65*time.Second
			if down != wasDown {
				shared.setDown(down)
				wasDown = down
			}
		})
		for _, n := range nodes {
			if h := n.Health(); h.StoreErrors == 0 {
				t.Fatalf("%d/s: node saw no store errors; the outage did not happen", rate)
			}
			if err := n.Close(ctx); err != nil {
				t.Fatalf("Close: %v", err)
			}
		}
		if rate == 10 && rej != 0 {
			t.Errorf("10/s: %d rejects, want 0", rej)
		}
		got := disttest.SharedCount(t, shared.inner, count, "client-count", clk.NS())
		t.Logf("%d/s: accepted %d, rejected %d, busiest 60 s %d, shared count %d", rate, len(acc), rej, disttest.Busiest(acc, time.Minute), got)
		if got != int64(len(acc)) {
			t.Errorf("%d/s: shared count after the outage = %d, want the %d accepted (no lost counts)", rate, got, len(acc))
		}
	}
}

func TestDelayedFailClosedRejectsWhileBreakerOpen(t *testing.T) {
	rule := disttest.MustAlg(t, algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: 100, Window: time.Minute})
	clk := disttest.NewClock()
	shared := newFaultStore()
	n := delayedNodes(t, shared, clk, 1, nil)[0]
	req := store.Request{Algorithm: rule, Key: "k", Cost: 1, OnFailure: store.FailClosed}
	open := req
	open.OnFailure = store.FailOpen
	if d, _ := n.DecideOne(ctx, clk.NS(), req); !d.Allowed {
		t.Fatalf("before the outage: %+v", d)
	}
	shared.setDown(true)
	for i := 0; i < defaultBreakerFailures; i++ {
		clk.Add(200 * time.Millisecond)
		if err := n.Sync(ctx); err == nil {
			t.Fatal("Sync against a down store: no error")
		}
	}
	if h := n.Health(); !h.BreakerOpen || h.Up {
		t.Fatalf("after %d failed syncs health = %+v, want breaker open", defaultBreakerFailures, h)
	}
	d, err := n.DecideOne(ctx, clk.NS(), req)
	if err != nil || d.Allowed || d.Reason != algorithm.ReasonStoreUnavailable {
		t.Fatalf("fail-closed during the outage = %+v, %v; want rejected with %q", d, err, algorithm.ReasonStoreUnavailable)
	}
	if d, err := n.DecideOne(ctx, clk.NS(), open); err != nil || !d.Allowed {
		t.Fatalf("fail-open during the outage = %+v, %v; want allowed", d, err)
	}
	// While the breaker is open, Sync does not call the store.
	before := shared.calls.Load()
	if err := n.Sync(ctx); !errors.Is(err, ErrBreakerOpen) {
		t.Fatalf("Sync with the breaker open = %v, want ErrBreakerOpen", err)
	}
	if shared.calls.Load() != before {
		t.Fatal("Sync called the store while the breaker was open")
	}
	shared.setDown(false)
	clk.Add(defaultBreakerCooldown)
	if err := n.Sync(ctx); err != nil {
		t.Fatalf("Sync after the store came back: %v", err)
	}
	if d, _ := n.DecideOne(ctx, clk.NS(), req); !d.Allowed {
		t.Fatalf("fail-closed after recovery = %+v, want allowed", d)
	}
	if got := disttest.SharedCount(t, shared.inner, rule, "k", clk.NS()); got != 2 {
		t.Fatalf("shared count = %d, want the 2 accepted before the last decision was synced", got)
	}
}

// TestDelayedRepushesAfterStoreLosesData wipes the shared store (a restart
// without persistence): the nodes notice and push their counts again.
func TestDelayedRepushesAfterStoreLosesData(t *testing.T) {
	count := disttest.CounterRule(t)
	clk := disttest.NewClock()
	shared := newFaultStore()
	nodes := delayedNodes(t, shared, clk, 4, nil)
	wiped := false
	acc, _ := disttest.Drive(t, clk, nodes, 20, 20*time.Second, 200*time.Millisecond, func(n *Node, now int64) bool {
		d, err := n.DecideOne(ctx, now, store.Request{Algorithm: count, Key: "c", Cost: 1})
		if err != nil {
			t.Fatal(err)
		}
		return d.Allowed
	}, func(el time.Duration) {
		if el >= 10*time.Second && !wiped {
			shared.wipe()
			wiped = true
		}
	})
	for _, n := range nodes {
		if err := n.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := disttest.SharedCount(t, shared.inner, count, "c", clk.NS()); got != int64(len(acc)) {
		t.Fatalf("shared count after a wipe = %d, want all %d accepted", got, len(acc))
	}
}

func centralNode(t *testing.T, shared *faultStore, clk *disttest.Clock, nodes int) *Node {
	return mustNode(t, Options{
		Arrangement: Centralized, Nodes: nodes, Shared: shared, Clock: clk.Now,
		ManualSync: true, Deadline: time.Second,
	})
}

func TestCentralizedFailOpenDecidesFromLastViewAndPushesLater(t *testing.T) {
	rule := disttest.MustAlg(t, algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: 100, Window: time.Hour})
	clk := disttest.NewClock()
	shared := newFaultStore()
	n := centralNode(t, shared, clk, 4)
	req := store.Request{Algorithm: rule, Key: "k", Cost: 1}
	for i := 0; i < 90; i++ {
		if d, err := n.DecideOne(ctx, clk.NS(), req); err != nil || !d.Allowed {
			t.Fatalf("request %d with the store up: %+v, %v", i, d, err)
		}
	}
	shared.setDown(true)
	accepted := 0
	for i := 0; i < 20; i++ {
		clk.Add(time.Millisecond)
		d, err := n.DecideOne(ctx, clk.NS(), req)
		if err != nil {
			t.Fatalf("fail-open decision returned an error: %v", err)
		}
		if d.Allowed {
			accepted++
		} else if d.Reason == algorithm.ReasonStoreUnavailable {
			t.Fatalf("fail-open rule rejected because of the store")
		}
	}
	if accepted != 10 {
		t.Fatalf("during the outage the node accepted %d, want the 10 its last view (90 of 100) left", accepted)
	}
	if h := n.Health(); h.PendingEvents != 10 || !h.BreakerOpen {
		t.Fatalf("health during the outage = %+v, want 10 pending events and the breaker open", h)
	}
	shared.setDown(false)
	clk.Add(defaultBreakerCooldown)
	if err := n.Sync(ctx); err != nil {
		t.Fatalf("pushing the outage's counts: %v", err)
	}
	if got := disttest.SharedCount(t, shared.inner, rule, "k", clk.NS()); got != 100 {
		t.Fatalf("shared count after the push = %d, want 100", got)
	}
	if h := n.Health(); h.PendingEvents != 0 || !h.Up {
		t.Fatalf("health after recovery = %+v", h)
	}
	if d, _ := n.DecideOne(ctx, clk.NS(), req); d.Allowed {
		t.Fatalf("after recovery the store's count is full, got %+v", d)
	}
}

func TestCentralizedFailClosedAndFailLocal(t *testing.T) {
	rule := disttest.MustAlg(t, algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: 100, Window: time.Hour})
	clk := disttest.NewClock()
	shared := newFaultStore()
	n := centralNode(t, shared, clk, 4)
	for i := 0; i < 60; i++ {
		n.DecideOne(ctx, clk.NS(), store.Request{Algorithm: rule, Key: "k", Cost: 1})
	}
	shared.setDown(true)
	d, err := n.DecideOne(ctx, clk.NS(), store.Request{Algorithm: rule, Key: "k", Cost: 1, OnFailure: store.FailClosed})
	if err != nil || d.Allowed || d.Reason != algorithm.ReasonStoreUnavailable || d.Limit != 100 || d.RetryAfter != defaultBreakerCooldown {
		t.Fatalf("fail-closed = %+v, %v; want rejected, %q, limit 100, retry after the breaker's cooldown", d, err, algorithm.ReasonStoreUnavailable)
	}
	accepted := 0
	for i := 0; i < 40; i++ {
		d, err := n.DecideOne(ctx, clk.NS(), store.Request{Algorithm: rule, Key: "k", Cost: 1, OnFailure: store.FailLocal})
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			accepted++
		}
	}
	if accepted != 10 {
		t.Fatalf("fail-local accepted %d, want the remaining 40 split over 4 nodes = 10", accepted)
	}
}

func TestBreakerStopsCallingThenProbes(t *testing.T) {
	rule := disttest.MustAlg(t, algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: 100, Window: time.Hour})
	clk := disttest.NewClock()
	shared := newFaultStore()
	n := centralNode(t, shared, clk, 1)
	req := store.Request{Algorithm: rule, Key: "k", Cost: 1}
	shared.setDown(true)
	for i := 0; i < 10; i++ {
		if _, err := n.DecideOne(ctx, clk.NS(), req); err != nil {
			t.Fatal(err)
		}
	}
	if c := shared.calls.Load(); c != defaultBreakerFailures {
		t.Fatalf("%d calls reached a down store, want %d before the breaker opened", c, defaultBreakerFailures)
	}
	clk.Add(defaultBreakerCooldown)
	n.DecideOne(ctx, clk.NS(), req) // the probe, which fails
	n.DecideOne(ctx, clk.NS(), req)
	if c := shared.calls.Load(); c != defaultBreakerFailures+1 {
		t.Fatalf("after the cooldown %d calls, want exactly one probe more", c)
	}
	shared.setDown(false)
	clk.Add(defaultBreakerCooldown)
	if d, _ := n.DecideOne(ctx, clk.NS(), req); !d.Allowed {
		t.Fatal("probe after recovery not allowed")
	}
	if h := n.Health(); !h.Up || h.BreakerOpenings != 1 || h.StoreErrors != defaultBreakerFailures+1 || h.LastError == "" {
		t.Fatalf("health = %+v", h)
	}
}

// TestStalledStoreCostsAtMostTheDeadline uses a store that hangs and ignores
// its context, in a synctest bubble (the deadlines are exact, whatever the
// load of the machine): each decision still returns within the ceiling, the adaptive
// deadline climbs to the ceiling, the breaker opens after
// the default BreakerFailures (3) calls that reached it, and then no call waits.
func TestStalledStoreCostsAtMostTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rule := disttest.MustAlg(t, algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: 100, Window: time.Hour})
		shared := newFaultStore()
		shared.roundTrip = 2 * time.Millisecond // the first call learns it: the deadline starts at the floor
		const floor, ceiling = 10 * time.Millisecond, 50 * time.Millisecond
		n := mustNode(t, Options{Arrangement: Centralized, Shared: shared, ManualSync: true, Deadline: floor, MaxDeadline: ceiling})
		req := store.Request{Algorithm: rule, Key: "k", Cost: 1}
		if _, err := n.DecideOne(ctx, time.Now().UnixNano(), req); err != nil { // a first round trip measured
			t.Fatal(err)
		}
		shared.startStall()
		defer shared.endStall()
		for i := 0; !n.Health().BreakerOpen; i++ {
			if i == 20 {
				t.Fatalf("breaker still closed after %d decisions on a stalled store: %+v", i, n.Health())
			}
			start := time.Now()
			d, err := n.DecideOne(ctx, time.Now().UnixNano(), req)
			took := time.Since(start)
			if err != nil || !d.Allowed {
				t.Fatalf("decision %d during the stall: %+v, %v", i, d, err)
			}
			// It does not wait for the store, which never answers (the
			// bubble's clock: exact, whatever the load).
			if took > ceiling {
				t.Fatalf("decision %d took %v with a %v ceiling", i, took, ceiling)
			}
		}
		h := n.Health()
		calls := shared.calls.Load()
		t.Logf("stalled store: %d calls, %d below the ceiling", calls-1, h.DeadlineMisses)
		if h.StoreErrors != defaultBreakerFailures || h.DeadlineMisses == 0 {
			t.Fatalf("want %d failures at the ceiling after some misses below it: %+v", defaultBreakerFailures, h)
		}
		for i := 0; i < 10; i++ {
			n.DecideOne(ctx, time.Now().UnixNano(), req)
		}
		if c := shared.calls.Load(); c != calls {
			t.Fatalf("%d calls reached the stalled store with the breaker open", c-calls)
		}
	})
}

// TestAllOrNothing checks that when one rule of a request rejects, the
// other rules do not count it.
func TestAllOrNothing(t *testing.T) {
	small := disttest.MustAlg(t, algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: 2, Window: time.Hour})
	big := disttest.MustAlg(t, algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: 100, Window: time.Hour})
	for _, arr := range Arrangements() {
		clk := disttest.NewClock()
		shared := newFaultStore()
		n := mustNode(t, Options{Arrangement: arr, Shared: shared, Clock: clk.Now, ManualSync: true, Deadline: time.Second})
		reqs := []store.Request{{Algorithm: big, Key: "b", Cost: 1}, {Algorithm: small, Key: "s", Cost: 1}}
		out := make([]algorithm.Decision, 2)
		for i := 0; i < 5; i++ {
			if err := n.Decide(ctx, clk.NS(), reqs, out); err != nil {
				t.Fatal(err)
			}
		}
		if out[1].Allowed {
			t.Fatalf("%s: small rule still allows after 5 requests", arr)
		}
		d, _ := n.DecideOne(ctx, clk.NS(), store.Request{Algorithm: big, Key: "b", Cost: 1})
		if d.Remaining != 100-3 {
			t.Fatalf("%s: big rule remaining %d, want 97 (only the 2 fully allowed requests and this one counted)", arr, d.Remaining)
		}
	}
}

func TestDelayedFailLocalSplitsWhatIsLeft(t *testing.T) {
	rule := disttest.MustAlg(t, algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: 100, Window: time.Hour})
	clk := disttest.NewClock()
	shared := newFaultStore()
	n := delayedNodes(t, shared, clk, 4, nil)[0]
	local := store.Request{Algorithm: rule, Key: "k", Cost: 1, OnFailure: store.FailLocal}
	for i := 0; i < 60; i++ {
		if d, _ := n.DecideOne(ctx, clk.NS(), local); !d.Allowed {
			t.Fatalf("request %d rejected with the store up", i)
		}
	}
	if err := n.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	shared.setDown(true)
	for i := 0; i < defaultBreakerFailures; i++ {
		clk.Add(200 * time.Millisecond)
		n.Sync(ctx)
	}
	accepted := 0
	for i := 0; i < 40; i++ {
		d, err := n.DecideOne(ctx, clk.NS(), local)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			accepted++
		}
	}
	if accepted != 10 {
		t.Fatalf("fail-local during the outage accepted %d, want (100-60)/4 = 10", accepted)
	}
	shared.setDown(false)
	clk.Add(defaultBreakerCooldown)
	if err := n.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got := disttest.SharedCount(t, shared.inner, rule, "k", clk.NS()); got != 70 {
		t.Fatalf("shared count after the outage = %d, want 70", got)
	}
}

func TestSplitNodeSyncOnlyDropsIdleState(t *testing.T) {
	rule := disttest.MustAlg(t, algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: 8, Window: time.Second})
	clk := disttest.NewClock()
	n := mustNode(t, Options{Arrangement: Split, Nodes: 8, Clock: clk.Now, ManualSync: true})
	if d, _ := n.DecideOne(ctx, clk.NS(), store.Request{Algorithm: rule, Key: "k", Cost: 1}); !d.Allowed {
		t.Fatal("first request rejected")
	}
	clk.Add(time.Minute) // past the GC period and the key's idle time
	if err := n.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	held := 0
	for i := range n.table.shards {
		held += len(n.table.shards[i].m)
	}
	if held != 0 {
		t.Fatalf("%d entries held after a minute idle with a 1s window, want 0", held)
	}
}

// TestDelayedSyncAppliedAfterTimeoutCountsOnce: a sync times out but the
// store applies it later; the node must not push those events again.
func TestDelayedSyncAppliedAfterTimeoutCountsOnce(t *testing.T) {
	count := disttest.CounterRule(t)
	clk := disttest.NewClock()
	shared := newFaultStore()
	n := mustNode(t, Options{Arrangement: Delayed, Shared: shared, Clock: clk.Now, ManualSync: true, SyncDeadline: 20 * time.Millisecond})
	for i := 0; i < 5; i++ {
		n.DecideOne(ctx, clk.NS(), store.Request{Algorithm: count, Key: "k", Cost: 1})
	}
	shared.startStall()
	if err := n.Sync(ctx); err == nil {
		t.Fatal("Sync against a stalled store: no error")
	}
	shared.endStall() // the abandoned call now goes through
	deadline := time.Now().Add(5 * time.Second)
	for disttest.SharedCount(t, shared.inner, count, "k", clk.NS()) != 5 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	for i := 0; i < 3; i++ {
		n.DecideOne(ctx, clk.NS(), store.Request{Algorithm: count, Key: "k", Cost: 1})
	}
	clk.Add(200 * time.Millisecond)
	if err := n.Sync(ctx); err != nil {
		t.Fatalf("Sync after the stall: %v", err)
	}
	if got := disttest.SharedCount(t, shared.inner, count, "k", clk.NS()); got != 8 {
		t.Fatalf("shared count = %d, want the 8 accepted, each once", got)
	}
	if h := n.Health(); h.PendingEvents != 0 {
		t.Fatalf("%d events still pending", h.PendingEvents)
	}
}

// TestDelayedSparseClientNearItsLimit: a client at 1/s over 8 nodes with a
// limit of 20 per minute reaches each node only every 8 s or so. Without
// refreshing keys near their limit, each node would decide on a view many
// intervals old and let about one request per node too many through (27 of
// 20 was measured); with it the busiest minute stays at (1+e)·L = 21.
func TestDelayedSparseClientNearItsLimit(t *testing.T) {
	rule := disttest.MustAlg(t, algorithm.Config{Algorithm: algorithm.BoundedLog, Limit: 20, Window: time.Minute})
	clk := disttest.NewClock()
	nodes := delayedNodes(t, newFaultStore(), clk, 8, nil)
	acc, _ := disttest.Drive(t, clk, nodes, 1, 3*time.Minute, 200*time.Millisecond, func(n *Node, now int64) bool {
		d, err := n.DecideOne(ctx, now, store.Request{Algorithm: rule, Key: "sparse", Cost: 1})
		if err != nil {
			t.Fatal(err)
		}
		return d.Allowed
	}, nil)
	if b := disttest.Busiest(acc, time.Minute); b > 21 {
		t.Fatalf("busiest minute %d, want at most 21", b)
	}
}

// TestArrangementValid: the three arrangements are Valid and near misses
// are not.
func TestArrangementValid(t *testing.T) {
	for _, a := range Arrangements() {
		if !a.Valid() {
			t.Errorf("%q.Valid() = false", a)
		}
	}
	for _, a := range []Arrangement{"", "Delayed", "central", "gossip"} {
		if a.Valid() {
			t.Errorf("%q.Valid() = true", a)
		}
	}
}

// TestLoneSlowCallWaitsToTheCeiling checks, in a synctest bubble, that a
// call alone in flight is not sent to the failure policy at twice its
// adaptive deadline: with nothing else sent, no answer was missing, so it
// waits on to the ceiling and the store decides. A call made while another
// is unanswered still misses its deadline as before.
func TestLoneSlowCallWaitsToTheCeiling(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rule := disttest.MustAlg(t, algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: 100, Window: time.Hour})
		shared := newFaultStore()
		shared.roundTrip = 2 * time.Millisecond // the deadline learns it: 10 ms, the floor
		const floor, ceiling = 10 * time.Millisecond, time.Second
		n := mustNode(t, Options{Arrangement: Centralized, Shared: shared, ManualSync: true, Deadline: floor, MaxDeadline: ceiling})
		req := store.Request{Algorithm: rule, Key: "k", Cost: 1, OnFailure: store.FailClosed}
		if _, err := n.DecideOne(ctx, time.Now().UnixNano(), req); err != nil {
			t.Fatal(err)
		}
		shared.mu.Lock()
		shared.roundTrip = 25 * time.Millisecond // past twice the deadline: slow, alone, healthy
		shared.mu.Unlock()
		d, err := n.DecideOne(ctx, time.Now().UnixNano(), req)
		if err != nil || !d.Allowed || d.Remaining != 98 {
			t.Fatalf("lone slow call: %+v, %v; want the store's answer (allowed, 98 left)", d, err)
		}
		if h := n.Health(); h.DeadlineMisses != 0 || h.StoreErrors != 0 {
			t.Fatalf("lone slow call: %+v; want no miss and no error", h)
		}

		// Now calls hang, and a second call is made while the first is in
		// flight: neither is answered, so each misses its deadline (now
		// 75 ms, three times the slow call) and goes to the failure policy
		// (closed: rejected).
		shared.startStall()
		first := make(chan error, 1)
		go func() {
			_, err := n.DecideOne(ctx, time.Now().UnixNano(), req)
			first <- err
		}()
		time.Sleep(time.Millisecond)
		start := time.Now()
		d, err = n.DecideOne(ctx, time.Now().UnixNano(), req)
		took := time.Since(start)
		if err != nil || d.Allowed || took >= ceiling {
			t.Fatalf("call beside an unanswered one: %+v, %v after %v; want a rejection by the failure policy before the %v ceiling", d, err, took, ceiling)
		}
		if err := <-first; err != nil {
			t.Fatal(err)
		}
		if h := n.Health(); h.DeadlineMisses != 2 {
			t.Fatalf("two calls unanswered together: %d deadline misses, want 2 (%+v)", h.DeadlineMisses, h)
		}
		shared.endStall()
	})
}
