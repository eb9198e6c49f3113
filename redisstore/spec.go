package redisstore

import (
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
)

// ErrUnsupported is returned for a request whose algorithm the Redis store
// cannot run: a name it has no script for, or parameters that are not whole
// microseconds.
var ErrUnsupported = errors.New("redisstore: unsupported algorithm")

// Script algorithm codes, as dispatched in the decision script (build, in script.go).
const (
	codeFixed       = 1
	codeSliding     = 2
	codeWeighted    = 3
	codeSlidingLog  = 4
	codeBucket      = 5
	codeLeaky       = 6
	codeConcurrency = 7
	codeBoundedLog  = 8
	codeCalendar    = 9 // fixed-window over calendar periods
	// codeHolds is added to an algorithm's code when it has holds.
	codeHolds = 16
	// holdWords is the words of one hold in a state (algorithm.held).
	holdWords = 6
)

// spec is what the script needs to run one algorithm: its code, parameters
// in microseconds, the number of words its Redis state holds, and how to
// turn that state into the Go algorithm's state (nanoseconds).
type spec struct {
	code     int
	params   []int64
	luaWords int
	goWords  int
	limit    int64  // Decision.Limit
	ttlMS    int64  // PX of a written key; 0: no expiry
	tag      string // hash tag shared by the limit's keys
	group    string // hash tag of its Counter's group, before tag (see hashGroup)
	perKey   bool   // each key is its own hash tag (keyTag) instead
	timeIdx  []bool // per Lua word: holds a time in microseconds
	header   []string
	// cal, for a calendar window, gives the periods' boundaries that
	// every call sends after the header's parameters (see headerAt); the
	// header of the last period asked for is kept in calHeader.
	cal       interface{ Bounds(int64) [5]int64 }
	calHeader atomic.Pointer[periodHeader]
}

// periodHeader is a calendar window's header for the calls made while the
// caller's clock is in [start, end).
type periodHeader struct {
	start, end int64
	header     []string
}

// headerAt returns the header to send for a call made at now (the
// caller's clock, Unix nanoseconds): the spec's own, or for a calendar
// window the one with the boundaries of the periods around now, which
// the script, having no time zone database, decides with.
func (sp *spec) headerAt(now int64) []string {
	if sp.cal == nil {
		return sp.header
	}
	if h := sp.calHeader.Load(); h != nil && now >= h.start && now < h.end {
		return h.header
	}
	b := sp.cal.Bounds(now)
	h := &periodHeader{start: b[2], end: b[3], header: slices.Clone(sp.header)}
	h.header[3] = itoa(int64(len(sp.params) + len(b)))
	for _, t := range b {
		h.header = append(h.header, itoa(t/usec))
	}
	sp.calHeader.Store(h)
	return h.header
}

const usec = int64(time.Microsecond)

// scriptCodes maps an algorithm name to its branch of the decision script (lua/).
var scriptCodes = map[algorithm.Name]int{
	algorithm.FixedWindow:    codeFixed,
	algorithm.SlidingWindow:  codeSliding,
	algorithm.WeightedWindow: codeWeighted,
	algorithm.SlidingLog:     codeSlidingLog,
	algorithm.TokenBucket:    codeBucket,
	algorithm.GCRA:           codeBucket,
	algorithm.LeakyBucket:    codeLeaky,
	algorithm.Concurrency:    codeConcurrency,
	algorithm.BoundedLog:     codeBoundedLog,
}

