package memtable

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/store"
)

// TestPackedTableConverts fills a packed fixed-window table, then counts a
// request whose state no longer fits in 32-bit halves (with a millisecond
// window, the window number passes 2^32 at 4,294,967.296 s), which
// converts the table to the plain layout with its live keys in it; every
// decision before and after must match the model's.
func TestPackedTableConverts(t *testing.T) {
	for _, name := range []algorithm.Name{algorithm.FixedWindow, algorithm.WeightedWindow} {
		t.Run(string(name), func(t *testing.T) { testPackedTableConverts(t, name) })
	}
}

func testPackedTableConverts(t *testing.T, name algorithm.Name) {
	a, err := algorithm.New(algorithm.Config{Algorithm: name, Limit: 1000, Window: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	s := New(Options{Shards: 1})
	m := modelStore{}
	const boundary = int64(1<<32) * int64(time.Millisecond)
	now := boundary - int64(500*time.Microsecond)
	check := func(key string, cost int64) {
		t.Helper()
		req := []store.Request{{Algorithm: a, Key: key, Cost: cost}}
		got, err := s.DecideOne(ctx, now, req[0])
		if err != nil {
			t.Fatal(err)
		}
		var want [1]algorithm.Decision
		m.decide(now, req, want[:])
		if got != want[0] {
			t.Fatalf("%s cost %d: store %+v, model %+v", key, cost, got, want[0])
		}
	}
	const keys = 500
	for i := range keys {
		check(fmt.Sprint("k", i), 1+int64(i%3))
	}
	l, err := s.limitFor(a)
	if err != nil {
		t.Fatal(err)
	}
	tb := s.shards[0].tables[l.id]
	if !tb.packed {
		t.Fatal("a table with small states is not packed")
	}
	bytesBefore := s.Stats().Bytes
	now = boundary + int64(100*time.Microsecond)
	check("k7", 1) // window number 2^32: no longer fits
	if tb.packed {
		t.Fatal("the table is still packed after a state that does not fit")
	}
	if got := s.Stats().Bytes; got != bytesBefore {
		t.Errorf("accounted bytes went from %d to %d in the conversion; a packed table is accounted at its plain size", bytesBefore, got)
	}
	now -= int64(300 * time.Microsecond) // a clock behind the state's window
	for i := range keys {
		check(fmt.Sprint("k", i), 2)
	}
	now = boundary + int64(200*time.Microsecond)
	for i := range keys {
		check(fmt.Sprint("k", i), 3)
	}
	check("new", 1)
	if n := s.Len(); n != keys+1 {
		t.Errorf("store holds %d keys, want %d", n, keys+1)
	}
}

// TestPackRoundTrip checks the packing's bounds: states of two and three
// words in [0, 2^32) come back unchanged, others do not pack.
func TestPackRoundTrip(t *testing.T) {
	for _, st := range [][]int64{{0, 0}, {1, 2}, {half - 1, half - 1}, {493_000, 600}, {7, 8, 9}, {half - 1, 0, half - 1}} {
		packed := make([]int64, (len(st)+1)/2)
		got := make([]int64, len(st))
		ok := packState(packed, st)
		unpackState(got, packed)
		if !ok || !slices.Equal(got, st) {
			t.Errorf("%v packs to %#x, %v; unpacks to %v", st, packed, ok, got)
		}
	}
	for _, st := range [][]int64{{-1, 0}, {0, -1}, {half, 0}, {0, half}, {1 << 62, 5}, {1, 2, half}} {
		if packState(make([]int64, (len(st)+1)/2), st) {
			t.Errorf("%v fits; it must not", st)
		}
	}
}

// TestSlidingWindowLayoutByCounts checks that a sliding-window table's
// layout depends on its counts, never on the clock: whichever ring
// position the newest slice is at, a table with 16-bit counts keeps whole
// words (8·(1+Words()) bytes a slot) and one with 32-bit counts starts
// narrow, its counts in 16 bits (the same 40-byte slot with 12 slices),
// until a count passes 65,535.
func TestSlidingWindowLayoutByCounts(t *testing.T) {
	for _, limit := range []int64{600, algorithm.MaxLimit} {
		a, err := algorithm.New(algorithm.Config{Algorithm: algorithm.SlidingWindow, Limit: limit, Window: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		slice := int64(5 * time.Minute) // 12 slices
		for pos := range int64(4) {
			s := New(Options{Shards: 1})
			now := (1_000_000*12+pos)*slice + 1
			for i := range 100 {
				if _, err := s.DecideOne(ctx, now, store.Request{Algorithm: a, Key: fmt.Sprint("k", i), Cost: 1 + int64(i)%3}); err != nil {
					t.Fatal(err)
				}
			}
			l, err := s.limitFor(a)
			if err != nil {
				t.Fatal(err)
			}
			tb := s.shards[0].tables[l.id]
			narrow := limit >= 1<<16
			if tb.narrow != narrow || tb.packed != narrow || tb.stride != 5 {
				t.Errorf("limit %d, newest slice at ring position %d: narrow %v, packed %v, stride %d; want narrow %v, stride 5",
					limit, pos, tb.narrow, tb.packed, tb.stride, narrow)
			}
		}
	}
}

// TestNarrowSlidingWindowExact drives sliding-window keys with 32-bit
// counts (Limit algorithm.MaxLimit, 12 slices) across the 16-bit boundary
// of the narrow layout: costs of 1 to 70,000, slices counting up to
// millions, the clock moving within a slice and across slices (the store drops a
// key idle for a window by its newest time, so the clock does not go back). Every
// decision and every stored state must equal the algorithm's on a plain
// state of its own; a count of exactly 65,535 keeps the table narrow, the
// first count above converts it, and the decisions go on matching after.
func TestNarrowSlidingWindowExact(t *testing.T) {
	a, err := algorithm.New(algorithm.Config{Algorithm: algorithm.SlidingWindow, Limit: algorithm.MaxLimit, Window: 12 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	s := New(Options{Shards: 1})
	plain := map[string][]int64{}
	r := rand.New(rand.NewPCG(10, 16))
	now := int64(1_700_000_000) * int64(time.Second)
	check := func(key string, cost int64) {
		t.Helper()
		got, err := s.DecideOne(ctx, now, store.Request{Algorithm: a, Key: key, Cost: cost})
		if err != nil {
			t.Fatal(err)
		}
		st, ok := plain[key]
		if !ok {
			st = make([]int64, a.Words())
		}
		want := a.Decide(st, now, cost)
		if want.Allowed && !ok {
			plain[key] = st
		}
		if got != want {
			t.Fatalf("%s cost %d at %d: store %+v, plain %+v", key, cost, now, got, want)
		}
		if stored := storedState(t, s, a, key); ok || want.Allowed {
			if !slices.Equal(stored, st) {
				t.Fatalf("%s cost %d at %d: stored state %v, plain %v", key, cost, now, stored, st)
			}
		}
	}
	l, err := s.limitFor(a)
	if err != nil {
		t.Fatal(err)
	}
	light := func(steps int) {
		for range steps {
			switch x := r.IntN(100); {
			case x < 2:
				now += int64(r.IntN(14)) * int64(time.Second)
			case x < 50:
				now += int64(r.IntN(int(40 * time.Millisecond)))
			}
			check(fmt.Sprint("k", r.IntN(64)), 1+int64(r.IntN(3000)))
		}
	}
	light(20_000)
	tb := s.shards[0].tables[l.id]
	if !tb.narrow {
		t.Fatal("the table converted before a count passed 65,535")
	}
	check("heavy", 65_000)
	check("heavy", 535) // 65,535 in one slice: still fits
	if !tb.narrow {
		t.Fatal("a count of 65,535 converted the table")
	}
	check("heavy", 1) // 65,536
	if tb.narrow || tb.packed || tb.stride != 1+a.Words() {
		t.Fatalf("after a count of 65,536: narrow %v, packed %v, stride %d; want the plain layout", tb.narrow, tb.packed, tb.stride)
	}
	kept := 0
	for key := range plain { // every kept key came through the conversion
		if stored := storedState(t, s, a, key); stored != nil { // nil: dropped idle
			kept++
			if !slices.Equal(stored, plain[key]) {
				t.Fatalf("%s after the conversion: stored %v, plain %v", key, stored, plain[key])
			}
		}
	}
	if kept < 10 {
		t.Fatalf("%d keys kept through the conversion; the test means to convert live keys", kept)
	}
	light(5_000)
	for range 2_000 { // counts in the millions
		now += int64(r.IntN(int(300 * time.Millisecond)))
		check(fmt.Sprint("k", r.IntN(8)), 1+int64(r.IntN(70_000)))
	}
}

// storedState returns the state the store keeps for key (one shard), or
// nil if it keeps none.
func storedState(t *testing.T, s *Store, a algorithm.Algorithm, key string) []int64 {
	t.Helper()
	l, err := s.limitFor(a)
	if err != nil {
		t.Fatal(err)
	}
	tb := s.shards[0].tables[l.id]
	sl := tb.find(s.hash(key))
	if sl < 0 {
		return nil
	}
	return tb.load(sl, make([]int64, a.Words()))
}
