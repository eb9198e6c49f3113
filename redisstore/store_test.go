package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/internal/testkit/redistest"
	"github.com/floodgate-dev/floodgate/store"
)

// hostileKeys are request keys that must each get a counter of their own.
func hostileKeys() []string {
	long := strings.Repeat("0123456789", 1024) // 10 KB
	return []string{
		"", "a", "A", "a:b", "a", // "a" twice: the same key
		"{a}", "{", "}", "}{", "{}", "a}:{b",
		"fg:{x}:a", "%61", "%", "#", "#" + strings.Repeat("0", 64),
		"line\nbreak", "line\r\nbreak", "nul\x00byte", "\xff\xfe",
		"ключ", "a b", long, long + "1", long[:len(long)-1] + "1",
	}
}

// TestKeysAreIsolated fills a limit of 1 for each hostile key and checks
// that no other key was touched: each key's first request is allowed and
// its second rejected.
func TestKeysAreIsolated(t *testing.T) {
	prefix := fmt.Sprintf("iso%d", time.Now().UnixNano()) // fresh counters on every run, also with -count > 1
	s := newStore(t, Options{ClientTime: true, Prefix: prefix})
	ctx := context.Background()
	a := mustAlg(t, algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: 1, Window: time.Minute})
	seen := map[string]bool{}
	names := map[string]string{}
	for _, k := range hostileKeys() {
		d, err := s.DecideOne(ctx, t0, store.Request{Algorithm: a, Key: k, Cost: 1})
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed == seen[k] {
			t.Fatalf("key %.40q: allowed=%v, but seen before=%v: another key shares its counter", k, d.Allowed, seen[k])
		}
		seen[k] = true
		name, err := s.Key(a, k)
		if err != nil {
			t.Fatal(err)
		}
		if other, dup := names[name]; dup && other != k {
			t.Fatalf("keys %.40q and %.40q map to the same Redis key %q", k, other, name)
		}
		names[name] = k
		// The request key cannot change the hash tag or break out of it.
		tag := name[:strings.Index(name, "}")+1]
		if rest := name[len(tag):]; strings.ContainsAny(rest, "{}\r\n\x00 ") || len(rest) > maxPlainKey+1 {
			t.Fatalf("key %.40q gives Redis key suffix %.80q", k, rest)
		}
	}
	// Every Redis key the store wrote is one of the names above.
	out, err := shared.Do("KEYS", prefix+":*")
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(out, "\n")
	if len(got) != len(names) {
		t.Fatalf("Redis holds %d keys under the prefix, want %d", len(got), len(names))
	}
	for _, g := range got {
		if _, ok := names[g]; !ok {
			t.Fatalf("unexpected Redis key %q", g)
		}
	}
}

// TestLimitsDoNotShareState checks that two limits on the same request key
// keep separate counters, and that the limit decides the hash tag.
func TestLimitsDoNotShareState(t *testing.T) {
	s := newStore(t, Options{ClientTime: true})
	ctx := context.Background()
	a := mustAlg(t, algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: 1, Window: time.Minute})
	b := mustAlg(t, algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: 1, Window: time.Hour})
	for _, alg := range []algorithm.Algorithm{a, b} {
		d, err := s.DecideOne(ctx, t0, store.Request{Algorithm: alg, Key: "k", Cost: 1})
		if err != nil || !d.Allowed {
			t.Fatalf("%v: first request: %+v, %v", alg.Config(), d, err)
		}
	}
	ka, _ := s.Key(a, "k")
	kb, _ := s.Key(b, "k")
	ka2, _ := s.Key(a, "other")
	if ka == kb {
		t.Fatalf("two limits share the key %q", ka)
	}
	if slot(ka) != slot(ka2) {
		t.Fatalf("keys of one limit fall in slots %d and %d", slot(ka), slot(ka2))
	}
}

