package gateway

import (
	"bufio"
	"crypto/sha1"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate"
	"github.com/floodgate-dev/floodgate/httplimit"
)

// countingUpstream is a real upstream that counts the TCP connections it
// accepts and the most it had open at once.
type countingUpstream struct {
	*httptest.Server
	accepted, open, peak atomic.Int64
}

func newCountingUpstream(t *testing.T, h http.Handler) *countingUpstream {
	u := &countingUpstream{}
	u.Server = httptest.NewUnstartedServer(h)
	u.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			u.accepted.Add(1)
			n := u.open.Add(1)
			for p := u.peak.Load(); n > p && !u.peak.CompareAndSwap(p, n); p = u.peak.Load() {
			}
		case http.StateClosed, http.StateHijacked:
			u.open.Add(-1)
		}
	}
	u.Start()
	t.Cleanup(u.Close)
	return u
}

// limited returns a gateway in front of upstream limiting each X-Api-Key to
// limit requests an hour.
func limited(t *testing.T, upstream string, limit int, tr Transport) *Gateway {
	t.Helper()
	lim, err := floodgate.New(floodgate.Limit{Limit: int64(limit), Window: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	mw := httplimit.LimitBy(lim, httplimit.KeyByHeader("x-api-key"))
	gw, err := New(Options{noDirect: os.Getenv("NODIRECT") != "", Limit: mw, Routes: []Route{{Prefix: "/", Upstream: mustURL(t, upstream), Transport: tr}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gw.CloseIdleConnections)
	return gw
}

// TestGatewayReusesUpstreamConnections: 32 keep-alive clients sending 3,200
// requests open about 32 upstream connections, not one per request, and the
// gateway's count agrees with what the upstream accepted.
func TestGatewayReusesUpstreamConnections(t *testing.T) {
	up := newCountingUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	gw := limited(t, up.URL, 1<<30, Transport{})
	front := httptest.NewServer(gw)
	defer front.Close()
	const clients, each = 32, 100
	tr := &http.Transport{MaxIdleConnsPerHost: clients}
	defer tr.CloseIdleConnections()
	var wg sync.WaitGroup
	var failed atomic.Int64
	for c := range clients {
		wg.Go(func() {
			for i := range each {
				req, _ := http.NewRequest("GET", front.URL+"/x", nil)
				req.Header.Set("X-Api-Key", fmt.Sprintf("key-%d", (c*each+i)%1000))
				resp, err := tr.RoundTrip(req)
				if err != nil {
					failed.Add(1)
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if failed.Load() > 0 {
		t.Fatalf("%d requests failed", failed.Load())
	}
	st := gw.Upstreams()[0]
	t.Logf("%d requests, %d upstream connections accepted, gateway counted %d opened, %d open", clients*each, up.accepted.Load(), st.Opened, st.Open)
	if up.accepted.Load() > 2*clients {
		t.Errorf("upstream accepted %d connections for %d clients: connections are not reused", up.accepted.Load(), clients)
	}
	if st.Opened != uint64(up.accepted.Load()) {
		t.Errorf("gateway counted %d connections opened, upstream accepted %d", st.Opened, up.accepted.Load())
	}
}

// TestGatewayCapsUpstreamConnections: with max 2 connections, 16 slow
// requests at once never hold more than 2 upstream connections, and all
// are answered.
func TestGatewayCapsUpstreamConnections(t *testing.T) {
	up := newCountingUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(20 * time.Millisecond)
		io.WriteString(w, "ok")
	}))
	gw := limited(t, up.URL, 1<<30, Transport{MaxConns: 2})
	front := httptest.NewServer(gw)
	defer front.Close()
	var wg sync.WaitGroup
	var ok atomic.Int64
	for i := range 16 {
		wg.Go(func() {
			req, _ := http.NewRequest("GET", front.URL+"/x", nil)
			req.Header.Set("X-Api-Key", fmt.Sprint(i))
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == 200 {
					ok.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if ok.Load() != 16 || up.peak.Load() > 2 {
		t.Fatalf("%d/16 answered, upstream peak %d connections, want 16 and at most 2", ok.Load(), up.peak.Load())
	}
}

// TestGatewayStreamsServerSentEvents: an event the upstream flushed reaches
// the client while the upstream is still holding the response open.
func TestGatewayStreamsServerSentEvents(t *testing.T) {
	release := make(chan struct{})
	up := newCountingUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: first\n\n")
		w.(http.Flusher).Flush()
		<-release
		io.WriteString(w, "data: second\n\n")
	}))
	defer close(release)
	front := httptest.NewServer(limited(t, up.URL, 10, Transport{}))
	defer front.Close()
	req, _ := http.NewRequest("GET", front.URL+"/events", nil)
	req.Header.Set("X-Api-Key", "sse")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(resp.Body).ReadString('\n')
		got <- line
	}()
	select {
	case line := <-got:
		if line != "data: first\n" {
			t.Fatalf("first line %q", line)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the first event did not arrive while the stream was open: the gateway buffers")
	}
}

// TestGatewayStreamsRequestBodies: the upstream reads the first part of a
// request body before the client has written the rest.
func TestGatewayStreamsRequestBodies(t *testing.T) {
	firstSeen := make(chan struct{})
	up := newCountingUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		buf := make([]byte, 5)
		if _, err := io.ReadFull(r.Body, buf); err != nil || string(buf) != "part1" {
			http.Error(w, "bad first part", 400)
			return
		}
		close(firstSeen)
		rest, _ := io.ReadAll(r.Body)
		io.WriteString(w, string(buf)+string(rest))
	}))
	front := httptest.NewServer(limited(t, up.URL, 10, Transport{}))
	defer front.Close()
	pr, pw := io.Pipe()
	req, _ := http.NewRequest("POST", front.URL+"/upload", pr)
	req.Header.Set("X-Api-Key", "body")
	done := make(chan string, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		done <- string(b)
	}()
	pw.Write([]byte("part1"))
	select {
	case <-firstSeen:
	case <-time.After(5 * time.Second):
		pw.Close()
		t.Fatal("the upstream did not see the body's first part before its end: the gateway buffers request bodies")
	}
	pw.Write([]byte("part2"))
	pw.Close()
	if got := <-done; got != "part1part2" {
		t.Fatalf("upstream answered %q", got)
	}
}

// TestGatewayDropsHopByHopHeaders: RFC 9110 section 7.6.1 — headers named in
// Connection and the standard hop-by-hop headers stop at the gateway in
// both directions; end-to-end headers pass; Via names the gateway.
func TestGatewayDropsHopByHopHeaders(t *testing.T) {
	var seen http.Header
	up := newCountingUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = r.Header.Clone()
		w.Header().Set("Connection", "X-Resp-Hop")
		w.Header().Set("X-Resp-Hop", "1")
		w.Header().Set("Keep-Alive", "timeout=5")
		w.Header().Set("X-End", "1")
		io.WriteString(w, "ok")
	}))
	front := httptest.NewServer(limited(t, up.URL, 10, Transport{}))
	defer front.Close()
	conn, err := net.Dial("tcp", front.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprint(conn, "GET /h HTTP/1.1\r\nHost: x\r\nX-Api-Key: hop\r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\n"+
		"Keep-Alive: 300\r\nProxy-Authorization: Basic eDp5\r\nTE: trailers\r\nX-End-To-End: 1\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for _, h := range []string{"X-Hop", "Keep-Alive", "Proxy-Authorization"} {
		if v := seen.Get(h); v != "" {
			t.Errorf("upstream saw hop-by-hop %s: %q", h, v)
		}
	}
	if seen.Get("X-End-To-End") != "1" || seen.Get("Te") != "trailers" || seen.Get("Via") != "1.1 floodgate" {
		t.Errorf("upstream headers %v: want X-End-To-End, TE: trailers and Via: 1.1 floodgate", seen)
	}
	if resp.Header.Get("X-Resp-Hop") != "" || resp.Header.Get("Keep-Alive") != "" || resp.Header.Get("X-End") != "1" {
		t.Errorf("client got %v: want X-Resp-Hop and Keep-Alive dropped, X-End kept", resp.Header)
	}
}

// wsAccept computes Sec-WebSocket-Accept for a key (RFC 6455 section 4.2.2).
func wsAccept(key string) string {
	h := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	return base64.StdEncoding.EncodeToString(h[:])
}

// wsUpstream completes a WebSocket handshake by hand and echoes the bytes
// of every frame it receives back, unchanged, to the client.
func wsUpstream(t *testing.T) *countingUpstream {
	return newCountingUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") || r.Header.Get("Sec-WebSocket-Key") == "" {
			http.Error(w, "want a websocket upgrade", 400)
			return
		}
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n",
			wsAccept(r.Header.Get("Sec-WebSocket-Key")))
		brw.Flush()
		io.Copy(conn, brw) // echo frames as they come
	}))
}

