package memtable

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/store"

	"github.com/floodgate-dev/floodgate/algorithm"
)

// counter is a test-only algorithm: a fixed window of Limit units, with
// state [0] = window number + 1, [1] = units counted, and the remaining
// words (if Words asks for more) holding copies of [1] so tests can see
// whole states travel intact. Release gives units back, as concurrency does.
type counter struct {
	cfg   algorithm.Config
	words int
}

func newCounter(limit int64, window time.Duration, words int) *counter {
	return &counter{cfg: algorithm.Config{Algorithm: "test-counter", Limit: limit, Window: window, Slices: words}, words: words}
}

func (c *counter) Name() algorithm.Name     { return c.cfg.Algorithm }
func (c *counter) Config() algorithm.Config { return c.cfg }
func (c *counter) Words() int               { return c.words }
func (c *counter) IdleAfter() time.Duration { return c.cfg.Window }

func (c *counter) view(s []int64, now int64) (k, n int64) {
	k = now/int64(c.cfg.Window) + 1
	if s[0] == k {
		n = s[1]
	}
	return k, n
}

func (c *counter) set(s []int64, k, n int64) {
	s[0] = k
	for i := 1; i < len(s); i++ {
		s[i] = n
	}
}

func (c *counter) decide(s []int64, now, cost int64, commit bool) algorithm.Decision {
	k, n := c.view(s, now)
	d := algorithm.Decision{Limit: c.cfg.Limit}
	if cost < 1 {
		d.Reason = algorithm.ReasonBadCost
		return d
	}
	if n+cost > c.cfg.Limit {
		d.Remaining, d.Reason = c.cfg.Limit-n, algorithm.ReasonOverLimit
		return d
	}
	if commit {
		c.set(s, k, n+cost)
	}
	d.Allowed, d.Remaining = true, c.cfg.Limit-n-cost
	return d
}

func (c *counter) Decide(s []int64, now, cost int64) algorithm.Decision {
	return c.decide(s, now, cost, true)
}

func (c *counter) Peek(s []int64, now, cost int64) algorithm.Decision {
	return c.decide(s, now, cost, false)
}

func (c *counter) Record(s []int64, now, cost int64) {
	k, n := c.view(s, now)
	if k >= s[0] {
		c.set(s, k, n+cost)
	}
}

func (c *counter) Release(s []int64, now, cost int64) {
	k, n := c.view(s, now)
	c.set(s, k, max(0, n-cost))
}

// count returns the units counted for key in the window of now, read with
// an event-less Sync so nothing changes.
func count(t testing.TB, s *Store, c *counter, key string, now int64) int64 {
	t.Helper()
	b := []store.SyncBatch{{Algorithm: c, Key: key}}
	if err := s.Sync(context.Background(), now, b); err != nil {
		t.Fatal(err)
	}
	_, n := c.view(b[0].State, now)
	return n
}

// tracked reports whether the store holds key under a's limit.
func tracked(t testing.TB, s *Store, a algorithm.Algorithm, key string) bool {
	t.Helper()
	l, err := s.limitFor(a)
	if err != nil {
		t.Fatal(err)
	}
	h := s.hash(key)
	sh := s.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.table(l).find(h) >= 0
}
