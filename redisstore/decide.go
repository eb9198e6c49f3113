package redisstore

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/algorithm/gubernator"
	"github.com/floodgate-dev/floodgate/lease"
	"github.com/floodgate-dev/floodgate/store"
	"github.com/redis/rueidis"
)

// call is one script invocation.
type call struct {
	keys []string
	args []string
	// unseen: a push (op 'X') that returns each key's unseen cost after
	// its state.
	unseen bool
}

// exec runs the calls in one pipeline (one round trip per node), by SHA.
// Calls refused with NOSCRIPT (after SCRIPT FLUSH, a restart or a
// failover) wait for one SCRIPT LOAD per node, shared by every caller and
// finished in the background even if they give up, and are sent again by
// SHA; only if the script is still missing then is its text sent. Calls
// refused with TRYAGAIN (a multi-key call during a slot migration) are
// retried shortly. Neither error means the script ran, so neither retry
// can count twice.
func (s *Store) exec(ctx context.Context, calls []call) ([]rueidis.RedisResult, error) {
	client, err := s.connect()
	if err != nil {
		return nil, err
	}
	cmds := make(rueidis.Commands, len(calls))
	for i, c := range calls {
		cmds[i] = client.B().Evalsha().Sha1(scriptSHA).Numkeys(int64(len(c.keys))).Key(c.keys...).Arg(c.args...).Build()
	}
	gen := s.loads.generation()
	var res []rueidis.RedisResult
	if len(cmds) == 1 {
		res = []rueidis.RedisResult{client.Do(ctx, cmds[0])}
	} else {
		res = client.DoMulti(ctx, cmds...)
	}
	for attempt := 0; ; attempt++ {
		var again []int
		var redo rueidis.Commands
		reloaded := false
		for i, r := range res {
			rerr, ok := rueidis.IsRedisErr(r.Error())
			if !ok {
				continue
			}
			switch {
			case rerr.IsNoScript() && attempt == 0:
				if !reloaded {
					if err := s.reload(ctx, client, gen); err != nil {
						return nil, err
					}
					reloaded = true
				}
				c := calls[i]
				again = append(again, i)
				redo = append(redo, client.B().Evalsha().Sha1(scriptSHA).Numkeys(int64(len(c.keys))).Key(c.keys...).Arg(c.args...).Build())
			case rerr.IsNoScript():
				c := calls[i]
				again = append(again, i)
				redo = append(redo, client.B().Eval().Script(script).Numkeys(int64(len(c.keys))).Key(c.keys...).Arg(c.args...).Build())
			case rerr.IsTryAgain() && attempt < 20:
				c := calls[i]
				again = append(again, i)
				redo = append(redo, client.B().Evalsha().Sha1(scriptSHA).Numkeys(int64(len(c.keys))).Key(c.keys...).Arg(c.args...).Build())
			}
		}
		if len(redo) == 0 {
			break
		}
		if attempt > 0 && !reloaded {
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("redisstore: %w", ctx.Err())
			case <-time.After(10 * time.Millisecond):
			}
		}
		if len(redo) == 1 {
			res[again[0]] = client.Do(ctx, redo[0])
			continue
		}
		for j, r := range client.DoMulti(ctx, redo...) {
			res[again[j]] = r
		}
	}
	for _, r := range res {
		if err := r.Error(); err != nil {
			return nil, fmt.Errorf("redisstore: %w", err)
		}
	}
	return res, nil
}

// request is a store.Request with its spec and Redis key resolved.
type request struct {
	sp  *spec
	key string
}

func (s *Store) resolve(reqs []store.Request) ([]request, error) {
	rs := make([]request, len(reqs))
	for i := range reqs {
		sp, err := s.specFor(reqs[i].Algorithm)
		if err != nil {
			return nil, fmt.Errorf("request %d: %w", i, err)
		}
		rs[i] = request{sp: sp, key: s.key(sp, reqs[i].Key)}
	}
	return rs, nil
}

