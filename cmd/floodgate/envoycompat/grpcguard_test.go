package envoycompat

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/connlimit"
	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/grpcguard"
	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/h2raw"
)

// attacker is the attacking client's address; the well-behaved client
// calls from 127.0.0.1, a different client address.
var attacker = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}

// dialRawH2 connects a raw HTTP/2 client from the attacker's address to
// addr, for ShouldRateLimit calls.
func dialRawH2(t *testing.T, addr string) *h2raw.Conn {
	t.Helper()
	h, err := h2raw.Dial(attacker, addr, "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", time.Now().Add(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

func rlsCall(t *testing.T, c rlsv3.RateLimitServiceClient, when string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "test",
		Descriptors: []*commonv3.RateLimitDescriptor{desc("free", "x")}})
	if err != nil || r.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("the other client's call %s: %v %v", when, r, err)
	}
}

func rlsClient(t *testing.T, addr string) rlsv3.RateLimitServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn)
}

// connEnded reports whether err is the peer ending the connection.
func connEnded(err error) bool {
	return errors.Is(err, io.EOF) || strings.Contains(err.Error(), "connection reset by peer") ||
		strings.Contains(err.Error(), "broken pipe")
}

// TestCompatRapidResetCutOff: with the default bounds, a client that opens
// streams and resets them at once (HTTP/2 rapid reset) has its connection
// cut off and its next connection refused during the cooldown, while a
// client at another address keeps getting answers.
func TestCompatRapidResetCutOff(t *testing.T) {
	srv, _ := startServer(t, testRules, nil)
	addr := srv.Addr(ListenerGRPC)
	rlsc := rlsClient(t, addr)
	rlsCall(t, rlsc, "before the attack")

	h := dialRawH2(t, addr)
	frames := make(chan error, 1)
	var goAway *http2.GoAwayFrame
	go func() { // read what the server sends until it ends the connection
		for {
			f, err := h.Framer.ReadFrame()
			if err != nil {
				frames <- err
				return
			}
			if g, ok := f.(*http2.GoAwayFrame); ok {
				goAway = g
			}
		}
	}()
	// The default budget is 1000 resets and each stream gives half a reset
	// back: about 2000 reset streams spend it. Stop writing at the cut.
	const most = 20000
	sent := 0
	for sent < most {
		if err := h.Streams(100, true); err != nil {
			break
		}
		sent += 100
	}
	err := <-frames
	if !connEnded(err) {
		t.Fatalf("after %d reset streams the connection did not end: %v", sent, err)
	}
	if goAway != nil && goAway.ErrCode != http2.ErrCodeEnhanceYourCalm {
		t.Errorf("GOAWAY %v, want ENHANCE_YOUR_CALM", goAway.ErrCode)
	}
	rlsCall(t, rlsc, "after the attack")

	// The attacker's next connection is closed without a frame.
	h2 := dialRawH2(t, addr)
	h2.Flush()
	if f, err := h2.Framer.ReadFrame(); err == nil {
		t.Fatalf("a connection during the cooldown got %v, want it closed", f)
	}
	rlsCall(t, rlsc, "during the cooldown")
	got := srv.guardLog.refusals()
	if got[grpcguard.CutResets] != 1 || got[grpcguard.CutCooldown] != 1 {
		t.Errorf("refusals %v, want one connection cut for resets and one refused in the cooldown", got)
	}
}

// TestCompatHeldStreamsBounded: streams whose request message never
// arrives are bounded per client address (the rest refused at once with
// RESOURCE_EXHAUSTED) and cancelled at the request message deadline, while
// a client at another address keeps getting answers.
func TestCompatHeldStreamsBounded(t *testing.T) {
	srv, _ := startServer(t, testRules, nil, func(s *Settings) {
		s.Guard.MaxWaitingPerClient = 20
		s.Guard.MessageTimeout = 2 * time.Second
	})
	addr := srv.Addr(ListenerGRPC)
	rlsc := rlsClient(t, addr)

	h := dialRawH2(t, addr)
	const n = 60
	if err := h.Streams(n, false); err != nil {
		t.Fatal(err)
	}
	codes := map[string]int{} // stream endings by grpc-status
	for ended := 0; ended < n; {
		f, err := h.Framer.ReadFrame()
		if err != nil {
			t.Fatalf("after %d of %d streams ended: %v", ended, n, err)
		}
		mh, ok := f.(*http2.MetaHeadersFrame)
		if !ok || !mh.StreamEnded() {
			continue
		}
		ended++
		codes[headerValue(mh, "grpc-status")]++
		if ended == n-20 { // the refused ones end first; 20 are still held
			if _, waiting := srv.admission.Counts(); waiting != 20 {
				t.Errorf("%d calls waiting for their message, want 20", waiting)
			}
			rlsCall(t, rlsc, "while streams are held")
		}
	}
	// 8 is RESOURCE_EXHAUSTED, 1 CANCELLED.
	if codes["8"] != n-20 || codes["1"] != 20 {
		t.Fatalf("stream endings by grpc-status %v, want %d refused (8) and 20 cancelled (1)", codes, n-20)
	}
	if _, waiting := srv.admission.Counts(); waiting != 0 {
		t.Errorf("%d calls waiting for their message after the deadline, want 0", waiting)
	}
	got := srv.guardLog.refusals()
	if got[grpcguard.RefusedClientWaiting] != n-20 || got[grpcguard.CancelledNoMessage] != 20 {
		t.Errorf("refusals %v, want %d client_waiting_full and 20 message_timeout", got, n-20)
	}
}

func headerValue(f *http2.MetaHeadersFrame, name string) string {
	for _, hf := range f.Fields {
		if hf.Name == name {
			return hf.Value
		}
	}
	return ""
}

// TestCompatConnectionsCappedPerClient: past the per-address cap, a
// client's connections are closed at once, while those within it and a
// client at another address are served.
func TestCompatConnectionsCappedPerClient(t *testing.T) {
	srv, _ := startServer(t, testRules, nil, func(s *Settings) { s.Guard.MaxConnsPerClient = 3 })
	addr := srv.Addr(ListenerGRPC)
	var conns []*h2raw.Conn
	for i := 0; i < 5; i++ {
		h := dialRawH2(t, addr)
		if err := h.Flush(); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, h)
	}
	for i, h := range conns {
		f, err := h.Framer.ReadFrame() // the server's SETTINGS, or the end
		if i < 3 && err != nil {
			t.Errorf("connection %d, within the cap: %v", i+1, err)
		}
		if i >= 3 && err == nil {
			t.Errorf("connection %d, past the cap, got %v, want it closed", i+1, f)
		}
	}
	rlsCall(t, rlsClient(t, addr), "with the attacker's connections held")
	if got := srv.guardLog.refusals()[connlimit.RefusedClientFull]; got != 2 {
		t.Errorf("%d connections refused for the per-client cap, want 2", got)
	}
}
