package redisstore

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// loadScript sends SCRIPT LOAD to every node c knows, so that decisions
// can call the script by SHA from the first one. Redis compiles the script
// once per node (about a millisecond of Redis CPU for floodgate.lua); a
// decision that had to send the text with EVAL instead would pay that, and
// the transfer of the text, inside its deadline.
func loadScript(ctx context.Context, c rueidis.Client, timeout time.Duration) error {
	ctx, cancel := withTimeout(ctx, timeout)
	defer cancel()
	for addr, n := range c.Nodes() {
		sha, err := n.Do(ctx, n.B().ScriptLoad().Script(script).Build()).ToString()
		if err != nil {
			return fmt.Errorf("SCRIPT LOAD on %s: %w", addr, err)
		}
		if sha != scriptSHA {
			return fmt.Errorf("SCRIPT LOAD on %s answered SHA %s, want %s", addr, sha, scriptSHA)
		}
	}
	return nil
}

// scriptLoads runs at most one SCRIPT LOAD round at a time for the callers
// that met NOSCRIPT, however many they are.
type scriptLoads struct {
	mu      sync.Mutex
	running chan struct{} // closed when the round in flight ends; nil if none
	err     error         // the last round's result, valid once running is closed
	rounds  int           // rounds started, for tests
}

// wait starts a load round on c if none is in flight, and waits for the
// round to end or for ctx to end, whichever comes first. The round goes on
// without its callers: it has its own timeout, so a caller whose deadline
// is shorter than the load still leaves the script loaded for the next.
func (l *scriptLoads) wait(ctx context.Context, c rueidis.Client, timeout time.Duration) error {
	l.mu.Lock()
	done := l.running
	if done == nil {
		done = make(chan struct{})
		l.running = done
		l.rounds++
		go func() {
			lctx, cancel := context.WithTimeout(context.Background(), max(timeout, 5*time.Second))
			err := loadScript(lctx, c, max(timeout, 5*time.Second))
			cancel()
			l.mu.Lock()
			l.running, l.err = nil, err
			l.mu.Unlock()
			close(done)
		}()
	}
	l.mu.Unlock()
	select {
	case <-done:
		l.mu.Lock()
		err := l.err
		l.mu.Unlock()
		if err != nil {
			return fmt.Errorf("redisstore: reloading the script after NOSCRIPT: %w", err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("redisstore: waiting for the script to load after NOSCRIPT: %w", ctx.Err())
	}
}

// ScriptLoads returns how many times the store has loaded its script again
// after Redis answered NOSCRIPT (after SCRIPT FLUSH, a restart or a
// failover to a node that never had it).
func (s *Store) ScriptLoads() int {
	s.loads.mu.Lock()
	defer s.loads.mu.Unlock()
	return s.loads.rounds
}
