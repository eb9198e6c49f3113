package redistest

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestServerLifecycle(t *testing.T) {
	s := Start(t)
	if _, err := s.Do("SET", "k", "v"); err != nil {
		t.Fatalf("SET: %v", err)
	}
	if got, err := s.Do("GET", "k"); err != nil || got != "v" {
		t.Fatalf("GET = %q, %v; want v", got, err)
	}

	s.Pause()
	if err := s.ping(300 * time.Millisecond); err == nil {
		t.Fatal("PING answered while the server was paused")
	}
	s.Resume()
	if err := s.ping(time.Second); err != nil {
		t.Fatalf("PING after Resume: %v", err)
	}

	port := s.Port()
	s.Kill()
	if err := s.ping(300 * time.Millisecond); err == nil {
		t.Fatal("PING answered after Kill")
	}
	s.Restart()
	if s.Port() != port {
		t.Fatalf("Restart moved the server from port %d to %d", port, s.Port())
	}
	// No persistence: a restarted server is empty.
	if got, err := s.Do("EXISTS", "k"); err != nil || got != "0" {
		t.Fatalf("EXISTS k after restart = %q, %v; want 0", got, err)
	}
}

func TestClusterMigration(t *testing.T) {
	c := StartCluster(t)
	if len(c.Addrs()) != 3 {
		t.Fatalf("cluster has %d masters, want 3", len(c.Addrs()))
	}
	key := "{redistest}:a"
	slot := c.Slot(key)
	from := c.Owner(slot)
	if _, err := c.Servers()[from].Do("SET", key, "1"); err != nil {
		t.Fatalf("SET on owner: %v", err)
	}
	to := (from + 1) % 3

	c.BeginMigration(slot, to)
	// The key is still on the source: it answers it.
	if got, err := c.Servers()[from].Do("GET", key); err != nil || got != "1" {
		t.Fatalf("GET during migration, key not moved = %q, %v", got, err)
	}
	c.MigrateKeys(from, to, key)
	if _, err := c.Servers()[from].Do("GET", key); err == nil || !strings.HasPrefix(err.Error(), "redis: ASK "+strconv.Itoa(slot)) {
		t.Fatalf("GET on source after key moved: err = %v, want ASK %d", err, slot)
	}
	c.FinishMigration(slot, from, to)
	if c.Owner(slot) != to {
		t.Fatalf("slot %d owned by %d after migration, want %d", slot, c.Owner(slot), to)
	}
	if _, err := c.Servers()[from].Do("GET", key); err == nil || !strings.HasPrefix(err.Error(), "redis: MOVED "+strconv.Itoa(slot)) {
		t.Fatalf("GET on old owner: err = %v, want MOVED %d", err, slot)
	}
	if got, err := c.Servers()[to].Do("GET", key); err != nil || got != "1" {
		t.Fatalf("GET on new owner = %q, %v; want 1", got, err)
	}
}
