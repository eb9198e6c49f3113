package redisstore_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/distributed"
	"github.com/floodgate-dev/floodgate/internal/testkit/disttest"
	"github.com/floodgate-dev/floodgate/internal/testkit/netcut"
	"github.com/floodgate-dev/floodgate/internal/testkit/redistest"
	"github.com/floodgate-dev/floodgate/redisstore"
	"github.com/floodgate-dev/floodgate/store"
)

// region is one region of the test: its Redis, its nodes and its exchange
// with the others, which reaches them through links.
type region struct {
	name     string
	srv      *redistest.Server
	local    *redisstore.Store
	nodes    []*distributed.Node
	exchange *redisstore.Exchange
	links    []*netcut.Link // to the other regions' Redis
}

func regionStore(t *testing.T, addr string, outbox []string, timeout time.Duration) *redisstore.Store {
	t.Helper()
	s, err := redisstore.New(ctx, redisstore.Options{Addrs: []string{addr}, ClientTime: true, Timeout: timeout, Outbox: outbox})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// newRegions starts len(names) regions of nodesEach delayed nodes.
func newRegions(t *testing.T, clk *disttest.Clock, names []string, nodesEach int) []*region {
	rs := make([]*region, len(names))
	for i, n := range names {
		rs[i] = &region{name: n, srv: redistest.Start(t)}
	}
	for _, r := range rs {
		others := slices.DeleteFunc(slices.Clone(names), func(x string) bool { return x == r.name })
		r.local = regionStore(t, r.srv.Addr(), others, 5*time.Second)
		remotes := map[string]*redisstore.Store{}
		for _, o := range rs {
			if o != r {
				l := netcut.New(t, o.srv.Addr())
				r.links = append(r.links, l)
				remotes[o.name] = regionStore(t, l.Addr(), nil, 500*time.Millisecond)
			}
		}
		x, err := redisstore.NewExchange(r.local, redisstore.ExchangeOptions{Region: r.name, Remotes: remotes, Holder: r.name})
		if err != nil {
			t.Fatal(err)
		}
		r.exchange = x
		for k := range nodesEach {
			r.nodes = append(r.nodes, mustNode(t, distributed.Options{
				Arrangement: distributed.Delayed, Shared: r.local, Clock: clk.Now, ManualSync: true,
				Deadline: time.Second, SyncDeadline: 2 * time.Second, ID: fmt.Sprintf("%s-%d", r.name, k),
				Membership: &distributed.Membership{Period: time.Second}, Region: &distributed.Region{Regions: len(names)},
			}))
		}
	}
	return rs
}

// TestRegionsShareOneLimit: three regions, each a redis-server of its own
// and two delayed nodes, forward their counts to each other every second
// (the exchange) while their nodes sync every 200 ms and beat every
// second, on a virtual clock. A greedy client sends 30, 60 and 10 requests
// a second through the three regions against one limit of 600 per minute
// (bounded-log), and a steady one 8 a second spread evenly (80% of its
// limit); region c is cut off from the others for a minute.
//
// The busiest minute of the greedy client's accepted requests, all regions
// together, stays within (1+e)·L plus what the regions accept in the time
// an admission takes to reach the others' nodes (delta = 2 sync intervals
// and an exchange interval), and while the cut is found (the link timeout
// and a heartbeat period) what they accept in that time more; the steady
// client is rejected only while the cut lasts (each region then keeps its
// third of what is left). After the link is back, every region's Redis
// holds every region's count of a ledger key once.
func TestRegionsShareOneLimit(t *testing.T) {
	clk := disttest.NewClock()
	names := []string{"a", "b", "c"}
	rs := newRegions(t, clk, names, 2)
	rule := disttest.MustAlg(t, algorithm.Config{Algorithm: algorithm.BoundedLog, Limit: 600, Window: time.Minute})
	ledger := disttest.MustAlg(t, algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: 1 << 30, Window: time.Hour})
	rates := []int{30, 60, 10}
	const tick = 10 * time.Millisecond
	const interval, exchange, beat = 200 * time.Millisecond, time.Second, time.Second
	start := clk.NS()
	cutFrom, cutTo := start+int64(120*time.Second), start+int64(180*time.Second)
	duration := 300 * time.Second
	var greedy, steadyRejectedAt []int64
	var greedyByRegion [3]int
	ledgerAllowed := 0
	sent := [3]int{}
	cutDone := false
	for step := int64(0); step < int64(duration/tick); step++ {
		now := start + step*int64(tick)
		clk.Set(now)
		if now == cutFrom {
			for _, l := range rs[2].links {
				l.Cut()
			}
			for _, r := range rs[:2] {
				r.links[1].Cut() // a's and b's link to c: their second
			}
		}
		if now == cutTo && !cutDone {
			cutDone = true
			for _, r := range rs {
				for _, l := range r.links {
					l.Mend()
				}
			}
		}
		for _, r := range rs {
			for k, n := range r.nodes {
				// The nodes of a region sync and beat half a period apart.
				off := int64(k) * int64(interval) / 2
				if (now-start-off)%int64(interval) == 0 {
					n.Sync(ctx) // a failure keeps the counts
				}
				if (now-start-off)%int64(beat) == 0 {
					n.Heartbeat(ctx)
				}
			}
			if (now-start)%int64(exchange) == int64(exchange)/2 {
				r.exchange.Step(ctx, now) // a cut link's round fails; its counts wait
			}
		}
		for i, r := range rs {
			// rates[i] a second: the requests due by the end of this tick
			// that were not sent yet.
			if int(int64(step+1)*int64(rates[i])*int64(tick)/int64(time.Second)) <= sent[i] {
				continue
			}
			sent[i]++
			n := r.nodes[sent[i]%len(r.nodes)]
			var out [2]algorithm.Decision
			err := n.Decide(ctx, now, []store.Request{{Algorithm: rule, Key: "greedy", Cost: 1}, {Algorithm: ledger, Key: "ledger", Cost: 1}}, out[:])
			if err != nil {
				t.Fatal(err)
			}
			if out[0].Allowed {
				greedy = append(greedy, now)
				greedyByRegion[i]++
				ledgerAllowed++
			}
		}
		if (now-start)%int64(125*time.Millisecond) == 0 { // 8/s, over the six nodes in turn
			k := int((now - start) / int64(125*time.Millisecond))
			r := rs[k%3]
			d, err := r.nodes[(k/3)%2].DecideOne(ctx, now, store.Request{Algorithm: rule, Key: "steady", Cost: 1})
			if err != nil {
				t.Fatal(err)
			}
			if !d.Allowed {
				steadyRejectedAt = append(steadyRejectedAt, now)
			}
		}
	}
	// Let every count reach every region: syncs, exchanges, syncs.
	for range 3 {
		clk.Add(time.Second)
		for _, r := range rs {
			for _, n := range r.nodes {
				n.Sync(ctx)
			}
		}
		for _, r := range rs {
			if err := r.exchange.Step(ctx, clk.NS()); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, r := range rs {
		if got := disttest.SharedCount(t, r.local, ledger, "ledger", clk.NS()); got != int64(ledgerAllowed) {
			t.Errorf("region %s's Redis counts %d for the ledger key, %d were accepted in all", r.name, got, ledgerAllowed)
		}
	}

	window := time.Minute
	busiest := disttest.Busiest(greedy, window)
	// What the regions accepted in the busiest stretch of delta, and of
	// delta plus the time to find the cut.
	delta := 2*interval + exchange
	find := 3*time.Second + beat
	inDelta, inCut := disttest.Busiest(greedy, delta), disttest.Busiest(greedy, delta+find)
	before := disttest.Busiest(windowed(greedy, start, cutFrom), window)
	during := disttest.Busiest(windowed(greedy, cutFrom-int64(window), cutTo+int64(window)), window)
	var rejectedOutside, rejectedDuring int
	for _, at := range steadyRejectedAt {
		if at >= cutFrom && at < cutTo+int64(time.Second) {
			rejectedDuring++
		} else {
			rejectedOutside++
		}
	}
	t.Logf("greedy 30/60/10 per s: accepted %v of %v; busiest minute %d before the cut, %d around it (1.05 L = 630; most accepted in %v: %d, in %v: %d); steady 8/s rejected %d during the cut, %d outside it; ledger %d",
		greedyByRegion, sent, before, during, delta, inDelta, delta+find, inCut, rejectedDuring, rejectedOutside, ledgerAllowed)
	if before > 630+inDelta {
		t.Errorf("busiest minute before the cut %d, above 630 + %d", before, inDelta)
	}
	if busiest > 630+inCut {
		t.Errorf("busiest minute %d, above 630 + %d", busiest, inCut)
	}
	if rejectedOutside != 0 {
		t.Errorf("the steady client was rejected %d times outside the cut", rejectedOutside)
	}
}

// windowed returns the times in [from, to).
func windowed(times []int64, from, to int64) []int64 {
	var out []int64
	for _, t := range times {
		if t >= from && t < to {
			out = append(out, t)
		}
	}
	return out
}