// TestTTL checks that a written key expires after its algorithm's idle time
// (plus the slack), and that a rejected first request writes nothing.
func TestTTL(t *testing.T) {
	s := newStore(t, Options{TTLSlack: 500 * time.Millisecond})
	ctx := context.Background()
	a := mustAlg(t, algorithm.Config{Algorithm: algorithm.BoundedLog, Limit: 5, Window: 10 * time.Second})
	if _, err := s.DecideOne(ctx, 0, store.Request{Algorithm: a, Key: "ttl", Cost: 1}); err != nil {
		t.Fatal(err)
	}
	k, _ := s.Key(a, "ttl")
	pttl, err := shared.Do("PTTL", k)
	if err != nil {
		t.Fatal(err)
	}
	ms, _ := strconv.Atoi(pttl)
	if want := 10500; ms <= want-1000 || ms > want {
		t.Fatalf("PTTL = %s ms, want about %d", pttl, want)
	}
	// Cost above the limit: rejected, and no key is created.
	d, err := s.DecideOne(ctx, 0, store.Request{Algorithm: a, Key: "never", Cost: 6})
	if err != nil || d.Allowed || d.Reason != algorithm.ReasonCostOverLimit {
		t.Fatalf("cost 6 of 5: %+v, %v", d, err)
	}
	k2, _ := s.Key(a, "never")
	if n, _ := shared.Do("EXISTS", k2); n != "0" {
		t.Fatalf("a rejected first request created %s", k2)
	}
}

// TestServerTime checks that by default the script reads Redis's clock: the
// caller's time is ignored, and the window's reset matches the real clock.
func TestServerTime(t *testing.T) {
	s := newStore(t, Options{})
	ctx := context.Background()
	a := mustAlg(t, algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: 2, Window: time.Hour})
	// Callers with wildly different clocks share one window.
	for i, now := range []int64{0, time.Now().UnixNano(), 1 << 62} {
		d, err := s.DecideOne(ctx, now, store.Request{Algorithm: a, Key: "clock", Cost: 1})
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed != (i < 2) {
			t.Fatalf("request %d (caller time %d): allowed=%v", i, now, d.Allowed)
		}
		wall := time.Now()
		want := wall.Truncate(time.Hour).Add(time.Hour).Sub(wall)
		if diff := d.ResetAfter - want; diff < -2*time.Second || diff > 2*time.Second {
			t.Fatalf("ResetAfter = %v, real clock says %v", d.ResetAfter, want)
		}
	}
}

// TestScriptReload checks the reload after NOSCRIPT: after SCRIPT FLUSH
// and after a restart of redis-server, decisions go on.
func TestScriptReload(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, Options{Addrs: []string{srv.Addr()}, ClientTime: true})
	ctx := context.Background()
	a := mustAlg(t, algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: 3, Window: time.Minute})
	req := store.Request{Algorithm: a, Key: "k", Cost: 1}
	decide := func(want bool) {
		t.Helper()
		d, err := s.DecideOne(ctx, t0, req)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed != want {
			t.Fatalf("allowed = %v, want %v", d.Allowed, want)
		}
	}
	decide(true)
	if _, err := srv.Do("SCRIPT", "FLUSH"); err != nil {
		t.Fatal(err)
	}
	decide(true)
	if _, err := srv.Do("SCRIPT", "FLUSH"); err != nil {
		t.Fatal(err)
	}
	// Sync and multi-key calls fall back too.
	if err := s.Sync(ctx, t0, []store.SyncBatch{{Algorithm: a, Key: "k", Events: []store.Event{{Time: t0, Cost: 1}}}}); err != nil {
		t.Fatal(err)
	}
	decide(false)

	srv.Restart() // empty, and without the script
	// Each connection fails once when it finds the old server gone; decide
	// on another key until they all have reconnected, so no decision on k
	// is lost to that.
	ok := 0
	warm := store.Request{Algorithm: a, Key: "warm-up", Cost: 1}
	for deadline := time.Now().Add(30 * time.Second); ok < 20 && time.Now().Before(deadline); {
		if _, err := s.DecideOne(ctx, t0, warm); err == nil {
			ok++
		} else {
			ok = 0
			time.Sleep(5 * time.Millisecond)
		}
	}
	if ok < 20 {
		t.Fatal("store did not reconnect within 30 s of the restart")
	}
	decide(true) // the data went with the restart: a new count of 3
	decide(true)
	decide(true)
	decide(false)
	// The script came back by SCRIPT LOAD, never by sending its text with
	// EVAL: once per flush and once after the restart.
	if out, _ := srv.Do("INFO", "commandstats"); !strings.Contains(out, "cmdstat_script|load:") || strings.Contains(out, "cmdstat_eval:") {
		t.Fatalf("want SCRIPT LOAD and no EVAL in commandstats:\n%s", out)
	}
	if n := s.ScriptLoads(); n < 3 {
		t.Fatalf("%d reload rounds after two flushes and a restart, want at least 3", n)
	}
}

