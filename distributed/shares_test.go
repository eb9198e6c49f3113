package distributed

import (
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/internal/testkit/disttest"
	"github.com/floodgate-dev/floodgate/store"
)

// splitFleet is a set of live split nodes under a virtual clock: nodes
// join and stop, each beats every second of virtual time.
type splitFleet struct {
	t      *testing.T
	shared *faultStore
	clk    *disttest.Clock
	nodes  []*Node
	next   map[string]int // round-robin, per key
}

func newSplitFleet(t *testing.T, n int) *splitFleet {
	f := &splitFleet{t: t, shared: newFaultStore(), clk: disttest.NewClock(), next: map[string]int{}}
	f.add(n)
	return f
}

func (f *splitFleet) add(k int) {
	for range k {
		f.nodes = append(f.nodes, mustNode(f.t, Options{Arrangement: Split, Shared: f.shared, Clock: f.clk.Now, ManualSync: true,
			Membership: &Membership{Period: time.Second}}))
	}
}

// stop closes the last k nodes.
func (f *splitFleet) stop(k int) {
	for _, n := range f.nodes[len(f.nodes)-k:] {
		if err := n.Close(ctx); err != nil {
			f.t.Fatal(err)
		}
	}
	f.nodes = f.nodes[:len(f.nodes)-k]
}

func (f *splitFleet) beat() {
	for _, n := range f.nodes {
		if err := n.Heartbeat(ctx); err != nil {
			f.t.Fatal(err)
		}
	}
}

// decide sends one request of rule and key to the next node in turn.
func (f *splitFleet) decide(rule algorithm.Algorithm, key string) bool {
	i := (f.next[key] + 1) % len(f.nodes)
	f.next[key] = i
	d, err := f.nodes[i].DecideOne(ctx, f.clk.NS(), store.Request{Algorithm: rule, Key: key, Cost: 1})
	if err != nil {
		f.t.Fatal(err)
	}
	return d.Allowed
}

// shares returns the sum of the nodes' shares of rule now.
func (f *splitFleet) shares(rule algorithm.Algorithm) int64 {
	var sum int64
	for _, n := range f.nodes {
		a, err := n.liveShare(rule, f.clk.NS())
		if err != nil {
			f.t.Fatal(err)
		}
		sum += a.share - a.charge
	}
	return sum
}

// TestLiveSplitSharesAddUpToTheLimit scales 3 -> 8 -> 2 live split nodes:
// at every second the nodes' shares of a limit of 600 per minute add up to
// at most 600 and the newcomers' first unit (a share is at least 1) and
// what the newcomers' shares rise in the period before the old nodes see
// them, (L/8)·(P/W) each; after the ramp each holds L/n.
func TestLiveSplitSharesAddUpToTheLimit(t *testing.T) {
	rule := disttest.MustAlg(t, algorithm.Config{Algorithm: algorithm.BoundedLog, Limit: 600, Window: time.Minute})
	f := newSplitFleet(t, 3)
	f.beat()
	// Every node starts from one unit.
	if got := f.shares(rule); got != 3 {
		t.Fatalf("3 nodes started: shares add up to %d, want 3", got)
	}

	check := func(phase string, seconds int, slack int64, want int64) {
		t.Helper()
		for s := range seconds {
			f.clk.Add(time.Second)
			// The newcomers' first second: the old nodes beat after it.
			sum := f.shares(rule)
			if sum > 600+slack {
				t.Fatalf("%s, second %d: shares add up to %d, above 600 + %d", phase, s, sum, slack)
			}
			f.beat()
			if sum := f.shares(rule); sum > 600+slack {
				t.Fatalf("%s, second %d, every node beat: shares add up to %d, above 600 + %d", phase, s, sum, slack)
			}
		}
		if got := f.shares(rule); got != want {
			t.Fatalf("%s: after the ramp the shares add up to %d, want %d", phase, got, want)
		}
	}
	check("3 started", 70, 3, 600)
	f.add(5)
	// Each newcomer: 1 unit, + 74/60 a second; seen within a second.
	check("3 -> 8", 70, 5*(1+2), 8*75)
	f.stop(6)
	check("8 -> 2", 70, 0, 600)
}

