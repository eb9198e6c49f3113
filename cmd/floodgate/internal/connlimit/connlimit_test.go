package connlimit

import (
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"
)

// TestLimitListener: per-client cap, then a full listener that makes room
// for a newcomer by closing the oldest connection of the address holding
// the most, and refuses when no address holds two more than the newcomer.
func TestLimitListener(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	reasons := map[string]int{}
	// handled says what the listener did with each connection, in order:
	// a refusal's reason, or "accepted" (after an eviction's reason).
	handled := make(chan string, 16)
	ln := New(raw, "test", 4, 3, slog.New(slog.NewTextHandler(io.Discard, nil)), func(r string) {
		mu.Lock()
		reasons[r]++
		mu.Unlock()
		handled <- r
	})
	defer ln.Close()
	go func() {
		for {
			if _, err := ln.Accept(); err != nil {
				return // the server side holds every accepted connection
			}
			handled <- "accepted"
		}
	}()
	// dial connects from 127.0.0.ip and returns once the listener has
	// accepted or refused the connection, so that connections are taken in
	// the order they are dialled, however slow the machine.
	dial := func(ip byte) net.Conn {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, ip)}}
		c, err := d.Dial("tcp", raw.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		for timeout := time.After(30 * time.Second); ; {
			select {
			case r := <-handled:
				if r != EvictedForNewClient { // an eviction is followed by the newcomer's accept
					return c
				}
			case <-timeout:
				t.Fatal("the listener neither accepted nor refused a connection in 30 s")
			}
		}
	}
	closed := func(c net.Conn) bool {
		c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		_, err := c.Read(make([]byte, 1))
		ne, ok := err.(net.Error)
		return !(ok && ne.Timeout())
	}
	a := []net.Conn{dial(2), dial(2), dial(2)}
	if extra := dial(2); !closed(extra) {
		t.Error("a 4th connection from one address passed the per-client cap of 3")
	}
	b := dial(3)
	c1 := dial(4) // listener full (A 3, B 1): A's oldest makes room
	if !closed(a[0]) || closed(a[1]) || closed(a[2]) || closed(b) || closed(c1) {
		t.Error("the newcomer did not replace the oldest connection of the address holding the most")
	}
	c2 := dial(4) // full again (A 2, B 1, C 1): nobody holds 2 more than C
	if !closed(c2) {
		t.Error("a connection was admitted past a full listener though no address holds two more")
	}
	if got := ln.Open(); got != 4 {
		t.Errorf("%d connections counted open, want 4", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if reasons[RefusedClientFull] != 1 || reasons[EvictedForNewClient] != 1 || reasons[RefusedListenerFull] != 1 {
		t.Errorf("counted %v, want one of each reason", reasons)
	}
}
