package gateway

import (
	"bufio"
	"context"
	"errors"
	"net"
	"sync"
	"time"
)

// pool holds one plain-HTTP upstream's connections for the direct
// forwarder: at most maxConns open (dialing, in use or idle), at most
// maxIdle of them idle, each idle one closed after idleTimeout.
type pool struct {
	addr        string
	dialer      *net.Dialer
	conns       *connCounter
	maxIdle     int
	idleTimeout time.Duration
	slots       chan struct{} // one token per open connection; nil: no cap
	returned    chan struct{} // wakes one waiter at the cap when a connection is put back

	mu     sync.Mutex
	idle   []*upConn // most recently used last
	reaper *time.Timer
}

// upConn is one upstream connection with its buffers.
type upConn struct {
	net.Conn
	// headerBudget, when not negative, is how many more bytes br may read
	// from the connection: it bounds the response headers.
	headerBudget int64
	br           *bufio.Reader
	bw           *bufio.Writer
	idleSince    time.Time
	reused       bool
}

func newPool(addr string, t Transport, c *connCounter) *pool {
	p := &pool{
		addr:        addr,
		dialer:      &net.Dialer{Timeout: orDefault(t.DialTimeout, DefaultDialTimeout), KeepAlive: 30 * time.Second},
		conns:       c,
		maxIdle:     orDefault(t.MaxIdleConns, DefaultMaxIdleConns),
		idleTimeout: orDefault(t.IdleConnTimeout, DefaultIdleConnTimeout),
	}
	if n := orDefault(t.MaxConns, DefaultMaxConns); n > 0 {
		p.slots = make(chan struct{}, n)
		p.returned = make(chan struct{}, 1)
	}
	return p
}

// get returns an idle connection, or dials one when none is idle and the
// cap allows; at the cap it waits, without polling, until a connection is
// put back (returned) or closed (a slot frees), or ctx ends.
func (p *pool) get(ctx context.Context) (*upConn, error) {
	for {
		if c := p.takeIdle(); c != nil {
			return c, nil
		}
		if p.slots == nil {
			return p.dial(ctx)
		}
		select {
		case p.slots <- struct{}{}:
			c, err := p.dial(ctx)
			if err != nil {
				<-p.slots
			}
			return c, err
		case <-p.returned:
			// A connection was put back: take it if no one was faster.
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
}

func (p *pool) takeIdle() *upConn {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.idle) > 0 {
		c := p.idle[len(p.idle)-1]
		p.idle = p.idle[:len(p.idle)-1]
		if p.idleTimeout > 0 && now.Sub(c.idleSince) > p.idleTimeout {
			go p.close(c)
			continue
		}
		c.reused = true
		if len(p.idle) > 0 {
			p.wake() // more are idle: pass the wake-up on to the next waiter
		}
		return c
	}
	return nil
}

// wake tells one waiter at the cap that a connection is idle. The
// one-token buffer keeps a wake-up sent before the waiter waits; takeIdle
// passes it on while connections remain, so none sits idle while a caller
// waits.
func (p *pool) wake() {
	if p.returned == nil {
		return
	}
	select {
	case p.returned <- struct{}{}:
	default:
	}
}

func (p *pool) dial(ctx context.Context) (*upConn, error) {
	conn, err := p.dialer.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		return nil, err
	}
	p.conns.opened.Add(1)
	p.conns.open.Add(1)
	c := &upConn{Conn: conn, headerBudget: -1, bw: bufio.NewWriterSize(conn, 4<<10)}
	c.br = bufio.NewReaderSize(budgetReader{c}, 4<<10)
	return c, nil
}

// maxResponseHeaderBytes bounds an upstream's response headers, as
// http.Transport's MaxResponseHeaderBytes default does.
const maxResponseHeaderBytes = 1 << 20

var errHeadersTooLarge = errors.New("gateway: upstream response headers exceed 1 MiB")

// budgetReader reads from the connection within its header budget.
type budgetReader struct{ c *upConn }

func (b budgetReader) Read(p []byte) (int, error) {
	c := b.c
	if c.headerBudget < 0 {
		return c.Conn.Read(p)
	}
	if c.headerBudget == 0 {
		return 0, errHeadersTooLarge
	}
	if int64(len(p)) > c.headerBudget {
		p = p[:c.headerBudget]
	}
	n, err := c.Conn.Read(p)
	c.headerBudget -= int64(n)
	return n, err
}

// put returns a healthy connection for reuse, or closes it when enough
// are idle.
func (p *pool) put(c *upConn) {
	c.idleSince = time.Now()
	p.mu.Lock()
	if len(p.idle) >= p.maxIdle {
		p.mu.Unlock()
		p.close(c)
		return
	}
	p.idle = append(p.idle, c)
	if p.idleTimeout > 0 && p.reaper == nil {
		p.reaper = time.AfterFunc(p.idleTimeout, p.reap)
	}
	p.mu.Unlock()
	p.wake()
}

// close closes a connection that will not be used again.
func (p *pool) close(c *upConn) {
	c.Conn.Close()
	p.conns.open.Add(-1)
	if p.slots != nil {
		<-p.slots
	}
}

// reap closes connections idle longer than idleTimeout, and runs again
// while any are idle.
func (p *pool) reap() {
	now := time.Now()
	p.mu.Lock()
	var expired []*upConn
	kept := p.idle[:0]
	for _, c := range p.idle {
		if now.Sub(c.idleSince) > p.idleTimeout {
			expired = append(expired, c)
		} else {
			kept = append(kept, c)
		}
	}
	clear(p.idle[len(kept):])
	p.idle = kept
	p.reaper = nil
	if len(p.idle) > 0 {
		p.reaper = time.AfterFunc(p.idleTimeout/2, p.reap)
	}
	p.mu.Unlock()
	for _, c := range expired {
		p.close(c)
	}
}

// closeIdle closes every idle connection.
func (p *pool) closeIdle() {
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	if p.reaper != nil {
		p.reaper.Stop()
		p.reaper = nil
	}
	p.mu.Unlock()
	for _, c := range idle {
		p.close(c)
	}
}

// errRetryable marks a failure on a reused connection before any of the
// response arrived: the upstream had closed it while idle.
var errRetryable = errors.New("gateway: reused upstream connection closed")