// TestLiveSplitSteadyClients runs a client at 80% of its limit and a
// greedy one, spread evenly, through 3 -> 8 -> 2 live split nodes: the
// first is never rejected, and the greedy one's busiest minute stays
// within (1+e)·L plus what the newcomers' shares add in the second before
// the others see them.
func TestLiveSplitSteadyClients(t *testing.T) {
	for _, alg := range []algorithm.Name{algorithm.BoundedLog, algorithm.SlidingWindow, algorithm.FixedWindow, algorithm.GCRA, algorithm.SlidingLog} {
		t.Run(string(alg), func(t *testing.T) {
			rule := disttest.MustAlg(t, algorithm.Config{Algorithm: alg, Limit: 600, Window: time.Minute})
			f := newSplitFleet(t, 3)
			var greedy []int64
			rejected := 0
			const tick = 25 * time.Millisecond // 40 ticks a second
			for i := range 400 * 40 {
				switch i {
				case 120 * 40:
					f.add(5)
				case 240 * 40:
					f.stop(6)
				}
				if i%40 == 0 {
					f.beat()
				}
				if i%5 == 0 && !f.decide(rule, "steady") { // 8/s: 480 a minute
					rejected++
				}
				if f.decide(rule, "greedy") { // 40/s
					greedy = append(greedy, f.clk.NS())
				}
				f.clk.Add(tick)
			}
			b := disttest.Busiest(greedy, time.Minute)
			// (1+e)·L, or 2L for a fixed window (at a window boundary), and
			// the newcomers' unit and what they take in the second before
			// the others see them.
			bound := int(1.05*600) + 5*(1+2)
			if alg == algorithm.FixedWindow || alg == algorithm.GCRA {
				bound = 2*600 + 5*(1+2) // a bucket: the rate for a minute, and its burst
			}
			t.Logf("%s: steady client rejected %d times; greedy: %d accepted, busiest minute %d (bound %d)", alg, rejected, len(greedy), b, bound)
			// A sliding log's state does not convert: what it used is
			// counted from the time of each change, for a window.
			if rejected != 0 && alg != algorithm.SlidingLog {
				t.Errorf("the client at 80%% of its limit was rejected %d times", rejected)
			}
			if b > bound {
				t.Errorf("busiest minute %d above %d", b, bound)
			}
		})
	}
}

// TestLiveSplitKeepsTheCount: a key's count on a node survives its
// share's changes: a node that used its whole share of 200 (3 nodes) stays
// at its limit when the share falls to 75, and gets no more until the
// window moves.
func TestLiveSplitKeepsTheCount(t *testing.T) {
	for _, alg := range []algorithm.Name{algorithm.FixedWindow, algorithm.BoundedLog, algorithm.GCRA, algorithm.SlidingLog} {
		t.Run(string(alg), func(t *testing.T) {
			rule := disttest.MustAlg(t, algorithm.Config{Algorithm: alg, Limit: 600, Window: time.Hour})
			f := newSplitFleet(t, 1)
			f.add(2)
			f.beat()
			f.clk.Add(time.Hour) // the ramps of the start are over: 200 each
			n := f.nodes[0]
			req := store.Request{Algorithm: rule, Key: "k", Cost: 1}
			for i := range 200 {
				if d, _ := n.DecideOne(ctx, f.clk.NS(), req); !d.Allowed {
					t.Fatalf("request %d of 200 rejected", i)
				}
			}
			f.add(5)
			f.clk.Add(time.Second)
			f.beat()
			// A bucket refills at its share's rate: it is checked at once.
			for s := range 30 {
				if d, _ := n.DecideOne(ctx, f.clk.NS(), req); d.Allowed {
					t.Fatalf("%d min after 5 joined: request allowed, share %d", s, d.Limit)
				}
				if alg == algorithm.GCRA {
					break
				}
				f.clk.Add(time.Minute)
			}
		})
	}
}
