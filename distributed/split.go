package distributed

import (
	"fmt"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/store"
)

// splitKey names a limit divided into parts.
type splitKey struct {
	cfg   algorithm.Config
	parts int
}

// splitter is an algorithm whose parameters come with each request
// (gubernator's), so that its Config does not name its limit: it divides
// itself.
type splitter interface {
	Split(parts int) algorithm.Algorithm
}

// splitAlg returns alg with its limits divided into parts, cached by
// Config (a splitter divides itself, uncached).
func (n *Node) splitAlg(alg algorithm.Algorithm, parts int) (algorithm.Algorithm, error) {
	if parts <= 1 {
		return alg, nil
	}
	if sp, ok := alg.(splitter); ok {
		return sp.Split(parts), nil
	}
	k := splitKey{alg.Config(), parts}
	if a, ok := n.algs.Load(k); ok {
		return a.(algorithm.Algorithm), nil
	}
	a, err := algorithm.New(splitConfig(k.cfg, parts))
	if err != nil {
		return nil, fmt.Errorf("distributed: splitting %s across %d nodes: %w", k.cfg.Algorithm, parts, err)
	}
	n.algs.Store(k, a)
	return a, nil
}

// splitConfig returns c with its allowance divided across nodes: Limit,
// Capacity and Burst become their nth part (at least 1, rounded down so the
// nodes together never grant more than c), and Rate its nth part.
func splitConfig(c algorithm.Config, nodes int) algorithm.Config {
	if nodes <= 1 {
		return c
	}
	n := int64(nodes)
	part := func(v int64) int64 {
		if v <= 0 {
			return v
		}
		return max(1, v/n)
	}
	c.Limit = part(c.Limit)
	c.Capacity = part(c.Capacity)
	if c.Burst > 1 {
		c.Burst = part(c.Burst)
	}
	if c.Rate > 0 {
		c.Rate /= float64(nodes)
	}
	return c
}

// ownShare returns the share of alg a split node enforces at now: its
// Nodes-th part, or with Membership the share that follows the live count
// (shares.go). A splitter's share is its part of the live count at once,
// without the ramp: its limit comes with each request, so no rule holds
// where its share was.
func (n *Node) ownShare(alg algorithm.Algorithm, now int64) (algorithm.Algorithm, error) {
	if n.mem == nil {
		return n.splitAlg(alg, n.nodes*n.regions)
	}
	if _, ok := alg.(splitter); ok {
		return n.splitAlg(alg, n.count())
	}
	a, err := n.liveShare(alg, now)
	if err != nil {
		return nil, err
	}
	return a, nil
}

// decideSplit decides every request against its limit/Nodes share,
// locally.
func (n *Node) decideSplit(now int64, reqs []store.Request, out []algorithm.Decision) error {
	var one [1]store.Request
	var local []store.Request
	if len(reqs) == 1 {
		local = one[:]
	} else {
		local = make([]store.Request, len(reqs))
	}
	copy(local, reqs)
	for i := range local {
		a, err := n.ownShare(local[i].Algorithm, now)
		if err != nil {
			return err
		}
		local[i].Algorithm = a
	}
	return n.decideLocal(now, local, out, func(*store.Request) how { return howSplitOwn })
}
