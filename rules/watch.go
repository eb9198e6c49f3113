package rules

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
)

// reloadDelay lets a burst of file events (an editor writing, renaming and
// chmod-ing) settle into one reload.
const reloadDelay = 100 * time.Millisecond

// Watch reloads the rule file at path into e whenever the file changes and
// whenever the process receives SIGHUP, until ctx is done. It watches the
// file's directory, so editors that replace the file and Kubernetes
// ConfigMap symlink swaps are seen. A file that fails to parse leaves the
// rules in force unchanged and is logged with the reason; an unchanged file
// is not reloaded. Watch returns nil when ctx ends, or an error if it cannot
// start watching.
func Watch(ctx context.Context, path string, e *Engine, log *slog.Logger) error {
	if e == nil {
		return errors.New("rules: Watch needs an engine")
	}
	if log == nil {
		log = slog.Default()
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("rules: watch %s: %w", path, err)
	}
	defer w.Close()
	dir := filepath.Dir(abs)
	if err := w.Add(dir); err != nil {
		return fmt.Errorf("rules: watch %s: %w", dir, err)
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	var last [32]byte
	if data, err := os.ReadFile(abs); err == nil {
		last = sha256.Sum256(data)
	}
	reload := func(why string, force bool) {
		data, err := os.ReadFile(abs)
		if err != nil {
			log.Error("rules: reload failed; the rules in force stay", "file", path, "trigger", why, "err", err)
			return
		}
		sum := sha256.Sum256(data)
		if sum == last && !force {
			return
		}
		set, err := Parse(path, data)
		if err != nil {
			last = sum // report a bad file once, not on every event
			log.Error("rules: reload failed; the rules in force stay", "file", path, "trigger", why, "err", err)
			return
		}
		last = sum
		e.Swap(set)
		log.Info("rules: reloaded", "file", path, "trigger", why, "domain", set.Domain(), "rules", set.Len())
	}

	base := filepath.Base(abs)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-hup:
			reload("SIGHUP", true)
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			name := filepath.Base(ev.Name)
			if name == base || strings.HasPrefix(name, "..") {
				timer.Reset(reloadDelay)
			}
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			log.Warn("rules: file watcher error", "file", path, "err", err)
		case <-timer.C:
			reload("file changed", false)
		}
	}
}
