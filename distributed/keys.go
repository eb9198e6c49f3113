package distributed

// LocalKeys returns how many counters the node holds in its local table:
// for a delayed node, the keys it decided or pulled recently; for a
// centralized node, the keys whose last shared decision it remembers (to
// fall back on during an outage); for split, its own counters. The shared
// store's key count is not included: in Redis it spans every node.
func (n *Node) LocalKeys() int {
	total := 0
	for i := range n.table.shards {
		sh := &n.table.shards[i]
		sh.mu.Lock()
		total += len(sh.m)
		sh.mu.Unlock()
	}
	return total
}
