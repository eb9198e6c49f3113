package envoycompat

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/connlimit"
	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/grpcguard"
	"github.com/floodgate-dev/floodgate/cmd/floodgate/internal/h2raw"
	"github.com/floodgate-dev/floodgate/internal/testkit/redistest"
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

// TestCompatResetsCutOff: with the default bounds, a client that opens
// streams and resets them at once (HTTP/2 rapid reset), or makes the
// server reset them (a WINDOW_UPDATE of increment 0 on each:
// MadeYouReset), has its connection cut off and its next connection
// refused during the cooldown, while a client at another address keeps
// getting answers.
func TestCompatResetsCutOff(t *testing.T) {
	for _, tc := range []struct {
		name   string
		attack func(h *h2raw.Conn) error
	}{
		{"rapid reset", func(h *h2raw.Conn) error { return h.Streams(100, true) }},
		{"MadeYouReset", func(h *h2raw.Conn) error { return h.MadeYouReset(100) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
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
			// The default budget is 1000 resets and each stream gives half a
			// reset back: about 2000 reset streams spend it. Stop writing at
			// the cut.
			const most = 20000
			sent := 0
			for sent < most {
				if err := tc.attack(h); err != nil {
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
		})
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

// TestCompatResetSettings: the FLOODGATE_GRPC_* variables set the reset
// budget, serve's own-mode defaults without them, and a bad value stops
// the start naming the variable.
func TestCompatResetSettings(t *testing.T) {
	base := map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "127.0.0.1:1", "RUNTIME_ROOT": t.TempDir()}
	s, err := ParseSettings(mapLookup(base))
	if err != nil {
		t.Fatal(err)
	}
	want := GuardSettings{MaxResets: 1000, ResetsPerSecond: 100, ResetCooldown: 10 * time.Second,
		MaxListenerResets: 10000, ListenerResetsPerSecond: 1000, FreeCancelAfter: 10 * time.Millisecond,
		MaxDescriptors: 64, MaxEntries: 64}
	got := s.Guard
	got.MaxConns, got.MaxConnsPerClient, got.MaxCalls, got.MaxCallsPerClient, got.MaxWaiting, got.MaxWaitingPerClient, got.MessageTimeout = 0, 0, 0, 0, 0, 0, 0
	if got != want {
		t.Fatalf("defaults %+v, want %+v", got, want)
	}
	m := map[string]string{"FLOODGATE_GRPC_MAX_RESETS": "0", "FLOODGATE_GRPC_RESETS_PER_SECOND": "2.5", "FLOODGATE_GRPC_RESET_COOLDOWN": "1m",
		"FLOODGATE_GRPC_MAX_LISTENER_RESETS": "50000", "FLOODGATE_GRPC_LISTENER_RESETS_PER_SECOND": "0", "FLOODGATE_GRPC_FREE_CANCEL_AFTER": "5ms"}
	for k, v := range base {
		m[k] = v
	}
	if s, err = ParseSettings(mapLookup(m)); err != nil {
		t.Fatal(err)
	}
	g := s.Guard
	if g.MaxResets != 0 || g.ResetsPerSecond != 2.5 || g.ResetCooldown != time.Minute || g.MaxListenerResets != 50000 ||
		g.ListenerResetsPerSecond != 0 || g.FreeCancelAfter != 5*time.Millisecond {
		t.Fatalf("set %+v", g)
	}
	for k, v := range map[string]string{"FLOODGATE_GRPC_MAX_RESETS": "-1", "FLOODGATE_GRPC_RESETS_PER_SECOND": "NaN",
		"FLOODGATE_GRPC_LISTENER_RESETS_PER_SECOND": "-3", "FLOODGATE_GRPC_FREE_CANCEL_AFTER": "soon", "FLOODGATE_GRPC_MAX_LISTENER_RESETS": "many"} {
		m := map[string]string{k: v}
		for k, v := range base {
			m[k] = v
		}
		if _, err := ParseSettings(mapLookup(m)); err == nil || !strings.HasPrefix(err.Error(), k+":") {
			t.Errorf("%s=%s: %v, want an error naming the variable", k, v, err)
		}
	}
}

// dialFrom returns an RLS client whose connection comes from the loopback
// address ip, as a client on another machine would.
func dialFrom(t *testing.T, addr, ip string) rlsv3.RateLimitServiceClient {
	t.Helper()
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
			return d.DialContext(ctx, "tcp", a)
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn)
}

// TestCompatEnvoyTimeoutsNotCutOff: an Envoy whose RLS calls time out
// (Redis stalled) spends no resets, however many, and is never cut off.
func TestCompatEnvoyTimeoutsNotCutOff(t *testing.T) {
	// Each call sent whole and cancelled 100 ms later by the client's
	// RST_STREAM CANCEL, with no deadline of the server's own to race it:
	// 200 such calls against a budget of 100 spend nothing by default, and
	// the whole budget with free_cancel_after 0. (The time is the server's
	// reading of the frames: a server too busy to read for 90 ms would
	// read a call and its cancellation together.)
	t.Run("cancelled after being served", func(t *testing.T) {
		msg, err := proto.Marshal(&rlsv3.RateLimitRequest{Domain: "test", Descriptors: []*commonv3.RateLimitDescriptor{desc("generic", "x")}})
		if err != nil {
			t.Fatal(err)
		}
		for _, free := range []bool{true, false} {
			rs := redistest.Start(t)
			srv, _ := startServer(t, testRules, map[string]string{"REDIS_URL": rs.Addr(), "FLOODGATE_GRPC_MAX_RESETS": "100"},
				func(s *Settings) {
					if !free {
						s.Guard.FreeCancelAfter = 0
					}
				})
			rs.Pause()
			h := dialRawH2(t, srv.Addr(ListenerGRPC))
			go func() { // read what the server sends until it ends the connection
				for {
					if _, err := h.Framer.ReadFrame(); err != nil {
						return
					}
				}
			}()
			for i := 0; i < 4; i++ {
				ids, err := h.Calls(50, msg)
				if err != nil {
					break // cut off
				}
				time.Sleep(100 * time.Millisecond)
				if h.Cancel(ids) != nil {
					break
				}
			}
			time.Sleep(100 * time.Millisecond) // the last resets are read
			rs.Resume()
			cut := srv.guardLog.refusals()[grpcguard.CutResets]
			if free && cut != 0 {
				t.Errorf("200 calls cancelled 100 ms after they were sent whole cut the connection off")
			}
			if !free && cut != 1 {
				t.Errorf("with free_cancel_after 0, 200 cancelled calls cut %d connections, want 1 (a budget of 100)", cut)
			}
		}
	})
	// Envoy's way: a gRPC client's calls with a deadline, which the
	// client's RST_STREAM CANCEL, the server's own at the grpc-timeout, or
	// the server's DEADLINE_EXCEEDED answer ends. 640 of them against a
	// budget of 200 cut nothing; another client on Envoy's address, and
	// Envoy, are answered once Redis is back.
	t.Run("gRPC deadlines", func(t *testing.T) {
		rs := redistest.Start(t)
		srv, _ := startServer(t, testRules, map[string]string{"REDIS_URL": rs.Addr(), "FLOODGATE_GRPC_MAX_RESETS": "200"})
		addr := srv.Addr(ListenerGRPC)
		envoy, other := dialFrom(t, addr, "127.0.0.3"), dialFrom(t, addr, "127.0.0.3")
		// A limited descriptor: its decision waits for Redis.
		req := &rlsv3.RateLimitRequest{Domain: "test", Descriptors: []*commonv3.RateLimitDescriptor{desc("generic", "x")}}
		rlsCall(t, other, "before Redis stalls")

		rs.Pause()
		var wg sync.WaitGroup
		var timedOut atomic.Int64
		for w := 0; w < 16; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 40; i++ {
					ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
					_, err := envoy.ShouldRateLimit(ctx, req)
					cancel()
					if status.Code(err) == codes.DeadlineExceeded {
						timedOut.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		rs.Resume()
		if timedOut.Load() < 400 {
			t.Fatalf("only %d of 640 calls timed out with Redis stalled", timedOut.Load())
		}
		if got := srv.guardLog.refusals(); len(got) != 0 {
			t.Fatalf("Envoy's %d timeouts were refused or cut: %v", timedOut.Load(), got)
		}
		for _, c := range []rlsv3.RateLimitServiceClient{other, envoy} {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := c.ShouldRateLimit(ctx, req)
			cancel()
			if err != nil {
				t.Fatalf("a client on Envoy's address once Redis is back: %v", err)
			}
		}
	})
}

// TestCompatDescriptorCaps: an RLS call with more descriptors, or a
// descriptor with more entries, than FLOODGATE_RLS_MAX_DESCRIPTORS and
// _ENTRIES allow (64 each by default) is answered INVALID_ARGUMENT naming
// the variable, before it is decided; at the bound, or with the variable
// at 0 (no bound, as in the reference), it is decided.
func TestCompatDescriptorCaps(t *testing.T) {
	request := func(descriptors, entries int) *rlsv3.RateLimitRequest {
		req := &rlsv3.RateLimitRequest{Domain: "test"}
		for i := 0; i < descriptors; i++ {
			d := &commonv3.RateLimitDescriptor{}
			for j := 0; j < entries; j++ {
				d.Entries = append(d.Entries, &commonv3.RateLimitDescriptor_Entry{Key: "free", Value: "x"})
			}
			req.Descriptors = append(req.Descriptors, d)
		}
		return req
	}
	srv, _ := startServer(t, testRules, nil)
	c := rlsClient(t, srv.Addr(ListenerGRPC))
	for _, tc := range []struct {
		descriptors, entries int
		want                 string
	}{
		{64, 1, ""},
		{1, 64, ""},
		{65, 1, "65 descriptors: the most a request may have is 64 (FLOODGATE_RLS_MAX_DESCRIPTORS)"},
		{1000, 1, "1000 descriptors: the most a request may have is 64 (FLOODGATE_RLS_MAX_DESCRIPTORS)"},
		{2, 65, "descriptor 0 has 65 entries: the most a descriptor may have is 64 (FLOODGATE_RLS_MAX_ENTRIES)"},
		{1, 1000, "descriptor 0 has 1000 entries: the most a descriptor may have is 64 (FLOODGATE_RLS_MAX_ENTRIES)"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := c.ShouldRateLimit(ctx, request(tc.descriptors, tc.entries))
		cancel()
		if tc.want == "" {
			if err != nil {
				t.Errorf("%d descriptors of %d entries: %v", tc.descriptors, tc.entries, err)
			}
		} else if status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() != tc.want {
			t.Errorf("%d descriptors of %d entries: %v, want INVALID_ARGUMENT %q", tc.descriptors, tc.entries, err, tc.want)
		}
	}
	srv, _ = startServer(t, testRules, map[string]string{"FLOODGATE_RLS_MAX_DESCRIPTORS": "0", "FLOODGATE_RLS_MAX_ENTRIES": "0"})
	c = rlsClient(t, srv.Addr(ListenerGRPC))
	if _, err := c.ShouldRateLimit(context.Background(), request(100, 100)); err != nil {
		t.Errorf("100 descriptors of 100 entries with no bound: %v", err)
	}
}
