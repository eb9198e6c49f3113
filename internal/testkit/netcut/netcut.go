// Package netcut is a TCP proxy on loopback that a test can cut and mend,
// standing for the network between two places (two regions, a node and its
// store).
package netcut

import (
	"io"
	"net"
	"sync"
	"testing"
)

// Link forwards connections from its own loopback address to an upstream
// address. Cut closes every open connection and refuses new ones until Mend.
type Link struct {
	ln       net.Listener
	upstream string
	mu       sync.Mutex
	down     bool
	conns    []net.Conn
}

// New listens on a loopback port and forwards to upstream until the test
// ends.
func New(t testing.TB, upstream string) *Link {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &Link{ln: ln, upstream: upstream}
	t.Cleanup(func() { ln.Close(); l.Cut() })
	go l.accept()
	return l
}

func (l *Link) accept() {
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return
		}
		l.mu.Lock()
		down := l.down
		l.mu.Unlock()
		if down {
			c.Close()
			continue
		}
		u, err := net.Dial("tcp", l.upstream)
		if err != nil {
			c.Close()
			continue
		}
		l.mu.Lock()
		l.conns = append(l.conns, c, u)
		l.mu.Unlock()
		go func() { io.Copy(u, c); u.Close() }()
		go func() { io.Copy(c, u); c.Close() }()
	}
}

// Addr is the address to dial in place of the upstream.
func (l *Link) Addr() string { return l.ln.Addr().String() }

// Cut closes the open connections and refuses new ones until Mend.
func (l *Link) Cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.down = true
	for _, c := range l.conns {
		c.Close()
	}
	l.conns = nil
}

// Mend lets new connections through again.
func (l *Link) Mend() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.down = false
}
