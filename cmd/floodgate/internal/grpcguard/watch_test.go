package grpcguard

import (
	"encoding/binary"
	"fmt"
	"slices"
	"testing"
	"time"
)

// rst encodes a RST_STREAM frame with an error code.
func rst(stream, code uint32) []byte {
	f := encFrame(frameRSTStream, stream, 4)
	binary.BigEndian.PutUint32(f[9:], code)
	return f
}

// TestFrameScannerReportsResetCodes: the error code of RST_STREAM and the
// flags of every frame reach the accounting, however the bytes are cut.
func TestFrameScannerReportsResetCodes(t *testing.T) {
	var b []byte
	h := encFrame(frameHeaders, 1, 7)
	h[4] = flagEndStream
	b = append(b, h...)
	b = append(b, rst(1, 0x1)...)         // PROTOCOL_ERROR
	b = append(b, encFrame(0x8, 3, 4)...) // WINDOW_UPDATE
	b = append(b, rst(5, errCodeCancel)...)
	want := []frame{{typ: frameHeaders, flags: flagEndStream, stream: 1}, {typ: frameRSTStream, stream: 1, code: 1},
		{typ: 0x8, stream: 3}, {typ: frameRSTStream, stream: 5, code: errCodeCancel}}
	for cut := 0; cut <= len(b); cut++ {
		for _, step := range []int{1, 3, len(b)} {
			pieces := []int{cut}
			for n := cut; n < len(b); n += step {
				pieces = append(pieces, step)
			}
			if got := scanFrames(b, pieces); !slices.Equal(got, want) {
				t.Fatalf("cut at %d, then every %d: %+v, want %+v", cut, step, got, want)
			}
		}
	}
}

// conn returns a watched connection of r from ip, driven frame by frame.
func conn(t *testing.T, r *Resets, ip string) *watchedConn {
	t.Helper()
	a, err := r.open(tcp(ip))
	if err != nil {
		t.Fatal(err)
	}
	return r.watch(nil, a)
}

func headers(id uint32, endStream bool) frame {
	f := frame{typ: frameHeaders, stream: id}
	if endStream {
		f.flags = flagEndStream
	}
	return f
}

func reset(id, code uint32) frame { return frame{typ: frameRSTStream, stream: id, code: code} }

