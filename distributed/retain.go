package distributed

import (
	"sync"
	"unsafe"
)

// retained keeps, for a push again after the shared store loses its data,
// the pushed counts of keys that are no longer in the table. A node has two
// such lists: retain, for keys evicted with more than one request counted
// (orphans, keys evicted before their count was pushed, once pushed, among
// them), and returning, for keys evicted with one pushed request (a
// flood's keys, and a client's first hit), so a flood cannot push a
// client's kept counts out. Each is an entry outside the table holding
// only its algorithm, key and history, which lost and repush treat like
// any other. A key that comes back takes its kept history into its new
// entry (adopt), which keeps it for as long as the key is in use.
//
// Each list is bounded in bytes (a quarter of Options.MaxPendingBytes);
// past the bound the oldest are forgotten and counted (Health's
// RetainForgotten, for both). Entries whose history has all passed its
// idle time leave as they stop mattering. Only the sync (under syncMu)
// changes their history; eviction only appends, and adopt only reads it.
type retained struct {
	mu        sync.Mutex
	list      []*entry // list[head:] are kept, oldest first
	head      int
	bytes     int64
	max       int64
	forgotten uint64
	// index, when set, finds a kept entry by key, for a key that comes
	// back to take its history again (see adopt).
	index map[entryKey]*entry
}

// retainedBytes is what one retained entry is accounted: the entry, its
// slot in the list, its key and history.
func retainedBytes(e *entry) int64 {
	return int64(unsafe.Sizeof(entry{})) + 8 + int64(len(e.key)) + historyBytes*int64(len(e.history))
}

// keep adds e (an entry outside the table) to the list and drops what no
// longer matters at now or does not fit.
func (r *retained) keep(e *entry, now int64) {
	if len(e.history) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.list = append(r.list, e)
	r.bytes += retainedBytes(e)
	if r.index != nil {
		r.index[entryKey{key: e.key, cfg: counterOf(e.alg)}] = e
	}
	for r.head < len(r.list) {
		f := r.list[r.head]
		last := f.history[len(f.history)-1].Time
		live := last > now-int64(f.alg.IdleAfter())
		if r.bytes <= r.max && live {
			break
		}
		if live && !f.gone {
			r.forgotten++
		}
		if r.index != nil {
			if k := (entryKey{key: f.key, cfg: counterOf(f.alg)}); r.index[k] == f {
				delete(r.index, k)
			}
		}
		r.bytes -= retainedBytes(f)
		r.list[r.head] = nil
		r.head++
	}
	// Dropping from the front moves head; the slice is compacted once
	// half of it is dropped, so each entry is copied O(1) times.
	if r.head > len(r.list)/2 {
		rest := copy(r.list, r.list[r.head:])
		clear(r.list[rest:])
		r.list, r.head = r.list[:rest], 0
	}
}

// snapshot returns the retained entries (those not taken back by adopt).
func (r *retained) snapshot() []*entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*entry
	for _, e := range r.list[r.head:] {
		if !e.gone {
			out = append(out, e)
		}
	}
	return out
}

// adopt gives e, a new table entry for key k with no history yet, the
// history of the kept entry of the same key, if there is one, and takes
// that entry off the list (reporting whether it did): its pushed counts are now e's, pushed again with e's (once) if
// the store loses its data. A push again already listed for the kept
// entry follows it to e (see resolve). The caller holds e's shard lock.
func (r *retained) adopt(s *shard, k entryKey, e *entry) bool {
	r.mu.Lock()
	f := r.index[k]
	if f != nil {
		delete(r.index, k)
		f.gone, f.movedTo = true, e
	}
	r.mu.Unlock()
	if f == nil {
		return false
	}
	e.history = append([]pushedEvent(nil), f.history...)
	s.bytes += historyBytes * int64(len(e.history))
	return true
}

// stats returns the retained entries' count, bytes and how many were
// forgotten.
func (r *retained) stats() (keys int, bytes int64, forgotten uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.list) - r.head, r.bytes, r.forgotten
}

// retainOrphan keeps orphan o, just pushed by sync seq at now, for a push
// again. The caller holds syncMu.
func (n *Node) retainOrphan(o *orphan, seq uint64, now int64) {
	var owed uint64
	if n.sentinel.repush {
		owed = n.sentinel.lostAt
	}
	e := &entry{alg: o.alg, key: o.key}
	for _, ev := range o.events {
		e.last = max(e.last, ev.Time)
	}
	e.history = appendHistory(nil, o.events, seq, now-int64(o.alg.IdleAfter()), owed)
	if e.manyHits() {
		n.retain.keep(e, now)
	} else {
		n.returning.keep(e, now) // a flood's key, most likely
	}
}

// adoptKept gives e, a new table entry for key k, the kept history of its
// key's last eviction, if one is kept (see retained.adopt). The caller
// holds e's shard lock.
func (n *Node) adoptKept(s *shard, k entryKey, e *entry) {
	if !n.returning.adopt(s, k, e) {
		n.retain.adopt(s, k, e)
	}
}

// evicted takes what eviction removes from the table with e: its queued
// events go to the orphan list, and its history to the retained list if it
// counted more than one request, else to the returning list (a key seen
// once, whose count is pushed: a flood's key, or a client's first hit,
// taken back if the key returns soon). A push again listed for e follows
// it to the kept entry (movedTo). The caller holds s's lock.
func (n *Node) evicted(s *shard, e *entry, now int64) {
	if len(e.history) > 0 {
		kept := &entry{alg: e.alg, key: e.key, last: e.last, history: append([]pushedEvent(nil), e.history...)}
		if e.manyHits() {
			n.retain.keep(kept, now)
		} else {
			n.returning.keep(kept, now)
		}
		e.movedTo = kept
	}
	if len(e.events) > 0 {
		n.orphanEvents(s, e)
	}
	n.dropOwed(e)
}
