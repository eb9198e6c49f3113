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
			Algorithm: Names()[int(alg)%len(Names())],
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
