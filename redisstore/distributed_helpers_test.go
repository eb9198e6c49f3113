package redisstore_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/distributed"
	"github.com/floodgate-dev/floodgate/store"
)

// The tests of package distributed over a real Redis are here, in the
// redisstore module, so that distributed (in the root module) needs no
// Redis client to be tested; the distributed_*_test.go files, in package
// redisstore_test, use distributed's public API and the helpers of
// internal/testkit/disttest.

// mustNode returns a node for o, closed when t ends.
func mustNode(t testing.TB, o distributed.Options) *distributed.Node {
	t.Helper()
	n, err := distributed.New(o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { n.Close(context.Background()) })
	return n
}

// keyFlood is a flood of new keys, one hit each, sent by several workers.
type keyFlood struct {
	keys    [][]string // the keys each worker sent
	allowed atomic.Int64
}

// startKeyFlood starts workers that each send calls of perCall new keys
// (prefix + "wW/cC/kI") under rule until stop; wg waits for them.
func startKeyFlood(t *testing.T, n *distributed.Node, rule algorithm.Algorithm, prefix string, workers, perCall int, stop time.Time, wg *sync.WaitGroup) *keyFlood {
	f := &keyFlood{keys: make([][]string, workers)}
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reqs := make([]store.Request, perCall)
			out := make([]algorithm.Decision, perCall)
			for c := 0; time.Now().Before(stop); c++ {
				for i := range reqs {
					k := fmt.Sprintf("%sw%d/c%d/k%d", prefix, w, c, i)
					f.keys[w] = append(f.keys[w], k)
					reqs[i] = store.Request{Algorithm: rule, Key: k, Cost: 1}
				}
				if err := n.Decide(ctx, time.Now().UnixNano(), reqs, out); err != nil {
					t.Error(err)
					return
				}
				for _, o := range out {
					if o.Allowed {
						f.allowed.Add(1)
					}
				}
			}
		}()
	}
	return f
}

// all returns every key the flood sent.
func (f *keyFlood) all() []string {
	var all []string
	for _, ks := range f.keys {
		all = append(all, ks...)
	}
	return all
}

// closeSettled closes n, which pushes every request it accepted and every
// count it owes again to a store found to have lost its data, sending
// failed pushes again for up to within; it fails t if anything is left.
// n's Health then reports its final counts.
func closeSettled(t *testing.T, n *distributed.Node, within time.Duration) {
	t.Helper()
	cctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	if err := n.Close(cctx); err != nil {
		t.Fatalf("%v: %+v", err, n.Health())
	}
}

// lossLog is a node's log handler that counts the warnings that the shared
// store lost its counts (a Redis restart without persistence, found by the
// node's sync count).
type lossLog struct{ n atomic.Int64 }

func (l *lossLog) Enabled(context.Context, slog.Level) bool { return true }

func (l *lossLog) Handle(_ context.Context, r slog.Record) error {
	if r.Level == slog.LevelWarn && strings.Contains(r.Message, "shared store lost its counts") {
		l.n.Add(1)
	}
	return nil
}

func (l *lossLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *lossLog) WithGroup(string) slog.Handler      { return l }
