package bench

// Experiment (b), not a limiter anyone should use: the one-slot table of
// prototype_test.go with 8-byte slots instead of 16, to test what the slot
// size costs. Half the bytes per key means half the memory the scattered
// visits spread over, so more of the table stays in the caches. The
// price is in the word's layout (see wordDecide): 32 bits of the key's
// hash instead of 64, a window tag of 7 bits instead of the window number,
// and limits below 2^24.
//
// Exactness: two keys of one shard (8 more bits of the hash) with the
// same 32-bit fingerprint share a counter, so both are limited together,
// never more loosely (for 200,000 keys the chance that any pair does is
// about 2%); a table that keeps its hash in 64 bits has about 3 in 10^7.
// The tag repeats every 128 windows, so a key idle for exactly a multiple
// of 128 windows would find its old count, again stricter, never looser;
// a table that drops keys idle for a window or more (as Floodgate's sweep
// does within its idle time) never sees it. Same clock read per decision.

import (
	"context"
	"hash/maphash"
	"sync"
	"time"
)

// A word slot: fingerprint (bits 32-63, never zero: zero marks an empty
// slot), moved flag (bit 31, for the lock-free table), window tag (bits
// 24-30), count (bits 0-23).
const (
	wordCountMask = 1<<24 - 1
	wordTagMask   = 0x7f << 24
	wordMoved     = 1 << 31
	wordLowMask   = 1<<32 - 1
	wordLimit     = wordCountMask // the largest limit a count can hold
)

// wordFingerprint returns 32 bits of h, independent of the shard's 8,
// shifted into a slot's high half.
func wordFingerprint(h uint64) uint64 {
	fp := h >> 24 & wordLowMask
	if fp == 0 {
		fp = 1
	}
	return fp << 32
}

// wordTag returns the window tag of time now, in a slot's tag bits.
func wordTag(now, window int64) uint64 {
	return uint64(now/window) << 24 & wordTagMask
}

// wordDecide decides one request on slot w at window tag and returns the
// slot to store and whether the request is allowed.
func wordDecide(w, tag, limit uint64) (uint64, bool) {
	if w&wordTagMask != tag {
		w = w&^(wordTagMask|wordCountMask) | tag
	}
	if w&wordCountMask >= limit {
		return w, false
	}
	return w + 1, true
}

type wordShard struct {
	mu    sync.Mutex
	slots []uint64
	n     int
	_     [24]byte
}

type wordProto struct {
	seed   maphash.Seed
	start  time.Time
	window int64
	limit  uint64 // at most wordLimit
	shards [256]wordShard
}

func newWordProto() limiter {
	return &wordProto{seed: maphash.MakeSeed(), start: time.Now(), window: int64(time.Hour), limit: wordLimit}
}

func (p *wordProto) allow(_ context.Context, key string) bool {
	now := p.start.UnixNano() + int64(time.Since(p.start))
	h := maphash.String(p.seed, key)
	fp, tag := wordFingerprint(h), wordTag(now, p.window)
	sh := &p.shards[h>>56]
	sh.mu.Lock()
	if (sh.n+1)*4 > len(sh.slots)*3 {
		sh.slots = wordRehash(sh.slots, max(16, 2*len(sh.slots)))
	}
	mask := uint64(len(sh.slots) - 1)
	i := fp >> 32 & mask
	for sh.slots[i]&^wordLowMask != fp && sh.slots[i] != 0 {
		i = (i + 1) & mask
	}
	w := sh.slots[i]
	if w == 0 {
		w = fp
		sh.n++
	}
	w, ok := wordDecide(w, tag, p.limit)
	sh.slots[i] = w
	sh.mu.Unlock()
	return ok
}

// wordRehash returns the slots of old, placed by their fingerprints in a
// linear-probing array of n slots.
func wordRehash(old []uint64, n int) []uint64 {
	slots := make([]uint64, n)
	mask := uint64(n - 1)
	for _, w := range old {
		if w != 0 {
			i := w >> 32 & mask
			for slots[i] != 0 {
				i = (i + 1) & mask
			}
			slots[i] = w
		}
	}
	return slots
}
