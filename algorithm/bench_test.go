package algorithm

import (
	"testing"
	"time"
)

// BenchmarkDecide measures one decision on one key's state, with traffic at
// twice the limit's rate so that both accepts and rejects occur, L = 600 per
// minute as in the baseline.
func BenchmarkDecide(b *testing.B) {
	for _, c := range testConfigs(600, time.Minute) {
		b.Run(string(c.Algorithm), func(b *testing.B) {
			a := mustNew(b, c)
			s := make([]int64, a.Words())
			now := int64(1_700_000_000e9)
			b.ReportAllocs()
			for b.Loop() {
				now += int64(50 * time.Millisecond)
				if a.Decide(s, now, 1).Allowed && c.Algorithm == Concurrency {
					a.Release(s, now, 1)
				}
			}
		})
	}
}

// BenchmarkBoundedLog measures bounded-log's Decide (L = 600 per minute, e
// = 0.05) on a light key (a request every 10 s: one entry) and on a heavy
// one (twice the limit's rate: about 20 entries, half the requests
// rejected).
func BenchmarkBoundedLog(b *testing.B) {
	for _, c := range []struct {
		name string
		gap  time.Duration
	}{{"light", 10 * time.Second}, {"heavy", 50 * time.Millisecond}} {
		b.Run(c.name, func(b *testing.B) {
			a := mustNew(b, Config{Limit: 600, Window: time.Minute})
			s := make([]int64, a.Words())
			now := int64(1_700_000_000e9)
			for b.Loop() {
				now += int64(c.gap)
				a.Decide(s, now, 1)
			}
		})
	}
}
