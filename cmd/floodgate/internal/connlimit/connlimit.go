// Package connlimit caps the connections a listener holds open, in all and
// per client address, so that one client cannot take every file descriptor
// of the process nor many clients keep a light one out.
package connlimit

import (
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/floodgate-dev/floodgate/internal/ratelog"

	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/grpcguard"
)

// Listener caps the connections a listener holds open: at most max in
// all and at most perClient from one client address (0 means no cap). A
// connection past the per-client cap is accepted and closed at once, so the
// kernel's backlog keeps draining and one client cannot take every file
// descriptor of the process. When the listener is full, a new client is
// not simply turned away: if some address holds at least two connections
// more than the newcomer's, that address's oldest connection is closed to
// make room. Many addresses holding connections open can therefore fill the
// listener, but cannot keep a client with few connections out of it.
type Listener struct {
	net.Listener
	name      string
	max       int
	perClient int
	log       *slog.Logger
	onReject  func(reason string)

	mu      sync.Mutex
	open    int
	clients map[string][]*limitedConn // oldest first
	// peakOpen and peakClient are the most connections held at once, in
	// all and from one address.
	peakOpen, peakClient int

	refusals *ratelog.Every // one log record every 10 s at most
}

// Reasons a connection is refused or closed, passed to New's onReject.
const (
	RefusedListenerFull = "listener_full"
	RefusedClientFull   = "client_full"
	EvictedForNewClient = "evicted"
)

// New wraps ln (named name in log records) in the caps maxConns and
// perClient (0: no cap); onReject, if not nil, is called with the reason of
// every connection refused or evicted.
func New(ln net.Listener, name string, maxConns, perClient int, log *slog.Logger, onReject func(string)) *Listener {
	if onReject == nil {
		onReject = func(string) {}
	}
	return &Listener{Listener: ln, name: name, max: maxConns, perClient: perClient, log: log, onReject: onReject,
		clients: map[string][]*limitedConn{}, refusals: ratelog.New(10 * time.Second)}
}

// Accept returns the next connection within the caps.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		lc := &limitedConn{Conn: c, l: l, client: grpcguard.ClientAddr(c.RemoteAddr())}
		victim, reason := l.admit(lc)
		if reason != "" {
			c.Close()
			l.refuse(reason)
			continue
		}
		if victim != nil {
			victim.Conn.Close() // its place is already given to lc
			l.refuse(EvictedForNewClient)
		}
		return lc, nil
	}
}

// admit counts c, or says which cap refuses it. When the listener is full
// it may instead return a connection to close to make room for c.
func (l *Listener) admit(c *limitedConn) (victim *limitedConn, reason string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	mine := l.clients[c.client]
	if l.perClient > 0 && len(mine) >= l.perClient {
		return nil, RefusedClientFull
	}
	if l.max > 0 && l.open >= l.max {
		var top string
		most := 0
		for addr, cs := range l.clients {
			if len(cs) > most {
				top, most = addr, len(cs)
			}
		}
		if most < len(mine)+2 {
			return nil, RefusedListenerFull
		}
		victim = l.clients[top][0]
		l.remove(victim)
	}
	l.open++
	l.clients[c.client] = append(mine, c)
	l.peakOpen = max(l.peakOpen, l.open)
	l.peakClient = max(l.peakClient, len(mine)+1)
	return victim, ""
}

// remove stops counting c; it reports false if c was not counted (already
// evicted). l.mu must be held.
func (l *Listener) remove(c *limitedConn) bool {
	cs := l.clients[c.client]
	for i, x := range cs {
		if x == c {
			cs = append(cs[:i], cs[i+1:]...)
			if len(cs) == 0 {
				delete(l.clients, c.client)
			} else {
				l.clients[c.client] = cs
			}
			l.open--
			return true
		}
	}
	return false
}

func (l *Listener) release(c *limitedConn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.remove(c)
}

// refuse counts a refused connection and logs the count at most every 10 s.
func (l *Listener) refuse(reason string) {
	l.onReject(reason)
	n, due := l.refusals.Add()
	if !due {
		return
	}
	l.log.Warn("connections refused: a connection cap is full", "listener", l.name, "refused", n,
		"last_reason", reason, "max_conns", l.max, "max_conns_per_client", l.perClient)
}

// Open returns the number of connections held open.
func (l *Listener) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open
}

// Peaks returns the most connections the listener has held at once, in all
// and from one client address.
func (l *Listener) Peaks() (open, perClient int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.peakOpen, l.peakClient
}

// limitedConn gives its place back to the listener when closed.
type limitedConn struct {
	net.Conn
	l      *Listener
	client string
	once   sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c) })
	return err
}
