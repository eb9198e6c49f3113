package algorithm

import (
	"testing"
	"time"
)

// TestIdleAfterRecordDebt checks that a state pushed over its limit by
// Record (counts merged from other nodes) is equivalent to a zero state once
// IdleAfter has passed, so a store that expires idle keys changes no
// decision.
func TestIdleAfterRecordDebt(t *testing.T) {
	for _, name := range Names() {
		alg, err := New(Config{Algorithm: name, Limit: 5, Window: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		idle := int64(alg.IdleAfter())
		if idle == 0 {
			continue // never idle by itself (concurrency without a window)
		}
		t0 := int64(10 * time.Second)
		s := make([]int64, alg.Words())
		for i := 0; i < 50; i++ {
			alg.Record(s, t0, 1)
		}
		at := t0 + idle + 1
		got, want := alg.Peek(s, at, 1), alg.Peek(make([]int64, alg.Words()), at, 1)
		if got != want {
			t.Errorf("%s: after 50 recorded units, at last update + IdleAfter the state decides %+v, a zero state %+v", name, got, want)
		}
	}
}
