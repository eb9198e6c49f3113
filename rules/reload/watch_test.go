package reload

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/internal/testkit/syncbuf"
	"github.com/floodgate-dev/floodgate/memstore"
	"github.com/floodgate-dev/floodgate/rules"
)

// fixedNow is the engines' clock: reloads must not depend on time passing.
func fixedNow() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) }

func mustParse(t testing.TB, text string) *rules.Set {
	t.Helper()
	s, err := rules.Parse("test.yaml", []byte(text))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return s
}

// one is a request of one descriptor with entries written key=value.
func one(kv ...string) rules.Request {
	var d rules.Descriptor
	for _, s := range kv {
		k, v, _ := strings.Cut(s, "=")
		d = append(d, rules.Entry{Key: k, Value: v})
	}
	return rules.Request{Descriptors: []rules.Descriptor{d}}
}

// allowedCount checks req n times and returns how many were allowed.
func allowedCount(t *testing.T, e *rules.Engine, req rules.Request, n int) int {
	t.Helper()
	got := 0
	for i := 0; i < n; i++ {
		r, err := e.Check(context.Background(), req)
		if err != nil {
			t.Fatalf("Check: %v", err)
		}
		if r.Allowed {
			got++
		}
	}
	return got
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	// Write beside and rename, as editors and config managers do.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func limitFile(limit int, extra string) string {
	return fmt.Sprintf(`
domain: d
rules:
  - name: per-member
    count_by: [member]
    limit: %d
    window: 1h
    algorithm: fixed-window
  - name: global
    count_by: global
    limit: 1000000
    window: 1h
    algorithm: fixed-window
%s`, limit, extra)
}

func startWatch(t *testing.T, path string, e *rules.Engine) (*syncbuf.Buffer, func()) {
	t.Helper()
	return startWatchWith(t, path, e, Options{})
}

// startWatchWith starts Watch with o, logging to the returned buffer, and
// returns once it watches.
func startWatchWith(t *testing.T, path string, e *rules.Engine, o Options) (*syncbuf.Buffer, func()) {
	t.Helper()
	logs := &syncbuf.Buffer{}
	o.Log = slog.New(slog.NewTextHandler(logs, nil))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	ready := make(chan struct{})
	watchReady = func() { close(ready) }
	go func() { done <- Watch(ctx, path, e, o) }()
	// Wait until the watcher sees events and signals before the test acts.
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("Watch: %v", err)
	}
	return logs, func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Watch: %v", err)
		}
		watchReady = nil
	}
}

func TestWatchReloadsAndKeepsOldRulesOnError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, path, limitFile(3, ""))
	set, err := rules.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	e := rules.NewEngine(set, memstore.New(memstore.Options{}), rules.WithClock(fixedNow))
	logs, stop := startWatch(t, path, e)
	defer stop()

	// Use two of u1's three.
	allowedCount(t, e, one("member=u1"), 2)

	// Add a rule: per-member is unchanged, so its counter survives.
	writeFile(t, path, limitFile(3, "  - name: extra\n    count_by: [client]\n    limit: 5\n    window: 1m\n"))
	waitFor(t, "reload", func() bool { return e.Set().Len() == 3 })
	if got := allowedCount(t, e, one("member=u1"), 5); got != 1 {
		t.Fatalf("after a reload that kept per-member: %d allowed, want 1 (counter survived)", got)
	}

	// A broken file keeps the rules in force and says why.
	before := e.Set()
	writeFile(t, path, limitFile(3, "  - name: broken\n    limit: many\n"))
	waitFor(t, "error log", func() bool { return strings.Contains(logs.String(), "reload failed") })
	if e.Set() != before {
		t.Fatal("a bad file replaced the rules")
	}
	if !strings.Contains(logs.String(), "rules.yaml:") || !strings.Contains(logs.String(), "limit must be a whole number") {
		t.Fatalf("log does not say what is wrong:\n%s", logs.String())
	}
	// Operators search logs for these messages; keep them stable.
	for _, msg := range []string{`msg="rules: reloaded"`, `msg="rules: reload failed; the rules in force stay"`} {
		if !strings.Contains(logs.String(), msg) {
			t.Fatalf("log lacks %s:\n%s", msg, logs.String())
		}
	}

	// Changing the limit keeps the rule's counts: u1 has used its 3, and
	// raised to 10 it gets the 7 the new limit allows beyond them.
	writeFile(t, path, limitFile(10, ""))
	waitFor(t, "reload", func() bool { s := e.Set(); return s != before && s.Len() == 2 })
	if got := allowedCount(t, e, one("member=u1"), 20); got != 7 {
		t.Fatalf("after raising the limit from 3 to 10: %d allowed, want 7", got)
	}
	// Lowered to 5 with 10 counted, it rejects at once.
	writeFile(t, path, limitFile(5, ""))
	waitFor(t, "reload", func() bool { return e.Set().Rules()[0].Limit == 5 })
	if got := allowedCount(t, e, one("member=u1"), 5); got != 0 {
		t.Fatalf("after lowering the limit to 5 with 10 counted: %d allowed, want 0", got)
	}
}

