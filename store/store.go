// Package store defines what a counter store is: the place per-key algorithm
// state lives, local (package memstore) or shared (package redisstore).
package store

import (
	"context"
	"errors"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/lease"
)

// Request is one limit to check for one request: an algorithm with its
// parameters, the key it counts by, and the cost.
type Request struct {
	// Algorithm decides; its Config is part of the state's identity, so two
	// requests with the same Key but different algorithms must not share state.
	Algorithm algorithm.Algorithm
	// Key identifies the counter, already namespaced by rule. Any bytes.
	Key string
	// Cost is the request's weight, at least 1.
	Cost int64
	// Shadow marks a limit that is decided and counted but never rejects:
	// its rejection does not stop the other requests from being counted.
	Shadow bool
	// OnFailure says what a distributed store does for this request when the
	// shared store cannot be reached in time. Local stores ignore it.
	OnFailure FailurePolicy
}

// FailurePolicy is what a rule does when the shared counter store is down.
type FailurePolicy uint8

// Failure policies. The zero value is FailOpen.
const (
	// FailOpen decides from the last known shared view plus local counts and
	// never rejects because the store is down.
	FailOpen FailurePolicy = iota
	// FailClosed rejects while the store is down.
	FailClosed
	// FailLocal enforces the remaining allowance split across the nodes.
	FailLocal
)

// String returns the policy's name as written in rule files.
func (p FailurePolicy) String() string {
	switch p {
	case FailClosed:
		return "closed"
	case FailLocal:
		return "local"
	default:
		return "open"
	}
}

// Store keeps per-key state and applies decisions to it.
type Store interface {
	// Decide decides every request in reqs at time now (Unix nanoseconds;
	// a store that keeps its own clock, such as Redis server time, may use it
	// instead) and writes one decision per request into out, which has
	// len(reqs). If every request that is not Shadow is allowed, all allowed
	// requests are counted; otherwise none is. A store error means no
	// decision was made.
	Decide(ctx context.Context, now int64, reqs []Request, out []algorithm.Decision) error
	// DecideOne is Decide for a single request; it exists so the common
	// one-limit path allocates nothing.
	DecideOne(ctx context.Context, now int64, req Request) (algorithm.Decision, error)
	// Release gives back units taken by allowed requests (concurrency).
	Release(ctx context.Context, now int64, reqs []Request) error
}

// Leaser is a Store that holds concurrency units under leases (see
// algorithm.Leaser), so that only the holder of a lease can give its units
// back. The memory and Redis stores are Leasers.
type Leaser interface {
	// Acquire is Decide, with the units of every allowed request whose
	// algorithm holds leases held under lease id until ReleaseLease or
	// until the lease expires. An invalid id is an error.
	Acquire(ctx context.Context, now int64, id lease.ID, reqs []Request, out []algorithm.Decision) error
	// ReleaseLease gives back what lease id holds in the keys of reqs
	// (requests whose algorithm holds no leases are skipped) and reports
	// whether any of them held it. An id never acquired there, already
	// released or expired changes nothing and reports false.
	ReleaseLease(ctx context.Context, now int64, id lease.ID, reqs []Request) (bool, error)
}

// CountKeeper is a Store that keeps each key's count when the limit that
// decides on it changes to one of the same algorithm.Config.Identity (a
// Limiter's SetLimit, a rule whose limit a reload changed): it converts the
// key's state to the new limit when it next sees the key (the algorithms'
// ConvertFrom). KeepsCounts reports whether it does so for a's keys; for
// a store or an algorithm that does not, a Limiter applies both limits for
// a while instead (see floodgate.Limiter.SetLimit). The memory and Redis
// stores are CountKeepers.
type CountKeeper interface {
	KeepsCounts(a algorithm.Algorithm) bool
}

// Resetter is a Store that can forget a key's state under one limit, so
// that the key's next request starts with the whole allowance. The memory
// and Redis stores are Resetters.
type Resetter interface {
	// Reset forgets the state of key under a. A key the store does not
	// hold is no error.
	Reset(ctx context.Context, a algorithm.Algorithm, key string) error
}

// Errors every store returns (perhaps wrapped) for a malformed call.
var (
	// ErrNoAlgorithm is returned for a request whose Algorithm is nil.
	ErrNoAlgorithm = errors.New("store: request has no algorithm")
	// ErrOutLength is returned by Decide when out and reqs differ in length.
	ErrOutLength = errors.New("store: Decide needs len(out) == len(reqs)")
)

// ErrNoLeases is returned (wrapped) by a Leaser that cannot hold leases in
// its present configuration, such as a distributed node that keeps counts
// locally; the caller then decides with Decide and holds units anonymously.
var ErrNoLeases = errors.New("store: this store holds no leases")

// Holder is a Store that keeps parts of a key's allowance for quota lease
// holders: clients that take units with one call and decide for
// themselves until they run out (lease.Op). The request's algorithm must
// have holds (a Config with Holds). The memory and Redis stores are
// Holders.
type Holder interface {
	// Hold applies op to req.Key under req.Algorithm at now, deciding
	// req.Cost units as Decide would (0: none), in one atomic step, and
	// returns that decision and what the lease holds. An algorithm without
	// holds is an error wrapping ErrNoHolds.
	Hold(ctx context.Context, now int64, req Request, op lease.Op) (algorithm.Decision, lease.Held, error)
}

// HoldAlgorithm is what an algorithm with holds has (algorithm.New with
// Config.Holds): the store-independent Hold a Holder runs on a key's state.
type HoldAlgorithm interface {
	Hold(state []int64, now, cost int64, op lease.Op) (algorithm.Decision, lease.Held)
}

// ErrNoHolds is returned (wrapped) by a Holder asked to hold units for a
// request whose algorithm keeps no holds, and by a store that cannot hold
// them in its present configuration.
var ErrNoHolds = errors.New("store: this limit keeps no holds (quota leases need a window algorithm with holds)")
