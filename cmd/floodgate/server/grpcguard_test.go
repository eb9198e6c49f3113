package server

import (
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/h2raw"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// dialRawH2 connects a raw HTTP/2 client from the attacker's address to
// addr, for RLS calls.
func dialRawH2(t *testing.T, addr string) *h2raw.Conn {
	t.Helper()
	h, err := h2raw.Dial(attacker, addr, "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", time.Now().Add(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// streams writes n streams' HEADERS, each followed by RST_STREAM if reset.
func streams(t *testing.T, h *h2raw.Conn, n int, reset bool) {
	t.Helper()
	if err := h.Streams(n, reset); err != nil {
		t.Fatalf("writing %d streams: %v", n, err)
	}
}

// TestGRPCRapidResetCutOff: a client that opens streams and resets them at
// once is sent GOAWAY ENHANCE_YOUR_CALM and disconnected once its address
// has spent its reset budget, and its next connection is refused during
// the cooldown, while a client at another address keeps getting answers.
func TestGRPCRapidResetCutOff(t *testing.T) {
	cfg := testConfig()
	cfg.Connections.GRPC.MaxResets = 50
	cfg.Connections.GRPC.ResetsPerSecond = 0.01
	cfg.Connections.GRPC.ResetCooldown = time.Minute
	r := start(t, cfg)
	addr := r.srv.Addr(ListenerGRPC)
	rlsc, _ := rlsClient(t, addr)
	if _, err := rlsc.ShouldRateLimit(context.Background(), rlsReq("default", "ip", "10.0.0.1")); err != nil {
		t.Fatal(err)
	}

	h := dialRawH2(t, addr)
	// With a budget of 50, and nothing given back for streams reset, the
	// 51st reset is one too many.
	streams(t, h, 100, true)
	var goAway *http2.GoAwayFrame
	for {
		f, err := h.Framer.ReadFrame()
		if err != nil {
			if errors.Is(err, io.EOF) || isConnReset(err) {
				break
			}
			t.Fatalf("reading from the server: %v", err)
		}
		if g, ok := f.(*http2.GoAwayFrame); ok {
			goAway = g
		}
	}
	if goAway == nil {
		t.Fatal("connection closed without GOAWAY")
	}
	if goAway.ErrCode != http2.ErrCodeEnhanceYourCalm {
		t.Fatalf("GOAWAY %v, want ENHANCE_YOUR_CALM", goAway.ErrCode)
	}
	if goAway.LastStreamID != 101 {
		t.Errorf("GOAWAY last stream %d, want 101 (the 51st)", goAway.LastStreamID)
	}

	// The attacker's next connection is closed without a frame.
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

func isConnReset(err error) bool {
	return strings.Contains(err.Error(), "connection reset by peer")
}

// TestGRPCHeldStreamsBounded: streams whose request message never comes
// are bounded per client address (the rest refused at once with
// RESOURCE_EXHAUSTED) and cancelled at the request message deadline,
// while a client at another address keeps getting answers.
func TestGRPCHeldStreamsBounded(t *testing.T) {
	cfg := testConfig()
	cfg.Connections.GRPC.MaxWaitingCallsPerClient = 20
	cfg.Connections.GRPC.RequestMessageTimeout = 3 * time.Second
	r := start(t, cfg)
	addr := r.srv.Addr(ListenerGRPC)
	rlsc, _ := rlsClient(t, addr)

	h := dialRawH2(t, addr)
	const n = 60
	streams(t, h, n, false)
	// Each stream ends with trailers; count the statuses.
	codes := map[string]int{}
	answered := 0
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
		codes[mh.PseudoValue("status")+" grpc-status "+headerValue(mh, "grpc-status")]++
		if ended == n-20 { // the refused ones come first; the held ones are still held
			if waiting := metricValue(t, r, "floodgate_grpc_calls_waiting"); waiting != 20 {
				t.Errorf("%v calls waiting for their message, want 20", waiting)
			}
			for i := 0; i < 3; i++ {
				if _, err := rlsc.ShouldRateLimit(context.Background(), rlsReq("default", "ip", "10.0.0.1")); err != nil {
					t.Fatalf("the other client's call during the attack: %v", err)
				}
				answered++
			}
		}
	}
	// 8 is RESOURCE_EXHAUSTED, 1 CANCELLED.
	if codes["200 grpc-status 8"] != n-20 || codes["200 grpc-status 1"] != 20 {
		t.Fatalf("stream endings %v, want %d refused (8) and 20 cancelled (1)", codes, n-20)
	}
	if waiting := metricValue(t, r, "floodgate_grpc_calls_waiting"); waiting != 0 {
		t.Errorf("%v calls waiting for their message after the deadline, want 0", waiting)
	}
	m := metricsText(t, r)
	for _, want := range []string{`floodgate_grpc_refused_total{reason="client_waiting_full"} 40`, `floodgate_grpc_refused_total{reason="message_timeout"} 20`} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
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

func metricsText(t *testing.T, r *running) string {
	t.Helper()
	code, body := httpGet(t, r.url("/metrics"))
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	return body
}

func metricValue(t *testing.T, r *running, name string) float64 {
	t.Helper()
	for _, line := range strings.Split(metricsText(t, r), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// TestGRPCCancellingClientNotCutOff: a stock gRPC client that cancels a
// third of its calls after starting them (HEADERS sent, then RST_STREAM,
// as Envoy does when its timeout fires) keeps its connection: its other
// calls all succeed and no connection is cut for resets.
func TestGRPCCancellingClientNotCutOff(t *testing.T) {
	cfg := testConfig()
	cfg.Connections.GRPC.MaxResets = 20 // small, so that a wrong count shows
	r := start(t, cfg)
	conn, err := grpc.NewClient(r.srv.Addr(ListenerGRPC), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rlsc := rlsv3.NewRateLimitServiceClient(conn)
	for i := 0; i < 600; i++ {
		ctx, cancel := context.WithCancel(context.Background())
		if i%3 == 0 {
			// A stream whose HEADERS go out, reset before its message.
			if _, err := conn.NewStream(ctx, &grpc.StreamDesc{}, "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"); err != nil {
				t.Fatal(err)
			}
			cancel()
			continue
		}
		if _, err := rlsc.ShouldRateLimit(ctx, rlsReq("default", "ip", "10.0.0.1")); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		cancel()
	}
	if m := metricsText(t, r); !strings.Contains(m, `floodgate_grpc_refused_total{reason="resets"} 0`) {
		t.Error("a connection was cut for resets")
	}
}