func TestWatchSIGHUP(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, path, limitFile(3, ""))
	set, _ := rules.Load(path)
	e := rules.NewEngine(set, memstore.New(memstore.Options{}))
	logs, stop := startWatchWith(t, path, e, Options{Signals: []os.Signal{syscall.SIGHUP}})
	defer stop()
	before := e.Set()
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "SIGHUP reload", func() bool { return e.Set() != before })
	if !strings.Contains(logs.String(), "trigger=SIGHUP") {
		t.Fatalf("log: %s", logs.String())
	}
}

// An edit made after the caller loaded the rules and before the watch was
// in place is in force once Watch is ready: it is no event, and the same
// content written again would change nothing.
func TestWatchStartsFromTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, path, limitFile(3, ""))
	set, _ := rules.Load(path)
	e := rules.NewEngine(set, memstore.New(memstore.Options{}))
	writeFile(t, path, limitFile(7, ""))
	_, stop := startWatch(t, path, e)
	defer stop()
	if got := allowedCount(t, e, one("member=u1"), 10); got != 7 {
		t.Fatalf("%d allowed, want 7: the file's limit is not in force", got)
	}
}

func TestWatchMissingDirectory(t *testing.T) {
	e := rules.NewEngine(nil, memstore.New(memstore.Options{}))
	err := Watch(context.Background(), filepath.Join(t.TempDir(), "no", "such", "rules.yaml"), e, Options{})
	if err == nil {
		t.Fatal("Watch of a missing directory did not fail")
	}
}

// No call fails while the rules are swapped under concurrent load, and the
// counter of a rule that stays the same is exact across every swap.
func TestReloadUnderLoad(t *testing.T) {
	const limit = 5000
	a := mustParse(t, limitFile(limit, ""))
	b := mustParse(t, limitFile(limit, "  - name: extra\n    count_by: [client]\n    limit: 1000000\n    window: 1h\n"))
	e := rules.NewEngine(a, memstore.New(memstore.Options{}), rules.WithClock(fixedNow))

	var allowed, calls atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := one("member=hot", "client=c")
			for {
				select {
				case <-stop:
					return
				default:
				}
				r, err := e.Check(context.Background(), req)
				if err != nil {
					t.Errorf("Check during reload: %v", err)
					return
				}
				calls.Add(1)
				if r.Allowed {
					allowed.Add(1)
				}
			}
		}()
	}
	for i := 0; i < 200; i++ {
		if i%2 == 0 {
			e.Swap(b)
		} else {
			e.Swap(a)
		}
		time.Sleep(time.Millisecond)
	}
	for calls.Load() < 2*limit {
		time.Sleep(time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if got := allowed.Load(); got != limit {
		t.Fatalf("per-member allowed %d of %d calls across 200 reloads, want exactly %d", got, calls.Load(), limit)
	}
}

// The production path under load: the file is rewritten again and again
// (valid and broken versions) while checks run; no check fails, and the
// unchanged rule admits exactly its limit across every reload.
func TestWatchUnderLoad(t *testing.T) {
	const limit = 3000
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, path, limitFile(limit, ""))
	set, err := rules.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	e := rules.NewEngine(set, memstore.New(memstore.Options{}), rules.WithClock(fixedNow))
	logs, stopWatch := startWatch(t, path, e)
	defer stopWatch()

	var allowed, calls atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := one("member=hot", "client=c")
			for {
				select {
				case <-stop:
					return
				default:
				}
				r, err := e.Check(context.Background(), req)
				if err != nil {
					t.Errorf("Check during reload: %v", err)
					return
				}
				calls.Add(1)
				if r.Allowed {
					allowed.Add(1)
				}
				time.Sleep(50 * time.Microsecond)
			}
		}()
	}
	versions := []string{
		limitFile(limit, "  - name: extra\n    count_by: [client]\n    limit: 1000000\n    window: 1h\n"),
		limitFile(limit, "  - name: broken\n    limit: lots\n"),
		limitFile(limit, ""),
	}
	reloads := 0
	for i := 0; i < 9; i++ {
		before := e.Set()
		writeFile(t, path, versions[i%3])
		if i%3 == 1 {
			waitFor(t, "error log", func() bool { return strings.Count(logs.String(), "reload failed") >= i/3+1 })
			if e.Set() != before {
				t.Fatal("broken file swapped in")
			}
			continue
		}
		waitFor(t, "reload", func() bool { return e.Set() != before })
		reloads++
	}
	for calls.Load() < 2*limit {
		time.Sleep(time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if got := allowed.Load(); got != limit {
		t.Fatalf("per-member admitted %d across %d reloads, want exactly %d", got, reloads, limit)
	}
}

func TestWatchDirectory(t *testing.T) {
	dir := t.TempDir()
	copyFixture(t, "../testdata/envoy/edge.yaml", filepath.Join(dir, "edge.yaml"))
	set, err := rules.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	e := rules.NewEngine(set, memstore.New(memstore.Options{}))
	logs, stop := startWatch(t, dir, e)
	defer stop()
	writeFile(t, filepath.Join(dir, "mail.yaml"), limitFile(3, ""))
	waitFor(t, "reload of the directory", func() bool { return len(e.Set().Domains()) == 2 })
	writeFile(t, filepath.Join(dir, "mail.yaml"), "domain: edge\nrules: []\n")
	waitFor(t, "error log", func() bool { return strings.Contains(logs.String(), "is also defined in") })
	if len(e.Set().Domains()) != 2 {
		t.Fatal("a bad directory replaced the rules")
	}
}

func copyFixture(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestWatchOnReload: the hook hears every reload attempt, the good file
// with the set now in force and the bad one with the reason, so a program
// can count reloads without reading the log.
func TestWatchOnReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, path, limitFile(3, ""))
	set, _ := rules.Load(path)
	e := rules.NewEngine(set, memstore.New(memstore.Options{}))
	heard := make(chan Reload, 8)
	_, stop := startWatchWith(t, path, e, Options{OnReload: func(r Reload) { heard <- r }})
	defer stop()

	writeFile(t, path, limitFile(4, ""))
	r := nextReload(t, heard)
	if r.Err != nil || r.Set == nil || r.Set != e.Set() || r.Trigger != "file changed" {
		t.Fatalf("good file: hook got %+v, want the set in force and trigger \"file changed\"", r)
	}
	writeFile(t, path, limitFile(3, "  - name: broken\n    limit: many\n"))
	r = nextReload(t, heard)
	if r.Err == nil || r.Set != nil || !strings.Contains(r.Err.Error(), "limit must be a whole number") {
		t.Fatalf("bad file: hook got %+v, want the parse error", r)
	}
}

