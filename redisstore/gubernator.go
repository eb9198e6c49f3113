package redisstore

import (
	"encoding/binary"
	"hash/fnv"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/algorithm/gubernator"
)

// codeGubernator is gubernator's buckets (lua/gubernator.lua), whose
// parameters come with each request rather than with a limit.
const codeGubernator = 10

// gubernatorAlg is an algorithm of package algorithm/gubernator: one
// request's parameters. Every such algorithm has the same Config, so its
// spec is built for each request instead of cached by Config.
type gubernatorAlg interface {
	algorithm.Algorithm
	Params() gubernator.Params
}

// gubernatorSpec returns the spec of one gubernator request: its
// parameters (lua/gubernator.lua reads them in this order), the
// request's limit as the decision's, and as ttl the store's slack, which
// the script adds to the time until the key's state expires. Its keys
// carry a hash tag of their own (perKey), so on a Cluster they spread
// over every slot, as gubernator spreads its keys over its peers.
func gubernatorSpec(a gubernatorAlg, slack time.Duration) *spec {
	p := a.Params()
	flag := func(b bool) int64 {
		if b {
			return 1
		}
		return 0
	}
	sp := &spec{
		code: codeGubernator,
		params: []int64{flag(p.Leaky), p.Limit, p.Duration, p.Burst, p.Behavior, p.CreatedAt,
			p.Period.Now, p.Period.End, p.Period.Length, flag(p.Period.Invalid),
			int64(p.Version), p.MaxWait, p.WaitCeiling},
		luaWords: a.Words(),
		goWords:  a.Words(),
		limit:    p.Limit,
		ttlMS:    int64((slack + time.Millisecond - 1) / time.Millisecond),
		perKey:   true,
		timeIdx:  make([]bool, a.Words()), // milliseconds on both sides
	}
	sp.header = make([]string, 0, 4+len(sp.params))
	sp.header = append(sp.header, itoa(codeGubernator), itoa(sp.ttlMS), itoa(int64(sp.luaWords)), itoa(int64(len(sp.params))))
	for _, v := range sp.params {
		sp.header = append(sp.header, itoa(v))
	}
	return sp
}

// keyTag returns the hash tag of a gubernator key: the key's own FNV-1a
// hash, so that keys spread over a Cluster's slots.
func keyTag(key string) string {
	h := fnv.New64a()
	h.Write([]byte(key))
	v := h.Sum64()
	const hexdigits = "0123456789abcdef"
	b := []byte("g.0000000000000000")
	for i := len(b) - 1; i >= 2; i-- {
		b[i] = hexdigits[v&15]
		v >>= 4
	}
	return string(b)
}

// gubernatorState fixes a synced gubernator state read by unpackState:
// a leaky bucket's remaining (word 4) is fractional, which the Go state
// keeps as the bits of its float64.
func gubernatorState(packed string, words []int64) {
	const kind, remaining = 0, 4
	if len(words) > remaining && words[kind] == 2 && len(packed) >= 8*(remaining+1) {
		words[remaining] = int64(binary.LittleEndian.Uint64([]byte(packed[8*remaining : 8*remaining+8])))
	}
}
