package memtable

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
)

// TestFloodCannotResetVictims puts 700 clients at their limit, then sends a
// flood of distinct keys far beyond the store's key and byte bounds, asking
// again for every victim after each tenth of the flood. No victim may get a
// request through before its window allows, the store must stay within its
// bytes, and once the window has passed the victims are served again. The
// cost of the guarantee, light clients charged for evicted keys that share
// their hash cells, is measured and logged.
func TestFloodCannotResetVictims(t *testing.T) {
	const (
		maxKeys  = 4096
		maxBytes = 512 << 10
	)
	flood := 200_000
	victims := 700
	if raceEnabled || testing.Short() {
		flood, victims = 20_000, 200
	}
	for _, cfg := range []algorithm.Config{
		{Algorithm: algorithm.FixedWindow, Limit: 5, Window: time.Hour},
		{Algorithm: algorithm.BoundedLog, Limit: 5, Window: time.Hour},
		{Algorithm: algorithm.TokenBucket, Limit: 5, Window: time.Hour},
		{Algorithm: algorithm.SlidingLog, Limit: 200, Window: time.Hour},
	} {
		t.Run(string(cfg.Algorithm), func(t *testing.T) {
			a, err := algorithm.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			s := New(Options{Shards: 16, MaxKeys: maxKeys, MaxBytes: maxBytes})
			now := 1_000 * sec
			victim := func(i int) string { return fmt.Sprint("victim-", i) }
			// Each victim sends until it reaches its limit or is rejected
			// (a victim evicted while filling up may be charged for other
			// victims sharing its summary cells).
			short := 0
			for i := range victims {
				for j := range cfg.Limit {
					if d := decide(t, s, a, victim(i), now, 1); !d.Allowed {
						short += int(cfg.Limit - j)
						break
					}
				}
			}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			admitted := 0
			for k := range flood {
				now += int64(time.Millisecond)
				decide(t, s, a, fmt.Sprint("flood-", k), now, 1)
				if (k+1)%(flood/10) == 0 {
					for i := range victims {
						if decide(t, s, a, victim(i), now, 1).Allowed {
							admitted++
						}
					}
					if st := s.Stats(); st.Bytes > maxBytes {
						t.Fatalf("after %d flood keys the store accounts %d bytes, over its bound %d", k+1, st.Bytes, maxBytes)
					}
				}
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			st := s.Stats()
			if admitted > 0 {
				t.Errorf("%d victim requests admitted before their window allows, after a flood of %d keys", admitted, flood)
			}
			if st.Keys > maxKeys || st.Evicted == 0 {
				t.Errorf("Stats %+v: want at most %d keys, and evictions", st, maxKeys)
			}
			if grow := int64(after.HeapAlloc) - int64(before.HeapAlloc); grow > 2*maxBytes {
				t.Errorf("heap grew %d bytes during the flood, bound %d", grow, maxBytes)
			}
			hurt, rejected := lightCost(t, s, a, now, 1000)
			// Once the summary lets their use go (at most two idle times,
			// four hours for this token bucket), victims are served again.
			later := now + int64(5*time.Hour)
			served := 0
			for i := range victims {
				if decide(t, s, a, victim(i), later, 1).Allowed {
					served++
				}
			}
			if served != victims {
				t.Errorf("a window after the flood, %d of %d victims served", served, victims)
			}
			t.Logf("%s: %d flood keys: %d keys kept, %d bytes (bound %d), %d evicted, %d charged; victims admitted early: %d "+
				"(%d victim units refused while filling up); light clients after the flood: %d of %d lost allowance, %d of %d requests rejected",
				cfg.Algorithm, flood, st.Keys, st.Bytes, maxBytes, st.Evicted, st.Charged, admitted, short,
				hurt, 1000, rejected, 1000*int(cfg.Limit))
		})
	}
}

// lightCost sends n fresh light clients' whole limit each at now and
// returns how many lost part of their allowance and how many requests were
// rejected: what the flood before cost them.
func lightCost(t *testing.T, s *Store, a algorithm.Algorithm, now int64, n int) (hurt, rejected int) {
	for i := range n {
		r := 0
		for range a.Config().Limit {
			if !decide(t, s, a, fmt.Sprint("light-", i), now, 1).Allowed {
				r++
			}
		}
		rejected += r
		if r > 0 {
			hurt++
		}
	}
	return hurt, rejected
}
