package algorithm

import (
	"errors"
	"fmt"
	"time"
)

// Name names an algorithm. Its values are the constants below, as written
// in rule files and on the command line; Valid tells a known name from any
// other string.
type Name string

// The algorithms' names.
const (
	FixedWindow    Name = "fixed-window"
	SlidingWindow  Name = "sliding-window"
	WeightedWindow Name = "weighted-window"
	SlidingLog     Name = "sliding-log"
	TokenBucket    Name = "token-bucket"
	GCRA           Name = "gcra"
	LeakyBucket    Name = "leaky-bucket"
	Concurrency    Name = "concurrency"
	BoundedLog     Name = "bounded-log"
)

// Names returns every algorithm name in a stable order.
func Names() []Name {
	return []Name{FixedWindow, SlidingWindow, WeightedWindow, SlidingLog,
		TokenBucket, GCRA, LeakyBucket, Concurrency, BoundedLog}
}

// Valid reports whether n is one of Names. The empty Name, which Config
// reads as BoundedLog, is not.
func (n Name) Valid() bool {
	switch n {
	case FixedWindow, SlidingWindow, WeightedWindow, SlidingLog,
		TokenBucket, GCRA, LeakyBucket, Concurrency, BoundedLog:
		return true
	}
	return false
}

// Reason says why a decision rejected a request. It is one of the Reason
// constants, so a program can tell "over the limit" from "can never pass"
// from "the store is down" without reading text; its string form is a
// stable identifier for answer formats (over_limit), and Message is the
// sentence for people.
type Reason string

// The reasons a decision gives for a rejection. The zero Reason ("") means
// the request was allowed.
const (
	// ReasonOverLimit: the request would take the key over its limit; it
	// passes after RetryAfter.
	ReasonOverLimit Reason = "over_limit"
	// ReasonCostOverLimit: the request's cost is above the limit (or the
	// bucket's capacity), so it can never be accepted.
	ReasonCostOverLimit Reason = "cost_over_limit"
	// ReasonQueueFull: the leaky bucket's queue has no room for the request.
	ReasonQueueFull Reason = "queue_full"
	// ReasonBadCost: the cost is below 1 or could not be read.
	ReasonBadCost Reason = "bad_cost"
	// ReasonBlocked: the rule's limit is 0; it rejects every request.
	ReasonBlocked Reason = "blocked"
	// ReasonStoreUnavailable: the shared counter store could not be asked
	// in time and the rule fails closed.
	ReasonStoreUnavailable Reason = "store_unavailable"
)

// Message returns a sentence saying what r means, for logs and answer
// bodies read by people.
func (r Reason) Message() string {
	switch r {
	case "":
		return ""
	case ReasonOverLimit:
		return "over limit"
	case ReasonCostOverLimit:
		return "cost exceeds limit: this request can never be accepted"
	case ReasonQueueFull:
		return "queue full"
	case ReasonBadCost:
		return "cost must be a whole number of at least 1"
	case ReasonBlocked:
		return "blocked: the rule's limit is 0"
	case ReasonStoreUnavailable:
		return "shared counter store unavailable"
	}
	return string(r)
}

// Decision is the outcome of one request against one limit. The algorithm
// of gubernator's API (package algorithm/gubernator) fills its fields its own
// way: see there.
type Decision struct {
	// Allowed reports whether the request may proceed (after Delay, if any).
	Allowed bool
	// Limit is the number of requests (cost units) the limit grants per window
	// (Config.Limit), or the capacity for the token bucket.
	Limit int64
	// Remaining is how many cost units could still be accepted right now
	// after this decision. It is never negative.
	Remaining int64
	// ResetAfter is how long until the allowance is fully back (for
	// window algorithms: until the current window's requests stop counting;
	// for buckets: until the bucket is full again).
	ResetAfter time.Duration
	// RetryAfter is how long until this same request would be accepted if
	// nothing else happened. It is zero when Allowed is true, zero when the
	// request can never be accepted (see Reason), and negative never.
	RetryAfter time.Duration
	// Delay is how long an allowed request must wait before it proceeds. Only
	// the leaky bucket sets it; it is zero otherwise.
	Delay time.Duration
	// Reason says why the request was rejected; it is empty when Allowed.
	Reason Reason
}

// Algorithm is a rate-limiting rule with its parameters bound.
//
// Implementations must be safe for concurrent use; the state slices they are
// handed are not shared between concurrent calls.
type Algorithm interface {
	// Name returns the algorithm's name, one of Names.
	Name() Name
	// Config returns the parameters the algorithm was built with, with
	// defaults filled in.
	Config() Config
	// Words returns the length of the per-key state slice.
	Words() int
	// Decide decides a request of the given cost at time now (nanoseconds)
	// and, if it is allowed, records it in state.
	Decide(state []int64, now int64, cost int64) Decision
	// Peek is Decide without changing state.
	Peek(state []int64, now int64, cost int64) Decision
	// Record counts a request of the given cost at time now as accepted,
	// without deciding. It is how counts taken elsewhere (other nodes, a
	// period when the shared store was down) are merged in.
	Record(state []int64, now int64, cost int64)
	// Release gives back cost units taken by an earlier allowed request. Only
	// the concurrency algorithm holds units until release; for the others it
	// does nothing.
	Release(state []int64, now int64, cost int64)
	// IdleAfter returns how long after its last update a key's state is
	// equivalent to a zero state, so stores may expire it. Zero means the
	// state never goes idle by itself (concurrency without a Window).
	IdleAfter() time.Duration
}

