// Package disttest holds the helpers of the tests of package distributed,
// shared by its own tests (on in-process stores) and by its tests over a
// real Redis, which run in the redisstore module: a virtual clock, rules,
// the reading of a shared store's count, the busiest window of accepted
// requests and a driver of one client through several nodes.
//
// It does not import distributed, so that distributed's internal tests can
// import it without an import cycle: Drive takes the nodes as a Node,
// which *distributed.Node is.
package disttest

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/store"
)

// Clock is a virtual clock safe for concurrent reads; its Now is what a
// node's Options.Clock takes.
type Clock struct{ ns atomic.Int64 }

// NewClock returns a clock at 2026-07-30 00:00 UTC.
func NewClock() *Clock {
	c := &Clock{}
	c.ns.Store(time.Date(2026, 7, 30, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time { return time.Unix(0, c.ns.Load()) }

// Add moves the clock on by d and returns the new time in Unix ns.
func (c *Clock) Add(d time.Duration) int64 { return c.ns.Add(int64(d)) }

// NS returns the clock's time in Unix ns.
func (c *Clock) NS() int64 { return c.ns.Load() }

// Set sets the clock to ns, Unix ns.
func (c *Clock) Set(ns int64) { c.ns.Store(ns) }

// MustAlg returns the algorithm c configures, failing t if c is invalid.
func MustAlg(t testing.TB, c algorithm.Config) algorithm.Algorithm {
	t.Helper()
	a, err := algorithm.New(c)
	if err != nil {
		t.Fatalf("algorithm.New(%+v): %v", c, err)
	}
	return a
}

// CounterRule counts every accepted request, so the shared store's count
// can be compared with what the nodes accepted.
func CounterRule(t testing.TB) algorithm.Algorithm {
	return MustAlg(t, algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: algorithm.MaxLimit, Window: 24 * time.Hour})
}

// Used returns how many cost units state holds at now, as the algorithm
// reports it: the allowance of an empty state minus the allowance left.
// It reads a store's state the way the distributed nodes do, written here
// again so that a test's reading does not rest on the code it tests.
func Used(alg algorithm.Algorithm, state []int64, now int64) int64 {
	empty := alg.Peek(make([]int64, alg.Words()), now, 1).Remaining
	d := alg.Peek(state, now, 1)
	if !d.Allowed {
		// Remaining is not reduced by a request that does not fit.
		return empty + 1 - d.Remaining
	}
	return max(0, empty-d.Remaining)
}

// SharedCount returns the count the shared store holds for key under alg,
// read with an empty sync. It tries three times: right after a Redis
// restart the client's first call may meet a connection the old process
// closed.
func SharedCount(t testing.TB, s store.Syncer, alg algorithm.Algorithm, key string, now int64) int64 {
	t.Helper()
	var err error
	for try := 0; try < 3; try++ {
		b := []store.SyncBatch{{Algorithm: alg, Key: key}}
		if err = s.Sync(context.Background(), now, b); err == nil {
			return Used(alg, b[0].State, now)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("reading the shared count: %v", err)
	return 0
}

// Busiest returns the largest number of times within any window-long
// interval (t_i - t_j < window); times are in increasing order.
func Busiest(times []int64, window time.Duration) int {
	best, j := 0, 0
	for i := range times {
		for times[i]-times[j] >= int64(window) {
			j++
		}
		best = max(best, i-j+1)
	}
	return best
}

// Node is a limiter node as Drive drives it: a *distributed.Node.
type Node interface {
	store.Store
	Sync(ctx context.Context) error
}

// lcgNode is the baseline's generator: s = s*1103515245+12345, node floor(s/2^32*n).
type lcgNode uint32

func (g *lcgNode) next(n int) int {
	*g = *g*1103515245 + 12345
	return int(uint64(*g) * uint64(n) >> 32)
}

// Drive drives a client at rate per second for dur through nodes, on clk,
// each node syncing when its own interval has passed since its last sync;
// node k's first sync comes at k/len(nodes) of an interval, as
// unsynchronized nodes do. The node of each request is drawn by the
// baseline's generator. decide is called for each request and returns
// whether it was accepted; between, if not nil, is called before each
// request with the time elapsed since the start. Drive returns the times
// of the accepted requests and the number rejected.
func Drive[N Node](t testing.TB, clk *Clock, nodes []N, rate int, dur, interval time.Duration,
	decide func(n N, now int64) bool, between func(elapsed time.Duration)) (accepted []int64, rejected int) {
	t.Helper()
	start := clk.NS()
	next := make([]int64, len(nodes))
	for k := range next {
		next[k] = start + int64(interval)*int64(k+1)/int64(len(nodes))
	}
	g := lcgNode(20260730)
	n := int(int64(rate) * int64(dur) / int64(time.Second))
	for i := 0; i < n; i++ {
		at := start + int64(i)*int64(time.Second)/int64(rate)
		clk.Set(at)
		if between != nil {
			between(time.Duration(at - start))
		}
		for k, nd := range nodes {
			if at >= next[k] {
				nd.Sync(context.Background()) // failures are the test's business: the node keeps its counts
				next[k] = at + int64(interval)
			}
		}
		if decide(nodes[g.next(len(nodes))], at) {
			accepted = append(accepted, at)
		} else {
			rejected++
		}
	}
	return accepted, rejected
}