// TestServerResetsSpend: streams the server resets for the client's
// protocol errors (MadeYouReset) spend the client's budget as its own
// resets do, once per stream whichever side resets it, and a stream the
// server ends normally spends nothing.
func TestServerResetsSpend(t *testing.T) {
	t.Run("MadeYouReset is cut as rapid reset is", func(t *testing.T) {
		var cuts []string
		r := testResets(newFakeClock(), &cuts)
		c := conn(t, r, "10.0.0.1")
		n := 0
		for id := uint32(1); c.clientFrame(headers(id, false)) && c.serverFrame(reset(id, 0x1)); id += 2 {
			n++
		}
		// As in TestResetBudget: the 11th stream's reset is one too many.
		if n != 10 || !slices.Equal(cuts, []string{CutResets}) {
			t.Fatalf("%d streams reset by the server before the cut (cuts %v), want 10 and [resets]", n, cuts)
		}
	})
	t.Run("each code the server resets with for the client", func(t *testing.T) {
		for code, spends := range map[uint32]bool{0x0: false, 0x1: true, 0x2: true, 0x3: true, 0x5: true, 0x6: true, 0x7: true, errCodeCancel: true} {
			var cuts []string
			r := testResets(newFakeClock(), &cuts)
			c := conn(t, r, "10.0.0.1")
			for id := uint32(1); id < 100; id += 2 {
				c.clientFrame(headers(id, false))
				c.serverFrame(reset(id, code))
			}
			if got := len(cuts) > 0; got != spends {
				t.Errorf("server resets with code %#x: cut %v, want %v", code, got, spends)
			}
		}
	})
	t.Run("only streams answered after their whole request earn resets", func(t *testing.T) {
		for _, complete := range []bool{false, true} {
			var cuts []string
			r := testResets(newFakeClock(), &cuts)
			c := conn(t, r, "10.0.0.1")
			n := 0
			for id := uint32(1); id < 400; id += 4 {
				// One stream answered (refused at once, as a bound does,
				// if its request is not complete), one reset by the server.
				c.clientFrame(headers(id, complete))
				c.serverFrame(headers(id, true))
				c.serverFrame(reset(id, errCodeNo))
				c.clientFrame(headers(id+2, false))
				if !c.serverFrame(reset(id+2, 0x1)) {
					break
				}
				n++
			}
			if want := map[bool]int{false: 10, true: 100}[complete]; n != want {
				t.Errorf("request complete %v: %d server resets before the cut, want %d", complete, n, want)
			}
		}
	})
	t.Run("a stream spends at most once, and only while open", func(t *testing.T) {
		var cuts []string
		r := testResets(newFakeClock(), &cuts)
		c := conn(t, r, "10.0.0.1")
		for id := uint32(1); id < 2000; id += 2 {
			c.clientFrame(headers(id, true))
			switch id % 6 {
			case 1: // answered (trailers), then the client's reset crosses it
				c.serverFrame(headers(id, true))
				c.clientFrame(reset(id, errCodeCancel))
			case 3: // answered, then NO_ERROR: the client need not finish
				c.serverFrame(headers(id, true))
				c.serverFrame(reset(id, errCodeNo))
				c.clientFrame(reset(id, errCodeCancel))
			case 5: // reset by both sides at once: one spend, and a credit
				c.clientFrame(reset(id, errCodeCancel))
				c.serverFrame(reset(id, errCodeCancel))
			}
		}
		if len(cuts) != 0 {
			t.Fatalf("cut (%v): a third of the streams reset once each should never run out", cuts)
		}
		a := c.acct
		if a.tokens < r.o.Budget-1 {
			t.Fatalf("%.1f resets left, want about the budget %v", a.tokens, r.o.Budget)
		}
	})
}

// TestFreeCancelAfter: a call cancelled after it was served for
// FreeCancelAfter spends nothing, by the client's reset or the server's at
// its deadline; a call cancelled sooner, or before its request was
// complete, spends.
func TestFreeCancelAfter(t *testing.T) {
	newR := func(c *fakeClock, cuts *[]string) *Resets {
		return NewResets(ResetOptions{Budget: 10, StreamCredit: 1, RefillPerSecond: 0, Cooldown: 5 * time.Second,
			FreeCancelAfter: 20 * time.Millisecond, Now: c.now, OnCut: func(r string) { *cuts = append(*cuts, r) }})
	}
	for _, tc := range []struct {
		name     string
		complete bool
		wait     time.Duration
		byServer bool
		free     bool
	}{
		{"Envoy's timeout: served, cancelled by the client", true, 20 * time.Millisecond, false, true},
		{"the call's deadline: served, cancelled by the server", true, 30 * time.Millisecond, true, true},
		{"cancelled at once", true, 0, false, false},
		{"cancelled before the free time", true, 19 * time.Millisecond, false, false},
		{"request not complete", false, time.Second, false, false},
		{"request not complete, server's deadline", false, time.Second, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var cuts []string
			clock := newFakeClock()
			r := newR(clock, &cuts)
			c := conn(t, r, "10.0.0.1")
			n := 0
			for id := uint32(1); id < 400; id += 2 {
				if !c.clientFrame(headers(id, tc.complete)) {
					break
				}
				clock.add(tc.wait)
				var ok bool
				if tc.byServer {
					ok = c.serverFrame(reset(id, errCodeCancel))
				} else {
					ok = c.clientFrame(reset(id, errCodeCancel))
				}
				if !ok {
					break
				}
				n++
			}
			if free := n == 200; free != tc.free {
				t.Fatalf("%d of 200 cancelled calls before the cut; free %v, want %v", n, free, tc.free)
			}
		})
	}
}

