package grpcguard

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/credentials/insecure"
)

// frame encodes one HTTP/2 frame with a payload of n zero bytes.
func encFrame(typ byte, stream uint32, n int) []byte {
	f := make([]byte, 9+n)
	f[0], f[1], f[2] = byte(n>>16), byte(n>>8), byte(n)
	f[3] = typ
	binary.BigEndian.PutUint32(f[5:], stream)
	return f
}

type seen struct {
	typ    byte
	stream uint32
}

func see(f frame) seen { return seen{f.typ, f.stream} }

// scanFrames feeds b to a scanner in pieces of the given sizes (the rest
// in one piece) and returns the frames it reported, whole.
func scanFrames(b []byte, pieces []int) []frame {
	var s frameScanner
	var got []frame
	f := func(fr frame) bool { got = append(got, fr); return true }
	for _, n := range pieces {
		n = min(n, len(b))
		s.scan(b[:n], f)
		b = b[n:]
	}
	s.scan(b, f)
	return got
}

// scanAll feeds b to a scanner in pieces of the given sizes (the rest in
// one piece) and returns the frames it saw.
func scanAll(b []byte, preface int, pieces []int) []seen {
	s := frameScanner{preface: preface}
	var got []seen
	f := func(fr frame) bool { got = append(got, see(fr)); return true }
	for _, n := range pieces {
		n = min(n, len(b))
		s.scan(b[:n], f)
		b = b[n:]
	}
	s.scan(b, f)
	return got
}

func TestFrameScannerFollowsFramesAcrossReads(t *testing.T) {
	var stream []byte
	stream = append(stream, clientPreface...)
	stream = append(stream, encFrame(0x4, 0, 6)...)                // SETTINGS
	stream = append(stream, encFrame(frameHeaders, 1, 40)...)      // HEADERS
	stream = append(stream, encFrame(0x0, 1, 17)...)               // DATA
	stream = append(stream, encFrame(frameRSTStream, 3, 4)...)     // RST_STREAM
	stream = append(stream, encFrame(frameHeaders, 1<<31|5, 0)...) // reserved bit set
	want := []seen{{0x4, 0}, {frameHeaders, 1}, {0x0, 1}, {frameRSTStream, 3}, {frameHeaders, 5}}
	for _, tc := range []struct {
		name   string
		pieces []int
	}{
		{"whole", nil},
		{"byte by byte", slices.Repeat([]int{1}, len(stream))},
		{"split in the preface", []int{5, 30}},
		{"split in a header", []int{24 + 9 + 6 + 4, 3}},
		{"split in a payload", []int{24 + 9 + 6 + 9 + 20}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pieces := tc.pieces
			got := scanAll(stream, len(clientPreface), pieces)
			if len(got) != len(want) {
				t.Fatalf("frames %v, want %v", got, want)
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("frames %v, want %v", got, want)
				}
			}
		})
	}
}

// FuzzFrameScanner: however a byte stream is cut into reads, the scanner
// sees the same frames as when it reads it whole, and never panics.
func FuzzFrameScanner(f *testing.F) {
	f.Add(append([]byte(clientPreface), encFrame(frameHeaders, 1, 3)...), uint8(7))
	f.Add(append(encFrame(frameRSTStream, 1, 4), encFrame(0x0, 1, 300)...), uint8(1))
	f.Add([]byte{0xff, 0xff, 0xff, 1, 0, 0, 0, 0, 1}, uint8(2))
	f.Add(append(encFrame(frameHeaders, 3, 0), rst(3, errCodeCancel)...), uint8(0))
	f.Fuzz(func(t *testing.T, b []byte, step uint8) {
		whole := scanFrames(b, nil)
		var pieces []int
		for n := 0; n < len(b); n += int(step) + 1 {
			pieces = append(pieces, int(step)+1)
		}
		split := scanFrames(b, pieces)
		if len(whole) != len(split) {
			t.Fatalf("whole %v, split %v", whole, split)
		}
		for i := range whole {
			if whole[i] != split[i] {
				t.Fatalf("whole %v, split %v", whole, split)
			}
		}
	})
}