// newSpec builds the spec of a from its exported parameter form; ttlSlack
// is added to the key TTL.
func newSpec(a algorithm.Algorithm, ttlSlack time.Duration) (*spec, error) {
	p, ok := paramsOf(a)
	if !ok {
		return nil, fmt.Errorf("%w %q: not built by algorithm.New", ErrUnsupported, a.Name())
	}
	code, ok := scriptCodes[p.Name]
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnsupported, p.Name)
	}
	var params []int64
	var err error
	var cal interface{ Bounds(int64) [5]int64 }
	if !p.Calendar.IsZero() {
		code, params = codeCalendar, []int64{p.Limit, p.CarryOver}
		if cal, ok = a.(interface{ Bounds(int64) [5]int64 }); !ok {
			return nil, fmt.Errorf("%w %q: a calendar window without Bounds", ErrUnsupported, p.Name)
		}
	} else if params, err = scriptArgs(p, time.Microsecond); err != nil {
		return nil, fmt.Errorf("%w: %v (the Redis scripts count time in µs)", ErrUnsupported, err)
	}
	if p.Holds > 0 {
		// The algorithm with holds (quota leases): the script wraps the
		// inner algorithm's code, given its words, the most holds and the
		// hold ttl after its params.
		ttl := p.HoldTTL / time.Microsecond
		if code == codeSliding || p.HoldTTL%time.Microsecond != 0 {
			return nil, fmt.Errorf("%w: holds of %s with ttl %v (the script keeps them for the other window algorithms, ttl in whole µs)", ErrUnsupported, p.Name, p.HoldTTL)
		}
		inner := p.Words - 1 - holdWords*int(p.Holds)
		code += codeHolds
		params = append(params, int64(inner), p.Holds, int64(ttl))
	}
	sp := &spec{code: code, params: params, goWords: p.Words, luaWords: p.Words, limit: p.Limit, cal: cal}
	if code == codeSliding {
		sp.luaWords = 1 + p.Slices // one count per slice; Go packs them
	}
	sp.timeIdx = make([]bool, sp.luaWords)
	for i := range sp.timeIdx {
		sp.timeIdx[i] = code != codeSliding && p.TimeWord(i)
	}
	if p.IdleAfter > 0 {
		sp.ttlMS = int64((p.IdleAfter+ttlSlack)+time.Millisecond-1) / int64(time.Millisecond)
	}
	sp.tag = configTag(counterOf(a))
	if g, ok := hashGroup(a.Config().Counter); ok {
		sp.group = configTag(g)
	}
	sp.header = append(sp.header,
		itoa(int64(sp.code)), itoa(sp.ttlMS), itoa(int64(sp.luaWords)), itoa(int64(len(sp.params))))
	for _, p := range sp.params {
		sp.header = append(sp.header, itoa(p))
	}
	return sp, nil
}

// converts reports whether the script keeps a key's count when the
// limit deciding on it changes to another of the same
// algorithm.Config.Identity: every algorithm whose state's meaning does
// not depend on its limit in the script (the windows: the script keeps a
// sliding window's counts unpacked), the buckets, whose states carry
// their emission interval, and bounded-log, whose states that depend on
// their entry size carry it (see code 8's tostored); the script converts
// a state another limit wrote when it reads it (with holds, the log
// before them, keeping the holds).
func converts(c algorithm.Config) bool {
	switch c.Algorithm {
	case algorithm.FixedWindow, algorithm.WeightedWindow, algorithm.SlidingWindow,
		algorithm.TokenBucket, algorithm.GCRA, algorithm.LeakyBucket:
		return true
	case algorithm.BoundedLog:
		return true
	}
	return false
}

// counterOf returns what names the counter a's keys are kept in: a's
// Identity when the script converts its states (so that limits of one
// Counter share each key), else its whole Config.
func counterOf(a algorithm.Algorithm) algorithm.Config {
	c := a.Config()
	if converts(c) {
		return c.Identity()
	}
	return c
}

// hashGroup returns the group of a Counter that starts with {name}: name.
// Every key of the counters of one group is kept in one Cluster hash slot
// (its name's hash is the key's hash tag, the counter's tag following it),
// so that a request that passes several of them, an organisation's, a
// team's and a user's budgets, is decided in one atomic script call: on
// all of them or on none. The group's keys are then served by one primary.
func hashGroup(counter string) (string, bool) {
	if len(counter) < 3 || counter[0] != '{' {
		return "", false
	}
	end := strings.IndexByte(counter, '}')
	if end < 2 {
		return "", false
	}
	return counter[1:end], true
}

// configTag returns a short hash of every field of c: the identity of a
// counter (see counterOf), shared by all its keys as their Redis Cluster
// hash tag; or of a group's name (see hashGroup).
func configTag(c any) string {
	h := fnv.New64a()
	fmt.Fprintf(h, "%#v", c)
	const hexdigits = "0123456789abcdef"
	var b [16]byte
	v := h.Sum64()
	for i := 15; i >= 0; i-- {
		b[i] = hexdigits[v&15]
		v >>= 4
	}
	return string(b[:])
}

// toGo converts a state read from Redis into the Go algorithm's state in
// dst (len goWords): times from microseconds to nanoseconds, and the
// sliding window's counts packed as package algorithm packs them: four
// 16-bit counts to a word when the limit is below 2^16, else two 32-bit.
func (sp *spec) toGo(lua []int64, dst []int64) {
	clear(dst)
	if sp.code == codeSliding {
		bits, field := 32, uint64(1<<32-1)
		if sp.limit < 1<<16 {
			bits, field = 16, 1<<16-1
		}
		per := 64 / bits
		dst[0] = lua[0]
		for p := range len(lua) - 1 {
			v := min(uint64(lua[1+p]), field) // a count kept under a limit of 2^16 or more saturates
			dst[1+p/per] = int64(uint64(dst[1+p/per]) | v<<(bits*(p%per)))
		}
		return
	}
	for i, v := range lua {
		if sp.timeIdx[i] {
			v *= usec
		}
		dst[i] = v
	}
}
