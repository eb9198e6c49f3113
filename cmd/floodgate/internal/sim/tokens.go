package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/floodgate-dev/floodgate"
)

// Ways a token budget can be charged when the cost is known only after
// the response.
const (
	// TokensForgiven is what an RLS server that decides every addend does:
	// the request-time check counts 1, and the cost sent after the response
	// is decided like a request, so a cost above what is left is rejected
	// and never counted.
	TokensForgiven = "forgiven"
	// TokensSettled checks without counting before the call and charges
	// the cost after it, even past the budget (Limiter.Check, Charge).
	TokensSettled = "settled"
	// TokensReserved reserves an estimate (by default the largest cost)
	// before the call and charges what the response cost beyond it after
	// (Limiter.Prepay, Prepayment.Settle).
	TokensReserved = "reserved"
)

// TokenModes lists the modes in the order the table prints them.
var TokenModes = []string{TokensForgiven, TokensSettled, TokensReserved}

// TokenShape describes a token-budget simulation: Clients clients share one
// budget of Budget tokens per Window; each sends a request, waits for its
// response (Latency, uniform between MinLatency and MaxLatency) whose cost
// is uniform between MinCost and MaxCost tokens, pauses up to Think, and
// sends the next. A rejected client waits the decision's RetryAfter (at
// least a second) and tries again.
type TokenShape struct {
	Clients                int
	Budget                 int64
	Window                 time.Duration
	MinCost, MaxCost       int64
	MinLatency, MaxLatency time.Duration
	Think                  time.Duration
	Duration               time.Duration
	Seed                   uint64
	// Estimate is what the reserved mode reserves per request; 0 means
	// MaxCost, which keeps the budget exactly.
	Estimate int64
}

// DefaultTokenShape is 20 clients on a 100,000-token per-minute budget with
// responses of 100 to 8,000 tokens taking 1 to 10 s, for 10 minutes.
var DefaultTokenShape = TokenShape{Clients: 20, Budget: 100_000, Window: time.Minute,
	MinCost: 100, MaxCost: 8000, MinLatency: time.Second, MaxLatency: 10 * time.Second,
	Think: time.Second, Duration: 10 * time.Minute, Seed: 1}

// TokenRun is one mode's result.
type TokenRun struct {
	Mode string
	// PerWindow holds the tokens served (responses completed) in each
	// calendar window from virtual zero.
	PerWindow []int64
	// Busiest is the most tokens served in any window-long interval.
	Busiest int64
	// Served is the number of responses completed; Rejected the number of
	// rejected requests.
	Served, Rejected int
	// Total is the tokens served in all.
	Total int64
}

func (s TokenShape) check() error {
	switch {
	case s.Clients < 1 || s.Clients > 10_000:
		return fmt.Errorf("sim tokens: clients %d out of range 1..10000", s.Clients)
	case s.Budget < 1 || s.Window <= 0 || s.Duration <= 0:
		return errors.New("sim tokens: budget, window and duration must be positive")
	case s.MinCost < 1 || s.MaxCost < s.MinCost || s.MaxCost > s.Budget:
		return fmt.Errorf("sim tokens: costs %d..%d must be within 1..budget", s.MinCost, s.MaxCost)
	case s.Estimate < 0 || s.Estimate > s.Budget:
		return fmt.Errorf("sim tokens: estimate %d out of range 0..budget", s.Estimate)
	case s.MinLatency < 0 || s.MaxLatency < s.MinLatency || s.Think < 0:
		return errors.New("sim tokens: latencies and think time must be ordered and not negative")
	}
	return nil
}

// Bound is the most tokens the settled mode may serve in a window-long
// interval: the budget with the algorithm's tolerance, plus one largest
// response per client in flight when the budget ran out.
func (s TokenShape) Bound(tolerance float64) int64 {
	return int64((1+tolerance)*float64(s.Budget)) + int64(s.Clients)*s.MaxCost
}

// Tokens runs the shape once per mode, each with a fresh real limiter
// (bounded-log) under a virtual clock and the same random draws.
func Tokens(ctx context.Context, s TokenShape) ([]TokenRun, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	runs := make([]TokenRun, 0, len(TokenModes))
	for _, m := range TokenModes {
		r, err := tokenRun(ctx, s, m)
		if err != nil {
			return nil, err
		}
		runs = append(runs, r)
	}
	return runs, nil
}

type tokenClient struct {
	next     time.Duration // when the next event happens
	busy     bool          // a response is in flight, done at next
	cost     int64
	reserved *floodgate.Prepayment
}

func tokenRun(ctx context.Context, s TokenShape, mode string) (TokenRun, error) {
	epoch := Epoch(s.Window)
	var now time.Duration
	lim, err := floodgate.New(floodgate.Limit{Limit: s.Budget, Window: s.Window},
		floodgate.WithClock(func() time.Time { return epoch.Add(now) }))
	if err != nil {
		return TokenRun{}, err
	}
	rng := rand.New(rand.NewPCG(s.Seed, 12))
	clients := make([]tokenClient, s.Clients)
	for i := range clients {
		clients[i].next = time.Duration(rng.Int64N(int64(s.Think) + 1))
	}
	run := TokenRun{Mode: mode, PerWindow: make([]int64, (s.Duration+s.Window-1)/s.Window)}
	var served []Event
	for {
		c := &clients[0]
		for i := range clients {
			if clients[i].next < c.next {
				c = &clients[i]
			}
		}
		if c.next >= s.Duration {
			break
		}
		now = c.next
		if c.busy {
			if err := tokenDone(ctx, lim, mode, c); err != nil {
				return run, err
			}
			run.PerWindow[now/s.Window] += c.cost
			run.Served++
			run.Total += c.cost
			served = append(served, Event{At: now, Cost: c.cost})
			c.busy = false
			c.next = now + time.Duration(rng.Int64N(int64(s.Think)+1))
			continue
		}
		est := s.Estimate
		if est == 0 {
			est = s.MaxCost
		}
		d, err := tokenStart(ctx, lim, mode, c, est)
		if err != nil {
			return run, err
		}
		if !d.Allowed {
			run.Rejected++
			c.next = now + max(d.RetryAfter, time.Second)
			continue
		}
		c.busy = true
		c.cost = s.MinCost + rng.Int64N(s.MaxCost-s.MinCost+1)
		c.next = now + s.MinLatency + time.Duration(rng.Int64N(int64(s.MaxLatency-s.MinLatency)+1))
	}
	run.Busiest = Busiest(served, s.Window)
	return run, nil
}

// tokenStart asks before the call, as mode does.
func tokenStart(ctx context.Context, lim *floodgate.Limiter, mode string, c *tokenClient, estimate int64) (floodgate.Decision, error) {
	switch mode {
	case TokensForgiven:
		return lim.AllowN(ctx, "tenant", 1)
	case TokensSettled:
		return lim.Check(ctx, "tenant")
	default:
		r, err := lim.Prepay(ctx, "tenant", estimate)
		if err != nil {
			return floodgate.Decision{}, err
		}
		c.reserved = r
		return r.Decision, nil
	}
}

// tokenDone charges the cost after the response, as mode does.
func tokenDone(ctx context.Context, lim *floodgate.Limiter, mode string, c *tokenClient) error {
	var err error
	switch mode {
	case TokensForgiven:
		_, err = lim.AllowN(ctx, "tenant", c.cost) // rejected means forgiven
	case TokensSettled:
		_, err = lim.Charge(ctx, "tenant", c.cost)
	default:
		_, err = c.reserved.Settle(ctx, c.cost)
	}
	return err
}
