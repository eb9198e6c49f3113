package ratelog

import (
	"sync"
	"testing"
	"time"
)

func TestEvery(t *testing.T) {
	clock := time.Unix(1000, 0)
	e := New(10 * time.Second)
	e.now = func() time.Time { return clock }
	steps := []struct {
		advance time.Duration
		n       int64
		due     bool
	}{
		{0, 1, true}, // the first event is recorded
		{time.Second, 0, false},
		{time.Second, 0, false},
		{8 * time.Second, 3, true}, // 10 s later: the two held back and this one
		{9 * time.Second, 0, false},
		{time.Minute, 2, true},
	}
	for i, s := range steps {
		clock = clock.Add(s.advance)
		if n, due := e.Add(); n != s.n || due != s.due {
			t.Fatalf("step %d: Add() = %d, %v; want %d, %v", i, n, due, s.n, s.due)
		}
	}
}

// TestEveryConcurrent: of many events at one instant exactly one is
// recorded, and the counts recorded add up to the events.
func TestEveryConcurrent(t *testing.T) {
	e := New(time.Hour)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var records, total int64
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				if n, due := e.Add(); due {
					mu.Lock()
					records++
					total += n
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	total += e.pending.Load()
	if records != 1 || total != 8000 {
		t.Fatalf("%d records standing for %d events, want 1 and 8000", records, total)
	}
}