// fakeClock is a clock tests move by hand.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time      { return c.t }
func (c *fakeClock) add(d time.Duration) { c.t = c.t.Add(d) }
func newFakeClock() *fakeClock           { return &fakeClock{t: time.Unix(1_000_000, 0)} }
func tcp(ip string) net.Addr             { return &net.TCPAddr{IP: net.ParseIP(ip), Port: 4000} }
func testResets(c *fakeClock, cut *[]string) *Resets {
	return NewResets(ResetOptions{Budget: 10, StreamCredit: 1, RefillPerSecond: 2, Cooldown: 5 * time.Second,
		Now: c.now, OnCut: func(r string) { *cut = append(*cut, r) }})
}

func TestResetBudget(t *testing.T) {
	t.Run("a client resetting half its streams or fewer is never cut", func(t *testing.T) {
		var cuts []string
		r := testResets(newFakeClock(), &cuts)
		a, err := r.open(tcp("10.0.0.1"))
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 10_000; i++ {
			if !r.opened(a) {
				t.Fatalf("cut at stream %d", i)
			}
			if i%2 == 1 {
				r.completed(a)
			} else if r.reset(a) != "" {
				t.Fatalf("cut at stream %d", i)
			}
		}
	})
	t.Run("pure resets are cut after the budget, and the address cools down", func(t *testing.T) {
		var cuts []string
		c := newFakeClock()
		r := testResets(c, &cuts)
		a, _ := r.open(tcp("10.0.0.1"))
		other, _ := r.open(tcp("10.0.0.1"))
		n := 0
		for ; r.opened(a) && (r.reset(a) == ""); n++ {
		}
		// Streams reset earn nothing: the 11th reset is refused.
		if n != 10 {
			t.Fatalf("%d streams opened and reset before the cut, want 10", n)
		}
		if r.opened(other) {
			t.Fatal("another connection of the address opened a stream during the cooldown")
		}
		if _, err := r.open(tcp("10.0.0.1")); !errors.Is(err, errCoolingDown) {
			t.Fatalf("new connection during the cooldown: %v, want refused", err)
		}
		if b, err := r.open(tcp("10.0.0.2")); err != nil || !(r.reset(b) == "") {
			t.Fatalf("another address is refused: %v", err)
		}
		c.add(5 * time.Second)
		a2, err := r.open(tcp("10.0.0.1"))
		if err != nil {
			t.Fatalf("after the cooldown: %v", err)
		}
		// 5 s at 2 per second refilled 10 (the budget) on top of the
		// overdraft of 1.
		n = 0
		for ; r.reset(a2) == ""; n++ {
		}
		if n != 9 {
			t.Fatalf("%d resets after the cooldown, want 9", n)
		}
	})
	t.Run("time refills the budget", func(t *testing.T) {
		var cuts []string
		c := newFakeClock()
		r := testResets(c, &cuts)
		a, _ := r.open(tcp("10.0.0.1"))
		for i := 0; i < 10; i++ {
			if !(r.reset(a) == "") {
				t.Fatalf("reset %d refused", i)
			}
		}
		c.add(time.Second) // earns 2
		for i := range 2 {
			if !(r.reset(a) == "") {
				t.Fatalf("refilled reset %d refused", i)
			}
		}
		if r.reset(a) == "" {
			t.Fatal("reset past the refill allowed")
		}
	})
	t.Run("forgotten once idle and full", func(t *testing.T) {
		var cuts []string
		c := newFakeClock()
		r := testResets(c, &cuts)
		a, _ := r.open(tcp("10.0.0.1"))
		for i := 0; i < 8; i++ {
			r.reset(a)
		}
		r.close(a)
		c.add(2 * time.Second)  // 2 + 4 of 10
		r.open(tcp("10.0.0.9")) // sweeps
		if n := r.Clients(); n != 2 {
			t.Fatalf("%d addresses accounted, want 2 (10.0.0.1 still short)", n)
		}
		c.add(2 * time.Second) // 2 + 8: full
		r.open(tcp("10.0.0.9"))
		if n := r.Clients(); n != 1 {
			t.Fatalf("%d addresses accounted, want 1", n)
		}
	})
}

