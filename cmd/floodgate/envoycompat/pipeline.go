package envoycompat

import (
	"context"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-dev/floodgate/internal/inflight"
)

// maxShared bounds the requests of one shared pipeline, so that one
// pipeline does not hold Redis for long.
const maxShared = 128

// sharedPipeline sends the counting commands (INCRBY and EXPIRE) of
// concurrent requests to one Redis together. While no pipeline is in
// flight, a request's commands go out alone at once: light traffic waits
// for nothing. Beyond that, requests queue, and as the pipeline in flight
// returns, everything queued goes out as one pipeline. Each command still
// answers on its own, so every request gets the counts it would get alone;
// what is saved is a write to Redis (and Redis's read) per request, which
// under load costs the server more than anything else it does for a call.
// A queued request waits at most for the one pipeline in flight to return.
// Own mode's redisstore batches its script calls the same way.
//
// On a Redis Cluster every request goes out on its own: a pipeline in
// flight to one slow master must not hold the requests for the others.
type sharedPipeline struct {
	client rueidis.Client
	alone  bool // every request on its own (a cluster)
	// timeout bounds a shared pipeline whose requests have no deadline.
	timeout time.Duration

	q      inflight.Queue[*queuedCommands]
	mu     sync.Mutex
	shared int // shared pipelines sent (a request alone is not one); mu guards it
}

// queuedCommands are one request's commands waiting for the next shared
// pipeline, and then their results.
type queuedCommands struct {
	ctx     context.Context
	cmds    rueidis.Commands
	done    chan struct{}
	results []rueidis.RedisResult
}

// newSharedPipeline shares pipelines to client, a Redis of REDIS_TYPE
// redisType, bounding those without a deadline by timeout.
func newSharedPipeline(client rueidis.Client, redisType string, timeout time.Duration) *sharedPipeline {
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	return &sharedPipeline{client: client, alone: redisType == "cluster", timeout: timeout}
}

// do sends cmds and returns their results, in order: at once if nothing
// is in flight, else in the next shared pipeline. When ctx ends first, each
// result is ctx's error; commands already sent may still count.
func (p *sharedPipeline) do(ctx context.Context, cmds rueidis.Commands) []rueidis.RedisResult {
	if p.alone {
		return p.client.DoMulti(ctx, cmds...)
	}
	q, alone := p.q.Enter(1, func() *queuedCommands {
		return &queuedCommands{ctx: ctx, cmds: cmds, done: make(chan struct{})}
	})
	if alone {
		rs := p.client.DoMulti(ctx, cmds...)
		p.next()
		return rs
	}
	select {
	case <-q.done:
		return q.results
	case <-ctx.Done():
		// Still queued, it is left out and never counted; already sent,
		// it may count, as any request that runs out of time.
		return errorResults(len(cmds), ctx.Err())
	}
}

// errorResults are n results that all fail with err.
func errorResults(n int, err error) []rueidis.RedisResult {
	rs := make([]rueidis.RedisResult, n)
	for i := range rs {
		rs[i] = rueidis.NewErrorResult(err)
	}
	return rs
}

// next hands what is queued to a goroutine that sends it, keeping the
// finished pipeline's place in flight, or gives the place back.
func (p *sharedPipeline) next() {
	if batch := p.q.Next(maxShared); batch != nil {
		go p.run(batch)
	}
}

// run sends shared pipelines until nothing is queued.
func (p *sharedPipeline) run(batch []*queuedCommands) {
	for ; batch != nil; batch = p.q.Next(maxShared) {
		p.send(batch)
	}
}

// send sends the commands of batch in one pipeline, bounded by the latest
// deadline among them, and wakes each request with its results. Requests
// whose caller already gave up are left out.
func (p *sharedPipeline) send(batch []*queuedCommands) {
	live, last := inflight.StillWaiting(batch, func(q *queuedCommands) context.Context { return q.ctx }, p.timeout,
		func(q *queuedCommands, err error) {
			q.results = errorResults(len(q.cmds), err)
			close(q.done)
		})
	if len(live) == 0 {
		return
	}
	total := 0
	for _, q := range live {
		total += len(q.cmds)
	}
	ctx, cancel := context.WithDeadline(context.Background(), last)
	defer cancel()
	all := make(rueidis.Commands, 0, total)
	for _, q := range live {
		all = append(all, q.cmds...)
	}
	p.mu.Lock()
	p.shared++
	p.mu.Unlock()
	rs := p.client.DoMulti(ctx, all...)
	for _, q := range live {
		q.results, rs = rs[:len(q.cmds):len(q.cmds)], rs[len(q.cmds):]
		close(q.done)
	}
}
