package server

import (
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// limitListener caps the connections a listener holds open: at most max in
// all and at most perClient from one client address (0 means no cap). A
// connection past a cap is accepted and closed at once, so the kernel's
// backlog keeps draining and one client cannot take every file descriptor
// of the process: other clients, and the process's other listeners, keep
// being served.
type limitListener struct {
	net.Listener
	name      string
	max       int
	perClient int
	log       *slog.Logger
	onReject  func(reason string)

	mu      sync.Mutex
	open    int
	clients map[string]int

	refused   atomic.Int64 // refused since the last log line
	lastLogNS atomic.Int64
}

// Reasons a connection is refused, as counted in metrics.
const (
	refusedListenerFull = "listener_full"
	refusedClientFull   = "client_full"
)

func newLimitListener(ln net.Listener, name string, maxConns, perClient int, log *slog.Logger, onReject func(string)) *limitListener {
	if onReject == nil {
		onReject = func(string) {}
	}
	return &limitListener{Listener: ln, name: name, max: maxConns, perClient: perClient, log: log, onReject: onReject,
		clients: map[string]int{}}
}

// Accept returns the next connection within the caps.
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		client := clientAddr(c.RemoteAddr())
		if reason := l.admit(client); reason != "" {
			c.Close()
			l.refuse(reason)
			continue
		}
		return &limitedConn{Conn: c, l: l, client: client}, nil
	}
}

// admit counts a new connection from client, or says which cap refuses it.
func (l *limitListener) admit(client string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.max > 0 && l.open >= l.max {
		return refusedListenerFull
	}
	n := l.clients[client]
	if l.perClient > 0 && n >= l.perClient {
		return refusedClientFull
	}
	l.open++
	l.clients[client] = n + 1
	return ""
}

func (l *limitListener) release(client string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if n := l.clients[client] - 1; n > 0 {
		l.clients[client] = n
	} else {
		delete(l.clients, client)
	}
}

// refuse counts a refused connection and logs the count at most every 10 s.
func (l *limitListener) refuse(reason string) {
	l.onReject(reason)
	l.refused.Add(1)
	now := time.Now().UnixNano()
	last := l.lastLogNS.Load()
	if now-last < int64(10*time.Second) || !l.lastLogNS.CompareAndSwap(last, now) {
		return
	}
	l.log.Warn("connections refused: a connection cap is full", "listener", l.name, "refused", l.refused.Swap(0),
		"last_reason", reason, "max_conns", l.max, "max_conns_per_client", l.perClient)
}

// Open returns the number of connections held open.
func (l *limitListener) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open
}

// clientAddr is the part of a remote address a per-client cap counts by:
// the IP address without the port.
func clientAddr(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		return string(ta.IP.To16())
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

// limitedConn gives its place back to the listener when closed.
type limitedConn struct {
	net.Conn
	l      *limitListener
	client string
	once   sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.client) })
	return err
}

// limitConns wraps a bound listener in the configured connection caps and
// counts what they refuse in floodgate_connections_refused_total.
func (s *Server) limitConns(name string, ln net.Listener) net.Listener {
	c := s.cfg.Connections
	if c.MaxConns == 0 && c.MaxConnsPerClient == 0 {
		return ln
	}
	s.refusedOnce.Do(func() {
		s.refused = prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_connections_refused_total",
			Help: "Connections accepted and closed at once because a connection cap (max_conns, max_conns_per_client) was full.",
		}, []string{"listener", "reason"})
		s.rec.Registry().MustRegister(s.refused)
	})
	return newLimitListener(ln, name, c.MaxConns, c.MaxConnsPerClient, s.log, func(reason string) {
		s.refused.WithLabelValues(name, reason).Inc()
	})
}
