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
	end context.CancelFunc // the stream ends (reset, or the connection closed)
	err error
}

// arrive is what the interceptors do when the call's first message is in.
func (s stream) arrive(a *Admission, streaming bool) { a.arrived(s.ctx.(*call), streaming) }

// finish is what the interceptors do when the call's handler returns.
func (s stream) finish(a *Admission) { a.end(s.ctx.(*call)) }

// open starts a call from ip; its stream ends when the test does at the
// latest, so that the sweeping goroutine stops.
func open(t *testing.T, a *Admission, ip string) stream {
	base, end := context.WithCancel(peer.NewContext(context.Background(), &peer.Peer{Addr: tcp(ip)}))
	t.Cleanup(end)
	ctx, err := a.tap(base, &tap.Info{FullMethodName: "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"})
	if err != nil {
		end()
	}
	return stream{ctx: ctx, end: end, err: err}
}

// newAdmission returns an Admission for a test in a synctest bubble; when
// the test ends (after its streams, see open) virtual time moves on until
// the sweeping goroutine has seen no call waits, and stopped.
func newAdmission(t *testing.T, o AdmissionOptions) *Admission {
	a := NewAdmission(o)
	t.Cleanup(func() {
		time.Sleep(time.Minute)
		if _, w := a.Counts(); w != 0 {
			t.Errorf("%d calls still waiting after every stream ended", w)
		}
	})
	return a
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
			a := newAdmission(t, AdmissionOptions{MaxCalls: 5, MaxCallsPerClient: 3, OnRefuse: func(r string) { refused = append(refused, r) }})
			var held []stream
			for i := 0; i < 3; i++ {
				s := open(t, a, "10.0.0.1")
				wantAdmitted(t, s, "call within the per-client cap")
				s.arrive(a, false)
				held = append(held, s)
			}
			wantRefused(t, open(t, a, "10.0.0.1"), "4th call from one client")
			wantAdmitted(t, open(t, a, "10.0.0.2"), "call from another client")
			wantAdmitted(t, open(t, a, "10.0.0.3"), "call from a third client")
			wantRefused(t, open(t, a, "10.0.0.4"), "6th call in all")
			held[0].finish(a)
			wantAdmitted(t, open(t, a, "10.0.0.1"), "call after one of the client's ended")
			if len(refused) != 2 || refused[0] != RefusedClientCalls || refused[1] != RefusedCalls {
				t.Fatalf("refusals %v", refused)
			}
		})
	})
	t.Run("waiting per client, and a message frees the place", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			a := newAdmission(t, AdmissionOptions{MaxWaitingPerClient: 2})
			s1, s2 := open(t, a, "10.0.0.1"), open(t, a, "10.0.0.1")
			wantAdmitted(t, s1, "first")
			wantAdmitted(t, s2, "second")
			wantRefused(t, open(t, a, "10.0.0.1"), "3rd waiting call from one client")
			s1.arrive(a, false)
			wantCounts(t, a, 2, 1)
			wantAdmitted(t, open(t, a, "10.0.0.1"), "call once a message arrived")
			wantCounts(t, a, 3, 2)
		})
	})
	t.Run("a call whose stream ends before its message stops counting", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			a := newAdmission(t, AdmissionOptions{MaxCallsPerClient: 2, MaxWaitingPerClient: 2})
			s1, s2 := open(t, a, "10.0.0.1"), open(t, a, "10.0.0.1")
			wantRefused(t, open(t, a, "10.0.0.1"), "third")
			s1.end() // reset: gRPC never runs the interceptors for it
			wantRefused(t, open(t, a, "10.0.0.1"), "a call right after (the last look was just now)")
			time.Sleep(purgeEvery)
			wantAdmitted(t, open(t, a, "10.0.0.1"), "a call once one was reset")
			s2.end()
			wantCounts(t, a, 1, 1)
		})
	})
	t.Run("a newcomer takes the place of the client with the most waiting", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var refused []string
			a := newAdmission(t, AdmissionOptions{MaxWaiting: 4, OnRefuse: func(r string) { refused = append(refused, r) }})
			var attacker []stream
			for i := 0; i < 4; i++ {
				attacker = append(attacker, open(t, a, "10.0.0.66"))
			}
			wantRefused(t, open(t, a, "10.0.0.66"), "the attacker's 5th")
			v1 := open(t, a, "10.0.0.1")
			wantAdmitted(t, v1, "victim's first call (evicts)")
			if !errors.Is(context.Cause(attacker[0].ctx), errEvicted) {
				t.Fatalf("the attacker's oldest call: cause %v, want evicted", context.Cause(attacker[0].ctx))
			}
			wantAdmitted(t, open(t, a, "10.0.0.1"), "victim's second (attacker 3, victim 1)")
			wantRefused(t, open(t, a, "10.0.0.1"), "victim's third (attacker 2, victim 2)")
			wantAdmitted(t, open(t, a, "10.0.0.2"), "a third client's first (attacker 2, victim 2, third 0)")
			wantRefused(t, open(t, a, "10.0.0.2"), "its second (attacker 1, victim 2, third 1)")
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
		a := newAdmission(t, AdmissionOptions{MessageTimeout: 10 * time.Second, OnRefuse: func(r string) { refused = append(refused, r) }})
		silent := open(t, a, "10.0.0.66")
		talker := open(t, a, "10.0.0.1")
		talker.arrive(a, false)
		time.Sleep(9 * time.Second)
		if silent.ctx.Err() != nil {
			t.Fatal("cancelled before its deadline")
		}
		late := open(t, a, "10.0.0.66")
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
		talker.finish(a)
		late.end()
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
		a := newAdmission(t, AdmissionOptions{MaxCallsPerClient: 1})
		w := open(t, a, "10.0.0.1")
		wantAdmitted(t, w, "watch")
		w.arrive(a, true)
		wantCounts(t, a, 0, 0)
		wantAdmitted(t, open(t, a, "10.0.0.1"), "a call next to the watch")
		w.finish(a)
		wantCounts(t, a, 1, 1)
	})
}

