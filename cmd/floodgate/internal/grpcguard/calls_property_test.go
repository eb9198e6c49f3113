package grpcguard

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"
)

// TestAdmissionPurgeKeepsNewCallCounted: a call past a bound makes tap
// forget its own address's ended calls, which removes the address's entry;
// the call then admitted must still be found, and forgotten, once its own
// stream ends before its message (it was left counted for ever, and the
// listener's waiting calls grew until it refused everyone).
func TestAdmissionPurgeKeepsNewCallCounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newAdmission(t, AdmissionOptions{MaxWaitingPerClient: 1})
		s1 := open(t, a, "10.0.0.1")
		wantAdmitted(t, s1, "first")
		s1.end() // reset before its message
		time.Sleep(purgeEvery)
		s2 := open(t, a, "10.0.0.1") // at the bound: purges s1, the address's only call
		wantAdmitted(t, s2, "a call once the first was reset")
		wantCounts(t, a, 1, 1)
		checkBookkeeping(t, a, []*modelCall{{stream: s2, ip: "10.0.0.1"}})
		s2.end() // reset before its message too
		wantCounts(t, a, 0, 0)
	})
}

// modelCall is a call as the property test drives it.
type modelCall struct {
	stream
	ip    string
	state int
}

// States of a modelCall.
const (
	stWaiting   = iota // admitted, no message yet
	stServed           // unary: message in, handler running
	stStreaming        // streaming: first message in, handler running
	stEnded            // its stream ended
)