// Config holds the parameters of every algorithm. Fields an algorithm does
// not use are ignored.
type Config struct {
	// Algorithm is one of Names. Empty means BoundedLog.
	Algorithm Name
	// Limit is the number of cost units allowed per Window (all algorithms;
	// for concurrency, the number of requests in flight at once; for
	// token-bucket and leaky-bucket it is the default Capacity).
	Limit int64
	// Window is the period Limit applies to.
	Window time.Duration
	// Slices is the number of slices of the sliding window (default 12).
	Slices int
	// Capacity is the token bucket's size (default Limit).
	Capacity int64
	// Rate is the token or leak rate in units per second (default
	// Limit/Window).
	Rate float64
	// Burst is GCRA's burst: how many requests may arrive at once (default
	// Limit, as go-redis/redis_rate's PerMinute(100) has burst 100; 1 means
	// perfectly smooth spacing of Window/Limit).
	Burst int64
	// Tolerance is bounded-log's e: a W-long interval holds at most
	// (1+e)·Limit accepted units (default 0.05).
	Tolerance float64
	// MaxDelay bounds the leaky bucket's queue: a request that would wait
	// longer is rejected (default Window).
	MaxDelay time.Duration
	// Counter names the counter a limit's keys are counted in, so that a
	// changed limit keeps its counts: limits with the same Counter (and
	// the same Identity: algorithm, window) share each key's state, each
	// deciding on it with its own limit (see Identity and ConvertFrom). The
	// rule engine gives each rule's limits the rule's name; a Limiter, a
	// name derived from the limit it was made with, so that SetLimit keeps
	// its keys' counts. Empty: limits that differ in any parameter count
	// apart. A Counter that starts with {name} is one of a group of
	// counters whose keys a Redis store keeps in one Cluster hash slot
	// (see redisstore), so that a request passing several is decided in
	// one atomic call.
	Counter string
	// Calendar, when set, makes a fixed window's windows calendar periods
	// (a day, week, month or year in a time zone) instead of Window, which
	// must then be zero. Only fixed-window takes it.
	Calendar Calendar
	// CarryOver is the most units a calendar window carries into a period
	// from what the key left unused of the one before (0: none).
	CarryOver int64
	// Holds, when above 0, lets each key hold parts of its allowance for
	// up to Holds quota lease holders at once (see held.Hold). Only
	// the window algorithms take it.
	Holds int
	// HoldTTL is how long a hold lasts unless renewed (default 10 s).
	HoldTTL time.Duration
}

// Bounds New enforces, so that no decision's arithmetic can overflow int64.
// It also bounds a sliding window's Slices (1024), the sliding log's Limit
// and a bounded log's entries (100,000).
const (
	// MaxLimit is the largest Limit, Capacity and Burst New accepts.
	MaxLimit = 1<<32 - 1
	// MaxWindow is the longest Window and MaxDelay New accepts. Derived
	// spans (a token bucket's refill time, GCRA's burst tolerance) may be at
	// most twice as long.
	MaxWindow = 366 * 24 * time.Hour
	// maxLogSize is the largest Limit the sliding log accepts (it keeps one
	// timestamp per unit) and the most entries a bounded log may need.
	maxLogSize = 100_000
	// maxSlices is the most slices a sliding window may have.
	maxSlices = 1024
	// maxTime is the latest time, in nanoseconds, the algorithms handle
	// (about the year 2116). Later times are treated as maxTime, and times
	// before 0 as 0.
	maxTime = int64(1) << 62
)

// ErrUnknown is returned by New for an algorithm name not in Names.
var ErrUnknown = errors.New("unknown algorithm")

// New returns the algorithm c names, with its parameters checked and
// defaults filled in.
func New(c Config) (Algorithm, error) {
	if c.Algorithm == "" {
		c.Algorithm = BoundedLog
	}
	if c.Limit < 1 {
		return nil, fmt.Errorf("%s: limit must be at least 1, got %d", c.Algorithm, c.Limit)
	}
	// The holds wrap the algorithm built without them.
	holds, ttl := c.Holds, c.HoldTTL
	c.Holds, c.HoldTTL = 0, 0
	var a Algorithm
	var err error
	switch {
	case !c.Calendar.IsZero() || c.CarryOver != 0:
		a, err = newCalendar(c)
	case c.Window <= 0 && c.Algorithm != Concurrency:
		return nil, fmt.Errorf("%s: window must be positive, got %v", c.Algorithm, c.Window)
	default:
		a, err = newAlgorithm(c)
	}
	if err != nil {
		return nil, err
	}
	a.(interface{ setSelf(Algorithm) }).setSelf(a)
	if holds == 0 && ttl == 0 {
		return a, nil
	}
	hc := a.Config() // defaults filled in
	hc.Holds, hc.HoldTTL = holds, ttl
	h, err := withHolds(a, hc)
	if err != nil {
		return nil, err
	}
	h.setSelf(h)
	return h, nil
}