// TestWatchSignalsAreOptIn: without Options.Signals, Watch takes no
// signal. The test catches SIGHUP itself (so the process survives it),
// sends it, then edits the file: the first reload is the edit's.
func TestWatchSignalsAreOptIn(t *testing.T) {
	caught := make(chan os.Signal, 1)
	signal.Notify(caught, syscall.SIGHUP)
	defer signal.Stop(caught)
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, path, limitFile(3, ""))
	set, _ := rules.Load(path)
	e := rules.NewEngine(set, memstore.New(memstore.Options{}))
	heard := make(chan Reload, 8)
	_, stop := startWatchWith(t, path, e, Options{OnReload: func(r Reload) { heard <- r }})
	defer stop()
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	<-caught
	writeFile(t, path, limitFile(4, ""))
	if r := nextReload(t, heard); r.Trigger != "file changed" {
		t.Fatalf("first reload triggered by %q, want the file edit: Watch took a signal it was not given", r.Trigger)
	}
}

// nextReload returns the next reload the hook heard, failing the test if
// none comes within 20 s.
func nextReload(t *testing.T, heard <-chan Reload) Reload {
	t.Helper()
	select {
	case r := <-heard:
		return r
	case <-time.After(20 * time.Second):
		t.Fatal("timed out waiting for a reload")
		return Reload{}
	}
}

// TestWatchReportsAFileBrokenAtStart: a file that is already broken when
// the watch starts is reported then, and the rules in force stay. Its sum
// is the last one seen, so writing the same broken content again is no
// change: without the report at start it would never be reported.
func TestWatchReportsAFileBrokenAtStart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, path, limitFile(3, ""))
	set, _ := rules.Load(path)
	e := rules.NewEngine(set, memstore.New(memstore.Options{}))
	broken := limitFile(3, "  - name: broken\n    limit: many\n")
	writeFile(t, path, broken)
	heard := make(chan Reload, 8)
	_, stop := startWatchWith(t, path, e, Options{OnReload: func(r Reload) { heard <- r }})
	defer stop()
	r := nextReload(t, heard)
	if r.Err == nil || r.Trigger != "watch started" || !strings.Contains(r.Err.Error(), "limit must be a whole number") {
		t.Fatalf("hook got %+v, want the parse error at the watch's start", r)
	}
	if e.Set() != set {
		t.Fatal("a broken file replaced the rules in force")
	}
}