// TestDeadline checks that a stalled server costs a caller its deadline and
// an error, not a hang, and that a killed one gives an error.
func TestDeadline(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, Options{Addrs: []string{srv.Addr()}, ClientTime: true, Timeout: 200 * time.Millisecond})
	a := mustAlg(t, algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: 3, Window: time.Minute})
	req := store.Request{Algorithm: a, Key: "k", Cost: 1}
	srv.Pause()
	_, err := s.DecideOne(context.Background(), t0, req)
	srv.Resume()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("decision against a paused server: err = %v, want a deadline error", err)
	}
	srv.Kill()
	if _, err := s.DecideOne(context.Background(), t0, req); err == nil {
		t.Fatal("decision against a killed server returned no error")
	}
}

// TestBadInput checks that malformed requests and options get errors.
func TestBadInput(t *testing.T) {
	needRedis(t)
	ctx := context.Background()
	if _, err := New(ctx, Options{}); err == nil {
		t.Error("New without addresses: no error")
	}
	if _, err := New(ctx, Options{Addrs: []string{shared.Addr()}, Prefix: "a{b}"}); err == nil {
		t.Error("New with braces in the prefix: no error")
	}
	if _, err := New(ctx, Options{Addrs: []string{shared.Addr()}, Cluster: true}); err == nil {
		t.Error("New with Cluster set against a single server: no error")
	}
	s := newStore(t, Options{ClientTime: true})
	if _, err := s.DecideOne(ctx, t0, store.Request{Key: "k", Cost: 1}); !errors.Is(err, store.ErrNoAlgorithm) {
		t.Errorf("nil algorithm: err = %v", err)
	}
	a := mustAlg(t, algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: 3, Window: time.Minute})
	if err := s.Decide(ctx, t0, []store.Request{{Algorithm: a, Key: "k", Cost: 1}}, nil); !errors.Is(err, store.ErrOutLength) {
		t.Errorf("short out: err = %v", err)
	}
	odd := mustAlg(t, algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: 3, Window: time.Second + 1})
	if _, err := s.DecideOne(ctx, t0, store.Request{Algorithm: odd, Key: "k", Cost: 1}); !errors.Is(err, ErrUnsupported) {
		t.Errorf("window of 1s+1ns: err = %v", err)
	}
	sw := mustAlg(t, algorithm.Config{Algorithm: algorithm.SlidingWindow, Limit: 3, Window: time.Second, Slices: 7})
	if _, err := s.DecideOne(ctx, t0, store.Request{Algorithm: sw, Key: "k", Cost: 1}); !errors.Is(err, ErrUnsupported) {
		t.Errorf("1s in 7 slices: err = %v", err)
	}
	// A key that holds something else is an error, not a silent reset.
	k, _ := s.Key(a, "foreign")
	if _, err := shared.Do("SET", k, "12 34"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DecideOne(ctx, t0, store.Request{Algorithm: a, Key: "foreign", Cost: 1}); err == nil || !strings.Contains(err.Error(), "holds 5 bytes") {
		t.Errorf("foreign value: err = %v", err)
	}
	for _, cost := range []int64{0, -1, 4, 1 << 62} {
		t.Run(fmt.Sprint("cost ", cost), func(t *testing.T) {
			d, err := s.DecideOne(ctx, t0, store.Request{Algorithm: a, Key: "cost", Cost: cost})
			if err != nil || d.Allowed || d.Reason == "" {
				t.Errorf("cost %d: %+v, %v", cost, d, err)
			}
		})
	}
}