// decideCall builds one script call deciding reqs[idx...] with op.
func (s *Store) decideCall(op string, at int64, reqs []store.Request, rs []request, idx []int) call {
	c := call{keys: make([]string, 0, len(idx)), args: make([]string, 0, 2+len(idx)*10)}
	c.args = append(c.args, op, s.now(at))
	for _, i := range idx {
		c.keys = append(c.keys, rs[i].key)
		c.args = append(c.args, rs[i].sp.headerAt(at)...)
		shadow := "0"
		if reqs[i].Shadow {
			shadow = "1"
		}
		c.args = append(c.args, itoa(reqs[i].Cost), shadow)
	}
	return c
}

var reasons = [...]algorithm.Reason{"", algorithm.ReasonOverLimit, algorithm.ReasonCostOverLimit,
	algorithm.ReasonQueueFull, algorithm.ReasonBadCost, gubernator.ReasonBadPeriod, gubernator.ReasonNeverFits, gubernator.ReasonScheduled}

// decisions parses a 'd' or 'p' reply into out[idx...].
func decisions(r rueidis.RedisResult, rs []request, idx []int, out []algorithm.Decision) error {
	v, err := r.AsIntSlice()
	if err != nil {
		return fmt.Errorf("redisstore: reading decisions: %w", err)
	}
	if len(v) != 6*len(idx) {
		return fmt.Errorf("redisstore: script returned %d values for %d decisions", len(v), len(idx))
	}
	return decodeDecisions(v, rs, idx, out)
}

// decodeDecisions reads six values per decision from v into out[idx...].
func decodeDecisions(v []int64, rs []request, idx []int, out []algorithm.Decision) error {
	for j, i := range idx {
		f := v[6*j : 6*j+6]
		if f[5] < 0 || f[5] >= int64(len(reasons)) {
			return fmt.Errorf("redisstore: script returned reason code %d", f[5])
		}
		out[i] = decision(f, rs[i].sp)
	}
	return nil
}

// DecideOne decides one request: alone in one EVALSHA when no call of its
// hash slot is in flight, else together with other concurrent DecideOne calls of its
// hash slot in one script call that decides each on its own (see batcher).
func (s *Store) DecideOne(ctx context.Context, now int64, req store.Request) (algorithm.Decision, error) {
	sp, err := s.specFor(req.Algorithm)
	if err != nil {
		return algorithm.Decision{}, err
	}
	if _, err := s.connect(); err != nil {
		return algorithm.Decision{}, err
	}
	ctx, cancel := s.deadline(ctx)
	defer cancel()
	return s.decideBatched(ctx, now, req, sp, s.key(sp, req.Key))
}

// decideAlone decides one request in one EVALSHA of op 'd'.
func (s *Store) decideAlone(ctx context.Context, now int64, req store.Request, sp *spec, key string) (algorithm.Decision, error) {
	client, err := s.connect()
	if err != nil {
		return algorithm.Decision{}, err
	}
	shadow := "0"
	if req.Shadow {
		shadow = "1"
	}
	hdr := sp.headerAt(now)
	args := make([]string, 0, len(hdr)+4)
	args = append(append(append(args, "d", s.now(now)), hdr...), itoa(req.Cost), shadow)
	gen := s.loads.generation()
	r := client.Do(ctx, client.B().Evalsha().Sha1(scriptSHA).Numkeys(1).Key(key).Arg(args...).Build())
	if rerr, ok := rueidis.IsRedisErr(r.Error()); ok && (rerr.IsNoScript() || rerr.IsTryAgain()) {
		if rerr.IsNoScript() {
			// Start the reload now, even if ctx ends before it does, so
			// that the next decisions find the script.
			if err := s.reload(ctx, client, gen); err != nil {
				return algorithm.Decision{}, err
			}
		}
		// The slow path knows how to recover.
		var out [1]algorithm.Decision
		err := s.Decide(ctx, now, []store.Request{req}, out[:])
		return out[0], err
	}
	if err := r.Error(); err != nil {
		return algorithm.Decision{}, fmt.Errorf("redisstore: %w", err)
	}
	var v [6]int64
	if err := decodeInts(r, v[:]); err != nil {
		return algorithm.Decision{}, err
	}
	if v[5] < 0 || v[5] >= int64(len(reasons)) {
		return algorithm.Decision{}, fmt.Errorf("redisstore: script returned reason code %d", v[5])
	}
	return decision(v[:], sp), nil
}

