// Package h2raw is a raw HTTP/2 client for the listeners' attack tests: it
// writes its own frames, so it can reset streams in a burst, make the
// server reset them (MadeYouReset) or leave out a call's request message,
// which a gRPC client never does.
package h2raw

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"errors"
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
	block  []byte // HPACK block of one request's headers
	next   uint32 // the next stream id
}

// Options says where a Conn connects and what its streams ask for.
type Options struct {
	// From is the local address to connect from (nil: any).
	From net.Addr
	// Addr is the server's host:port.
	Addr string
	// TLS, if set, connects with TLS and asks for h2 (ALPN).
	TLS *tls.Config
	// Method, Path and ContentType are every stream's request headers
	// (POST, and application/grpc with "te: trailers", if empty).
	Method, Path, ContentType string
	// Deadline bounds the whole connection, so that a hung server fails
	// the test, not the run.
	Deadline time.Time
}

// Dial connects from the local address from to addr, with the whole
// connection bounded by deadline, and prepares the headers of a gRPC call
// to path.
func Dial(from net.Addr, addr, path string, deadline time.Time) (*Conn, error) {
	return DialWith(Options{From: from, Addr: addr, Path: path, Deadline: deadline})
}

// DialWith connects as o says.
func DialWith(o Options) (*Conn, error) {
	d := net.Dialer{LocalAddr: o.From, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", o.Addr)
	if err != nil {
		return nil, err
	}
	c.SetDeadline(o.Deadline)
	scheme := "http"
	if o.TLS != nil {
		cfg := o.TLS.Clone()
		cfg.NextProtos = []string{http2.NextProtoTLS}
		tc := tls.Client(c, cfg)
		if err := tc.Handshake(); err != nil {
			c.Close()
			return nil, err
		}
		if tc.ConnectionState().NegotiatedProtocol != http2.NextProtoTLS {
			c.Close()
			return nil, errors.New("h2raw: the server did not choose HTTP/2")
		}
		c, scheme = tc, "https"
	}
	// A batch of frames (a hundred streams is about 8 KB) goes out in one
	// write, so no part of it is written after the server has cut the
	// connection off: that write fails (broken pipe) where the test waits
	// for the GOAWAY.
	h := &Conn{c: c, w: bufio.NewWriterSize(c, 64<<10), next: 1}
	h.Framer = http2.NewFramer(h.w, c)
	h.Framer.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	method, ctype := o.Method, o.ContentType
	if method == "" {
		method = "POST"
	}
	fields := [][2]string{{":method", method}, {":scheme", scheme}, {":authority", o.Addr}, {":path", o.Path}}
	if ctype == "" {
		fields = append(fields, [2]string{"content-type", "application/grpc"}, [2]string{"te", "trailers"})
	} else {
		fields = append(fields, [2]string{"content-type", ctype})
	}
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	for _, f := range fields {
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

// Calls writes n new streams, each a whole gRPC call: HEADERS, then the
// request message msg (length-prefixed, uncompressed) in a DATA frame that
// ends the stream, and flushes. It returns the streams' ids.
func (h *Conn) Calls(n int, msg []byte) ([]uint32, error) {
	body := make([]byte, 5+len(msg))
	binary.BigEndian.PutUint32(body[1:], uint32(len(msg)))
	copy(body[5:], msg)
	ids := make([]uint32, n)
	for i := range ids {
		ids[i] = h.next
		h.next += 2
		h.Framer.WriteHeaders(http2.HeadersFrameParam{StreamID: ids[i], BlockFragment: h.block, EndHeaders: true})
		h.Framer.WriteData(ids[i], true, body)
	}
	return ids, h.w.Flush()
}

// Cancel writes RST_STREAM CANCEL for each of ids, as a client whose
// deadline passed does, and flushes.
func (h *Conn) Cancel(ids []uint32) error {
	for _, id := range ids {
		h.Framer.WriteRSTStream(id, http2.ErrCodeCancel)
	}
	return h.w.Flush()
}

// Flush sends what is buffered (the preface and SETTINGS at first).
func (h *Conn) Flush() error { return h.w.Flush() }

// Close closes the connection.
func (h *Conn) Close() error { return h.c.Close() }
