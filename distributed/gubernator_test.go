package distributed

import (
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/algorithm/gubernator"
	"github.com/floodgate-dev/floodgate/internal/testkit/disttest"
	"github.com/floodgate-dev/floodgate/store"
)

// TestDelayedDecidesWithTheRequestsAlgorithm: gubernator's requests share
// one Config whatever their parameters, so a delayed node must decide each
// with its own (a raised limit counts at once) and push its events with the
// latest request's parameters, which the shared store records with (as a
// gubernator owner applies forwarded GLOBAL hits): another node then reads
// the bucket those parameters make.
func TestDelayedDecidesWithTheRequestsAlgorithm(t *testing.T) {
	clk := disttest.NewClock()
	shared := newFaultStore()
	nodes := delayedNodes(t, shared, clk, 2, nil)
	token10 := gubernator.New(gubernator.Params{Limit: 10, Duration: 60_000})
	token20 := gubernator.New(gubernator.Params{Limit: 20, Duration: 60_000})
	leaky20 := gubernator.New(gubernator.Params{Leaky: true, Limit: 20, Duration: 60_000})
	decide := func(n *Node, a algorithm.Algorithm, hits int64) algorithm.Decision {
		t.Helper()
		d, err := n.DecideOne(ctx, clk.NS(), store.Request{Algorithm: a, Key: "k", Cost: hits})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	var times []int64
	for range 3 {
		times = append(times, clk.NS())
		decide(nodes[0], token10, 1)
		clk.Add(time.Millisecond)
	}
	// The limit raised by 10: remaining 7 + 10 - 1, as gubernator answers.
	if d := decide(nodes[0], token20, 1); d.Limit != 20 || d.Remaining != 16 {
		t.Fatalf("token bucket raised to 20 after 3 hits of 10: limit %d remaining %d, want 20 and 16", d.Limit, d.Remaining)
	}
	// A switch to a leaky bucket starts a new one, on the node and in the
	// store's record of the pushed events.
	times = append(times, clk.NS())
	if d := decide(nodes[0], leaky20, 1); d.Remaining != 19 {
		t.Fatalf("leaky bucket after a token bucket: remaining %d, want 19 (a new bucket)", d.Remaining)
	}
	decide(nodes[1], leaky20, 0) // the other node reads the key from now on
	if err := nodes[0].Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := nodes[1].Sync(ctx); err != nil {
		t.Fatal(err)
	}
	// The store recorded the 5 hits with the leaky bucket's parameters.
	want := make([]int64, leaky20.Words())
	for _, at := range times[:3] {
		leaky20.Record(want, at, 1)
	}
	leaky20.Record(want, times[3], 1)
	leaky20.Record(want, times[3], 1)
	w := leaky20.Peek(want, clk.NS(), 0)
	if w.Remaining != 15 {
		t.Fatalf("reference: %+v, want 15 left", w)
	}
	clk.Add(time.Millisecond)
	if d := decide(nodes[1], leaky20, 0); d.Remaining != w.Remaining || d.Limit != 20 {
		t.Fatalf("the other node reads %+v, want the leaky bucket the store recorded: %+v", d, w)
	}
}

// TestSplitDividesTheRequestsLimit: a split node enforces its part of each
// gubernator request's own limit, which changes from request to request.
func TestSplitDividesTheRequestsLimit(t *testing.T) {
	n := mustNode(t, Options{Arrangement: Split, Nodes: 2, ManualSync: true})
	now := time.Date(2026, 7, 30, 0, 0, 0, 0, time.UTC).UnixNano()
	for _, c := range []struct{ limit, share int64 }{{10, 5}, {40, 20}, {1, 1}} {
		a := gubernator.New(gubernator.Params{Limit: c.limit, Duration: 60_000})
		d, err := n.DecideOne(ctx, now, store.Request{Algorithm: a, Key: "k", Cost: 0})
		if err != nil {
			t.Fatal(err)
		}
		if d.Limit != c.share {
			t.Fatalf("limit %d over 2 nodes: the node enforces %d, want %d", c.limit, d.Limit, c.share)
		}
	}
}

// TestLiveSplitDividesTheRequestsLimit: a split node counting the live
// nodes divides each gubernator request's limit by the count it sees.
func TestLiveSplitDividesTheRequestsLimit(t *testing.T) {
	clk := disttest.NewClock()
	shared := newFaultStore()
	nodes := make([]*Node, 4)
	for k := range nodes {
		nodes[k] = mustNode(t, Options{Arrangement: Split, Shared: shared, Clock: clk.Now, ManualSync: true,
			Membership: &Membership{Period: time.Second}})
	}
	beatAll(t, clk, nodes...)
	beatAll(t, clk, nodes...)
	wantCount(t, nodes, 4, "four nodes")
	for _, c := range []struct{ limit, share int64 }{{100, 25}, {8, 2}} {
		a := gubernator.New(gubernator.Params{Limit: c.limit, Duration: 60_000})
		d, err := nodes[0].DecideOne(ctx, clk.NS(), store.Request{Algorithm: a, Key: "k", Cost: 0})
		if err != nil {
			t.Fatal(err)
		}
		if d.Limit != c.share {
			t.Fatalf("limit %d over 4 live nodes: the node enforces %d, want %d", c.limit, d.Limit, c.share)
		}
	}
}
