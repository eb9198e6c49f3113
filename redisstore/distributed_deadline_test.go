package redisstore_test

import (
	"bufio"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/distributed"
	"github.com/floodgate-dev/floodgate/internal/testkit/disttest"
	"github.com/floodgate-dev/floodgate/internal/testkit/redistest"
	"github.com/floodgate-dev/floodgate/store"
)

// stallThreshold is what shows the machine itself stalled (this process or
// redis-server not scheduled, or this process starved of CPU): a round
// trip of the independent PING, or the monitor's wake-up from a 2 ms sleep
// late by as much. On an idle or ordinarily loaded machine a loopback PING
// takes well under a millisecond and a sleep ends within one; 50 ms is 20%
// of the default ceiling. A decision's answer passes through several
// goroutines (the caller's, its call's timer, the client's writer and
// reader) where the monitor's PING passes through one, so a process starved
// enough that one hop takes 50 ms sends decisions to the ceiling: beside
// three CPU-bound loops under -race, calls reached the 250 ms ceiling while
// no PING took 100 ms (83 and 99 ms at most).
const stallThreshold = 50 * time.Millisecond

// defaultMaxDeadline is the ceiling of the adaptive deadline when
// distributed.Options.MaxDeadline is zero, as its doc says.
const defaultMaxDeadline = 250 * time.Millisecond

// pingMonitor sends PING to srv on a connection of its own, one after the
// other 2 ms apart, and keeps the rounds whose PING took minStall or more
// or whose sleep ended that late, with that lateness, so that a test can tell a deadline
// that is too short from a machine that stopped.
type pingMonitor struct {
	mu        sync.Mutex
	stalls    []stall
	worst     time.Duration // the slowest PING
	worstWake time.Duration // the latest wake-up
	stop      chan struct{}
	done      chan struct{}
}

func startPingMonitor(t *testing.T, addr string) *pingMonitor {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("ping monitor: %v", err)
	}
	m := &pingMonitor{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(m.done)
		defer c.Close()
		r := bufio.NewReader(c)
		const nap = 2 * time.Millisecond
		last := time.Now()
		for {
			select {
			case <-m.stop:
				return
			default:
			}
			time.Sleep(nap)
			start := time.Now()
			if _, err := c.Write([]byte("PING\r\n")); err != nil {
				return
			}
			if _, err := r.ReadString('\n'); err != nil {
				return
			}
			end := time.Now()
			late := start.Sub(last) - nap
			m.mu.Lock()
			m.worst = max(m.worst, end.Sub(start))
			m.worstWake = max(m.worstWake, late)
			if worst := max(end.Sub(start), late); worst >= minStall {
				m.stalls = append(m.stalls, stall{last, end, worst})
			}
			m.mu.Unlock()
			last = end
		}
	}()
	return m
}

func (m *pingMonitor) close() { close(m.stop); <-m.done }

// stalledAt reports whether a round of the monitor that showed a stall
// (a PING or a wake-up late by least or more) overlapped [from, to].
func (m *pingMonitor) stalledAt(from, to time.Time, least time.Duration) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.stalls {
		if s.late >= least && s.from.Before(to) && s.to.After(from) {
			return true
		}
	}
	return false
}

// minStall is the least lateness the monitor keeps: a deadline adapts from
// 5 ms, so a stall of a few milliseconds can explain a miss early on.
const minStall = 2 * time.Millisecond

// stall is a round of the monitor: from its last answer to this one, with
// the PING's round trip or the wake-up's lateness, whichever was larger.
type stall struct {
	from, to time.Time
	late     time.Duration
}

// stallFor is the stall that explains a decision missing deadline d: a
// quarter of it (an answer passes through about four goroutines, each of
// which a starved process can hold up as long as the monitor's one), and
// never more than stallThreshold.
func stallFor(d time.Duration) time.Duration { return min(stallThreshold, d/4) }

// deadlineLoad is one load phase of TestRedisCentralizedAdaptiveDeadline.
type deadlineLoad struct {
	decided, storeRejects atomic.Int64
	slowest               atomic.Int64
	mu                    sync.Mutex
	firstFailed           [2]time.Time  // the first decision sent to the failure policy
	failedDeadline        time.Duration // the node's deadline as it failed
}

// run sends fail-closed decisions from 32 goroutines for d.
func (l *deadlineLoad) run(t *testing.T, n *distributed.Node, rule algorithm.Algorithm, d time.Duration) {
	var wg sync.WaitGroup
	stop := time.Now().Add(d)
	for w := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(stop); i++ {
				req := store.Request{Algorithm: rule, Key: fmt.Sprintf("w%d/k%d", w, i%50), Cost: 1, OnFailure: store.FailClosed}
				start := time.Now()
				dec, err := n.DecideOne(ctx, start.UnixNano(), req)
				end := time.Now()
				took := int64(end.Sub(start))
				for s := l.slowest.Load(); took > s && !l.slowest.CompareAndSwap(s, took); s = l.slowest.Load() {
				}
				if err != nil {
					t.Error(err)
					return
				}
				l.decided.Add(1)
				if dec.Reason == algorithm.ReasonStoreUnavailable {
					if l.storeRejects.Add(1) == 1 {
						l.mu.Lock()
						l.firstFailed = [2]time.Time{start, end}
						l.failedDeadline = n.Health().Deadline
						l.mu.Unlock()
					}
				}
				// Clients that wait a little between requests: 32
				// goroutines spinning on two cores would measure the
				// scheduler, not the deadline.
				time.Sleep(500 * time.Microsecond)
			}
		}()
	}
	wg.Wait()
}

