package gateway

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"
)

// TestPoolAtCapWaitsForAReturnedConnection: with MaxConns 1 and the one
// connection in use, a second get waits for it and gets that same
// connection once it is put back (no second dial past the cap); a get
// whose context ends while it waits returns the context's error.
func TestPoolAtCapWaitsForAReturnedConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	counter := &connCounter{}
	p := newPool(ln.Addr().String(), Transport{MaxConns: 1}, counter)
	defer p.closeIdle()
	ctx := context.Background()
	first, err := p.get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *upConn, 1)
	go func() {
		c, err := p.get(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- c
	}()
	p.put(first)
	select {
	case c := <-got:
		if c != first {
			t.Fatal("the waiter got a new connection past the cap of 1")
		}
		if n := counter.opened.Load(); n != 1 {
			t.Fatalf("%d connections dialed, want 1", n)
		}
		// Held again: a get that gives up returns its context's error.
		cctx, cancel := context.WithCancelCause(ctx)
		stop := errors.New("caller gave up")
		cancel(stop)
		if _, err := p.get(cctx); !errors.Is(err, stop) {
			t.Fatalf("get with an ended context at the cap: %v, want its cause", err)
		}
		p.put(c)
	case <-time.After(20 * time.Second):
		t.Fatal("the waiter never got the connection put back")
	}
}
