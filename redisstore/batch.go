package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/internal/inflight"
	"github.com/floodgate-dev/floodgate/store"
)

const (
	// batchInflight is how many DecideOne calls per hash slot go to Redis
	// at once before further ones wait to share a call. One gave the
	// largest calls and the least Redis CPU per decision in
	// scripts/compare-redis-cpu (10 decisions per call with 32 clients,
	// against 6.5 with two in flight).
	batchInflight = 1
	// maxBatch bounds the decisions of one shared call, so that one call
	// does not hold Redis for long.
	maxBatch = 128
)

// batcher groups concurrent DecideOne calls of one hash slot (one group on
// a single server). While no call is in flight, a decision goes out alone
// at once: light traffic waits for nothing. Beyond
// that, decisions queue, and as each call returns, everything queued goes
// out in one script call (op 'i'), which decides each key on its own.
// Redis then parses one EVALSHA, enters Lua once and answers once for many
// decisions, where each of these cost about as much as the decision itself.
// A queued decision waits at most for one call in flight to return.
type batcher struct {
	q inflight.Queue[*pending]
}

// pending is one queued decision.
type pending struct {
	ctx  context.Context
	now  int64
	req  store.Request
	sp   *spec
	key  string
	done chan struct{}
	d    algorithm.Decision
	err  error
}

// batcherFor returns the batcher of key's group.
func (s *Store) batcherFor(key string) *batcher {
	var sl uint16
	if s.cluster {
		sl = slot(key)
	}
	if b, ok := s.batchers.Load(sl); ok {
		return b.(*batcher)
	}
	b, _ := s.batchers.LoadOrStore(sl, &batcher{})
	return b.(*batcher)
}

// decideBatched decides one request through its slot's batcher: alone at
// once if nothing is in flight, else in the next shared call.
func (s *Store) decideBatched(ctx context.Context, now int64, req store.Request, sp *spec, key string) (algorithm.Decision, error) {
	b := s.batcherFor(key)
	p, alone := b.q.Enter(batchInflight, func() *pending {
		return &pending{ctx: ctx, now: now, req: req, sp: sp, key: key, done: make(chan struct{})}
	})
	if alone {
		d, err := s.decideAlone(ctx, now, req, sp, key)
		b.next(s)
		return d, err
	}
	select {
	case <-p.done:
		return p.d, p.err
	case <-ctx.Done():
		// Still queued, it is skipped and never counted; already sent, it
		// may count, as any call that runs out of time.
		return algorithm.Decision{}, fmt.Errorf("redisstore: %w", ctx.Err())
	}
}

// next hands what is queued to a goroutine that sends it, keeping the
// finished call's place in flight, or gives the place back.
func (b *batcher) next(s *Store) {
	if batch := b.q.Next(maxBatch); batch != nil {
		go b.run(s, batch)
	}
}

// run sends batches until nothing is queued.
func (b *batcher) run(s *Store, batch []*pending) {
	for ; batch != nil; batch = b.q.Next(maxBatch) {
		s.decideShared(batch)
	}
}

// decideShared decides batch in one script call and wakes each caller.
// Decisions whose caller already gave up are left out.
func (s *Store) decideShared(batch []*pending) {
	live, last := s.stillWaiting(batch)
	if len(live) == 0 {
		return
	}
	ctx, cancel := context.WithDeadline(context.Background(), last)
	defer cancel()
	switch {
	case floorMode != "":
		s.floorShared(ctx, live)
		return
	case len(live) == 1:
		p := live[0]
		p.d, p.err = s.decideAlone(p.ctx, p.now, p.req, p.sp, p.key)
		close(p.done)
		return
	}
	// Keys of one limit go together, so that its header is sent once; a
	// key named twice keeps its order (its limit is part of the key).
	live = bySpec(live)
	c := call{keys: make([]string, 0, len(live)), args: make([]string, 0, 2+len(live)*2+12)}
	c.args = append(c.args, "i", "")
	if s.clientTime {
		c.args[1] = "t"
	}
	for g := 0; g < len(live); {
		sp, n := live[g].sp, 0
		c.args = append(c.args, sp.header...)
		c.args = append(c.args, "")
		count := len(c.args) - 1
		for ; g < len(live) && live[g].sp == sp; g, n = g+1, n+1 {
			p := live[g]
			c.keys = append(c.keys, p.key)
			c.args = append(c.args, itoa(p.req.Cost))
			if s.clientTime {
				c.args = append(c.args, s.now(p.now))
			}
		}
		c.args[count] = strconv.Itoa(n)
	}
	res, err := s.exec(ctx, []call{c})
	var v []int64
	if err == nil {
		if v, err = res[0].AsIntSlice(); err != nil {
			err = fmt.Errorf("redisstore: reading decisions: %w", err)
		} else if len(v) != 6*len(live) {
			err = fmt.Errorf("redisstore: script returned %d values for %d decisions", len(v), len(live))
		}
	}
	for j, p := range live {
		switch {
		case err != nil:
			p.err = err
		case v[6*j+5] == -1:
			// The key's value could not be read; deciding it alone
			// returns the script's full error.
			p.d, p.err = s.decideAlone(p.ctx, p.now, p.req, p.sp, p.key)
		case v[6*j+5] < 0 || v[6*j+5] >= int64(len(reasons)):
			p.err = fmt.Errorf("redisstore: script returned reason code %d", v[6*j+5])
		default:
			p.d = decision(v[6*j:6*j+6], p.sp)
		}
		close(p.done)
	}
}

// stillWaiting answers the decisions of batch whose caller gave up and
// returns the others with the latest of their deadlines.
func (s *Store) stillWaiting(batch []*pending) ([]*pending, time.Time) {
	live := batch[:0:0]
	var last time.Time
	for _, p := range batch {
		if err := p.ctx.Err(); err != nil {
			p.err = fmt.Errorf("redisstore: %w", err)
			close(p.done)
			continue
		}
		dl, ok := p.ctx.Deadline()
		if !ok {
			dl = time.Now().Add(s.timeout)
		}
		if dl.After(last) {
			last = dl
		}
		live = append(live, p)
	}
	return live, last
}

// bySpec reorders batch so that decisions of one limit are adjacent, in
// order of first appearance, keeping their order within each limit.
func bySpec(batch []*pending) []*pending {
	out := make([]*pending, 0, len(batch))
	for i, p := range batch {
		if p == nil {
			continue
		}
		out = append(out, p)
		for j := i + 1; j < len(batch); j++ {
			if q := batch[j]; q != nil && q.sp == p.sp {
				out = append(out, q)
				batch[j] = nil
			}
		}
	}
	return out
}
