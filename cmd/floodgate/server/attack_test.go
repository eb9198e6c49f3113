package server

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"sync"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/connlimit"
)

// attacker is a loopback source address other than the checker's, so the
// per-client cap falls on the attacker, as it would on a real network.
var attacker = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}

// silentBodies opens n connections to addr from the attacker's address,
// sends each a POST header announcing a 60,000-byte body and one body byte,
// and then nothing. It returns, for each connection, how long after its
// byte was sent the server closed it (or -1 if it was still open at
// deadline).
func silentBodies(t *testing.T, addr, path string, n int, deadline time.Duration) func() []time.Duration {
	t.Helper()
	d := net.Dialer{LocalAddr: attacker, Timeout: 5 * time.Second}
	held := make([]time.Duration, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("attack connection %d: %v", i, err)
		}
		req := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 60000\r\n\r\n{", path)
		sent := time.Now()
		if _, err := io.WriteString(c, req); err != nil {
			held[i] = 0 // closed before we could even write: refused
			c.Close()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			c.SetReadDeadline(sent.Add(deadline))
			_, err := io.Copy(io.Discard, c)
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				held[i] = -1
				return
			}
			held[i] = time.Since(sent)
		}()
	}
	return func() []time.Duration { wg.Wait(); return held }
}

// TestSilentBodiesCannotHoldTheServer: 1,500 connections that send a POST
// header, one byte of a 60,000-byte body and then nothing, against the
// http listener and against the gateway, from one client address. Every
// 100 ms during the attack a fresh connection asks /healthz and an RLS
// call is made: each must answer within 1 s. Every attack connection must
// be closed by the server within the read timeout (those past the
// per-client cap at once).
func TestSilentBodiesCannotHoldTheServer(t *testing.T) {
	if testing.Short() {
		t.Skip("opens 3,000 connections")
	}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
	}))
	defer up.Close()
	const readTimeout = 2 * time.Second
	cfg := testConfig()
	cfg.Gateway.Routes = []Route{{Prefix: "/", Upstream: up.URL}}
	cfg.Connections.ReadHeaderTimeout = time.Second
	cfg.Connections.ReadTimeout = readTimeout
	cfg.Connections.GatewayReadTimeout = readTimeout
	cfg.Connections.MaxConns = 1000
	cfg.Connections.MaxConnsPerClient = 300
	r := start(t, cfg)
	rlsc, _ := rlsClient(t, r.srv.Addr(ListenerGRPC))

	const n = 1500
	start := time.Now()
	waitHTTP := silentBodies(t, r.srv.Addr(ListenerHTTP), "/v1/check", n, readTimeout+10*time.Second)
	waitGW := silentBodies(t, r.srv.Addr(ListenerGateway), "/upload", n, readTimeout+10*time.Second)
	t.Logf("opened %d attack connections in %v", 2*n, time.Since(start).Round(time.Millisecond))

	lat := checkEvery100ms(t, r, rlsc, readTimeout+time.Second)
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	t.Logf("%d checks (/healthz on a new connection, then RLS) during the attack: median %v, max %v",
		len(lat), lat[len(lat)/2], lat[len(lat)-1])

	// The caps are checked on the server's side: the most connections its
	// listener held at once from the attacker's address, and what it
	// refused. Counted from the client, a connection refused at once can
	// look held on a loaded machine (its close arrives late), and when
	// opening all of them takes longer than the read timeout, the first
	// ones are closed at the timeout and later ones take their places:
	// more than the cap in all, never more than the cap at once.
	for name, wait := range map[string]func() []time.Duration{"http": waitHTTP, "gateway": waitGW} {
		var longest time.Duration
		for i, h := range wait() {
			if h < 0 {
				t.Errorf("%s: attack connection %d still open %v after its last byte", name, i, readTimeout+10*time.Second)
			}
			longest = max(longest, h)
		}
		var refused float64
		for _, reason := range []string{connlimit.RefusedListenerFull, connlimit.RefusedClientFull, connlimit.EvictedForNewClient} {
			refused += metricValue(t, r, fmt.Sprintf(`floodgate_connections_refused_total{listener=%q,reason=%q}`, name, reason))
		}
		peakOpen, peakClient := r.srv.capped[name].Peaks()
		t.Logf("%s: %.0f connections refused by a cap, %d admitted over the attack; at most %d held at once (%d from one address); longest held %v",
			name, refused, n-int(refused), peakOpen, peakClient, longest.Round(time.Millisecond))
		if peakClient > cfg.Connections.MaxConnsPerClient {
			t.Errorf("%s: %d connections held at once from one address, more than the per-client cap %d", name, peakClient, cfg.Connections.MaxConnsPerClient)
		}
		if refused == 0 {
			t.Errorf("%s: no connection of %d refused: the per-client cap %d was not reached", name, n, cfg.Connections.MaxConnsPerClient)
		}
		// Held past the read timeout is a fault; the slack is for a
		// stalled machine, whose stalls last seconds.
		if longest > readTimeout+10*time.Second {
			t.Errorf("%s: a connection was held %v, read timeout %v", name, longest, readTimeout)
		}
	}
}

