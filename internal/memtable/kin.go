package memtable

import (
	"slices"
	"sync/atomic"

	"github.com/floodgate-dev/floodgate/algorithm"
)

// Limits that count the same thing
//
// Limits whose algorithms have the same algorithm.Identity count the same
// thing with different parameters: a limit that Limiter.SetLimit or a rule
// reload changed, the plans a rule's overrides give its keys. They are kin.
// A key missing from its limit's table is looked for in the tables of the
// limit's kin in the same shard (at most maxKinProbes of them, the newest
// first); found there, its state is converted to the limit's parameters
// (algorithm.Convert) and moved. So a changed limit keeps every key's
// count: a raise admits at once what it allows beyond it, a lower applies
// at once. Only decisions on keys a table does not hold pay for the look,
// and only while the limit has kin.

// KeepsCounts reports true: the store keeps each key's count across a
// change of its limit (store.CountKeeper), as described above, for every
// algorithm whose states convert.
func (s *Store) KeepsCounts(a algorithm.Algorithm) bool { return true }

// maxKinProbes bounds the kin tables a missing key is looked for in: a
// caller who makes many limits of one identity (a request's own limit
// override per value) costs each new key at most this many probes.
const maxKinProbes = 8

// kin is the live limits of one identity, newest last; the slice is
// replaced, never modified, under the registry's lock.
type kin struct {
	limits atomic.Pointer[[]*limit]
}

// join adds l to the kin of its identity. The registry's lock is held.
func (s *Store) join(l *limit) {
	id := l.cfg.Identity()
	k := s.kins[id]
	if k == nil {
		k = new(kin)
		s.kins[id] = k
	}
	var ls []*limit
	if p := k.limits.Load(); p != nil {
		ls = slices.Clone(*p)
	}
	ls = append(ls, l)
	k.limits.Store(&ls)
	l.kin, l.identity = k, id
}

// leave takes l out of its kin. The registry's lock is held.
func (s *Store) leave(l *limit) {
	k := l.kin
	if k == nil {
		return
	}
	p := k.limits.Load()
	ls := slices.DeleteFunc(slices.Clone(*p), func(o *limit) bool { return o == l })
	if len(ls) == 0 {
		delete(s.kins, l.identity)
	}
	k.limits.Store(&ls)
}

// adopt looks for the key of hash h, missing from t (l's table), in the
// tables of l's kin, and when it finds it there moves it into t as a state
// of a (l's algorithm), converted at now. It returns the key's slot in t,
// or -1. The shard's lock is held.
func (sh *shard) adopt(t *table, l *limit, a algorithm.Algorithm, h uint64, now int64) int {
	if l.kin == nil {
		return -1
	}
	p := l.kin.limits.Load()
	if p == nil || len(*p) < 2 {
		return -1
	}
	ls := *p
	probes := 0
	for i := len(ls) - 1; i >= 0 && probes < maxKinProbes; i-- {
		o := ls[i]
		if o == l || uint(o.id) >= uint(len(sh.tables)) || o.retired.Load() {
			continue
		}
		ot := sh.tables[o.id]
		if ot == nil || ot.l != o {
			continue
		}
		probes++
		ot.advance(now)
		sl := ot.find(h)
		if sl < 0 {
			continue
		}
		src := ot.load(sl, make([]int64, o.words))
		if c := ot.chargeFor(sl, now); c > 0 {
			o.alg.Record(src, now, c) // what the eviction summary charged it
		}
		ot.remove(sl)
		dst := make([]int64, l.words)
		cv, ok := a.(interface {
			ConvertFrom(algorithm.Algorithm, []int64, int64, []int64) bool
		})
		if !ok || !cv.ConvertFrom(o.alg, src, now, dst) || allZero(dst) {
			return -1
		}
		t.put(t.insert(h), dst)
		return t.find(h)
	}
	return -1
}

// forget removes the key of hash h from the tables of l's kin (Reset):
// otherwise a later decision would adopt its state from one of them. The
// shard's lock is held.
func (sh *shard) forget(l *limit, h uint64) {
	if l.kin == nil {
		return
	}
	for _, o := range *l.kin.limits.Load() {
		if o == l || uint(o.id) >= uint(len(sh.tables)) || o.retired.Load() {
			continue
		}
		if ot := sh.tables[o.id]; ot != nil && ot.l == o {
			if sl := ot.find(h); sl >= 0 {
				ot.remove(sl)
			}
		}
	}
}
