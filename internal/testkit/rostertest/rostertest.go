// Package rostertest checks a store.Roster: the same scenario runs against
// every store that implements it, on times the test chooses (a Redis store
// runs it with ClientTime).
package rostertest

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/store"
)

// Check runs the scenario against r in groups named after prefix (a store
// shared with other tests gets a prefix of its own). Times start at base
// (Unix nanoseconds).
func Check(t *testing.T, r store.Roster, prefix string, base int64) {
	t.Helper()
	ctx := context.Background()
	group := prefix + "g"
	sec := int64(time.Second)
	beat := func(at int64, member string, leave bool) store.Census {
		t.Helper()
		c, err := r.Heartbeat(ctx, base+at, store.Beat{Group: group, Member: member, Expiry: 3 * time.Second, Leave: leave})
		if err != nil {
			t.Fatalf("beat of %s at %ds: %v", member, at/sec, err)
		}
		return c
	}
	if c := beat(0, "a", false); c.Live != 1 || !c.New {
		t.Fatalf("first beat: %+v", c)
	}
	if c := beat(sec, "b", false); c.Live != 2 || !c.New {
		t.Fatalf("b joins: %+v", c)
	}
	if c := beat(2*sec, "a", false); c.Live != 2 || c.New {
		t.Fatalf("a again: %+v", c)
	}
	// b's last beat (at 1 s) counts until 4 s: at 4 s a is alone.
	if c := beat(4*sec, "a", false); c.Live != 1 {
		t.Fatalf("after b expired: %+v", c)
	}
	if c := beat(4*sec, "b", false); c.Live != 2 || !c.New {
		t.Fatalf("b back after expiring: %+v", c)
	}
	if c := beat(5*sec, "a", true); c.Live != 1 {
		t.Fatalf("a leaves: %+v", c)
	}
	if c := beat(5*sec, "b", false); c.Live != 1 || c.New {
		t.Fatalf("b alone: %+v", c)
	}
	other, err := r.Heartbeat(ctx, base+5*sec, store.Beat{Group: prefix + "h", Member: "a", Expiry: time.Second})
	if err != nil || other.Live != 1 {
		t.Fatalf("groups are apart: %+v %v", other, err)
	}
	for _, b := range []store.Beat{{Member: "a", Expiry: time.Second}, {Group: group, Expiry: time.Second}, {Group: group, Member: "a"}} {
		if _, err := r.Heartbeat(ctx, base, b); err == nil {
			t.Errorf("%+v: no error", b)
		}
	}
}
