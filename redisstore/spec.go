package redisstore

import (
	"errors"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
)

// ErrUnsupported is returned for a request whose algorithm the Redis store
// cannot run: a name it has no script for, or parameters that are not whole
// microseconds.
var ErrUnsupported = errors.New("redisstore: unsupported algorithm")

// Script algorithm codes, as dispatched in floodgate.lua.
const (
	codeFixed       = 1
	codeSliding     = 2
	codeWeighted    = 3
	codeSlidingLog  = 4
	codeBucket      = 5
	codeLeaky       = 6
	codeConcurrency = 7
	codeBoundedLog  = 8
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
	timeIdx  []bool // per Lua word: holds a time in microseconds
	header   []string
}

const usec = int64(time.Microsecond)

// wholeUS returns d in microseconds, or an error naming what if d is not a
// whole number of them.
func wholeUS(name, what string, d int64) (int64, error) {
	if d%usec != 0 {
		return 0, fmt.Errorf("%w: %s: %s %v is not a whole number of microseconds (the Redis scripts count time in µs)",
			ErrUnsupported, name, what, time.Duration(d))
	}
	return d / usec, nil
}

// probeInterval returns the emission interval of a bucket-like algorithm in
// whole microseconds, rounded up: a cost-1 request on a fresh state reports
// exactly one interval as ResetAfter.
func probeInterval(a algorithm.Algorithm) int64 {
	st := make([]int64, a.Words())
	d := a.Peek(st, 1<<40, 1)
	ns := int64(d.ResetAfter)
	return (ns + usec - 1) / usec
}

// newSpec builds the spec of a; ttlSlack is added to the key TTL.
func newSpec(a algorithm.Algorithm, ttlSlack time.Duration) (*spec, error) {
	c := a.Config()
	name := a.Name()
	sp := &spec{goWords: a.Words(), limit: c.Limit}
	var w int64
	if name != algorithm.Concurrency || c.Window != 0 {
		var err error
		if w, err = wholeUS(name, "window", int64(c.Window)); err != nil {
			return nil, err
		}
	}
	switch name {
	case algorithm.FixedWindow:
		sp.code, sp.params, sp.luaWords = codeFixed, []int64{c.Limit, w}, 2
		sp.timeIdx = []bool{false, false}
	case algorithm.SlidingWindow:
		n := int64(c.Slices)
		if w%n != 0 {
			return nil, fmt.Errorf("%w: %s: window %v does not split into %d slices of whole microseconds",
				ErrUnsupported, name, c.Window, n)
		}
		sp.code, sp.params, sp.luaWords = codeSliding, []int64{c.Limit, w / n, n}, 1+int(n)
		sp.timeIdx = make([]bool, sp.luaWords)
	case algorithm.WeightedWindow:
		sp.code, sp.params, sp.luaWords = codeWeighted, []int64{c.Limit, w}, 3
		sp.timeIdx = make([]bool, 3)
	case algorithm.SlidingLog:
		sp.code, sp.params, sp.luaWords = codeSlidingLog, []int64{c.Limit, w}, 2+int(c.Limit)
		sp.timeIdx = make([]bool, sp.luaWords)
		for i := 2; i < sp.luaWords; i++ {
			sp.timeIdx[i] = true
		}
	case algorithm.TokenBucket, algorithm.GCRA:
		capacity, limit := c.Capacity, c.Capacity
		if name == algorithm.GCRA {
			capacity, limit = c.Burst, c.Limit
		}
		iv := probeInterval(a)
		sp.code, sp.params, sp.luaWords = codeBucket, []int64{limit, capacity, iv, capacity * iv}, 2
		sp.limit = limit
		sp.timeIdx = []bool{true, true}
	case algorithm.LeakyBucket:
		md, err := wholeUS(name, "max delay", int64(c.MaxDelay))
		if err != nil {
			return nil, err
		}
		sp.code, sp.params, sp.luaWords = codeLeaky, []int64{c.Limit, probeInterval(a), md}, 2
		sp.timeIdx = []bool{true, true}
	case algorithm.Concurrency:
		sp.code, sp.params, sp.luaWords = codeConcurrency, []int64{c.Limit, w}, 2
		sp.timeIdx = []bool{false, true}
	case algorithm.BoundedLog:
		m := max(1, int64(c.Tolerance*float64(c.Limit)))
		size := int64(a.Words()-2) / 3
		sp.code, sp.params, sp.luaWords = codeBoundedLog, []int64{c.Limit, w, m, size}, a.Words()
		sp.timeIdx = make([]bool, sp.luaWords)
		for i := 2; i < sp.luaWords; i += 3 {
			sp.timeIdx[i], sp.timeIdx[i+1] = true, true
		}
	default:
		return nil, fmt.Errorf("%w %q", ErrUnsupported, name)
	}
	if idle := a.IdleAfter(); idle > 0 {
		sp.ttlMS = int64((idle+ttlSlack)+time.Millisecond-1) / int64(time.Millisecond)
	}
	sp.tag = configTag(c)
	sp.header = append(sp.header,
		itoa(int64(sp.code)), itoa(sp.ttlMS), itoa(int64(sp.luaWords)), itoa(int64(len(sp.params))))
	for _, p := range sp.params {
		sp.header = append(sp.header, itoa(p))
	}
	return sp, nil
}

// configTag returns a short hash of every field of c: the identity of a
// limit, shared by all its keys as their Redis Cluster hash tag.
func configTag(c algorithm.Config) string {
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
			v := uint64(lua[1+p]) & field
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
