package grpcguard

import (
	"encoding/binary"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/credentials"
)

// ResetOptions configures Resets.
type ResetOptions struct {
	// Budget is how many stream resets a client address may have in hand:
	// each reset spends one, each stream the client opens earns
	// StreamCredit (so a client resetting fewer than that share of its
	// streams never runs out) and time earns RefillPerSecond, up to
	// Budget. A reset with nothing left cuts the connection off.
	Budget          float64
	StreamCredit    float64
	RefillPerSecond float64
	// Cooldown is how long a client address whose connection was cut off
	// has its other connections cut at their next stream and new ones
	// refused.
	Cooldown time.Duration
	// OnCut, if set, is called with "resets" for each connection cut off
	// and with "cooldown" for each connection refused or cut during a
	// cooldown.
	OnCut func(reason string)
	// Now is the clock (time.Now if nil).
	Now func() time.Time
}

// Reasons passed to ResetOptions.OnCut.
const (
	CutResets   = "resets"
	CutCooldown = "cooldown"
)

// Resets keeps the stream-reset budget of every client address with a
// connection to the gRPC listener. Wrap the server's transport
// credentials with Credentials to apply it.
type Resets struct {
	o ResetOptions

	mu        sync.Mutex
	clients   map[string]*resetAccount
	lastSweep time.Time
}

// resetAccount is one client address's budget.
type resetAccount struct {
	mu        sync.Mutex
	tokens    float64
	refilled  time.Time // when time's earnings were last added
	coolUntil time.Time // zero unless cut off
	conns     int       // open connections; guarded by Resets.mu
}

// NewResets returns the reset accounting o describes.
func NewResets(o ResetOptions) *Resets {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.OnCut == nil {
		o.OnCut = func(string) {}
	}
	return &Resets{o: o, clients: map[string]*resetAccount{}}
}

// errCoolingDown refuses a connection from an address that was cut off.
var errCoolingDown = errors.New("grpcguard: client address cut off for resetting too many streams; retry later")

// errCutOff is what the gRPC transport reads from a connection cut off.
var errCutOff = errors.New("grpcguard: connection cut off for resetting too many streams")

// open counts a new connection from addr, or refuses it during the
// address's cooldown.
func (r *Resets) open(addr net.Addr) (*resetAccount, error) {
	now := r.o.Now()
	key := ClientAddr(addr)
	r.mu.Lock()
	defer r.mu.Unlock()
	if now.Sub(r.lastSweep) >= time.Second {
		r.sweep(now)
	}
	a := r.clients[key]
	if a == nil {
		a = &resetAccount{tokens: r.o.Budget, refilled: now}
		r.clients[key] = a
	}
	a.mu.Lock()
	cooling := now.Before(a.coolUntil)
	a.mu.Unlock()
	if cooling {
		r.o.OnCut(CutCooldown)
		return nil, errCoolingDown
	}
	a.conns++
	return a, nil
}

// close stops counting a connection of a.
func (r *Resets) close(a *resetAccount) {
	r.mu.Lock()
	a.conns--
	r.mu.Unlock()
}

// sweep forgets addresses without connections whose budget is full again
// and whose cooldown is over. r.mu must be held.
func (r *Resets) sweep(now time.Time) {
	r.lastSweep = now
	for k, a := range r.clients {
		if a.conns > 0 {
			continue
		}
		a.mu.Lock()
		done := !now.Before(a.coolUntil) && a.tokens+now.Sub(a.refilled).Seconds()*r.o.RefillPerSecond >= r.o.Budget
		a.mu.Unlock()
		if done {
			delete(r.clients, k)
		}
	}
}

// Clients returns the number of client addresses being accounted.
func (r *Resets) Clients() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.clients)
}

// opened earns a's credit for a new stream; it reports false if the
// address is cooling down (the connection must then be cut off).
func (r *Resets) opened(a *resetAccount) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.coolUntil.IsZero() && !r.cooled(a) {
		return false
	}
	a.tokens = min(a.tokens+r.o.StreamCredit, r.o.Budget)
	return true
}

// reset spends one of a's resets; it reports false if none was left, and
// then starts the address's cooldown.
func (r *Resets) reset(a *resetAccount) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.coolUntil.IsZero() && !r.cooled(a) {
		return false
	}
	a.tokens--
	if a.tokens >= 0 {
		return true
	}
	// Out: add what time has earned since the last refill, then decide.
	now := r.o.Now()
	a.tokens = min(a.tokens+now.Sub(a.refilled).Seconds()*r.o.RefillPerSecond, r.o.Budget)
	a.refilled = now
	if a.tokens >= 0 {
		return true
	}
	a.coolUntil = now.Add(r.o.Cooldown)
	return false
}

// cooled reports whether a's cooldown is over, and then clears it. a.mu
// must be held.
func (r *Resets) cooled(a *resetAccount) bool {
	now := r.o.Now()
	if now.Before(a.coolUntil) {
		return false
	}
	a.coolUntil = time.Time{}
	a.tokens = min(a.tokens+now.Sub(a.refilled).Seconds()*r.o.RefillPerSecond, r.o.Budget)
	a.refilled = now
	return true
}

// Credentials wraps creds so that every connection the gRPC server accepts
// is watched by r.
func (r *Resets) Credentials(creds credentials.TransportCredentials) credentials.TransportCredentials {
	return guardedCreds{TransportCredentials: creds, r: r}
}

