package memtable

import (
	"math/rand/v2"
	"testing"
	"time"
)

// The summary never charges a key less than the sum of what it recorded
// for that key's hash while those uses count, charges exactly that when
// no other key shares its cells, and forgets uses two epochs after they end.
func TestSketchIsAnUpperBound(t *testing.T) {
	c := newCounter(600, time.Minute, 2)
	tb := &table{l: &limit{words: 2, idle: time.Minute, alg: c, full: 600}, n: 1000}
	k := newSketch(tb, 0)
	now := int64(1_000) * sec
	if k.quantum != 1 {
		t.Fatalf("quantum %d for a limit of 600, want 1", k.quantum)
	}
	r := rand.New(rand.NewPCG(1, 2))
	want := map[uint64]int64{}
	for range 20_000 {
		h := r.Uint64() &^ metaMask
		if r.IntN(4) == 0 {
			h = uint64(r.IntN(50)+1) << metaBits // a few keys evicted many times
		}
		u := int64(r.IntN(5) + 1)
		k.Add(h, u, now+int64(time.Minute))
		want[h] += u
	}
	exact := 0
	for h, u := range want {
		got := k.Charge(h, now)
		if got < u {
			t.Fatalf("hash %x charged %d, recorded %d", h, got, u)
		}
		if got == u {
			exact++
		}
	}
	t.Logf("%d of %d hashes charged exactly what they recorded", exact, len(want))
	alone := newSketch(tb, 0)
	alone.Add(42<<metaBits, 7, now+int64(time.Minute))
	if got := alone.Charge(42<<metaBits, now); got != 7 {
		t.Fatalf("a lone key charged %d, want 7", got)
	}
	if got := alone.Charge(42<<metaBits, now+int64(3*time.Minute)); got != 0 {
		t.Fatalf("a use that ended two epochs ago still charges %d", got)
	}
}