// TestRedisCentralizedAdaptiveDeadline runs a centralized node with default
// deadlines on a real redis-server under concurrent load (32 goroutines,
// fail-closed requests): while Redis is healthy no decision goes to the
// failure policy. Then Redis is stopped with SIGSTOP: every decision
// answers within the ceiling (plus a stated slack for this process's own
// scheduling) and the breaker opens.
//
// A loaded shared machine can stop this process or redis-server for longer
// than the ceiling (a 274 ms call was seen once at load average 17 under
// -race), or starve it of CPU so that answers wait unread; no deadline can
// answer that, and the ceiling sending the decision to the failure policy
// is then right. So a monitor watches the machine: a PING on a connection
// of its own every 2 ms. A healthy phase whose first failed decision
// overlapped a PING, or a wake-up of the monitor, late by a quarter of the
// deadline in force or more (stallFor) is run again, on a new node, up to
// five times, and the test fails if any phase has a failed decision
// without such a stall (a machine that
// stalls in all five goes on to the SIGSTOP phase, saying so in the log).
func TestRedisCentralizedAdaptiveDeadline(t *testing.T) {
	srv := redistest.Start(t)
	shared := redisShared(t, srv, false)
	rule := disttest.MustAlg(t, algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: algorithm.MaxLimit, Window: time.Hour})
	var n *distributed.Node
	for attempt := 1; ; attempt++ {
		n = mustNode(t, distributed.Options{Arrangement: distributed.Centralized, Shared: shared, ManualSync: true})
		mon := startPingMonitor(t, srv.Addr())
		var l deadlineLoad
		l.run(t, n, rule, 3*time.Second)
		mon.close()
		h := n.Health()
		t.Logf("healthy Redis, attempt %d: %d decisions, %d sent to the failure policy, %d deadline misses, %d store errors, deadline now %v, slowest %v, slowest PING %v, latest wake-up %v",
			attempt, l.decided.Load(), l.storeRejects.Load(), h.DeadlineMisses, h.StoreErrors, h.Deadline, time.Duration(l.slowest.Load()), mon.worst, mon.worstWake)
		if l.storeRejects.Load() == 0 && h.DeadlineMisses == 0 && h.StoreErrors == 0 && h.BreakerOpenings == 0 {
			break
		}
		if l.storeRejects.Load() == 0 || !mon.stalledAt(l.firstFailed[0], l.firstFailed[1], stallFor(l.failedDeadline)) {
			t.Fatalf("healthy Redis: %d of %d decisions went to the failure policy, with no stall of the machine seen: %+v",
				l.storeRejects.Load(), l.decided.Load(), h)
		}
		if attempt == 5 {
			// Every failed decision was explained by a measured stall: the
			// machine is too busy to show the healthy phase; the SIGSTOP
			// phase below still holds its own invariants.
			t.Logf("healthy Redis: the machine stalled (a PING or a wake-up late by a quarter of the deadline, at most %v) in each of %d attempts; every failed decision overlapped a stall", stallThreshold, attempt)
			break
		}
		t.Logf("attempt %d: the first failed decision (deadline %v) overlapped a PING or wake-up late by %v or more (the machine stalled); again", attempt, l.failedDeadline, stallFor(l.failedDeadline))
		n.Close(ctx)
	}

	srv.Pause()
	defer srv.Resume()
	var l deadlineLoad
	l.run(t, n, rule, 2*time.Second)
	h := n.Health()
	t.Logf("stopped Redis: %d decisions, %d rejected as store unavailable, slowest %v, %+v",
		l.decided.Load(), l.storeRejects.Load(), time.Duration(l.slowest.Load()), h)
	if !h.BreakerOpen {
		t.Fatalf("breaker closed after 2 s of a stopped Redis: %+v", h)
	}
	// The ceiling plus a stated slack for this process's own scheduling on
	// a loaded 2-core machine (32 goroutines waking at the ceiling at once):
	// without the deadline a decision would wait for the store's 1 s timeout.
	const slack = 250 * time.Millisecond
	if s := time.Duration(l.slowest.Load()); s > defaultMaxDeadline+slack {
		t.Fatalf("a decision took %v with a %v ceiling (and %v slack)", s, defaultMaxDeadline, slack)
	}
}
