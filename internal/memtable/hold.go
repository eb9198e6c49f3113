package memtable

import (
	"context"
	"fmt"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/lease"
	"github.com/floodgate-dev/floodgate/store"
)

// Hold implements store.Holder: it applies op to the key of req under its
// algorithm's holds (store.HoldAlgorithm), deciding req.Cost, in one step
// under the key's shard lock. What the eviction summary charges the key is
// recorded into its state first, where it stays counted for a window (as
// the summary would have kept charging it), so that what Hold grants is
// what the state holds. A key that ends with a zero state is not kept.
func (s *Store) Hold(ctx context.Context, now int64, req store.Request, op lease.Op) (algorithm.Decision, lease.Held, error) {
	hd, ok := req.Algorithm.(store.HoldAlgorithm)
	if !ok {
		if req.Algorithm == nil {
			return algorithm.Decision{}, lease.Held{}, store.ErrNoAlgorithm
		}
		return algorithm.Decision{}, lease.Held{}, fmt.Errorf("memstore: %s: %w", req.Algorithm.Name(), store.ErrNoHolds)
	}
	l, h, err := s.resolve("request", 0, req.Algorithm, req.Key)
	if err != nil {
		return algorithm.Decision{}, lease.Held{}, err
	}
	sh := s.shardOf(h)
	if l, err = s.lockLive(sh, l, req.Algorithm); err != nil {
		return algorithm.Decision{}, lease.Held{}, err
	}
	defer sh.mu.Unlock()
	t := sh.table(l)
	t.advance(now)
	st := sh.scratch[:l.words]
	defer clear(st)
	sl := t.find(h)
	if sl < 0 {
		sl = sh.adopt(t, l, req.Algorithm, h, now) // a kin limit's key, converted
	}
	var c int64
	if sl >= 0 {
		t.touch(sl)
		t.load(sl, st)
		if c = t.chargeFor(sl, now); c > 0 {
			t.slots[sl*t.stride] &^= charged // recorded below
		}
	} else {
		c = t.chargeOf(h, now)
	}
	if c > 0 {
		req.Algorithm.Record(st, now, c)
	}
	d, held := hd.Hold(st, now, req.Cost, op)
	if sl < 0 {
		if allZero(st) {
			return d, held, nil
		}
		sl = t.insert(h)
	}
	t.put(sl, st)
	return d, held, nil
}
