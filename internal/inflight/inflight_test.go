package inflight

import (
	"slices"
	"testing"
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