// TestGatewayLimitsAndPassesWebSocketUpgrades: the upgrade request is rate
// limited like any other; an allowed one is switched and the tunnel carries
// a frame both ways; past the limit the upgrade gets 429.
func TestGatewayLimitsAndPassesWebSocketUpgrades(t *testing.T) {
	up := wsUpstream(t)
	// The listener's timeouts bound the upgrade request, not the tunnel
	// (net/http clears a hijacked connection's deadlines).
	front := httptest.NewUnstartedServer(limited(t, up.URL, 1, Transport{}))
	front.Config.ReadTimeout = 300 * time.Millisecond
	front.Config.WriteTimeout = 300 * time.Millisecond
	front.Start()
	defer front.Close()
	dial := func() (*http.Response, net.Conn, *bufio.Reader) {
		conn, err := net.Dial("tcp", front.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		const key = "dGhlIHNhbXBsZSBub25jZQ=="
		fmt.Fprintf(conn, "GET /chat HTTP/1.1\r\nHost: x\r\nX-Api-Key: ws\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
			"Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n", key)
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		return resp, conn, br
	}
	resp, conn, br := dial()
	defer conn.Close()
	if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Sec-WebSocket-Accept") != wsAccept("dGhlIHNhbXBsZSBub25jZQ==") {
		t.Fatalf("upgrade: %d %v", resp.StatusCode, resp.Header)
	}
	// A masked text frame "hello" (RFC 6455 section 5.7).
	mask := []byte{0x37, 0xfa, 0x21, 0x3d}
	frame := []byte{0x81, 0x85}
	frame = append(frame, mask...)
	for i, c := range []byte("hello") {
		frame = append(frame, c^mask[i%4])
	}
	time.Sleep(600 * time.Millisecond) // past the listener's timeouts
	conn.Write(frame)
	echo := make([]byte, len(frame))
	if _, err := io.ReadFull(br, echo); err != nil || string(echo) != string(frame) {
		t.Fatalf("echo through the tunnel: %x %v, want %x", echo, err, frame)
	}
	resp2, conn2, _ := dial()
	defer conn2.Close()
	if resp2.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("second upgrade for the same key: %d, want 429", resp2.StatusCode)
	}
}

// TestGatewayServesHTTP2OverTLS: a client speaking HTTP/2 over TLS is
// served, and a streamed response still streams.
func TestGatewayServesHTTP2OverTLS(t *testing.T) {
	up := newCountingUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Upstream-Proto", r.Proto)
		w.Header().Set("X-Seen-Via", r.Header.Get("Via"))
		io.WriteString(w, "ok")
	}))
	front := httptest.NewUnstartedServer(limited(t, up.URL, 10, Transport{}))
	front.EnableHTTP2 = true
	front.StartTLS()
	defer front.Close()
	req, _ := http.NewRequest("GET", front.URL+"/x", nil)
	req.Header.Set("X-Api-Key", "h2")
	resp, err := front.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 2 || string(body) != "ok" || resp.Header.Get("X-Seen-Via") != "2 floodgate" || resp.Header.Get("RateLimit-Policy") == "" {
		t.Fatalf("%s %d %q via %q policy %q", resp.Proto, resp.StatusCode, body, resp.Header.Get("X-Seen-Via"), resp.Header.Get("RateLimit-Policy"))
	}
}
