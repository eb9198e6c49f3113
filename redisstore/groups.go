package redisstore

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/rueidis"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/store"
)

// groupDecision is a queued Decide of several requests (a request's
// limits), decided all or nothing. Its answers go to ds, which the waiting
// caller copies out: a caller that gave up must not have its slice written
// later.
type groupDecision struct {
	reqs []store.Request
	rs   []request
	ds   []algorithm.Decision
}

// decideGroupBatched decides reqs, whose keys rs share a server, all or
// nothing, through the server's batcher: alone at once if nothing is in
// flight, else with the decisions queued meanwhile (op 'g' for the groups
// beside op 'i' for the single decisions, in one pipeline).
func (s *Store) decideGroupBatched(ctx context.Context, now int64, reqs []store.Request, rs []request, out []algorithm.Decision) error {
	g := &groupDecision{reqs: reqs, rs: rs, ds: make([]algorithm.Decision, len(reqs))}
	b := s.batcherFor(rs[0].key)
	p, alone := b.q.Enter(batchInflight, func() *pending {
		return &pending{ctx: ctx, now: now, key: rs[0].key, group: g, done: make(chan struct{})}
	})
	if alone {
		err := s.decideGroupAlone(ctx, now, g)
		b.next(s)
		copy(out, g.ds)
		return err
	}
	select {
	case <-p.done:
		copy(out, g.ds)
		return p.err
	case <-ctx.Done():
		// Still queued, it is skipped and never counted; already sent, it
		// may count, as any call that runs out of time.
		return fmt.Errorf("redisstore: %w", ctx.Err())
	}
}

// decideGroupAlone decides g in one call of op 'd'.
func (s *Store) decideGroupAlone(ctx context.Context, now int64, g *groupDecision) error {
	idx := indexes(len(g.reqs))
	res, err := s.exec(ctx, []call{s.decideCall("d", now, g.reqs, g.rs, idx)})
	if err != nil {
		return err
	}
	return decisions(res[0], g.rs, idx, g.ds)
}

// decideOnServer decides live, queued decisions for one server, in one
// pipeline: the single decisions in one call of op 'i', the groups in one
// call of op 'g'.
func (s *Store) decideOnServer(ctx context.Context, live []*pending) {
	var singles, groups []*pending
	for _, p := range live {
		if p.group != nil {
			groups = append(groups, p)
		} else {
			singles = append(singles, p)
		}
	}
	var calls []call
	if len(singles) > 0 {
		// Keys of one limit go together, so that its header is sent once; a
		// key named twice keeps its order (its limit is part of the key).
		singles = bySpec(singles)
		c := call{keys: make([]string, 0, len(singles)), args: make([]string, 0, 2+len(singles)*2+12)}
		c.args = append(c.args, "i", s.timeArg(""))
		c.keys, c.args = s.appendShared(c.keys, c.args, singles)
		calls = append(calls, c)
	}
	if len(groups) > 0 {
		calls = append(calls, s.groupCall(groups))
	}
	res, err := s.exec(ctx, calls)
	if len(singles) > 0 {
		var v []int64
		if err == nil {
			v, err = sharedValues(res[0], len(singles))
			res = res[1:]
		}
		s.answerShared(singles, v, err)
	}
	if len(groups) > 0 {
		s.answerGroups(groups, res, err)
	}
}

// groupCall builds the op 'g' call deciding groups, each all or nothing.
func (s *Store) groupCall(groups []*pending) call {
	c := call{args: []string{"g", ""}}
	if s.clientTime {
		c.args[1] = "t"
	}
	for _, p := range groups {
		g := p.group
		c.args = append(c.args, strconv.Itoa(len(g.reqs)))
		if s.clientTime {
			c.args = append(c.args, s.now(p.now))
		}
		for i, r := range g.reqs {
			c.keys = append(c.keys, g.rs[i].key)
			c.args = append(c.args, g.rs[i].sp.headerAt(p.now)...)
			shadow := "0"
			if r.Shadow {
				shadow = "1"
			}
			c.args = append(c.args, itoa(r.Cost), shadow)
		}
	}
	return c
}

// answerGroups wakes the callers of groups with what their op 'g' call,
// res[0], returned, or with err.
func (s *Store) answerGroups(groups []*pending, res []rueidis.RedisResult, err error) {
	var v []int64
	if err == nil {
		n := 0
		for _, p := range groups {
			n += len(p.group.reqs)
		}
		v, err = sharedValues(res[0], n)
	}
	for _, p := range groups {
		g := p.group
		if err != nil {
			p.err = err
			close(p.done)
			continue
		}
		f := v[:6*len(g.reqs)]
		v = v[6*len(g.reqs):]
		if f[5] == -1 {
			// A key's value could not be read; deciding the group alone
			// returns the script's full error.
			p.err = s.decideGroupAlone(p.ctx, p.now, g)
			close(p.done)
			continue
		}
		p.err = decodeDecisions(f, g.rs, indexes(len(g.reqs)), g.ds)
		close(p.done)
	}
}