// TestWatchedConnCutsOff: a connection whose client resets past its
// budget is closed, with GOAWAY ENHANCE_YOUR_CALM first if the server is
// between two frames; the server's own frames are never broken into.
func TestWatchedConnCutsOff(t *testing.T) {
	settings := encFrame(0x4, 0, 12)
	for _, tc := range []struct {
		name    string
		written []byte // by the server before it reads
		goAway  bool
	}{
		{"between frames", settings, true},
		{"inside a frame", settings[:5], false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var cuts []string
			r := testResets(newFakeClock(), &cuts)
			client, server := net.Pipe()
			defer client.Close()
			sc, _, err := r.Credentials(insecure.NewCredentials()).ServerHandshake(server)
			if err != nil {
				t.Fatal(err)
			}
			go func() { // the client: preface, then streams opened and reset
				b := []byte(clientPreface)
				for id := uint32(1); id < 200; id += 2 {
					b = append(b, encFrame(frameHeaders, id, 10)...)
					b = append(b, encFrame(frameRSTStream, id, 4)...)
				}
				client.Write(b)
			}()
			go func() { // the server: writes (in two pieces), then reads
				sc.Write(tc.written[:3])
				sc.Write(tc.written[3:])
				io.Copy(io.Discard, sc)
			}()
			got, _ := io.ReadAll(client)
			if !bytes.HasPrefix(got, tc.written) {
				t.Fatalf("server's bytes not intact: % x", got)
			}
			g := got[len(tc.written):]
			if !tc.goAway {
				if len(g) != 0 {
					t.Fatalf("bytes written inside the server's frame: % x", g)
				}
			} else {
				if len(g) < 17 || g[3] != frameGoAway {
					t.Fatalf("no GOAWAY after the server's frame: % x", g)
				}
				if code := binary.BigEndian.Uint32(g[13:]); code != errCodeEnhanceYourCalm {
					t.Fatalf("GOAWAY code %#x, want ENHANCE_YOUR_CALM", code)
				}
				// As in TestResetBudget, the 11th stream's reset is refused.
				if last := binary.BigEndian.Uint32(g[9:]); last != 21 {
					t.Fatalf("GOAWAY last stream %d, want 21", last)
				}
			}
			if len(cuts) != 1 || cuts[0] != CutResets {
				t.Fatalf("cuts %v, want [resets]", cuts)
			}
			if _, err := sc.Write(settings); err == nil {
				t.Fatal("the server could still write after the cut")
			}
		})
	}
}

// BenchmarkWatchedConnRead is the frame scanning of one read of 64 unary
// calls (HEADERS and DATA frames), and the accounting of their streams
// opened.
func BenchmarkWatchedConnRead(b *testing.B) {
	r := NewResets(ResetOptions{Budget: 1000, StreamCredit: 1, RefillPerSecond: 100, Cooldown: time.Second})
	acct, _ := r.open(tcp("10.0.0.1"))
	c := &watchedConn{r: r, acct: acct}
	var buf []byte
	for i := 0; i < 64; i++ {
		buf = append(buf, encFrame(frameHeaders, 0, 60)...)
		buf = append(buf, encFrame(0x0, 0, 80)...)
	}
	b.SetBytes(int64(len(buf)))
	id := uint32(1)
	for b.Loop() {
		for i := 0; i < 64; i++ { // new stream ids, as a client's
			binary.BigEndian.PutUint32(buf[i*(9+60+9+80)+5:], id)
			id += 2
		}
		c.in.scan(buf, c.clientFrame)
		clear(c.open) // the server answered them (BenchmarkWatchedCall counts that too)
	}
}
