package grpcguard

import (
	"crypto/tls"
	"encoding/binary"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/credentials"
)

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
	return g.r.watch(c, a), info, nil
}

func (g guardedCreds) Clone() credentials.TransportCredentials {
	return guardedCreds{TransportCredentials: g.TransportCredentials.Clone(), r: g.r}
}

// Watch returns conn, an HTTP/2 server connection whose client preface has
// not been read yet (after TLS, for an HTTPS listener), watched by r; or
// an error, and conn closed, if the client's address is cooling down. A
// watched *tls.Conn keeps its ConnectionState method, which HTTP/2 servers
// look for.
func (r *Resets) Watch(conn net.Conn) (net.Conn, error) {
	a, err := r.open(conn.RemoteAddr())
	if err != nil {
		conn.Close()
		return nil, err
	}
	w := r.watch(conn, a)
	if tc, ok := conn.(*tls.Conn); ok {
		return watchedTLSConn{watchedConn: w, tls: tc}, nil
	}
	return w, nil
}

func (r *Resets) watch(c net.Conn, a *resetAccount) *watchedConn {
	return &watchedConn{Conn: c, r: r, acct: a, in: frameScanner{preface: len(clientPreface)}, wlock: make(chan struct{}, 1)}
}

// watchedTLSConn is a watched TLS connection.
type watchedTLSConn struct {
	*watchedConn
	tls *tls.Conn
}

// ConnectionState is the TLS connection's.
func (c watchedTLSConn) ConnectionState() tls.ConnectionState { return c.tls.ConnectionState() }

// watchedConn counts the streams the client opens and the streams reset
// (by the client, or by the server for the client's errors), and cuts the
// connection off when the client's address, or the listener, has no
// resets left.
type watchedConn struct {
	net.Conn
	r    *Resets
	acct *resetAccount

	in         frameScanner  // read by the server's reader only
	lastStream atomic.Uint32 // highest stream the client opened; written by the reader

	// open holds the streams the client opened that neither side has
	// ended yet; the reader adds them, either side removes them.
	mu   sync.Mutex
	open map[uint32]openStream

	// wlock (a channel of one, so that cutOff can give up waiting)
	// serialises writes, so that GOAWAY goes between two frames.
	wlock chan struct{}
	out   frameScanner // what the server wrote; under wlock
	done  atomic.Bool  // cut off or closed: no more writes
	// reported: the cut is counted (OnCut)
	reported atomic.Bool
	once     sync.Once
}

// openStream is a stream neither side has ended.
type openStream struct {
	opened   time.Time // when its HEADERS were read
	complete bool      // the client ended its side: the request is all in
}

func (c *watchedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && !c.in.scan(p[:n], c.clientFrame) {
		c.cutOff()
		return 0, errCutOff
	}
	return n, err
}

// clientFrame accounts one frame from the client; false cuts the
// connection off.
func (c *watchedConn) clientFrame(f frame) bool {
	switch f.typ {
	case frameHeaders:
		if f.stream == 0 || f.stream%2 == 0 {
			return true // a protocol error the server reports itself
		}
		if f.stream <= c.lastStream.Load() { // trailers
			if f.flags&flagEndStream != 0 {
				c.complete(f.stream)
			}
			return true
		}
		c.lastStream.Store(f.stream)
		if !c.r.opened(c.acct) {
			c.report(CutCooldown)
			return false
		}
		c.mu.Lock()
		if c.open == nil {
			c.open = map[uint32]openStream{}
		}
		c.open[f.stream] = openStream{opened: c.r.o.Now(), complete: f.flags&flagEndStream != 0}
		c.mu.Unlock()
	case frameData:
		if f.flags&flagEndStream != 0 {
			c.complete(f.stream)
		}
	case frameRSTStream:
		return c.ended(f.stream, true)
	}
	return true
}

// serverFrame accounts one frame the server wrote; false cuts the
// connection off.
func (c *watchedConn) serverFrame(f frame) bool {
	switch f.typ {
	case frameHeaders, frameData:
		if f.flags&flagEndStream != 0 {
			if s, ok := c.forget(f.stream); ok && s.complete {
				c.r.completed(c.acct) // answered in full after the whole request
			}
		}
	case frameRSTStream:
		switch f.code {
		case errCodeNo: // the answer is complete; the client need not finish its side
			c.forget(f.stream)
		case errCodeCancel: // the call's deadline passed
			return c.ended(f.stream, true)
		default: // a protocol error of the client's, or an answer it would not take
			return c.ended(f.stream, false)
		}
	}
	return true
}

// complete records that the client ended its side of stream id.
func (c *watchedConn) complete(id uint32) {
	c.mu.Lock()
	if s, ok := c.open[id]; ok {
		s.complete = true
		c.open[id] = s
	}
	c.mu.Unlock()
}

// forget removes stream id, ended without a reset to account, and
// returns it if it was open.
func (c *watchedConn) forget(id uint32) (openStream, bool) {
	c.mu.Lock()
	s, ok := c.open[id]
	delete(c.open, id)
	c.mu.Unlock()
	return s, ok
}

// ended accounts stream id reset: if it was still open, it spends a
// reset, unless it is a cancellation (cancel) of a call served for
// FreeCancelAfter. It reports false if the connection must be cut off.
func (c *watchedConn) ended(id uint32, cancel bool) bool {
	s, ok := c.forget(id)
	if !ok {
		return true // ended already, or never opened: nothing abandoned
	}
	if after := c.r.o.FreeCancelAfter; cancel && after > 0 && s.complete && c.r.o.Now().Sub(s.opened) >= after {
		return true
	}
	if why := c.r.reset(c.acct); why != "" {
		c.report(why)
		return false
	}
	return true
}

// report passes why the connection is cut off to OnCut, once: the reader
// and the writer may both find a reason.
func (c *watchedConn) report(why string) {
	if c.reported.CompareAndSwap(false, true) {
		c.r.o.OnCut(why)
	}
}

func (c *watchedConn) Write(p []byte) (int, error) {
	c.wlock <- struct{}{}
	if c.done.Load() {
		<-c.wlock
		return 0, net.ErrClosed
	}
	n, err := c.Conn.Write(p)
	ok := c.out.scan(p[:n], c.serverFrame)
	<-c.wlock
	if !ok {
		c.cutOff()
	}
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
			binary.BigEndian.PutUint32(f[9:], c.lastStream.Load())
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
