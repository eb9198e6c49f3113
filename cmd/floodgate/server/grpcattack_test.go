package server

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/h2raw"
)

// attackers are loopback source addresses other than the checker's
// (127.0.0.1), one per attacking client.
func attackers(n int) []*net.TCPAddr {
	var a []*net.TCPAddr
	for i := 0; i < n; i++ {
		a = append(a, &net.TCPAddr{IP: net.IPv4(127, 0, byte(i/250), byte(2+i%250))})
	}
	return a
}

// madeYouReset runs one MadeYouReset attacker per address against the RLS
// listener at addr for d: each connection writes batches of streams opened
// with HEADERS and ended by the server for a WINDOW_UPDATE of increment 0,
// and reads (and drops) what the server sends. A connection the server
// closes is opened again. It returns the streams written.
func madeYouReset(t *testing.T, addr string, from []*net.TCPAddr, d time.Duration) int {
	t.Helper()
	var mu sync.Mutex
	total := 0
	var wg sync.WaitGroup
	end := time.Now().Add(d)
	for _, a := range from {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				h, err := h2raw.Dial(a, addr, "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", end.Add(5*time.Second))
				if err != nil {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				go func() {
					for {
						if _, err := h.Framer.ReadFrame(); err != nil {
							return
						}
					}
				}()
				for time.Now().Before(end) {
					if h.MadeYouReset(32) != nil {
						break
					}
					mu.Lock()
					total += 32
					mu.Unlock()
				}
				h.Close()
			}
		}()
	}
	wg.Wait()
	return total
}

// TestGRPCMadeYouResetCountsReturnToZero: after MadeYouReset from four
// addresses, with the reset budget off so that only the call bounds meet
// it, floodgate_grpc_calls_waiting and _in_flight return to 0 and a fresh
// client gets every call answered (before, a call admitted just after a
// purge removed its address's entry stayed counted for ever, and the
// listener ended up refusing everyone with RESOURCE_EXHAUSTED).
func TestGRPCMadeYouResetCountsReturnToZero(t *testing.T) {
	cfg := testConfig()
	cfg.Connections.GRPC.MaxResets = 0
	cfg.Connections.GRPC.MaxListenerResets = 0
	cfg.Connections.GRPC.MaxWaitingCalls = 16
	cfg.Connections.GRPC.MaxWaitingCallsPerClient = 4
	r := start(t, cfg)
	addr := r.srv.Addr(ListenerGRPC)
	n := madeYouReset(t, addr, attackers(4), 3*time.Second)
	t.Logf("%d streams made to be reset from 4 addresses in 3 s", n)

	deadline := time.Now().Add(20 * time.Second)
	for {
		calls, waiting := metricValue(t, r, "floodgate_grpc_calls_in_flight"), metricValue(t, r, "floodgate_grpc_calls_waiting")
		if calls == 0 && waiting == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("20 s after the attack: %v calls in flight, %v waiting; want 0", calls, waiting)
		}
		time.Sleep(200 * time.Millisecond)
	}
	rlsc, _ := rlsClient(t, addr)
	for i := 0; i < 200; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := rlsc.ShouldRateLimit(ctx, rlsReq("default", "ip", "10.0.0.1"))
		cancel()
		if status.Code(err) == codes.ResourceExhausted {
			t.Fatalf("a fresh client's call %d after the attack: %v", i, err)
		}
		if err != nil {
			t.Fatalf("a fresh client's call %d after the attack: %v", i, err)
		}
	}
}

// readUntilClosed reads what the server sends on h until it closes the
// connection, and returns its GOAWAY frame, if any. It fails the test if
// the connection is still open at its deadline.
func readUntilClosed(t *testing.T, h *h2raw.Conn) *http2.GoAwayFrame {
	t.Helper()
	var goAway *http2.GoAwayFrame
	for {
		f, err := h.Framer.ReadFrame()
		if err != nil {
			if errors.Is(err, io.EOF) || isConnReset(err) {
				return goAway
			}
			t.Fatalf("reading from the server: %v (connection not cut off)", err)
		}
		if g, ok := f.(*http2.GoAwayFrame); ok {
			goAway = g
		}
	}
}