// BenchmarkAdmission is the bookkeeping of one unary call: admitted at its
// HEADERS, its message arriving, its handler returning; next to the
// context gRPC makes for every stream anyway, alone, for scale.
func BenchmarkAdmission(b *testing.B) {
	base, end := context.WithCancel(peer.NewContext(context.Background(), &peer.Peer{Addr: tcp("10.0.0.1")}))
	defer end()
	info := &tap.Info{FullMethodName: "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"}
	b.Run("stream context alone", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, cancel := context.WithCancel(base)
			cancel()
		}
	})
	b.Run("stream context and admission", func(b *testing.B) {
		a := NewAdmission(AdmissionOptions{MaxCalls: 8192, MaxCallsPerClient: 2048, MaxWaiting: 4096, MaxWaitingPerClient: 1024, MessageTimeout: 10 * time.Second})
		b.ReportAllocs()
		for b.Loop() {
			stream, cancel := context.WithCancel(base)
			ctx, err := a.tap(stream, info)
			if err != nil {
				b.Fatal(err)
			}
			c := ctx.(*call)
			a.arrived(c, false)
			a.end(c)
			cancel()
		}
	})
}

// TestAdmissionClose: Close ends the sweeping goroutine even while calls
// wait (synctest fails the test if a goroutine is left blocked).
func TestAdmissionClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := NewAdmission(AdmissionOptions{MessageTimeout: time.Hour})
		base, end := context.WithCancel(peer.NewContext(context.Background(), &peer.Peer{Addr: tcp("10.0.0.1")}))
		defer end()
		if _, err := a.tap(base, &tap.Info{}); err != nil {
			t.Fatal(err)
		}
		a.Close()
		if _, err := a.tap(base, &tap.Info{}); err != nil {
			t.Fatalf("a call after Close: %v", err)
		}
	})
}
