package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/rueidis"

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
	// group, when set, is a Decide of several requests (see groups.go);
	// req, sp and d are then unused and key is its first key.
	group *groupDecision
}

// batcherFor returns the batcher of key's group (see batchGroup).
func (s *Store) batcherFor(key string) *batcher {
	g := s.batchGroup(key)
	if b, ok := s.batchers.Load(g); ok {
		return b.(*batcher)
	}
	b, _ := s.batchers.LoadOrStore(g, &batcher{})
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
	live, last := inflight.StillWaiting(batch, func(p *pending) context.Context { return p.ctx }, s.timeout,
		func(p *pending, err error) {
			p.err = fmt.Errorf("redisstore: %w", err)
			close(p.done)
		})
	if len(live) == 0 {
		return
	}
	ctx, cancel := context.WithDeadline(context.Background(), last)
	defer cancel()
	switch {
	case len(live) == 1 && live[0].group != nil:
		p := live[0]
		p.err = s.decideGroupAlone(p.ctx, p.now, p.group)
		close(p.done)
		return
	case len(live) == 1:
		p := live[0]
		p.d, p.err = s.decideAlone(p.ctx, p.now, p.req, p.sp, p.key)
		close(p.done)
		return
	case !s.cluster:
		s.decideOnServer(ctx, live)
		return
	}
	groups := bySlot(live)
	if s.decideOnPrimary(ctx, groups) {
		return
	}
	// The slot map is not known, is out of date or the primary refused the
	// call before it wrote anything: one script call per slot, each routed
	// by the client, pipelined per primary.
	calls := make([]call, len(groups))
	for i, g := range groups {
		calls[i].args = append(calls[i].args, "i", s.timeArg(""))
		calls[i].keys, calls[i].args = s.appendShared(calls[i].keys, calls[i].args, g)
	}
	res, err := s.exec(ctx, calls)
	for i, g := range groups {
		var v []int64
		gerr := err
		if gerr == nil {
			v, gerr = sharedValues(res[i], len(g))
		}
		s.answerShared(g, v, gerr)
	}
}

// timeArg returns the time argument of op 'i': mode ("" or "K") when Redis's
// clock decides, else the same in the caller's-clock form ("t" or "T").
func (s *Store) timeArg(mode string) string {
	if !s.clientTime {
		return mode
	}
	if mode == "" {
		return "t"
	}
	return "T"
}

// appendShared appends to keys and args the op 'i' arguments deciding live
// in its order (keys of one limit adjacent send its header once).
func (s *Store) appendShared(keys, args []string, live []*pending) ([]string, []string) {
	for g := 0; g < len(live); {
		sp, n := live[g].sp, 0
		args = append(args, sp.headerAt(live[g].now)...)
		args = append(args, "")
		count := len(args) - 1
		for ; g < len(live) && live[g].sp == sp; g, n = g+1, n+1 {
			p := live[g]
			keys = append(keys, p.key)
			args = append(args, itoa(p.req.Cost))
			if s.clientTime {
				args = append(args, s.now(p.now))
			}
		}
		args[count] = strconv.Itoa(n)
	}
	return keys, args
}

// decideOnPrimary decides groups, one per hash slot, in one script call
// sent to the primary that the slot map says serves them all, and reports
// whether it did (it answers every caller then). A script's declared keys
// must share a slot, so this call declares none and names its keys among
// its arguments with each slot's count; the script reads every key before
// it writes one, so a primary that no longer serves one of them refuses
// the call before anything is counted, and it returns false with the
// callers still waiting.
func (s *Store) decideOnPrimary(ctx context.Context, groups [][]*pending) bool {
	o := s.owners.Load()
	if o == nil || len(groups) < 2 {
		return false
	}
	node := o.node[slot(groups[0][0].key)]
	n := 0
	for _, g := range groups {
		if o.node[slot(g[0].key)] != node { // a group's keys share its slot
			return false
		}
		n += len(g)
	}
	client := o.clients[node]
	if node == 0 || client == nil {
		return false
	}
	args := make([]string, 0, 4+2*n+len(groups)+len(groups)*12)
	args = append(args, "i", s.timeArg("K"), strconv.Itoa(n))
	for _, g := range groups {
		for _, p := range g {
			args = append(args, p.key)
		}
	}
	args = append(args, strconv.Itoa(len(groups)))
	for _, g := range groups {
		args = append(args, strconv.Itoa(len(g)))
	}
	var keys []string
	for _, g := range groups {
		keys, args = s.appendShared(keys, args, g)
	}
	r := client.Do(ctx, client.B().Evalsha().Sha1(scriptSHA).Numkeys(0).Arg(args...).Build())
	if rerr, ok := rueidis.IsRedisErr(r.Error()); ok && (rerr.IsNoScript() || strings.Contains(rerr.Error(), "non local key")) {
		s.ownersTried.Store(0)
		s.owners.CompareAndSwap(o, &owners{}) // read it again before the next call
		return false
	}
	v, err := sharedValues(r, n)
	for _, g := range groups {
		var gv []int64
		if err == nil {
			gv, v = v[:6*len(g)], v[6*len(g):]
		}
		s.answerShared(g, gv, err)
	}
	return true
}

// sharedValues reads the reply of op 'i' for n decisions: six integers each.
func sharedValues(r rueidis.RedisResult, n int) ([]int64, error) {
	v, err := r.AsIntSlice()
	if err != nil {
		return nil, fmt.Errorf("redisstore: reading decisions: %w", err)
	}
	if len(v) != 6*n {
		return nil, fmt.Errorf("redisstore: script returned %d values for %d decisions", len(v), n)
	}
	return v, nil
}

// answerShared wakes the callers of live with their decisions' six values
// each in v, or with err.
func (s *Store) answerShared(live []*pending, v []int64, err error) {
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

// bySlot splits batch into groups of one hash slot each, in order of first
// appearance, each ordered by bySpec.
func bySlot(batch []*pending) [][]*pending {
	var groups [][]*pending
	at := map[uint16]int{}
	for _, p := range batch {
		sl := slot(p.key)
		i, ok := at[sl]
		if !ok {
			i = len(groups)
			at[sl] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], p)
	}
	for i, g := range groups {
		// Keys of one limit go together, so that its header is sent once.
		groups[i] = bySpec(g)
	}
	return groups
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