// decodeInts reads an array reply of len(dst) integers into dst.
func decodeInts(r rueidis.RedisResult, dst []int64) error {
	msgs, err := r.ToArray()
	if err != nil {
		return fmt.Errorf("redisstore: reading decision: %w", err)
	}
	if len(msgs) != len(dst) {
		return fmt.Errorf("redisstore: script returned %d values, want %d", len(msgs), len(dst))
	}
	for i := range msgs {
		if dst[i], err = msgs[i].AsInt64(); err != nil {
			return fmt.Errorf("redisstore: reading decision: %w", err)
		}
	}
	return nil
}

// decision builds a Decision from the script's six values; f[5] is a
// valid reason code.
func decision(f []int64, sp *spec) algorithm.Decision {
	d := algorithm.Decision{
		Allowed:    f[0] == 1,
		Limit:      sp.limit,
		Remaining:  f[1],
		ResetAfter: time.Duration(f[2] * usec),
		RetryAfter: time.Duration(f[3] * usec),
		Delay:      time.Duration(f[4] * usec),
		Reason:     reasons[f[5]],
	}
	if sp.code == codeCalendar {
		// A calendar window reports in the delay field what it carried
		// into the period, which its limit includes.
		d.Limit, d.Delay = sp.limit+f[4], 0
	}
	return d
}

// Decide decides every request and counts the allowed ones only if every
// non-Shadow request is allowed, as store.Store says. Requests that name
// the same limit and key see each other's effect, in order.
//
// On a single server, or when all requests fall in one Cluster slot, this is
// one atomic script call. Across Cluster slots it takes two round trips: the
// first checks every slot's requests without counting; if all pass, the
// second decides and counts slot by slot. A request that another client
// exhausts between the two is then rejected while the other slots' requests
// stay counted: an overcount, never an overshoot.
func (s *Store) Decide(ctx context.Context, now int64, reqs []store.Request, out []algorithm.Decision) error {
	return s.decideAll(ctx, now, reqs, out, nil)
}

// Acquire implements store.Leaser: Decide, with the units of every allowed
// concurrency request held under lease id (in the key's state, next to
// its count).
func (s *Store) Acquire(ctx context.Context, now int64, id lease.ID, reqs []store.Request, out []algorithm.Decision) error {
	if !id.Valid() {
		return lease.ErrInvalid
	}
	return s.decideAll(ctx, now, reqs, out, &id)
}

// ReleaseLease implements store.Leaser: it gives back what lease id holds
// in the concurrency keys of reqs, in one script call per Cluster hash slot
// those keys fall in (one call on a single server), sent in one pipeline.
// It reports whether the lease held anything.
func (s *Store) ReleaseLease(ctx context.Context, now int64, id lease.ID, reqs []store.Request) (bool, error) {
	if !id.Valid() {
		return false, nil
	}
	rs, err := s.resolve(reqs)
	if err != nil {
		return false, err
	}
	ctx, cancel := s.deadline(ctx)
	defer cancel()
	var calls []call
	for _, sub := range s.concurrencyGroups(rs) {
		calls = append(calls, leased(s.decideCall("l", now, reqs, rs, sub), id))
	}
	if len(calls) == 0 {
		return false, nil
	}
	res, err := s.exec(ctx, calls)
	if err != nil {
		return false, err
	}
	held := false
	for _, r := range res {
		vals, err := r.AsIntSlice()
		if err != nil {
			return false, fmt.Errorf("redisstore: release lease: %w", err)
		}
		for _, v := range vals {
			held = held || v == 1
		}
	}
	return held, nil
}