// TestGRPCMadeYouResetCutOff: a client that makes the server reset its
// streams (HEADERS, then a WINDOW_UPDATE of increment 0, a protocol error
// on the stream) spends its address's reset budget as one that resets them
// itself: it is sent GOAWAY ENHANCE_YOUR_CALM and disconnected, and its
// next connection is refused during the cooldown, while a client at
// another address keeps getting answers.
func TestGRPCMadeYouResetCutOff(t *testing.T) {
	cfg := testConfig()
	cfg.Connections.GRPC.MaxResets = 50
	cfg.Connections.GRPC.ResetsPerSecond = 0.01
	cfg.Connections.GRPC.ResetCooldown = time.Minute
	r := start(t, cfg)
	addr := r.srv.Addr(ListenerGRPC)
	rlsc, _ := rlsClient(t, addr)

	h := dialRawH2(t, addr)
	if err := h.MadeYouReset(100); err != nil {
		t.Fatal(err)
	}
	g := readUntilClosed(t, h)
	if g == nil || g.ErrCode != http2.ErrCodeEnhanceYourCalm {
		t.Fatalf("connection closed with GOAWAY %v, want ENHANCE_YOUR_CALM", g)
	}
	h2 := dialRawH2(t, addr)
	h2.Flush()
	if f, err := h2.Framer.ReadFrame(); err == nil {
		t.Fatalf("a connection during the cooldown got %v, want it closed", f)
	}
	for i := 0; i < 5; i++ {
		if _, err := rlsc.ShouldRateLimit(context.Background(), rlsReq("default", "ip", "10.0.0.1")); err != nil {
			t.Fatalf("the other client's call after the attack: %v", err)
		}
	}
	m := metricsText(t, r)
	for _, want := range []string{`floodgate_grpc_refused_total{reason="resets"} 1`, `floodgate_grpc_refused_total{reason="cooldown"} 1`} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// TestHTTPSMadeYouResetCutOff: the same attack on the HTTPS listener
// (HTTP/2 after TLS) is cut off by connections.http2's budget, while
// another client is served over HTTP/2 with its TLS state seen by the
// handlers.
func TestHTTPSMadeYouResetCutOff(t *testing.T) {
	dir := t.TempDir()
	cert, key := selfSigned(t, dir)
	cfg := testConfig()
	cfg.HTTP.TLS = TLS{Cert: cert, Key: key}
	cfg.Connections.HTTP2.MaxResets = 50
	cfg.Connections.HTTP2.ResetsPerSecond = 0.01
	cfg.Connections.HTTP2.ResetCooldown = time.Minute
	r := start(t, cfg)
	addr := r.srv.Addr(ListenerHTTP)
	tc := &tls.Config{InsecureSkipVerify: true}
	dial := func() *h2raw.Conn {
		h, err := h2raw.DialWith(h2raw.Options{From: attacker, Addr: addr, TLS: tc, Path: "/v1/check",
			ContentType: "application/json", Deadline: time.Now().Add(20 * time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		return h
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: true}}
	defer client.CloseIdleConnections()
	get := func(when string) {
		t.Helper()
		resp, err := client.Get("https://" + addr + "/healthz")
		if err != nil {
			t.Fatalf("the other client %s: %v", when, err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.ProtoMajor != 2 || resp.TLS == nil {
			t.Fatalf("the other client %s: %s over HTTP/%d", when, resp.Status, resp.ProtoMajor)
		}
	}
	get("before the attack")

	h := dial()
	if err := h.MadeYouReset(100); err != nil {
		t.Fatal(err)
	}
	g := readUntilClosed(t, h)
	if g == nil || g.ErrCode != http2.ErrCodeEnhanceYourCalm {
		t.Fatalf("connection closed with GOAWAY %v, want ENHANCE_YOUR_CALM", g)
	}
	// The cooldown closes the next connection as soon as TLS has chosen h2.
	if h2, err := h2raw.DialWith(h2raw.Options{From: attacker, Addr: addr, TLS: tc, Path: "/v1/check", Deadline: time.Now().Add(20 * time.Second)}); err == nil {
		h2.Flush()
		if f, err := h2.Framer.ReadFrame(); err == nil {
			t.Fatalf("a connection during the cooldown got %v, want it closed", f)
		}
		h2.Close()
	}
	get("after the attack")
	resp, err := client.Get("https://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := string(body)
	for _, want := range []string{`floodgate_connections_refused_total{listener="http",reason="resets"} 1`,
		`floodgate_connections_refused_total{listener="http",reason="cooldown"} 1`} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// victimCalls makes RLS calls back to back for d and returns how many
// were answered; it fails the test for a call that fails.
func victimCalls(t *testing.T, rlsc rlsv3.RateLimitServiceClient, d time.Duration) int {
	t.Helper()
	n := 0
	for end := time.Now().Add(d); time.Now().Before(end); n++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := rlsc.ShouldRateLimit(ctx, rlsReq("default", "ip", "10.0.0.1"))
		cancel()
		if err != nil {
			t.Fatalf("the victim's call %d: %v", n, err)
		}
	}
	return n
}

// rapidResetInTurn runs rapid reset against addr for d from 4 connections,
// each reopened from the next of the addresses when the server closes it,
// and returns the streams the server read on the connections it cut off
// (the last stream its GOAWAY names) and the connections opened.
func rapidResetInTurn(t *testing.T, addr string, from []*net.TCPAddr, d time.Duration) (read, conns int) {
	t.Helper()
	var mu sync.Mutex
	var wg sync.WaitGroup
	end := time.Now().Add(d)
	next := 0
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				mu.Lock()
				a := from[next%len(from)]
				next++
				conns++
				mu.Unlock()
				h, err := h2raw.Dial(a, addr, "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", end.Add(5*time.Second))
				if err != nil {
					continue
				}
				lastRead := make(chan uint32, 1)
				go func() {
					var last uint32
					for {
						f, err := h.Framer.ReadFrame()
						if err != nil {
							lastRead <- last
							return
						}
						if g, ok := f.(*http2.GoAwayFrame); ok {
							last = g.LastStreamID
						}
					}
				}()
				// Paced (about 16,000 streams a second per connection), so
				// that the attacker, in the test's process, leaves the
				// victim most of the machine: the server's share is what
				// the test measures.
				for time.Now().Before(end) && h.Streams(32, true) == nil {
					time.Sleep(2 * time.Millisecond)
				}
				h.Close()
				mu.Lock()
				read += int(<-lastRead+1) / 2
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return read, conns
}

// TestGRPCResetFromManyAddresses: rapid reset from 200 addresses in turn,
// each within its own budget, is cut off by the listener's budget: the
// streams the server reads on the connections it cuts stay within that
// budget (without it, each address resets a thousand), and a victim at
// another address keeps getting answers. How much of its rate the victim
// keeps is measured by scripts/attack-grpc reset-many, with the attacker
// in a process of its own: here the attacker shares the test's process,
// and its own CPU would decide the figure.
func TestGRPCResetFromManyAddresses(t *testing.T) {
	cfg := testConfig()
	cfg.Connections.GRPC.MaxListenerResets = 2000
	cfg.Connections.GRPC.ListenerResetsPerSecond = 200
	r := start(t, cfg)
	addr := r.srv.Addr(ListenerGRPC)
	rlsc, _ := rlsClient(t, addr)
	quiet := victimCalls(t, rlsc, time.Second)

	done := make(chan [2]int)
	go func() {
		read, conns := rapidResetInTurn(t, addr, attackers(200), 3*time.Second)
		done <- [2]int{read, conns}
	}()
	time.Sleep(500 * time.Millisecond)
	during := victimCalls(t, rlsc, 2*time.Second) // calls in 2 s
	got := <-done
	read, conns := got[0], got[1]
	t.Logf("victim: %d calls in 1 s quiet, %d in 2 s under attack; the attack opened %d connections, the server read %d of their streams",
		quiet, during, conns, read)
	// 2,000 in hand and 200 a second for 3 s, with 4 connections that may
	// each have streams in flight past their cut; the victim's calls give
	// a tenth back each.
	if limit := 2000 + 3*200 + 4*1024 + quiet/10 + during/10; read > limit {
		t.Errorf("the server read %d streams of the cut connections, more than the listener's budget allows (%d)", read, limit)
	}
	if m := metricsText(t, r); !strings.Contains(m, `floodgate_grpc_refused_total{reason="listener_resets"}`) ||
		strings.Contains(m, `floodgate_grpc_refused_total{reason="listener_resets"} 0`) {
		t.Error("no connection cut for the listener's budget")
	}
}

// TestRLSDescriptorCaps: rls.max_descriptors and rls.max_entries bound RLS
// calls (past either, INVALID_ARGUMENT naming the bound, and another call
// is answered next; rls's TestDescriptorCaps sends 200,000), and the
// configuration refuses bounds past the rule engine's.
func TestRLSDescriptorCaps(t *testing.T) {
	cfg := testConfig()
	cfg.RLS.MaxDescriptors, cfg.RLS.MaxEntries = 8, 4
	r := start(t, cfg)
	rlsc, _ := rlsClient(t, r.srv.Addr(ListenerGRPC))
	many := &rlsv3.RateLimitRequest{Domain: "default"}
	wide := &rlsv3.RateLimitRequest{Domain: "default", Descriptors: []*commonv3.RateLimitDescriptor{{}}}
	for i := 0; i < 100; i++ {
		many.Descriptors = append(many.Descriptors, &commonv3.RateLimitDescriptor{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "ip", Value: "10.0.0.1"}}})
		wide.Descriptors[0].Entries = append(wide.Descriptors[0].Entries, &commonv3.RateLimitDescriptor_Entry{Key: "ip", Value: "10.0.0.1"})
	}
	for _, tc := range []struct {
		req  *rlsv3.RateLimitRequest
		want string
	}{
		{many, "100 descriptors: the most a request may have is 8"},
		{wide, "descriptor 0 has 100 entries: the most a descriptor may have is 4"},
		{rlsReq("default", "a", "1", "b", "2", "c", "3", "d", "4", "e", "5"), "descriptor 0 has 5 entries: the most a descriptor may have is 4"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := rlsc.ShouldRateLimit(ctx, tc.req)
		cancel()
		if status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() != tc.want {
			t.Errorf("%v, want INVALID_ARGUMENT %q", err, tc.want)
		}
	}
	if _, err := rlsc.ShouldRateLimit(context.Background(), rlsReq("default", "ip", "10.0.0.1")); err != nil {
		t.Fatalf("a call after the refused ones: %v", err)
	}
	for _, bad := range []string{"max_descriptors: 0", "max_descriptors: 65", "max_entries: 0", "max_entries: 100"} {
		if _, err := ParseConfig("f.yaml", []byte("rls:\n  "+bad+"\n")); err == nil || !strings.Contains(err.Error(), "rls.max_descriptors must be from 1 to 64") {
			t.Errorf("rls: %s: %v, want an error naming the bounds", bad, err)
		}
	}
}
