package topk

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
)

func TestExactWhenKeysFit(t *testing.T) {
	s := New(10, 0)
	for i := range 5 {
		s.Add(fmt.Sprintf("k%d", i), uint64(i+1))
	}
	s.Add("k0", 10) // k0: 11
	got := s.Top(0)
	want := []Entry{{"k0", 11, 0}, {"k4", 5, 0}, {"k3", 4, 0}, {"k2", 3, 0}, {"k1", 2, 0}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Top = %v, want %v", got, want)
	}
	if top2 := s.Top(2); len(top2) != 2 || top2[0].Key != "k0" || top2[1].Key != "k4" {
		t.Fatalf("Top(2) = %v", top2)
	}
	if s.Total() != 1+2+3+4+5+10 {
		t.Fatalf("Total = %d", s.Total())
	}
}

// TestBoundsAgainstExactCounts feeds a skewed stream with far more distinct
// keys than counters and checks the space-saving guarantees against exact
// counts: memory stays bounded, every reported count brackets the truth, and
// every key above N/capacity is held.
func TestBoundsAgainstExactCounts(t *testing.T) {
	const capacity = 20
	s := New(capacity, 0)
	exact := map[string]uint64{}
	r := rand.New(rand.NewPCG(1, 2))
	z := rand.NewZipf(r, 1.3, 1, 5000)
	var n uint64
	for range 200_000 {
		k := fmt.Sprintf("client-%d", z.Uint64())
		s.Add(k, 1)
		exact[k]++
		n++
	}
	if len(exact) < 10*capacity {
		t.Fatalf("stream too narrow for the test: %d distinct keys", len(exact))
	}
	top := s.Top(0)
	if len(top) > capacity {
		t.Fatalf("sketch holds %d keys, capacity %d", len(top), capacity)
	}
	held := map[string]bool{}
	for _, e := range top {
		held[e.Key] = true
		truth := exact[e.Key]
		if e.Count < truth || e.Count-e.Err > truth {
			t.Errorf("%s: count %d err %d, true count %d", e.Key, e.Count, e.Err, truth)
		}
	}
	for k, c := range exact {
		if c > n/capacity && !held[k] {
			t.Errorf("heavy hitter %s (%d of %d) not held", k, c, n)
		}
	}
	// The very top of a Zipf stream must come out in the right order.
	if top[0].Key != "client-0" || top[1].Key != "client-1" {
		t.Errorf("top two = %s, %s; want client-0, client-1", top[0].Key, top[1].Key)
	}
	if s.Total() != n {
		t.Errorf("Total = %d, want %d", s.Total(), n)
	}
}

func TestLongKeysAreCut(t *testing.T) {
	s := New(4, 8)
	s.Add(strings.Repeat("a", 1000), 1)
	s.Add(strings.Repeat("a", 500), 1)
	top := s.Top(0)
	if len(top) != 1 || top[0].Key != "aaaaaaaa" || top[0].Count != 2 {
		t.Fatalf("Top = %v, want one 8-byte key counted twice", top)
	}
}

func TestDecay(t *testing.T) {
	s := New(4, 0)
	s.Add("big", 100)
	s.Add("small", 1)
	s.Decay(1, 2)
	top := s.Top(0)
	if len(top) != 1 || top[0] != (Entry{"big", 50, 0}) {
		t.Fatalf("after Decay(1,2): %v, want only big=50", top)
	}
	// The sketch keeps working after decay: a freed slot is reused and
	// ordering is kept.
	s.Add("new", 60)
	top = s.Top(0)
	if len(top) != 2 || top[0].Key != "new" || top[1].Key != "big" {
		t.Fatalf("after adding: %v", top)
	}
	s.Decay(2, 1) // not a decay: ignored
	if got := s.Top(1)[0].Count; got != 60 {
		t.Fatalf("Decay(2,1) changed counts: %d", got)
	}
	s.Reset()
	if len(s.Top(0)) != 0 || s.Total() != 0 {
		t.Fatalf("Reset left %v", s.Top(0))
	}
}

func TestZeroAndTinyCapacity(t *testing.T) {
	s := New(0, 0)
	if s.Capacity() != 1 {
		t.Fatalf("Capacity = %d, want 1", s.Capacity())
	}
	s.Add("a", 0)
	if len(s.Top(0)) != 0 {
		t.Fatal("adding zero stored a key")
	}
	s.Add("a", 3)
	s.Add("b", 1)
	top := s.Top(0)
	if len(top) != 1 || top[0] != (Entry{"b", 4, 3}) {
		t.Fatalf("Top = %v, want b=4 err 3", top)
	}
}

func TestConcurrentAdds(t *testing.T) {
	s := New(8, 0)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				s.Add(fmt.Sprintf("k%d", (g+i)%4), 1)
				if i%100 == 0 {
					s.Top(3)
				}
			}
		}()
	}
	wg.Wait()
	var sum uint64
	for _, e := range s.Top(0) {
		sum += e.Count
	}
	if sum != 16000 || s.Total() != 16000 {
		t.Fatalf("counted %d (total %d), want 16000", sum, s.Total())
	}
}

func BenchmarkAddHeld(b *testing.B) {
	s := New(64, 0)
	keys := make([]string, 64)
	for i := range keys {
		keys[i] = fmt.Sprintf("rule/client-%d", i)
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		s.Add(keys[i&63], 1)
	}
}

func BenchmarkAddChurn(b *testing.B) {
	s := New(64, 0)
	keys := make([]string, 4096)
	for i := range keys {
		keys[i] = fmt.Sprintf("rule/client-%d", i)
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		s.Add(keys[i&4095], 1)
	}
}