// leased puts lease id into a call of op 'a' or 'l', after op and time.
func leased(c call, id lease.ID) call {
	c.args = slices.Insert(c.args, 2, itoa(id.Hi), itoa(id.Lo))
	return c
}

// decideAll is Decide, holding concurrency units under *lease if it is not
// nil.
func (s *Store) decideAll(ctx context.Context, now int64, reqs []store.Request, out []algorithm.Decision, lease *lease.ID) error {
	if len(out) != len(reqs) {
		return store.ErrOutLength
	}
	if len(reqs) == 0 {
		return nil
	}
	commitOp := "d"
	if lease != nil {
		commitOp = "a"
	}
	rs, err := s.resolve(reqs)
	if err != nil {
		return err
	}
	mk := func(op string, idx []int) call {
		c := s.decideCall(op, now, reqs, rs, idx)
		if op == "a" {
			c = leased(c, *lease)
		}
		return c
	}
	ctx, cancel := s.deadline(ctx)
	defer cancel()
	groups := s.groups(rs)
	if len(groups) == 1 && lease == nil && len(reqs) > 1 && !s.cluster {
		return s.decideGroupBatched(ctx, now, reqs, rs, out)
	}
	if len(groups) == 1 {
		res, err := s.exec(ctx, []call{mk(commitOp, groups[0])})
		if err != nil {
			return err
		}
		return decisions(res[0], rs, groups[0], out)
	}
	for _, op := range []string{"p", commitOp} {
		calls := make([]call, len(groups))
		for g, idx := range groups {
			calls[g] = mk(op, idx)
		}
		res, err := s.exec(ctx, calls)
		if err != nil {
			return err
		}
		for g, idx := range groups {
			if err := decisions(res[g], rs, idx, out); err != nil {
				return err
			}
		}
		for i := range reqs {
			if !out[i].Allowed && !reqs[i].Shadow {
				return nil // the check failed: nothing is counted
			}
		}
	}
	return nil
}

// indexes returns 0, 1, ..., n-1.
func indexes(n int) []int {
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	return idx
}

// groups splits request indexes by Cluster slot, in order of first
// appearance; on a single server all are one group.
func (s *Store) groups(rs []request) [][]int {
	if !s.cluster {
		return [][]int{indexes(len(rs))}
	}
	var groups [][]int
	slots := make([]uint16, 0, 4)
	for i, r := range rs {
		sl := slot(r.key)
		g := 0
		for g < len(slots) && slots[g] != sl {
			g++
		}
		if g == len(slots) {
			slots = append(slots, sl)
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], i)
	}
	return groups
}

// Release gives back the units of allowed requests. Only concurrency limits
// hold units; requests for other algorithms are skipped without a round
// trip.
func (s *Store) Release(ctx context.Context, now int64, reqs []store.Request) error {
	rs, err := s.resolve(reqs)
	if err != nil {
		return err
	}
	var keep []int
	for i := range rs {
		if rs[i].sp.code == codeConcurrency {
			keep = append(keep, i)
		}
	}
	if len(keep) == 0 {
		return nil
	}
	ctx, cancel := s.deadline(ctx)
	defer cancel()
	var calls []call
	for _, sub := range s.concurrencyGroups(rs) {
		calls = append(calls, s.decideCall("r", now, reqs, rs, sub))
	}
	_, err = s.exec(ctx, calls)
	return err
}

// concurrencyGroups returns, per group of requests one call can take, the
// indexes of its concurrency requests; groups without any are left out.
func (s *Store) concurrencyGroups(rs []request) [][]int {
	var out [][]int
	for _, idx := range s.groups(rs) {
		var sub []int
		for _, i := range idx {
			if rs[i].sp.code == codeConcurrency {
				sub = append(sub, i)
			}
		}
		if len(sub) > 0 {
			out = append(out, sub)
		}
	}
	return out
}
