package gubernator

import (
	"context"
	"testing"
	"time"

	guber "github.com/gubernator-io/gubernator/v2"
)

// seqStep is one request of a fixed sequence, sent after advancing the
// clock by wait.
type seqStep struct {
	wait    time.Duration
	q       *guber.RateLimitReq
	maxWait int64
}

// TestSequences sends fixed sequences, built on the cases of gubernator
// v2.21.0's own tests that a random sequence seldom meets, to both servers
// and compares every answer: a leak a hair under whole tokens (10,000 ms /
// 14 leaks 6.999999999999999 in 5 s), bookings into debt up to max_wait
// and past it, a plain request on a key in debt after its duration, a
// burst change on a key in debt, a refusal then a raised limit on a token
// bucket.
func TestSequences(t *testing.T) {
	p := startPair(t, onMemory)
	leaky := func(key string, limit, duration, burst, hits int64) *guber.RateLimitReq {
		return &guber.RateLimitReq{Name: "seq", UniqueKey: key, Algorithm: guber.Algorithm_LEAKY_BUCKET,
			Limit: limit, Duration: duration, Burst: burst, Hits: hits}
	}
	token := func(key string, limit, hits int64) *guber.RateLimitReq {
		return &guber.RateLimitReq{Name: "seq", UniqueKey: key, Limit: limit, Duration: 60_000, Hits: hits}
	}
	var steps []seqStep
	add := func(wait time.Duration, q *guber.RateLimitReq, maxWait int64) {
		steps = append(steps, seqStep{wait, q, maxWait})
	}
	add(0, leaky("eps", 14, 10_000, 0, 14), 0)
	add(5*time.Second, leaky("eps", 14, 10_000, 0, 7), 0)
	add(0, leaky("eps", 14, 10_000, 0, 0), 0)
	for i := range 32 {
		add(0, leaky("book", 10, 60_000, 10, 1), 120_000)
		if i == 25 {
			add(0, leaky("book", 10, 60_000, 10, 11), 120_000)
		}
	}
	add(61*time.Second, leaky("book", 10, 60_000, 10, 0), 0)
	add(0, leaky("book", 10, 60_000, 10, 1), 0)
	add(0, leaky("book", 10, 60_000, 20, 0), 0) // a burst change in debt
	add(0, leaky("book", 10, 60_000, 20, 2), 60_000)
	add(2*time.Minute, leaky("book", 10, 60_000, 20, 0), 0)
	add(0, token("tok", 2, 2), 0)
	add(0, token("tok", 2, 1), 0)
	add(0, token("tok", 2, 0), 0)
	add(0, token("tok", 5, 0), 0)
	add(0, token("tok", 5, 1), 0)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i, s := range steps {
		if s.wait > 0 {
			p.advance(t, s.wait)
		}
		if s.maxWait > 0 {
			setMaxWait(s.q, s.maxWait)
		}
		req := &guber.GetRateLimitsReq{Requests: []*guber.RateLimitReq{s.q}}
		g, err := p.guber.GetRateLimits(ctx, req)
		if err != nil {
			t.Fatalf("gubernator: %v", err)
		}
		f, err := p.flood.GetRateLimits(ctx, req)
		if err != nil {
			t.Fatalf("floodgate: %v", err)
		}
		a, b := g.Responses[0], f.Responses[0]
		if a.Status != b.Status || a.Limit != b.Limit || a.Remaining != b.Remaining || a.ResetTime != b.ResetTime || a.Error != b.Error ||
			retryAfter(a) != retryAfter(b) {
			t.Fatalf("step %d: %v max_wait %d\n gubernator %v retry_after %d\n floodgate  %v retry_after %d",
				i, s.q, s.maxWait, a, retryAfter(a), b, retryAfter(b))
		}
	}
	t.Logf("%d answers equal as gubernator.version %s", len(steps), floodVersion())
}
