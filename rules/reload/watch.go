// Package reload keeps a rule engine's rules in step with the rule file (or
// directory) they came from: it reloads on every change (and, if asked, on
// signals such as SIGHUP), and keeps the rules in force when the new file
// does not parse. It is apart
// from package rules so that programs that only decide (the middleware, a
// library user) do not link a file watcher.
package reload

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/floodgate-dev/floodgate/rules"
	"github.com/floodgate-dev/floodgate/rules/internal/ruledir"
)

// watchReady, when set (by tests), is called once Watch receives file
// events and signals.
var watchReady func()

// reloadDelay lets a burst of file events (an editor writing, renaming and
// chmod-ing) settle into one reload.
const reloadDelay = 100 * time.Millisecond

// Options configures Watch. The zero value logs to slog.Default, takes no
// signal and calls no hook.
type Options struct {
	// Log receives a line per reload ("rules: reloaded" at info level,
	// "rules: reload failed; the rules in force stay" at error level with
	// the reason); nil means slog.Default().
	Log *slog.Logger
	// Signals reload the rules, even unchanged, when the process receives
	// one of them. None by default; a server usually passes syscall.SIGHUP.
	// Watch stops relaying them to the process when it returns.
	Signals []os.Signal
	// OnReload, if set, is called after every reload attempt (not for the
	// rules Watch puts in force as it starts), from Watch's goroutine.
	OnReload func(Reload)
}

// Reload is one reload attempt, as Options.OnReload receives it.
type Reload struct {
	// Trigger is "file changed" or the signal's name.
	Trigger string
	// Set is the rule set now in force, or nil if Err is set.
	Set *rules.Set
	// Err says why the file did not load; the rules in force stay.
	Err error
}

// Watch puts the rules of the file at path in force in e once it watches
// the file (if they load), then reloads them whenever the file changes and
// whenever the process receives one of o.Signals, until ctx is done. It watches the
// file's directory, so editors that replace the file and Kubernetes
// ConfigMap symlink swaps are seen; if path is a directory (see Load), any
// change to its rule files reloads them all. A file that fails to parse leaves the
// rules in force unchanged and is logged with the reason; an unchanged file
// is not reloaded. Watch returns nil when ctx ends, or an error if it cannot
// start watching.
func Watch(ctx context.Context, path string, e *rules.Engine, o Options) error {
	if e == nil {
		return errors.New("reload: Watch needs an engine")
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	st, err := os.Stat(abs)
	if err != nil {
		return fmt.Errorf("rules: watch %s: %w", path, err)
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("rules: watch %s: %w", path, err)
	}
	defer w.Close()
	r := &reloader{path: path, abs: abs, isDir: st.IsDir(), e: e, log: o.Log, hook: o.OnReload}
	dir := filepath.Dir(abs)
	if r.isDir {
		dir = abs
	}
	if err := w.Add(dir); err != nil {
		return fmt.Errorf("rules: watch %s: %w", dir, err)
	}
	sig := make(chan os.Signal, 1)
	if len(o.Signals) > 0 {
		signal.Notify(sig, o.Signals...)
		defer signal.Stop(sig)
	}
	// Hash what is there now, after the watch is in place (a change from
	// here on is an event) and before saying ready: a change made right
	// after ready must differ from this sum, or it would be skipped. And
	// put it in force: an edit made before the watch, after the caller
	// loaded the rules, would otherwise be taken for the rules in force
	// and never reloaded.
	// A file already broken here is reported now: its sum is the last one
	// seen, so the same content would never be reported later.
	r.last, _ = contentSum(abs, r.isDir)
	if set, err := rules.Load(path); err == nil {
		e.Swap(set)
	} else {
		r.failed("watch started", err)
	}
	if watchReady != nil {
		watchReady()
	}
	return r.run(ctx, w, sig)
}

// reloader is one Watch: the file it watches and the content it last
// loaded (or last failed to load).
type reloader struct {
	path, abs string
	isDir     bool
	e         *rules.Engine
	log       *slog.Logger
	hook      func(Reload)
	last      [32]byte
}

// run reloads on a signal, and once file events have settled for
// reloadDelay, until ctx ends or the watcher closes.
func (r *reloader) run(ctx context.Context, w *fsnotify.Watcher, sig <-chan os.Signal) error {
	base := filepath.Base(r.abs)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case s := <-sig:
			r.reload(signalName(s), true)
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			name := filepath.Base(ev.Name)
			mine := name == base
			if r.isDir {
				mine = strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml")
			}
			if mine || strings.HasPrefix(name, "..") { // ..data: a Kubernetes ConfigMap swap
				timer.Reset(reloadDelay)
			}
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			r.log.Warn("rules: file watcher error", "file", r.path, "err", err)
		case <-timer.C:
			r.reload("file changed", false)
		}
	}
}

// reload loads the rules again if their content changed (or force is set)
// and swaps them in; a file that does not load leaves the rules in force.
func (r *reloader) reload(why string, force bool) {
	sum, err := contentSum(r.abs, r.isDir)
	if err != nil {
		r.failed(why, err)
		return
	}
	if sum == r.last && !force {
		return
	}
	set, err := rules.Load(r.path)
	r.last = sum // a bad file is reported once, not on every event
	if err != nil {
		r.failed(why, err)
		return
	}
	r.e.Swap(set)
	r.log.Info("rules: reloaded", "file", r.path, "trigger", why, "domain", set.Domain(), "rules", set.Len())
	if r.hook != nil {
		r.hook(Reload{Trigger: why, Set: set})
	}
}

// failed reports a reload that left the rules in force.
func (r *reloader) failed(why string, err error) {
	r.log.Error("rules: reload failed; the rules in force stay", "file", r.path, "trigger", why, "err", err)
	if r.hook != nil {
		r.hook(Reload{Trigger: why, Err: err})
	}
}

// signalName is "SIGHUP" for syscall.SIGHUP (whose String is "hangup"),
// and the signal's String for the others.
func signalName(s os.Signal) string {
	if s == syscall.SIGHUP {
		return "SIGHUP"
	}
	return s.String()
}

// contentSum hashes the rule file, or every rule file of the directory with
// its name, so that events that change nothing cause no reload.
func contentSum(path string, isDir bool) ([32]byte, error) {
	if !isDir {
		data, err := os.ReadFile(path)
		if err != nil {
			return [32]byte{}, err
		}
		return sha256.Sum256(data), nil
	}
	files, err := ruledir.Files(path)
	if err != nil {
		return [32]byte{}, err
	}
	h := sha256.New()
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return [32]byte{}, err
		}
		fmt.Fprintf(h, "%d:%s%d:", len(f), f, len(data))
		h.Write(data)
	}
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return sum, nil
}
