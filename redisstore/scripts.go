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
// once per node (about a millisecond of Redis CPU for the decision script); a
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

// scriptMissing reports whether some node c knows lacks the script.
func scriptMissing(ctx context.Context, c rueidis.Client, timeout time.Duration) (bool, error) {
	ctx, cancel := withTimeout(ctx, timeout)
	defer cancel()
	for addr, n := range c.Nodes() {
		v, err := n.Do(ctx, n.B().ScriptExists().Sha1(scriptSHA).Build()).AsIntSlice()
		if err != nil {
			return false, fmt.Errorf("redisstore: SCRIPT EXISTS on %s: %w", addr, err)
		}
		if len(v) != 1 || v[0] != 1 {
			return true, nil
		}
	}
	return false, nil
}

// scriptLoads runs at most one SCRIPT LOAD round at a time for the callers
// that met NOSCRIPT, however many they are.
type scriptLoads struct {
	mu      sync.Mutex
	running chan struct{} // closed when the round in flight ends; nil if none
	err     error         // the last round's result, valid once running is closed
	rounds  int           // rounds started, for tests
}

// reloadTimeout bounds one reload round, which outlives its callers.
const reloadTimeout = 5 * time.Second

// prepare readies a client for decisions: the script loaded on every node
// and, outside Cluster, every pipelined connection open.
func (s *Store) prepare(ctx context.Context, c rueidis.Client) error {
	if err := loadScript(ctx, c, setupTimeout(s.timeout)); err != nil {
		return err
	}
	if s.cluster {
		// Without the map decisions share calls per slot only; the next
		// decisions read it again.
		_ = s.loadOwners(ctx, c)
		return nil
	}
	return warmConnections(ctx, c, s.prefix, setupTimeout(s.timeout))
}

// setupTimeout bounds each setup call of a connection (PING, SCRIPT LOAD,
// warming): the store's Timeout, but never less than reloadTimeout. A
// Timeout tuned for decisions (a few hundred milliseconds) must not fail a
// start on a machine that is briefly busy; decisions keep their Timeout.
func setupTimeout(timeout time.Duration) time.Duration {
	return max(timeout, reloadTimeout)
}

// reload loads the script again on every node of c after NOSCRIPT, once
// for all callers, and waits for it as scriptLoads.wait says. gen is
// s.loads.generation() from before the refused call was sent.
func (s *Store) reload(ctx context.Context, c rueidis.Client, gen int) error {
	return s.loads.wait(ctx, gen, func(lctx context.Context) error { return loadScript(lctx, c, reloadTimeout) })
}

// generation returns how many rounds have started. A caller reads it before
// sending a call, so that a NOSCRIPT answer to a call sent before a round
// began does not start another.
func (l *scriptLoads) generation() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rounds
}

// wait starts a round of load if none is in flight and none started since
// generation gen, and waits for the
// round to end or for ctx to end, whichever comes first. The round goes on
// without its callers: it has its own timeout, so a caller whose deadline
// is shorter than the load still leaves the script loaded for the next.
func (l *scriptLoads) wait(ctx context.Context, gen int, load func(context.Context) error) error {
	l.mu.Lock()
	done := l.running
	if done == nil && l.rounds > gen {
		// A round started and ended since the call was sent: retry.
		err := l.err
		l.mu.Unlock()
		return err
	}
	if done == nil {
		done = make(chan struct{})
		l.running = done
		l.rounds++
		go func() {
			lctx, cancel := context.WithTimeout(context.Background(), reloadTimeout)
			err := load(lctx)
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

// warmConnections opens every pipelined connection of a single-server or
// Sentinel client before the first decision. The client spreads keyed
// commands over several connections (up to four) at random and dials each
// on first use; a decision that met a fresh one would pay a TCP handshake,
// HELLO, AUTH, SELECT and perhaps a TLS handshake inside its deadline. 32
// concurrent EXISTS calls leave a connection unopened with a probability
// under 1 in 1,000 (four connections).
func warmConnections(ctx context.Context, c rueidis.Client, prefix string, timeout time.Duration) error {
	ctx, cancel := withTimeout(ctx, timeout)
	defer cancel()
	// After a restart of Redis each old connection fails once and is then
	// dialed afresh on its next use: a second pass opens those.
	var err error
	for pass := 0; pass < 3; pass++ {
		if err = warmOnce(ctx, c, prefix); err == nil {
			return nil
		}
	}
	return err
}

// warmOnce sends 32 concurrent EXISTS calls and returns the first error.
func warmOnce(ctx context.Context, c rueidis.Client, prefix string) error {
	const calls = 32
	errs := make(chan error, calls)
	for i := 0; i < calls; i++ {
		go func() {
			key := prefix + ":warm:" + itoa(int64(i))
			errs <- c.Do(ctx, c.B().Exists().Key(key).Build()).Error()
		}()
	}
	var first error
	for i := 0; i < calls; i++ {
		if err := <-errs; err != nil && first == nil {
			first = fmt.Errorf("opening connections: %w", err)
		}
	}
	return first
}
