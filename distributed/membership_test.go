package distributed

import (
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/internal/testkit/disttest"
	"github.com/floodgate-dev/floodgate/store"
)

// liveNodes starts count delayed nodes counting each other through shared
// (ManualSync: the test beats and syncs them).
func liveNodes(t *testing.T, shared *faultStore, clk *disttest.Clock, count int) []*Node {
	t.Helper()
	nodes := make([]*Node, count)
	for k := range nodes {
		nodes[k] = mustNode(t, Options{
			Arrangement: Delayed, Shared: shared, Clock: clk.Now, ManualSync: true,
			Deadline: time.Second, SyncDeadline: 5 * time.Second, Refresh: time.Hour,
			Membership: &Membership{Period: time.Second},
		})
	}
	return nodes
}

// beatAll makes every node in nodes beat once, one period later.
func beatAll(t *testing.T, clk *disttest.Clock, nodes ...*Node) {
	t.Helper()
	clk.Add(time.Second)
	for _, n := range nodes {
		if err := n.Heartbeat(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func counts(nodes []*Node) []int {
	out := make([]int, len(nodes))
	for i, n := range nodes {
		out[i] = n.Health().Nodes
	}
	return out
}

func wantCount(t *testing.T, nodes []*Node, want int, when string) {
	t.Helper()
	for i, c := range counts(nodes) {
		if c != want {
			t.Fatalf("%s: node %d counts %d nodes, want %d (all: %v)", when, i, c, want, counts(nodes))
		}
	}
}

// TestMembershipFollowsTheLiveNodes scales 3 -> 8 -> 2: every node sees a
// join or a departure (Close) within one beat, and a node that stops
// beating without a word when its expiry has passed.
func TestMembershipFollowsTheLiveNodes(t *testing.T) {
	clk := disttest.NewClock()
	shared := newFaultStore()
	nodes := liveNodes(t, shared, clk, 3)
	beatAll(t, clk, nodes...)
	wantCount(t, nodes, 3, "3 started")
	nodes = append(nodes, liveNodes(t, shared, clk, 5)...)
	wantCount(t, nodes[7:], 8, "the last newcomer, after its first beat")
	beatAll(t, clk, nodes...)
	wantCount(t, nodes, 8, "one beat after 5 joined")
	for _, n := range nodes[2:] {
		if err := n.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	nodes = nodes[:2]
	beatAll(t, clk, nodes...)
	wantCount(t, nodes, 2, "one beat after 6 closed")

	// A node that stops beating is counted until its expiry (3 s) has
	// passed: shares stay smaller meanwhile.
	beatAll(t, clk, nodes[0])
	beatAll(t, clk, nodes[0])
	wantCount(t, nodes[:1], 2, "2 s after the other's last beat")
	beatAll(t, clk, nodes[0])
	wantCount(t, nodes[:1], 1, "3 s after the other's last beat")
	if h := nodes[0].Health(); !h.Live || h.RosterAge != 0 || h.HeartbeatErrors != 0 {
		t.Fatalf("health: %+v", h)
	}
}

// TestMembershipKeepsTheCountWhileTheStoreIsDown: a node keeps the last
// count it saw while its beats fail, and when the store comes back after
// every entry expired, the first node back does not take itself for the
// only one.
func TestMembershipKeepsTheCountWhileTheStoreIsDown(t *testing.T) {
	clk := disttest.NewClock()
	shared := newFaultStore()
	nodes := liveNodes(t, shared, clk, 4)
	beatAll(t, clk, nodes...)
	wantCount(t, nodes, 4, "4 started")
	shared.setDown(true)
	for range 10 {
		clk.Add(time.Second)
		for _, n := range nodes {
			if err := n.Heartbeat(ctx); err == nil {
				t.Fatal("a beat succeeded with the store down")
			}
		}
	}
	wantCount(t, nodes, 4, "10 s into the outage")
	if h := nodes[0].Health(); h.HeartbeatErrors != 10 || h.RosterAge != 10*time.Second {
		t.Fatalf("health during the outage: %+v", h)
	}
	shared.setDown(false)
	clk.Add(time.Second)
	if err := nodes[0].Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	wantCount(t, nodes[:1], 4, "the first node back, alone in the roster")
	beatAll(t, clk, nodes...)
	wantCount(t, nodes, 4, "a beat after the store came back")
}

// TestMembershipAssumesUntilTheFirstBeat: a node that starts while the
// store is down uses Membership.Assume.
func TestMembershipAssumesUntilTheFirstBeat(t *testing.T) {
	clk := disttest.NewClock()
	shared := newFaultStore()
	shared.setDown(true)
	n := mustNode(t, Options{Arrangement: Delayed, Shared: shared, Clock: clk.Now, ManualSync: true,
		Membership: &Membership{Assume: 6}})
	if h := n.Health(); h.Nodes != 6 || h.RosterAge != -1 {
		t.Fatalf("before any answer: %+v", h)
	}
	shared.setDown(false)
	beatAll(t, clk, n)
	if got := n.Health().Nodes; got != 1 {
		t.Fatalf("after the first answer: %d nodes, want 1", got)
	}
}

// TestFailLocalSharesFollowTheLiveCount: 8 live delayed nodes, 64 of 120
// used, then the store fails: fail-local lets the 8 together accept the
// 56 left, not 8/3 of it as nodes configured for 3 would.
func TestFailLocalSharesFollowTheLiveCount(t *testing.T) {
	rule := disttest.MustAlg(t, algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: 120, Window: time.Hour})
	for _, c := range []struct {
		name  string
		nodes func(*faultStore, *disttest.Clock) []*Node
		want  int
	}{
		{"live", func(s *faultStore, clk *disttest.Clock) []*Node {
			n := liveNodes(t, s, clk, 8)
			beatAll(t, clk, n...)
			return n
		}, 56},
		{"fixed at 3", func(s *faultStore, clk *disttest.Clock) []*Node {
			return delayedNodes(t, s, clk, 8, func(o *Options) { o.Nodes = 3; o.Refresh = time.Hour })
		}, 8 * (40 - 22)},
	} {
		t.Run(c.name, func(t *testing.T) {
			clk := disttest.NewClock()
			shared := newFaultStore()
			nodes := c.nodes(shared, clk)
			req := store.Request{Algorithm: rule, Key: "k", Cost: 1, OnFailure: store.FailLocal}
			for i := range 64 {
				if d, _ := nodes[i%8].DecideOne(ctx, clk.NS(), req); !d.Allowed {
					t.Fatalf("request %d rejected with the store up", i)
				}
			}
			for _, n := range nodes {
				if err := n.Sync(ctx); err != nil {
					t.Fatal(err)
				}
			}
			for _, n := range nodes { // every node pulls the 64 (Refresh)
				if err := n.Sync(ctx); err != nil {
					t.Fatal(err)
				}
			}
			shared.setDown(true)
			for range defaultBreakerFailures {
				clk.Add(200 * time.Millisecond)
				for _, n := range nodes {
					n.Sync(ctx)
				}
			}
			accepted := 0
			for range 50 {
				for _, n := range nodes {
					if d, err := n.DecideOne(ctx, clk.NS(), req); err != nil {
						t.Fatal(err)
					} else if d.Allowed {
						accepted++
					}
				}
			}
			if accepted != c.want {
				t.Fatalf("the outage accepted %d, want %d", accepted, c.want)
			}
		})
	}
}

func TestMembershipOptions(t *testing.T) {
	m := newFaultStore()
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{Arrangement: Delayed, Shared: m, Nodes: 3, Membership: &Membership{}}, "not both"},
		{Options{Arrangement: Split, Membership: &Membership{}}, "store.Roster"},
		{Options{Arrangement: Delayed, Shared: m, Membership: &Membership{Period: time.Second, Expiry: time.Second}}, "two periods"},
		{Options{Arrangement: Delayed, Shared: m, Membership: &Membership{Assume: -1}}, "negative"},
		{Options{Arrangement: Delayed, Shared: noRoster{m}, Syncer: m, Membership: &Membership{}}, "store.Roster"},
	} {
		if _, err := New(c.o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want one saying %q", c.o.Membership, err, c.want)
		}
	}
}

// noRoster hides a store's roster.
type noRoster struct{ store.Store }
