package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/internal/testkit/rostertest"
	"github.com/floodgate-dev/floodgate/store"
)

func TestRoster(t *testing.T) {
	base := time.Date(2026, 7, 30, 0, 0, 0, 0, time.UTC).UnixNano()
	t.Run("server", func(t *testing.T) { rostertest.Check(t, newStore(t, Options{ClientTime: true}), "", base) })
	t.Run("cluster", func(t *testing.T) { rostertest.Check(t, newClusterStore(t), "", base) })
}

// TestRosterServerTime: without ClientTime the members' expiry is Redis's
// own clock, whatever now the caller passes.
func TestRosterServerTime(t *testing.T) {
	s := newStore(t, Options{})
	ctx := context.Background()
	b := store.Beat{Group: "g", Member: "a", Expiry: 300 * time.Millisecond}
	c, err := s.Heartbeat(ctx, 0, b)
	if err != nil || c.Live != 1 {
		t.Fatalf("%+v %v", c, err)
	}
	b.Member = "b"
	deadline := time.Now().Add(time.Minute)
	for {
		c, err = s.Heartbeat(ctx, 0, b)
		if err != nil {
			t.Fatal(err)
		}
		if c.Live == 1 {
			break // a expired on Redis's clock
		}
		if time.Now().After(deadline) {
			t.Fatalf("a still counted a minute after its 300 ms expiry: %+v", c)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := s.Heartbeat(ctx, 0, store.Beat{Group: "a{b}", Member: "a", Expiry: time.Second}); err == nil {
		t.Fatal("a group name with braces was taken")
	}
}
