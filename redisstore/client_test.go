package redisstore

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/store"
	"github.com/redis/rueidis"
)

// TestNewWithClient is what an application that already holds a rueidis
// client writes: the store decides through that client, shares its
// counters with a store that dialled Redis itself, and Close leaves the
// application's client working.
func TestNewWithClient(t *testing.T) {
	needRedis(t)
	ctx := context.Background()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{shared.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	prefix := fmt.Sprintf("own%d", time.Now().UnixNano())
	s, err := NewWithClient(ctx, c, Options{Prefix: prefix, ClientTime: true})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(s.Address(), shared.Addr()) {
		t.Errorf("Address() = %q, want it to name %s", s.Address(), shared.Addr())
	}
	dialled := newStore(t, Options{Prefix: prefix, ClientTime: true})
	a := mustAlg(t, algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: 3, Window: time.Minute})
	req := store.Request{Algorithm: a, Key: "user", Cost: 1}
	for i, st := range []*Store{s, dialled, s, dialled} {
		d, err := st.DecideOne(ctx, t0, req)
		if err != nil {
			t.Fatal(err)
		}
		if want := i < 3; d.Allowed != want {
			t.Fatalf("request %d: allowed=%v, want %v (both stores count the same key)", i+1, d.Allowed, want)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Do(ctx, c.B().Ping().Build()).Error(); err != nil {
		t.Fatalf("the caller's client after Store.Close: %v", err)
	}
	if _, err := s.DecideOne(ctx, t0, req); err == nil {
		t.Fatal("DecideOne on a closed store succeeded")
	}
}

// TestNewWithClientCluster checks that a Cluster client makes a Cluster
// store: a Decide over keys of several limits, in several slots, runs.
func TestNewWithClientCluster(t *testing.T) {
	cl := sharedCluster(t)
	ctx := context.Background()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: cl.Addrs(), DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := NewWithClient(ctx, c, Options{Prefix: fmt.Sprintf("ownc%d", time.Now().UnixNano()), ClientTime: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !s.cluster {
		t.Fatal("a Cluster client made a store that does not group calls by slot")
	}
	var reqs []store.Request
	for i := range 8 {
		a := mustAlg(t, algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: int64(i + 1), Window: time.Minute})
		reqs = append(reqs, store.Request{Algorithm: a, Key: "k", Cost: 1})
	}
	out := make([]algorithm.Decision, len(reqs))
	if err := s.Decide(ctx, t0, reqs, out); err != nil {
		t.Fatal(err)
	}
	for i, d := range out {
		if !d.Allowed {
			t.Errorf("request %d refused on a fresh key", i)
		}
	}
}

// TestNewWithClientRefusesConnectionOptions: the client decides how to
// connect, so a connection option would be silently ignored; it is an
// error instead, as is a nil client.
func TestNewWithClientRefusesConnectionOptions(t *testing.T) {
	needRedis(t)
	ctx := context.Background()
	if _, err := NewWithClient(ctx, nil, Options{}); err == nil {
		t.Error("nil client accepted")
	}
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{shared.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for name, o := range map[string]Options{
		"Addrs":        {Addrs: []string{"127.0.0.1:1"}},
		"Cluster":      {Cluster: true},
		"Sentinel":     {SentinelMaster: "m"},
		"Password":     {Password: "x"},
		"DB":           {DB: 2},
		"ConnectLater": {ConnectLater: true},
		"Prefix":       {Prefix: "a{b"},
		"Slots":        {SlotsPerLimit: -1},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := NewWithClient(ctx, c, o); err == nil {
				t.Errorf("NewWithClient accepted %+v", o)
			}
		})
	}
}
