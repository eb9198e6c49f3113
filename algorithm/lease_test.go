package algorithm

import (
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/lease"
)

func leaser(t *testing.T, c Config) (Algorithm, Leaser) {
	t.Helper()
	a := mustNew(t, c)
	l, ok := a.(Leaser)
	if !ok {
		t.Fatalf("%s is no Leaser", a.Name())
	}
	return a, l
}

// A lease is released once, by its own id: a foreign id, an id already
// released and an invalid one change nothing.
func TestLeaseReleaseNeedsTheLease(t *testing.T) {
	a, l := leaser(t, Config{Algorithm: Concurrency, Limit: 2, Window: time.Minute})
	s := make([]int64, a.Words())
	now := int64(time.Second)
	mine, theirs := lease.New(), lease.New()
	if !l.Acquire(s, now, 1, mine).Allowed || !l.Acquire(s, now, 1, theirs).Allowed {
		t.Fatal("two leases under a limit of 2 were not both allowed")
	}
	if d := a.Decide(s, now, 1); d.Allowed || d.Remaining != 0 {
		t.Fatalf("a third request: %+v", d)
	}
	stranger := lease.New()
	for _, tc := range []struct {
		name string
		id   lease.ID
	}{{"never acquired", stranger}, {"zero", lease.ID{}}, {"out of range", lease.ID{Hi: 1 << lease.Bits, Lo: 1}}} {
		t.Run(tc.name, func(t *testing.T) {
			if l.ReleaseLease(s, now, tc.id) {
				t.Errorf("releasing a lease %s reported true", tc.name)
			}
		})
	}
	a.Release(s, now, 2) // anonymous units only: the leases stay
	if d := a.Peek(s, now, 1); d.Allowed {
		t.Fatalf("after the foreign releases a request is allowed: %+v", d)
	}
	if !l.ReleaseLease(s, now, mine) {
		t.Fatal("releasing my lease reported false")
	}
	if l.ReleaseLease(s, now, mine) {
		t.Fatal("releasing my lease twice reported true")
	}
	if d := a.Peek(s, now, 1); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("after one release exactly one slot is free: %+v", d)
	}
	if d := a.Peek(s, now, 2); d.Allowed {
		t.Fatalf("the double release freed a second slot: %+v", d)
	}
}

// A lease not released expires after the window even while the key is
// busy, which the leak guard of anonymous units does not do.
func TestLeaseExpiresOnABusyKey(t *testing.T) {
	for _, tc := range []struct {
		window, ttl time.Duration
	}{{10 * time.Second, 10 * time.Second}, {0, lease.DefaultTTL}} {
		t.Run("window "+tc.window.String(), func(t *testing.T) {
			a, l := leaser(t, Config{Algorithm: Concurrency, Limit: 2, Window: tc.window})
			s := make([]int64, a.Words())
			now := int64(time.Second)
			crashed := lease.New()
			if !l.Acquire(s, now, 1, crashed).Allowed {
				t.Fatal("first lease refused")
			}
			// Others come and go every second; one slot is left for them.
			for i := 1; int64(i)*int64(time.Second) < int64(tc.ttl); i++ {
				at := now + int64(i)*int64(time.Second)
				id := lease.New()
				if d := l.Acquire(s, at, 1, id); !d.Allowed {
					t.Fatalf("window %v: at %ds the free slot was refused: %+v", tc.window, i, d)
				}
				if d := a.Peek(s, at, 1); d.Allowed {
					t.Fatalf("window %v: at %ds the crashed holder's slot is free too soon: %+v", tc.window, i, d)
				}
				if !l.ReleaseLease(s, at, id) {
					t.Fatal("release of a live lease failed")
				}
			}
			end := now + int64(tc.ttl)
			if d := a.Peek(s, end, 2); !d.Allowed {
				t.Fatalf("window %v: the crashed holder's lease did not expire after %v: %+v", tc.window, tc.ttl, d)
			}
			if l.ReleaseLease(s, end, crashed) {
				t.Fatalf("window %v: an expired lease was released", tc.window)
			}
		})
	}
}

// Leases are bounded per key: past lease.MaxPerKey the request is refused, and
// the state stays within Words.
func TestLeasesBounded(t *testing.T) {
	a, l := leaser(t, Config{Algorithm: Concurrency, Limit: 5000, Window: time.Minute})
	if p, _ := paramsOf(a); p.MaxLeases != lease.MaxPerKey || a.Words() != ccHeader+ccLease*lease.MaxPerKey {
		t.Fatalf("params %+v, words %d", p, a.Words())
	}
	s := make([]int64, a.Words())
	for i := range lease.MaxPerKey {
		if !l.Acquire(s, 1, 1, lease.New()).Allowed {
			t.Fatalf("lease %d refused", i)
		}
	}
	if d := l.Acquire(s, 1, 1, lease.New()); d.Allowed || d.Reason != ReasonOverLimit {
		t.Fatalf("lease %d: %+v", lease.MaxPerKey+1, d)
	}
	if d := a.Decide(s, 1, 1); !d.Allowed {
		t.Fatalf("an anonymous request under the limit: %+v", d)
	}
}
