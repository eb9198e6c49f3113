package algorithm

import (
	"encoding/binary"
	"testing"
	"time"
)

// FuzzDecide feeds every algorithm arbitrary parameters, state words, times
// and costs. Nothing may panic; from a valid (zero) state the decisions must
// keep the common rules.
func FuzzDecide(f *testing.F) {
	f.Add(uint8(0), uint32(600), uint32(60_000), []byte{}, []byte{1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add(uint8(8), uint32(1), uint32(1), []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}, []byte{0x80, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add(uint8(1), uint32(10), uint32(5), []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, []byte{3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	// A compact bounded-log header (3 entries, merged) over arbitrary words.
	f.Add(uint8(8), uint32(20), uint32(1000), []byte{3, 0, 0x16, 0, 0, 0, 0x10, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f,
		1, 2, 3, 4, 5, 6, 7, 8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 9, 9, 9, 9, 9, 9, 9, 0x80},
		[]byte{0x81, 0, 0, 0, 0, 0, 0, 0, 1, 0x41, 0, 0, 0, 0, 0, 0, 0, 2})
	f.Fuzz(func(t *testing.T, alg uint8, limit, windowMS uint32, state, ops []byte) {
		c := Config{
			Algorithm: Names[int(alg)%len(Names)],
			Limit:     int64(limit%2000) + 1,
			Window:    time.Duration(windowMS%100_000_000+1) * time.Millisecond,
		}
		a, err := New(c)
		if err != nil {
			return
		}
		corrupt := make([]int64, a.Words())
		for i := range corrupt {
			if len(state) >= 8*(i+1) {
				corrupt[i] = int64(binary.LittleEndian.Uint64(state[8*i:]))
			}
		}
		clean := make([]int64, a.Words())
		for len(ops) >= 9 {
			op, v := ops[0], int64(binary.LittleEndian.Uint64(ops[1:9]))
			ops = ops[9:]
			now, cost := v, int64(op%8)-1 // costs -1..6, now anything
			if op&8 != 0 {
				cost = v
				now = int64(op) * int64(time.Second)
			}
			switch op >> 6 {
			case 0, 1:
				a.Decide(corrupt, now, cost)
				checkDecision(t, a, a.Decide(clean, now, cost), cost)
			case 2:
				a.Record(corrupt, now, cost)
				a.Record(clean, now, cost)
			case 3:
				a.Release(corrupt, now, cost)
				a.Release(clean, now, cost)
				a.Peek(corrupt, now, cost)
			}
		}
	})
}

// FuzzDecideCompact feeds sliding-window's DecideCompactInto arbitrary
// compact words (the fields past the slice count cleared, as a store that
// packed them leaves them), epochs, times, costs and limits with 16- and
// 32-bit counts. Nothing may panic; where it decides, the decision and the
// state must be Decide's on the same state in the algorithm's own words;
// where it declines, nothing may change.
func FuzzDecideCompact(f *testing.F) {
	f.Add(uint8(3), uint32(600), []byte{1, 2, 3, 4, 5, 6, 7, 0x10, 9, 9, 9, 9, 9, 9, 9, 0x20, 0, 0, 0, 0, 0, 0, 0, 0}, int64(1_000_000), int64(5), uint32(1))
	// States the decision takes: in the newest slice (1,008,208) and the next.
	f.Add(uint8(3), uint32(600), []byte{1, 2, 3, 4, 5, 6, 7, 0x10, 9, 9, 9, 9, 9, 9, 9, 0x20, 0, 0, 0, 0, 0, 0, 0, 0}, int64(1_000_000), int64(1_008_208_500_000_000), uint32(5))
	f.Add(uint8(3), uint32(70_000), []byte{1, 2, 3, 4, 5, 6, 7, 0x10, 9, 9, 9, 9, 9, 9, 9, 0x20, 0, 0, 0, 0, 0, 0, 0, 0}, int64(1_000_000), int64(1_008_209_100_000_000), uint32(5))
	f.Add(uint8(15), uint32(1<<31), []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, int64(0), int64(-1), uint32(70_000))
	f.Fuzz(func(t *testing.T, n uint8, limit uint32, words []byte, epoch, now int64, cost uint32) {
		slices := 9 + int(n)%20
		a := newSlidingWindow(Config{Algorithm: SlidingWindow, Limit: int64(limit) + 1, Window: time.Duration(slices) * time.Second, Slices: slices})
		cw := a.CompactWords()
		compact := make([]int64, cw)
		for i := range compact {
			if len(words) >= 8*(i+1) {
				compact[i] = int64(binary.LittleEndian.Uint64(words[8*i:]))
			}
		}
		for p := slices; p < 4*cw; p++ { // no fields past the counts
			compact[p/4] &^= CompactMaxCount << (14 * (p % 4))
		}
		for i := 3; i < cw; i++ { // nor bytes past the offset's three
			compact[i] &= 1<<56 - 1
		}
		wide := make([]int64, a.words)
		wide[0] = epoch + compactOffset(compact)
		for p := range int64(slices) {
			a.setAt(wide, p, compactCount(compact, p))
		}
		before := append([]int64(nil), compact...)
		var got Decision
		if !a.DecideCompactInto(&got, compact, epoch, now, int64(cost)) {
			if !equalWords(compact, before) || got != (Decision{}) {
				t.Fatalf("declined but changed the state or the decision: %v to %v, %+v", before, compact, got)
			}
			return
		}
		if want := a.Decide(wide, now, int64(cost)); got != want {
			t.Fatalf("compact %+v, Decide %+v", got, want)
		}
		if o := compactOffset(compact); epoch+o != wide[0] {
			t.Fatalf("newest slice: compact %d, wide %d", epoch+o, wide[0])
		}
		for p := range int64(slices) {
			if compactCount(compact, p) != a.countAt(wide, p) {
				t.Fatalf("position %d: compact %d, wide %d", p, compactCount(compact, p), a.countAt(wide, p))
			}
		}
	})
}
