package inflight

import (
	"context"
	"slices"
	"testing"
	"time"
)

func TestQueue(t *testing.T) {
	var q Queue[int]
	made := 0
	item := func(v int) func() int { return func() int { made++; return v } }
	if _, alone := q.Enter(1, item(1)); !alone || made != 0 {
		t.Fatalf("first Enter: alone %v, made %d; want alone without making its item", alone, made)
	}
	for v := 2; v <= 6; v++ {
		if got, alone := q.Enter(1, item(v)); alone || got != v {
			t.Fatalf("Enter(%d) with the place taken: %d, alone %v; want queued", v, got, alone)
		}
	}
	if n := q.Waiting(); n != 5 {
		t.Fatalf("Waiting = %d, want 5", n)
	}
	if b := q.Next(3); !slices.Equal(b, []int{2, 3, 4}) {
		t.Fatalf("Next(3) = %v, want the first three in arrival order", b)
	}
	if b := q.Next(3); !slices.Equal(b, []int{5, 6}) {
		t.Fatalf("Next(3) = %v, want the rest", b)
	}
	if n := q.InFlight(); n != 1 {
		t.Fatalf("InFlight with the batch's sender = %d, want 1", n)
	}
	if b := q.Next(3); b != nil {
		t.Fatalf("Next with nothing waiting = %v, want nil", b)
	}
	// The place was given back: the next caller goes alone again.
	if _, alone := q.Enter(1, item(7)); !alone {
		t.Fatal("Enter after the place was given back: queued, want alone")
	}
	if n := q.InFlight(); n != 1 {
		t.Fatalf("InFlight = %d, want 1", n)
	}
}

func TestStillWaiting(t *testing.T) {
	type req struct {
		ctx  context.Context
		gone error
	}
	done, cancel := context.WithCancel(context.Background())
	cancel()
	soon, c1 := context.WithTimeout(context.Background(), time.Minute)
	defer c1()
	later, c2 := context.WithTimeout(context.Background(), time.Hour)
	defer c2()
	batch := []*req{{ctx: soon}, {ctx: done}, {ctx: later}, {ctx: context.Background()}}
	start := time.Now()
	live, last := StillWaiting(batch, func(r *req) context.Context { return r.ctx }, 2*time.Hour,
		func(r *req, err error) { r.gone = err })
	if len(live) != 3 || live[0] != batch[0] || live[1] != batch[2] || live[2] != batch[3] {
		t.Fatalf("live = %v, want the three whose callers wait, in order", live)
	}
	if batch[1].gone != context.Canceled || batch[0].gone != nil {
		t.Fatalf("gaveUp: %v, %v; want only the cancelled one answered, with its error", batch[0].gone, batch[1].gone)
	}
	if d := last.Sub(start); d < 2*time.Hour || d > 2*time.Hour+time.Minute {
		t.Fatalf("last deadline %v after the call, want the 2 h default of the one without a deadline", d)
	}
}