type guardedCreds struct {
	credentials.TransportCredentials
	r *Resets
}

func (g guardedCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	a, err := g.r.open(raw.RemoteAddr())
	if err != nil {
		return nil, nil, err
	}
	c, info, err := g.TransportCredentials.ServerHandshake(raw)
	if err != nil {
		g.r.close(a)
		return nil, nil, err
	}
	return &watchedConn{Conn: c, r: g.r, acct: a, in: frameScanner{preface: len(clientPreface)}, wlock: make(chan struct{}, 1)}, info, nil
}

func (g guardedCreds) Clone() credentials.TransportCredentials {
	return guardedCreds{TransportCredentials: g.TransportCredentials.Clone(), r: g.r}
}

// clientPreface starts every HTTP/2 client connection.
const clientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// HTTP/2 frame types and error codes watchedConn uses.
const (
	frameHeaders   = 0x1
	frameRSTStream = 0x3
	frameGoAway    = 0x7

	errCodeEnhanceYourCalm = 0xb
)

// frameScanner follows an HTTP/2 byte stream frame by frame, looking only at
// the 9-byte frame headers.
type frameScanner struct {
	preface int // bytes of the client preface still to pass
	hdr     [9]byte
	hdrN    int // bytes of hdr filled
	payload int // bytes of the current frame's payload still to pass
}

// scan passes b and calls frame for each frame header completed in it.
// It stops early, returning false, when frame does.
func (s *frameScanner) scan(b []byte, frame func(typ byte, stream uint32) bool) bool {
	for len(b) > 0 {
		switch {
		case s.preface > 0:
			n := min(s.preface, len(b))
			s.preface -= n
			b = b[n:]
		case s.payload > 0:
			n := min(s.payload, len(b))
			s.payload -= n
			b = b[n:]
		default:
			n := copy(s.hdr[s.hdrN:], b)
			s.hdrN += n
			b = b[n:]
			if s.hdrN < len(s.hdr) {
				return true
			}
			s.hdrN = 0
			s.payload = int(s.hdr[0])<<16 | int(s.hdr[1])<<8 | int(s.hdr[2])
			if !frame(s.hdr[3], binary.BigEndian.Uint32(s.hdr[5:])&(1<<31-1)) {
				return false
			}
		}
	}
	return true
}

// atBoundary reports whether the stream so far ends between two frames.
func (s *frameScanner) atBoundary() bool { return s.preface == 0 && s.hdrN == 0 && s.payload == 0 }

// watchedConn counts the streams the client opens and resets, and cuts
// the connection off when the client's address has no resets left.
type watchedConn struct {
	net.Conn
	r    *Resets
	acct *resetAccount

	in         frameScanner // read by the transport's reader only
	lastStream uint32       // highest stream the client opened

	// wlock (a channel of one, so that cutOff can give up waiting)
	// serialises writes, so that GOAWAY goes between two frames.
	wlock chan struct{}
	out   frameScanner // what the server wrote; under wlock
	done  atomic.Bool  // cut off or closed: no more writes
	once  sync.Once
}

func (c *watchedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && !c.in.scan(p[:n], c.frame) {
		c.cutOff()
		return 0, errCutOff
	}
	return n, err
}

// frame accounts one frame from the client; false cuts the connection off.
func (c *watchedConn) frame(typ byte, stream uint32) bool {
	switch typ {
	case frameHeaders:
		if stream <= c.lastStream || stream%2 == 0 {
			return true // trailers, or a protocol error gRPC reports itself
		}
		c.lastStream = stream
		if !c.r.opened(c.acct) {
			c.r.o.OnCut(CutCooldown)
			return false
		}
	case frameRSTStream:
		if !c.r.reset(c.acct) {
			c.r.o.OnCut(CutResets)
			return false
		}
	}
	return true
}

func (c *watchedConn) Write(p []byte) (int, error) {
	c.wlock <- struct{}{}
	defer func() { <-c.wlock }()
	if c.done.Load() {
		return 0, net.ErrClosed
	}
	n, err := c.Conn.Write(p)
	c.out.scan(p[:n], func(byte, uint32) bool { return true })
	return n, err
}

// goAwayWait is how long cutOff waits for a write of the server's to end
// before it closes the connection without GOAWAY.
const goAwayWait = 100 * time.Millisecond

// cutOff sends GOAWAY (ENHANCE_YOUR_CALM) if the server is between two
// frames, and closes the connection.
func (c *watchedConn) cutOff() {
	t := time.NewTimer(goAwayWait)
	defer t.Stop()
	select {
	case c.wlock <- struct{}{}:
		if !c.done.Load() && c.out.atBoundary() {
			debug := "too many stream resets"
			f := make([]byte, 9+8+len(debug))
			f[2] = byte(8 + len(debug))
			f[3] = frameGoAway
			binary.BigEndian.PutUint32(f[9:], c.lastStream)
			binary.BigEndian.PutUint32(f[13:], errCodeEnhanceYourCalm)
			copy(f[17:], debug)
			c.Conn.SetWriteDeadline(time.Now().Add(time.Second))
			c.Conn.Write(f)
		}
		c.done.Store(true)
		<-c.wlock
	case <-t.C:
	}
	c.done.Store(true)
	c.Close()
}

func (c *watchedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.r.close(c.acct) })
	return err
}

// ClientAddr is the part of a remote address client accounting goes by:
// the IP address without the port.
func ClientAddr(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		return string(ta.IP.To16())
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}
