// Package ctxsleep waits for a duration or a context, for the transports
// that hold an outgoing call until its limiter allows it.
package ctxsleep

import (
	"context"
	"time"
)

// Sleep waits for d or until ctx is done, and returns ctx's error then.
// A d of zero or less returns nil at once.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
