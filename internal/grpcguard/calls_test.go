package grpcguard

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

// stream is one call as gRPC would start it: its context, cancelled when
// the stream ends.
type stream struct {
	ctx context.Context
	end context.CancelFunc
	err error
}

func open(a *Admission, ip string) stream {
	base, end := context.WithCancel(peer.NewContext(context.Background(), &peer.Peer{Addr: tcp(ip)}))
	ctx, err := a.tap(base, &tap.Info{FullMethodName: "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"})
	if err != nil {
		end()
	}
	return stream{ctx: ctx, end: end, err: err}
}

func wantRefused(t *testing.T, s stream, what string) {
	t.Helper()
	if status.Code(s.err) != codes.ResourceExhausted {
		t.Fatalf("%s: %v, want RESOURCE_EXHAUSTED", what, s.err)
	}
}

func wantAdmitted(t *testing.T, s stream, what string) {
	t.Helper()
	if s.err != nil {
		t.Fatalf("%s refused: %v", what, s.err)
	}
}

func wantCounts(t *testing.T, a *Admission, calls, waiting int) {
	t.Helper()
	if c, w := a.Counts(); c != calls || w != waiting {
		t.Fatalf("%d calls, %d waiting; want %d, %d", c, w, calls, waiting)
	}
}

func TestAdmissionCaps(t *testing.T) {
	t.Run("calls per client and in all", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var refused []string
			a := NewAdmission(AdmissionOptions{MaxCalls: 5, MaxCallsPerClient: 3, OnRefuse: func(r string) { refused = append(refused, r) }})
			var held []stream
			for i := 0; i < 3; i++ {
				s := open(a, "10.0.0.1")
				wantAdmitted(t, s, "call within the per-client cap")
				a.arrived(s.ctx, false)
				held = append(held, s)
			}
			wantRefused(t, open(a, "10.0.0.1"), "4th call from one client")
			wantAdmitted(t, open(a, "10.0.0.2"), "call from another client")
			wantAdmitted(t, open(a, "10.0.0.3"), "call from a third client")
			wantRefused(t, open(a, "10.0.0.4"), "6th call in all")
			held[0].end()
			synctest.Wait()
			wantAdmitted(t, open(a, "10.0.0.1"), "call after one of the client's ended")
			if len(refused) != 2 || refused[0] != RefusedClientCalls || refused[1] != RefusedCalls {
				t.Fatalf("refusals %v", refused)
			}
		})
	})
	t.Run("waiting per client, and a message frees the place", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			a := NewAdmission(AdmissionOptions{MaxWaitingPerClient: 2})
			s1, s2 := open(a, "10.0.0.1"), open(a, "10.0.0.1")
			wantAdmitted(t, s1, "first")
			wantAdmitted(t, s2, "second")
			wantRefused(t, open(a, "10.0.0.1"), "3rd waiting call from one client")
			a.arrived(s1.ctx, false)
			wantCounts(t, a, 2, 1)
			wantAdmitted(t, open(a, "10.0.0.1"), "call once a message arrived")
			wantCounts(t, a, 3, 2)
		})
	})
	t.Run("a newcomer takes the place of the client with the most waiting", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var refused []string
			a := NewAdmission(AdmissionOptions{MaxWaiting: 4, OnRefuse: func(r string) { refused = append(refused, r) }})
			var attacker []stream
			for i := 0; i < 4; i++ {
				attacker = append(attacker, open(a, "10.0.0.66"))
			}
			wantRefused(t, open(a, "10.0.0.66"), "the attacker's 5th")
			v1 := open(a, "10.0.0.1")
			wantAdmitted(t, v1, "victim's first call (evicts)")
			if !errors.Is(context.Cause(attacker[0].ctx), errEvicted) {
				t.Fatalf("the attacker's oldest call: cause %v, want evicted", context.Cause(attacker[0].ctx))
			}
			wantAdmitted(t, open(a, "10.0.0.1"), "victim's second (attacker 3, victim 1)")
			wantRefused(t, open(a, "10.0.0.1"), "victim's third (attacker 2, victim 2)")
			wantAdmitted(t, open(a, "10.0.0.2"), "a third client's first (attacker 2, victim 2, third 0)")
			wantRefused(t, open(a, "10.0.0.2"), "its second (attacker 1, victim 2, third 1)")
			for i, s := range attacker[3:] {
				if s.ctx.Err() != nil {
					t.Fatalf("attacker's call %d cancelled, only the three oldest should be", i+3)
				}
			}
			synctest.Wait()
			wantCounts(t, a, 4, 4)
			want := []string{RefusedWaiting, CancelledEvicted, CancelledEvicted, RefusedWaiting, CancelledEvicted, RefusedWaiting}
			if !slices.Equal(refused, want) {
				t.Fatalf("refusals %v, want %v", refused, want)
			}
		})
	})
}

func TestAdmissionMessageTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var refused []string
		a := NewAdmission(AdmissionOptions{MessageTimeout: 10 * time.Second, OnRefuse: func(r string) { refused = append(refused, r) }})
		silent := open(a, "10.0.0.66")
		talker := open(a, "10.0.0.1")
		a.arrived(talker.ctx, false)
		time.Sleep(9 * time.Second)
		if silent.ctx.Err() != nil {
			t.Fatal("cancelled before its deadline")
		}
		late := open(a, "10.0.0.66")
		time.Sleep(2 * time.Second)
		if !errors.Is(context.Cause(silent.ctx), errMessageTimeout) {
			t.Fatalf("a call without its message 11 s on: cause %v, want the message deadline", context.Cause(silent.ctx))
		}
		if talker.ctx.Err() != nil || late.ctx.Err() != nil {
			t.Fatal("a call with its message, or one still within its deadline, was cancelled")
		}
		silent.end() // gRPC ends the stream
		synctest.Wait()
		wantCounts(t, a, 2, 1)
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if late.ctx.Err() == nil {
			t.Fatal("the later call was not cancelled at its deadline")
		}
		talker.end()
		late.end()
		synctest.Wait()
		wantCounts(t, a, 0, 0)
		if len(refused) != 2 || refused[0] != CancelledNoMessage {
			t.Fatalf("refusals %v", refused)
		}
		if len(a.clients) != 0 {
			t.Fatalf("%d client entries left with no calls", len(a.clients))
		}
	})
}

// TestAdmissionStreamingCalls: a streaming call stops counting as in
// flight once its first message arrived (a health Watch lasts as long as
// the client likes).
func TestAdmissionStreamingCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := NewAdmission(AdmissionOptions{MaxCallsPerClient: 1})
		w := open(a, "10.0.0.1")
		wantAdmitted(t, w, "watch")
		a.arrived(w.ctx, true)
		wantCounts(t, a, 0, 0)
		wantAdmitted(t, open(a, "10.0.0.1"), "a call next to the watch")
		w.end()
		synctest.Wait()
		wantCounts(t, a, 1, 1)
	})
}