// checkEvery100ms asks /healthz on a new connection and makes one RLS call
// every 100 ms for d, failing the test for any check that fails or takes
// 1 s or more. It returns the latency of each check.
func checkEvery100ms(t *testing.T, r *running, rlsc rlsv3.RateLimitServiceClient, d time.Duration) []time.Duration {
	t.Helper()
	hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	var lat []time.Duration
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for end := time.Now().Add(d); time.Now().Before(end); <-tick.C {
		t0 := time.Now()
		resp, err := hc.Get(r.url("/healthz"))
		if err != nil {
			t.Errorf("/healthz during the attack: %v", err)
		} else {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("/healthz during the attack: %s", resp.Status)
			}
		}
		t1 := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err = rlsc.ShouldRateLimit(ctx, rlsReq("default", "ip", "10.0.0.1"))
		cancel()
		if err != nil {
			t.Errorf("RLS during the attack: %v", err)
		}
		t2 := time.Now()
		for _, l := range []time.Duration{t1.Sub(t0), t2.Sub(t1)} {
			if l >= time.Second {
				t.Errorf("a check took %v during the attack", l)
			}
			lat = append(lat, l)
		}
	}
	return lat
}

// TestSilentGRPCConnections: connections to the gRPC listener that never
// send the HTTP/2 preface are closed at the handshake timeout, and those
// past the per-client cap at once, while RLS calls from another address
// are answered.
func TestSilentGRPCConnections(t *testing.T) {
	cfg := testConfig()
	cfg.Connections.GRPC.HandshakeTimeout = time.Second
	cfg.Connections.MaxConnsPerClient = 20
	r := start(t, cfg)
	rlsc, _ := rlsClient(t, r.srv.Addr(ListenerGRPC))
	d := net.Dialer{LocalAddr: attacker}
	held := make([]time.Duration, 50)
	var wg sync.WaitGroup
	for i := range held {
		c, err := d.Dial("tcp", r.srv.Addr(ListenerGRPC))
		if err != nil {
			t.Fatal(err)
		}
		sent := time.Now()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			c.SetReadDeadline(sent.Add(5 * time.Second))
			_, err := io.Copy(io.Discard, c)
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				held[i] = -1
				return
			}
			held[i] = time.Since(sent)
		}()
	}
	lat := checkEvery100ms(t, r, rlsc, 1500*time.Millisecond)
	t.Logf("%d checks during the silent connections, max %v", len(lat), slicesMax(lat))
	wg.Wait()
	var fast, atTimeout int
	for i, h := range held {
		switch {
		case h < 0:
			t.Errorf("silent gRPC connection %d still open after 5 s", i)
		case h < 500*time.Millisecond:
			fast++
		case h > 2*time.Second:
			t.Errorf("silent gRPC connection %d held %v, handshake timeout 1s", i, h)
		default:
			atTimeout++
		}
	}
	t.Logf("%d refused at once, %d closed at the handshake timeout", fast, atTimeout)
	if atTimeout > 20 || atTimeout == 0 {
		t.Errorf("%d silent connections lasted to the handshake timeout, want 1..20 (the per-client cap)", atTimeout)
	}
}

func slicesMax(ds []time.Duration) time.Duration {
	var m time.Duration
	for _, d := range ds {
		m = max(m, d)
	}
	return m
}

// TestGRPCKeepaliveEnforced: a client that pings more often than
// connections.grpc.keepalive_min_time is sent away with GOAWAY
// ENHANCE_YOUR_CALM ("too many pings") and disconnected, instead of keeping
// the server busy answering pings. The client speaks raw HTTP/2 frames,
// since gRPC's own client will not ping more than every 10 s.
func TestGRPCKeepaliveEnforced(t *testing.T) {
	cfg := testConfig()
	cfg.Connections.GRPC.KeepaliveMinTime = 5 * time.Second
	r := start(t, cfg)
	c, err := net.Dial("tcp", r.srv.Addr(ListenerGRPC))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	frame := func(typ byte, payload []byte) []byte {
		n := len(payload)
		return append([]byte{byte(n >> 16), byte(n >> 8), byte(n), typ, 0, 0, 0, 0, 0}, payload...)
	}
	out := []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
	out = append(out, frame(0x4, nil)...) // SETTINGS
	for i := 0; i < 10; i++ {
		out = append(out, frame(0x6, []byte{0, 0, 0, 0, 0, 0, 0, byte(i)})...) // PING
	}
	if _, err := c.Write(out); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	hdr := make([]byte, 9)
	for {
		if _, err := io.ReadFull(c, hdr); err != nil {
			t.Fatalf("connection ended without GOAWAY: %v", err)
		}
		payload := make([]byte, int(hdr[0])<<16|int(hdr[1])<<8|int(hdr[2]))
		if _, err := io.ReadFull(c, payload); err != nil {
			t.Fatal(err)
		}
		if hdr[3] == 0x7 { // GOAWAY: last stream id, then the error code
			if code := payload[7]; code != 0xb {
				t.Fatalf("GOAWAY with error code %#x, want ENHANCE_YOUR_CALM (0xb)", code)
			}
			break
		}
	}
	if _, err := io.Copy(io.Discard, c); err != nil {
		t.Fatalf("connection not closed after GOAWAY: %v", err)
	}
}