// TestListenerBudget: addresses that each stay within their own budget
// but reset in turn are cut once the listener's budget is spent, each then
// cooling down; an address that resets nothing is never cut, and the
// listener's refill and its share of every stream that completes give
// resets back.
func TestListenerBudget(t *testing.T) {
	var cuts []string
	clock := newFakeClock()
	r := NewResets(ResetOptions{Budget: 10, StreamCredit: 1, RefillPerSecond: 2, Cooldown: 5 * time.Second,
		ListenerBudget: 30, ListenerStreamCredit: 0.125, ListenerRefillPerSecond: 10,
		Now: clock.now, OnCut: func(r string) { cuts = append(cuts, r) }})
	victim := conn(t, r, "10.0.0.1")
	resets := 0
	var cutAt []int
	for i := 0; i < 20; i++ { // 20 addresses, 5 resets each: within their own budget
		c := conn(t, r, fmt.Sprintf("10.0.1.%d", i+1))
		for id := uint32(1); id < 10; id += 2 {
			if !c.clientFrame(headers(id, false)) || !c.clientFrame(reset(id, errCodeCancel)) {
				cutAt = append(cutAt, i)
				break
			}
			resets++
		}
	}
	// 30 in hand, and nothing back for streams reset.
	if resets != 30 {
		t.Fatalf("%d resets let through the listener, want 30", resets)
	}
	if len(cutAt) != 20-6 || cuts[0] != CutListenerResets {
		t.Fatalf("%d addresses cut (%v), want 14, by the listener's budget", len(cutAt), cuts)
	}
	if _, err := r.open(tcp("10.0.1.20")); err == nil {
		t.Fatal("an address cut by the listener's budget may connect again at once")
	}
	for id := uint32(1); id < 200; id += 2 {
		if !victim.clientFrame(headers(id, true)) || !victim.serverFrame(headers(id, true)) {
			t.Fatal("an address that resets nothing was cut")
		}
	}
	// What is left (12.5: the victim's 100 completed streams earned an
	// eighth each) and a second (10) let 22 more resets through, from
	// addresses each within its own budget.
	left := r.listener.tokens
	clock.add(time.Second)
	n := 0
	for i, cut := 0, false; !cut; i++ {
		c := conn(t, r, fmt.Sprintf("10.0.2.%d", i+1))
		for id := uint32(1); id < 10; id += 2 {
			if cut = !c.clientFrame(headers(id, false)) || !c.clientFrame(reset(id, errCodeCancel)); cut {
				break
			}
			n++
		}
	}
	if left != 12.5 || n != 22 {
		t.Fatalf("%.2f resets left after the victim's streams, %d let through after a second; want 12.5 and 22", left, n)
	}
}

// BenchmarkWatchedCall is the accounting of one unary call's frames: the
// client's HEADERS and DATA (ending its side), the server's HEADERS, DATA
// and trailers, on a connection with 64 other calls open.
func BenchmarkWatchedCall(b *testing.B) {
	r := NewResets(ResetOptions{Budget: 1000, StreamCredit: 1, RefillPerSecond: 100, Cooldown: time.Second,
		ListenerBudget: 10000, ListenerStreamCredit: 0.1, ListenerRefillPerSecond: 1000, FreeCancelAfter: 10 * time.Millisecond})
	acct, _ := r.open(tcp("10.0.0.1"))
	c := r.watch(nil, acct)
	id := uint32(1)
	for ; id < 129; id += 2 {
		c.clientFrame(headers(id, false))
	}
	for b.Loop() {
		c.clientFrame(headers(id, false))
		c.clientFrame(frame{typ: frameData, flags: flagEndStream, stream: id})
		c.serverFrame(headers(id, false))
		c.serverFrame(frame{typ: frameData, stream: id})
		c.serverFrame(headers(id, true))
		id += 2
	}
}