// FuzzAdmissionBookkeeping drives Admission through any sequence of calls
// opened from a few addresses, messages arriving (unary or streaming),
// handlers returning, streams ending before their message (reset), time
// passing (message deadlines, sweeps) and counts read, and checks after
// every step that its counts equal the calls they count, no bound is
// exceeded, every counted call is reachable from the lists the purge and
// the sweep walk, and no address's entry is kept without calls or
// replaced while it has some. Each pair of bytes is one step.
func FuzzAdmissionBookkeeping(f *testing.F) {
	f.Add([]byte{0, 1, 0, 1, 5, 0, 6, 6, 0, 1, 5, 0, 6, 0})
	f.Add([]byte{0, 1, 0, 1, 0, 1, 5, 0, 5, 0, 5, 0, 6, 6, 0, 1, 5, 0, 6, 6, 0, 1})
	f.Add([]byte{0, 0, 0, 1, 0, 2, 0, 3, 0, 0, 0, 0, 2, 1, 3, 0, 4, 0, 4, 1, 6, 200})
	f.Add([]byte{0, 66, 0, 66, 0, 66, 0, 66, 0, 1, 0, 1, 5, 2, 6, 10, 0, 66, 6, 120, 7, 0})
	f.Add([]byte("the quick brown fox jumps over the lazy dog, twice: the quick brown fox"))
	f.Fuzz(func(t *testing.T, ops []byte) {
		synctest.Test(t, func(t *testing.T) {
			o := AdmissionOptions{MaxCalls: 8, MaxCallsPerClient: 5, MaxWaiting: 5, MaxWaitingPerClient: 3, MessageTimeout: time.Second}
			a := NewAdmission(o)
			defer a.Close()
			var calls []*modelCall
			live := func(arg byte, states ...int) *modelCall {
				var m []*modelCall
				for _, c := range calls {
					for _, s := range states {
						if c.state == s {
							m = append(m, c)
						}
					}
				}
				if len(m) == 0 {
					return nil
				}
				return m[int(arg)%len(m)]
			}
			for i := 0; i+1 < len(ops); i += 2 {
				op, arg := ops[i]%8, ops[i+1]
				switch op {
				case 0, 1: // a call from one of four addresses
					ip := fmt.Sprintf("10.0.0.%d", arg%4)
					s := open(t, a, ip)
					if s.err == nil {
						calls = append(calls, &modelCall{stream: s, ip: ip})
					}
				case 2, 3: // its message arrives
					if c := live(arg, stWaiting); c != nil {
						c.arrive(a, op == 3)
						c.state = stServed + int(op-2)
					}
				case 4: // its handler returns, and the stream ends
					if c := live(arg, stServed, stStreaming); c != nil {
						c.finish(a)
						c.end()
						c.state = stEnded
					}
				case 5: // the stream is reset before its message
					if c := live(arg, stWaiting); c != nil {
						c.end()
						c.state = stEnded
					}
				case 6: // time passes
					time.Sleep(time.Duration(arg) * 10 * time.Millisecond)
				case 7: // the counts are read (a metrics scrape)
					a.Counts()
				}
				synctest.Wait()
				// A call the admission cancelled (evicted, or past its
				// message deadline) has its stream ended by gRPC.
				for _, c := range calls {
					if c.state == stWaiting && c.ctx.Err() != nil {
						cause := context.Cause(c.ctx)
						if !errors.Is(cause, errEvicted) && !errors.Is(cause, errMessageTimeout) {
							t.Fatalf("step %d: a waiting call cancelled by %v", i/2, cause)
						}
						c.end()
						c.state = stEnded
					}
				}
				checkBookkeeping(t, a, calls)
				var inFlight, waiting int
				for _, c := range calls {
					inFlight += b2i(c.state == stWaiting || c.state == stServed)
					waiting += b2i(c.state == stWaiting)
				}
				if gc, gw := a.Counts(); gc != inFlight || gw != waiting {
					t.Fatalf("step %d (op %d): counts %d in flight, %d waiting; the calls: %d, %d", i/2, op, gc, gw, inFlight, waiting)
				}
				checkBookkeeping(t, a, calls)
			}
			// Every stream ends: the counts return to 0 and no entry is left.
			for _, c := range calls {
				if c.state == stServed || c.state == stStreaming {
					c.finish(a)
				}
				c.end()
			}
			synctest.Wait()
			if gc, gw := a.Counts(); gc != 0 || gw != 0 || len(a.clients) != 0 {
				t.Fatalf("after every stream ended: %d in flight, %d waiting, %d address entries", gc, gw, len(a.clients))
			}
		})
	})
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// checkBookkeeping checks Admission's structure against itself and the
// calls the test holds: the lists are well linked and hold only waiting
// calls, each address entry counts its own calls and is the map's, the
// totals add up and the bounds hold.
func checkBookkeeping(t *testing.T, a *Admission, calls []*modelCall) {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	walk := func(l *callList, what string) map[*call]bool {
		seen := map[*call]bool{}
		var prev *call
		for c := l.head; c != nil; c = c.next(l.kind) {
			if seen[c] {
				t.Fatalf("%s: a loop", what)
			}
			if c.links[l.kind].prev != prev {
				t.Fatalf("%s: a broken back link", what)
			}
			if !c.waiting || !c.inFlight {
				t.Fatalf("%s holds a call not waiting (%v) or not in flight (%v)", what, c.waiting, c.inFlight)
			}
			seen[c] = true
			prev = c
		}
		if l.tail != prev || l.n != len(seen) {
			t.Fatalf("%s: tail or length (%d) wrong, %d calls", what, l.n, len(seen))
		}
		return seen
	}
	all := walk(&a.waiting, "the list of waiting calls")
	calls0, waiting0 := 0, 0
	for key, cl := range a.clients {
		if cl.key != key {
			t.Fatalf("entry %q filed under %q", cl.key, key)
		}
		if cl.calls <= 0 {
			t.Fatalf("entry %q kept with %d calls", key, cl.calls)
		}
		mine := walk(&cl.waiting, "an address's waiting calls")
		for c := range mine {
			if !all[c] || c.client != cl {
				t.Fatal("a call in its address's list but not in the list of all, or of another address")
			}
		}
		if o := a.o.MaxCallsPerClient; o > 0 && cl.calls > o {
			t.Fatalf("address %q has %d calls in flight, cap %d", key, cl.calls, o)
		}
		if o := a.o.MaxWaitingPerClient; o > 0 && cl.waiting.n > o {
			t.Fatalf("address %q has %d calls waiting, cap %d", key, cl.waiting.n, o)
		}
		calls0 += cl.calls
		waiting0 += cl.waiting.n
	}
	if calls0 != a.calls || waiting0 != a.waiting.n {
		t.Fatalf("entries count %d calls, %d waiting; totals %d, %d", calls0, waiting0, a.calls, a.waiting.n)
	}
	if (a.o.MaxCalls > 0 && a.calls > a.o.MaxCalls) || (a.o.MaxWaiting > 0 && a.waiting.n > a.o.MaxWaiting) {
		t.Fatalf("%d calls, %d waiting: over the caps", a.calls, a.waiting.n)
	}
	inFlight := 0
	for _, m := range calls {
		c := m.ctx.(*call)
		if c.inFlight {
			inFlight++
			if a.clients[c.client.key] != c.client {
				t.Fatalf("a call in flight counted in an entry the map no longer holds (%s)", m.ip)
			}
		}
		if c.waiting && !all[c] {
			t.Fatal("a waiting call missing from the list of all waiting calls")
		}
	}
	if inFlight != a.calls {
		t.Fatalf("%d calls in flight by their flags, %d counted", inFlight, a.calls)
	}
}