// TestConnectLater starts a store while Redis is down: calls fail fast with
// ErrNotConnected, and once Redis is up the store connects by itself.
func TestConnectLater(t *testing.T) {
	srv := redistest.Start(t)
	srv.Kill()
	ctx := context.Background()
	if _, err := New(ctx, Options{Addrs: []string{srv.Addr()}}); err == nil {
		t.Fatal("New against a dead server returned no error")
	}
	s := newStore(t, Options{Addrs: []string{srv.Addr()}, ClientTime: true, ConnectLater: true, ReconnectEvery: 20 * time.Millisecond})
	a := mustAlg(t, algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: 3, Window: time.Minute})
	req := store.Request{Algorithm: a, Key: "k", Cost: 1}
	if _, err := s.DecideOne(ctx, t0, req); err == nil {
		t.Fatal("decision with Redis down returned no error")
	}
	if _, err := s.DecideOne(ctx, t0, req); !errors.Is(err, ErrNotConnected) {
		t.Fatalf("second decision with Redis down: err = %v, want ErrNotConnected", err)
	}
	srv.Restart()
	var err error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if _, err = s.DecideOne(ctx, t0, req); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("no decision within 30 s of Redis coming up: %v", err)
	}
	if err := s.Ping(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestSyncBatches checks that a Sync of 1,000 keys is 4 script calls (256
// keys each at most), sent together, and that every key got its events.
func TestSyncBatches(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, Options{Addrs: []string{srv.Addr()}, ClientTime: true})
	ctx := context.Background()
	a := mustAlg(t, algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: 100, Window: time.Minute})
	batches := make([]store.SyncBatch, 1000)
	for i := range batches {
		batches[i] = store.SyncBatch{Algorithm: a, Key: strconv.Itoa(i), Events: []store.Event{{Time: t0, Cost: int64(1 + i%5)}}}
	}
	if err := s.Sync(ctx, t0, batches); err != nil {
		t.Fatal(err)
	}
	for i, b := range batches {
		if b.State[1] != int64(1+i%5) {
			t.Fatalf("key %d: state %v, want a count of %d", i, b.State, 1+i%5)
		}
	}
	out, err := srv.Do("INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "cmdstat_evalsha:calls=4,") {
		t.Fatalf("want 4 EVALSHA calls for 1,000 keys:\n%s", out)
	}
}

// TestSyncManyEvents merges more events than one script call takes, for one
// key and for several, and checks the counts.
func TestSyncManyEvents(t *testing.T) {
	s := newStore(t, Options{ClientTime: true})
	ctx := context.Background()
	a := mustAlg(t, algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: 100, Window: time.Hour})
	var batches []store.SyncBatch
	for k, n := range []int{10000, 3, 4095, 4097, 1} {
		evs := make([]store.Event, n)
		for i := range evs {
			evs[i] = store.Event{Time: t0, Cost: 1}
		}
		batches = append(batches, store.SyncBatch{Algorithm: a, Key: fmt.Sprint("many-", k), Events: evs})
	}
	if err := s.Sync(ctx, t0, batches); err != nil {
		t.Fatal(err)
	}
	for _, b := range batches {
		if b.State[1] != int64(len(b.Events)) {
			t.Fatalf("%s: count %d after merging %d events", b.Key, b.State[1], len(b.Events))
		}
	}
}

// TestKillUnderLoad kills redis-server while 16 goroutines decide, then
// restarts it: calls during the outage return errors (none hangs, none
// panics), and decisions resume after the restart.
func TestKillUnderLoad(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, Options{Addrs: []string{srv.Addr()}, Timeout: 200 * time.Millisecond})
	a := mustAlg(t, algorithm.Config{Algorithm: algorithm.BoundedLog, Limit: 1000, Window: time.Minute})
	var phase atomic.Int32 // 0 before the kill, 1 down, 2 restarted
	var okBefore, errDown, okAfter atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				p := phase.Load()
				_, err := s.DecideOne(context.Background(), 0, store.Request{Algorithm: a, Key: fmt.Sprint(g, "-", i%50), Cost: 1})
				switch {
				case p == 0 && err == nil:
					okBefore.Add(1)
				case p == 1 && err != nil && phase.Load() == 1:
					errDown.Add(1)
				case p == 2 && err == nil:
					okAfter.Add(1)
				}
			}
		}()
	}
	// Each phase lasts until it has what it must show: a busy machine
	// makes it longer, never a failure, unless it lasts 30 s.
	waitFor := func(what string, n *atomic.Int64) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); n.Load() < 100; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				close(stop)
				wg.Wait()
				t.Fatalf("%s: %d in 30 s, want 100", what, n.Load())
			}
		}
	}
	waitFor("decisions before the kill", &okBefore)
	phase.Store(1)
	srv.Kill()
	waitFor("errors while Redis is down", &errDown)
	srv.Restart()
	phase.Store(2)
	waitFor("decisions after the restart", &okAfter)
	close(stop)
	wg.Wait()
	t.Logf("decisions before the kill %d, errors while down %d, decisions after the restart %d",
		okBefore.Load(), errDown.Load(), okAfter.Load())
	if okBefore.Load() == 0 || errDown.Load() == 0 || okAfter.Load() == 0 {
		t.Fatal("want decisions before, errors during and decisions after the outage")
	}
}
