package gateway

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Transport defaults, used where a Transport field is zero.
const (
	// DefaultMaxIdleConns is sized for the gateway listener's concurrency:
	// every client connection in flight can find an idle upstream
	// connection when its request arrives, instead of dialing a new one
	// and leaving the old one in TIME_WAIT.
	DefaultMaxIdleConns          = 256
	DefaultMaxConns              = 1024
	DefaultDialTimeout           = 5 * time.Second
	DefaultTLSHandshakeTimeout   = 5 * time.Second
	DefaultResponseHeaderTimeout = 60 * time.Second
	DefaultIdleConnTimeout       = 90 * time.Second
)

// Transport configures how a route reaches its upstream. A zero field takes
// its default; a negative one turns the bound off.
type Transport struct {
	// MaxIdleConns is the number of idle connections kept to the upstream
	// for reuse. Default DefaultMaxIdleConns.
	MaxIdleConns int
	// MaxConns caps the connections to the upstream (dialing, in use and
	// idle); a request past it waits for one to be free. Default
	// DefaultMaxConns.
	MaxConns int
	// DialTimeout bounds opening a TCP connection. Default DefaultDialTimeout.
	DialTimeout time.Duration
	// TLSHandshakeTimeout bounds the TLS handshake with an https upstream.
	// Default DefaultTLSHandshakeTimeout.
	TLSHandshakeTimeout time.Duration
	// ResponseHeaderTimeout bounds the wait for the upstream's response
	// headers once the request is written (a streamed body may then take
	// as long as it takes). Default DefaultResponseHeaderTimeout.
	ResponseHeaderTimeout time.Duration
	// IdleConnTimeout closes an idle upstream connection after this long.
	// Default DefaultIdleConnTimeout.
	IdleConnTimeout time.Duration
}

// orDefault returns v, def when v is zero, or zero when v is negative.
func orDefault[T int | time.Duration](v, def T) T {
	switch {
	case v == 0:
		return def
	case v < 0:
		return 0
	}
	return v
}

// UpstreamStats counts one route's upstream connections and the requests
// that got no answer from it.
type UpstreamStats struct {
	Prefix   string
	Upstream string
	// Opened is the number of connections dialed since the gateway started;
	// Open is the number open now.
	Opened uint64
	Open   int64
	// Failed counts the requests the upstream did not answer (refused,
	// reset, timed out: the gateway answered 502); Canceled those whose
	// client went away before the upstream answered.
	Failed   uint64
	Canceled uint64
}

// connCounter counts the connections a transport dials.
type connCounter struct {
	opened atomic.Uint64
	open   atomic.Int64
}

// newTransport returns an http.Transport for t whose dials are counted in c.
func newTransport(t Transport, c *connCounter) *http.Transport {
	d := &net.Dialer{Timeout: orDefault(t.DialTimeout, DefaultDialTimeout), KeepAlive: 30 * time.Second}
	return &http.Transport{
		Proxy: nil, // the gateway talks to its upstreams directly
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			c.opened.Add(1)
			c.open.Add(1)
			return &countedConn{Conn: conn, c: c}, nil
		},
		TLSClientConfig:       &tls.Config{MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          0, // no bound across upstreams: each has its own transport
		MaxIdleConnsPerHost:   orDefault(t.MaxIdleConns, DefaultMaxIdleConns),
		MaxConnsPerHost:       orDefault(t.MaxConns, DefaultMaxConns),
		TLSHandshakeTimeout:   orDefault(t.TLSHandshakeTimeout, DefaultTLSHandshakeTimeout),
		ResponseHeaderTimeout: orDefault(t.ResponseHeaderTimeout, DefaultResponseHeaderTimeout),
		IdleConnTimeout:       orDefault(t.IdleConnTimeout, DefaultIdleConnTimeout),
		ExpectContinueTimeout: time.Second,
		// Pass the client's Accept-Encoding through untouched instead of
		// asking for gzip and decompressing on the client's behalf.
		DisableCompression: true,
	}
}

// countedConn decrements the open count once when closed.
type countedConn struct {
	net.Conn
	c    *connCounter
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.c.open.Add(-1) })
	return c.Conn.Close()
}

// bufferPool lends ReverseProxy its copy buffers; without one it allocates
// 32 KiB per response.
type bufferPool struct{ p sync.Pool }

func (b *bufferPool) Get() []byte {
	if v, ok := b.p.Get().(*[]byte); ok {
		return *v
	}
	return make([]byte, 32<<10)
}

func (b *bufferPool) Put(buf []byte) { b.p.Put(&buf) }
