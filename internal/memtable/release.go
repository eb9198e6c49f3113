package memtable

import (
	"context"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/store"
)

// Release gives back the units of reqs (see algorithm.Algorithm.Release).
// Keys the store does not track hold nothing, so they are skipped.
func (s *Store) Release(ctx context.Context, now int64, reqs []store.Request) error {
	for i := range reqs {
		a := reqs[i].Algorithm
		l, h, err := s.resolve("request", i, a, reqs[i].Key)
		if err != nil {
			return err
		}
		sh := s.shardOf(h)
		if l, err = s.lockLive(sh, l, a); err != nil {
			return err
		}
		if l.id < len(sh.tables) && sh.tables[l.id] != nil {
			t := sh.tables[l.id]
			t.advance(now)
			if sl := t.find(h); sl >= 0 {
				st := t.load(sl, sh.scratch[:l.words])
				a.Release(st, now, reqs[i].Cost)
				t.touch(sl)
				clear(st[:t.put(sl, st)])
			}
		}
		sh.mu.Unlock()
	}
	return nil
}

// Reset forgets key's state under a (store.Resetter): its next request
// starts with the whole allowance. Under memory pressure the eviction
// summary may still charge the key for uses of evicted keys that share
// its summary cells, as it charges any new key.
func (s *Store) Reset(ctx context.Context, a algorithm.Algorithm, key string) error {
	l, h, err := s.resolve("key", 0, a, key)
	if err != nil {
		return err
	}
	sh := s.shardOf(h)
	if l, err = s.lockLive(sh, l, a); err != nil {
		return err
	}
	defer sh.mu.Unlock()
	if l.id < len(sh.tables) && sh.tables[l.id] != nil {
		if t := sh.tables[l.id]; t.find(h) >= 0 {
			t.remove(t.find(h))
		}
	}
	sh.forget(l, h)
	return nil
}

// Sync merges each batch's events into the store with Algorithm.Record (at
// each event's own time) and sets the batch's State to a copy of the merged
// state. A batch without events only reads. It is the shared-store side of
// delayed synchronization when the nodes share one process.
func (s *Store) Sync(ctx context.Context, now int64, batches []store.SyncBatch) error {
	for i := range batches {
		b := &batches[i]
		l, h, err := s.resolve("batch", i, b.Algorithm, b.Key)
		if err != nil {
			return err
		}
		if cap(b.State) >= l.words {
			b.State = b.State[:l.words]
		} else {
			b.State = make([]int64, l.words)
		}
		clear(b.State)
		sh := s.shardOf(h)
		if l, err = s.lockLive(sh, l, b.Algorithm); err != nil {
			return err
		}
		t := sh.table(l)
		t.advance(now)
		sl := t.find(h)
		if sl < 0 {
			sl = sh.adopt(t, l, b.Algorithm, h, now)
		}
		var c int64
		if sl >= 0 {
			t.load(sl, b.State)
			c = t.chargeFor(sl, now)
		} else {
			c = t.chargeOf(h, now)
		}
		for _, e := range b.Events {
			b.Algorithm.Record(b.State, e.Time, e.Cost)
		}
		if len(b.Events) > 0 {
			if sl < 0 {
				sl = t.insert(h)
				t.mark(sl, c)
			} else {
				t.touch(sl)
			}
			t.put(sl, b.State)
		}
		if c > 0 {
			// The node decides on what it reads: it must see the charge,
			// also for a key the store no longer holds.
			b.Algorithm.Record(b.State, now, c)
		}
		sh.mu.Unlock()
	}
	return nil
}

func allZero(st []int64) bool {
	for _, w := range st {
		if w != 0 {
			return false
		}
	}
	return true
}
