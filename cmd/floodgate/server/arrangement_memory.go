package server

import "github.com/floodgate-dev/floodgate/distributed"

// ArrangementMemoryLimit returns the Go runtime memory limit (GOMEMLIMIT)
// that suits a delayed or centralized node's bounds: its table's bound in
// bytes and its pending queue's, half as much again for garbage and
// allocator slack, and 256 MiB for the rest of the server; 0 for the
// memory store, which MemoryLimit covers.
func (c Config) ArrangementMemoryLimit() int64 {
	if c.Store.Type == StoreMemory || c.Store.Type == "" {
		return 0
	}
	table, queue := c.Arrangement.MaxBytes, c.Arrangement.MaxPendingBytes
	if table <= 0 {
		table = distributed.DefaultMaxBytes
	}
	if queue <= 0 {
		queue = distributed.DefaultMaxPendingBytes
	}
	return table + queue + (table+queue)/2 + 256<<20
}
