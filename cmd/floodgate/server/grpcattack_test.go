package server

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

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
