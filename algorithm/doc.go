// Package algorithm holds Floodgate's rate-limiting algorithms as pure
// decision functions.
//
// An Algorithm owns no state and reads no clock. Each key's state is a
// fixed-length []int64 the caller keeps (its length is Words()); a zero state
// means a key that has never been seen. Time is an int64 count of nanoseconds
// (Unix time in production, virtual time in the simulator), and every call
// passes it in. This lets the same code run in the memory store, in the
// simulator under a virtual clock, and be mirrored by the Redis scripts. All
// arithmetic is on integers; New rejects parameters (see MaxLimit and
// MaxWindow) for which it could overflow.
//
// # Common rules
//
// A request's cost is at least 1; a smaller cost is rejected with
// ReasonBadCost, and a cost larger than the limit (or the bucket's capacity)
// with ReasonCostOverLimit, since it could never be accepted. Both leave
// RetryAfter zero. Otherwise RetryAfter is exactly how long until the same
// request would be accepted if nothing else happened, and zero when the
// request is allowed.
//
// If now is earlier than the latest time the state has seen (callers with
// skewed clocks), the algorithms decide as if it were that latest time, or
// the start of the newest window or slice: a clock going back never frees
// allowance. Times before 0 count as 0 and times after 2^62 (about the year
// 2116) as 2^62.
// A state whose header no algorithm could have written (a corrupted one) is
// reset to the zero state, even by Peek, rather than read out of bounds.
//
// # The algorithms
//
// Config.Algorithm is a Name: one of the Name constants, or a name read at
// run time converted with Name(s) and checked with Valid (New reports
// ErrUnknown for any other).
//
// In what follows L is Config.Limit and W is Config.Window. "Busiest window"
// is the most units accepted inside any W-long interval.
//
// fixed-window (2 words): one counter per window [kW, (k+1)W). Busiest
// window at most 2L, reached by piling L just before and L just after a
// boundary. ResetAfter is the time until the current window ends.
//
// fixed-window with a Calendar (3 words): the windows are calendar periods
// (a day, week, month or year in a time zone, from a start day; see
// Calendar) instead of multiples of Window: a calendar period is a fixed
// window by definition. Each period counts at most L plus what CarryOver
// carried into it: the part of the previous period's limit the key left
// unused, up to CarryOver, when it counted anything in that period (so any
// k consecutive periods count at most k·L + CarryOver). Like any fixed
// window, up to 2L at a boundary. ResetAfter is the time to the period's
// end, to the nanosecond, however long daylight saving makes it.
//
// sliding-window (1 + ceil(N/4) words when L < 2^16, else 1 + ceil(N/2);
// 4 and 7 for the default 12 slices): N slices of floor(W/N), counting the
// current slice and the N-1 before it, as the classic sliding window counter does; counts are packed
// four 16-bit or two 32-bit fields to a word, and Record saturates a slice's
// count at its field's maximum. The counted span is
// shorter than W by up to one slice, so an adversary piling L units at the
// end of the slice about to drop out and L more right after gets 2L through;
// the busiest window is at most 2L. ResetAfter is the time until the newest
// counted slice drops out, that is until nothing is counted.
//
// weighted-window (3 words): Cloudflare's estimate ceil(prev·(W-e)/W) +
// curr, with e the time elapsed in the current window, computed with 128-bit
// products. Accurate when traffic is even; the busiest window is at most 2L
// (the previous window's requests all at its end). ResetAfter is the time
// until the estimate falls to 0: the end of the next window if the current
// one has requests, else the end of this one.
//
// sliding-log (L + 2 words): one timestamp per accepted unit; exact, the
// busiest window is at most L and a request that keeps the trailing W within
// L is never rejected. L is at most 100,000. ResetAfter is the time until
// the newest timestamp leaves the window.
//
// token-bucket (2 words): capacity C (default L) refilled at Rate units per
// second (default L/W), starting full; a request takes cost tokens. It runs
// as the theoretical arrival time tat with emission interval
// T = ceil(1e9/Rate) ns: accept iff max(tat, now) + cost·T - now <= C·T.
// Busiest window at most C + Rate·W. ResetAfter is the time until the bucket
// is full again.
//
// gcra (2 words): the same arithmetic with T = ceil(W/L) and C = Burst
// (default L): requests are spaced T apart, with Burst of them allowed at
// once; any interval of length d holds at most Burst + d/T units. Remaining,
// RetryAfter and ResetAfter follow go-redis/redis_rate: remaining =
// floor(diff/T), retry_after = -diff, reset_after = new_tat - now when
// allowed and tat - now when rejected. A rejected request reports the
// units still available (redis-cell's rule), which is 0 for a cost of 1.
//
// leaky-bucket (2 words): the throttling form. Requests leave one unit every
// T = ceil(1e9/Rate) ns (Rate defaults to L/W); an accepted request carries
// Delay, the time until its turn, and the turns of accepted requests are
// spaced by their costs times T. A request whose Delay would exceed MaxDelay
// (default W) is rejected with ReasonQueueFull. Remaining is how many
// requests of cost 1 could still join the queue (at most L). ResetAfter is
// the time until the queue is empty.
//
// concurrency (Words() = 3 + 4·min(L, lease.MaxPerKey)): at most L units in
// flight. Acquire (see Leaser) holds a request's units under a lease id;
// only ReleaseLease with that id gives them back, once, and a lease not
// released expires W after it was taken (lease.DefaultTTL if W is zero),
// however busy the key. Decide holds units anonymously: Release gives them
// back, and if W is positive a state nobody has touched for longer than W
// counts as empty. A key holds at most min(L, lease.MaxPerKey) leases. ResetAfter
// (and RetryAfter when rejected) is the time until the first units come
// back by themselves, or zero if none will.
//
// bounded-log (Words() = 2 + 3·(2·ceil(L/m)+2), m = max(1, floor(e·L)), e =
// Tolerance, default 0.05): Floodgate's own, described in the source. It
// keeps both promises for any traffic: the busiest window is at most L + m
// <= (1+e)·L, and a request that keeps the key's accepted units in the
// trailing W within L is never rejected. ResetAfter is the time until no
// entry is counted. Words() is the capacity; the state is laid out so that
// what a key uses is a prefix and the rest is zero: a header (entries and
// the open entry's count), the newest timestamp, then one first timestamp
// per entry, so a key with at most m units in its window uses 3 words and
// a key at its limit at most floor((L-1)/m) + 4 (23 at L = 600, e = 0.05).
// Stores may keep a state up to its last nonzero word. Record merges counts
// taken elsewhere: a light key's events in time order keep one entry, as
// under Decide, and late events (older than the newest entry, as delayed
// nodes push them) go in without letting an entry grow past m units or the
// count of (t-W, t] fall more than m short; an event inside a full entry is
// counted from a later entry instead, an overcount. Only keys that took
// late events, or whose entries Record closed for their span, use the two
// regions after the timestamps (each closed entry's shortfall from m and
// its gap to the next entry), and half the capacity is for the entries
// Record makes. m is computed exactly (never rounded up) and timestamps are
// kept to the nanosecond, so no rounding weakens promise 1; promise 2 is
// unchanged for Decide, and for merged late events keeps the overcount
// above.
//
// # Changing a limit
//
// A key's state means something only under the parameters that wrote it.
// Limits with the same Config.Counter and Config.Identity (the same
// algorithm and window, say) count in one counter: a store keeps one state
// per key for them, and when another of them decides on it, converts it
// with the algorithm's ConvertFrom, keeping what was counted. So a raised
// limit admits at once what it allows beyond the count, and a lowered one
// applies at once: fixed, weighted and sliding windows keep their counts,
// the buckets their debt in whole units (rounded up), and bounded-log its
// entries with their counts. A W-long interval that spans a change of a
// bounded log from L to L' holds at most max(L, L') + max(m, m') units, and
// one after it L' + m'; the overcount that keeps this (entries combined, or
// an open entry split, when a lower leaves more than the new limit's room)
// ends within W of the change. Sliding-log and concurrency states do not
// convert: their Identity is their whole Config.
//
// Params gives every algorithm's parameters in the form stores consume:
// derived values (emission interval, bounded-log's m and capacity), the
// state's length and which words hold times. Direct decides the counting
// algorithms and bounded-log's light keys without the interface call, for
// a store's hot path. Leases are identified by package lease's IDs.
package algorithm
