package distributed

import (
	"fmt"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/store"
)

// splitAlg returns alg with its limits divided by the node count, cached.
func (n *Node) splitAlg(alg algorithm.Algorithm) (algorithm.Algorithm, error) {
	if n.nodes == 1 {
		return alg, nil
	}
	cfg := alg.Config()
	if a, ok := n.algs.Load(cfg); ok {
		return a.(algorithm.Algorithm), nil
	}
	a, err := algorithm.New(splitConfig(cfg, n.nodes))
	if err != nil {
		return nil, fmt.Errorf("distributed: splitting %s across %d nodes: %w", cfg.Algorithm, n.nodes, err)
	}
	n.algs.Store(cfg, a)
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
		a, err := n.splitAlg(local[i].Algorithm)
		if err != nil {
			return err
		}
		local[i].Algorithm = a
	}
	return n.decideLocal(now, local, out, func(*store.Request) how { return howSplitOwn })
}
