package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/rueidis"
)

// ownersMaxAge is how long a slot map read with CLUSTER SLOTS is used
// before the store reads it again (in the background, at most one read at
// a time, one attempt a second).
const ownersMaxAge = 5 * time.Second

// owners maps each hash slot of a Redis Cluster to the primary serving it,
// as last read with CLUSTER SLOTS, so that concurrent decisions of
// different slots on one primary share one batcher: a shared call then
// carries one script call per slot, pipelined in one write to that primary,
// which Redis reads and answers at once. A stale map costs no correctness,
// only sharing: the client still routes each script call by its slot.
type owners struct {
	read time.Time
	// node holds each slot's primary as its number in Store.primaries (from
	// 1); 0 for a slot no primary served.
	node [16384]uint16
	// clients[i] sends to primary i alone (nil if the client has no
	// connection to it).
	clients []rueidis.Client
}

// batchGroup returns the batcher group of key: 0 on a single server; on a
// cluster the primary serving key's slot when the map knows it, else the
// slot alone.
func (s *Store) batchGroup(key string) uint32 {
	if !s.cluster {
		return 0
	}
	sl := slot(key)
	o := s.owners.Load()
	if o == nil || time.Since(o.read) > ownersMaxAge {
		s.refreshOwners()
	}
	if o != nil && o.node[sl] != 0 {
		return 1<<16 | uint32(o.node[sl])
	}
	return uint32(sl)
}

// refreshOwners starts reading the slot map in the background unless a
// read is running or one started less than a second ago.
func (s *Store) refreshOwners() {
	now := time.Now().UnixNano()
	last := s.ownersTried.Load()
	if now-last < int64(time.Second) || !s.ownersTried.CompareAndSwap(last, now) {
		return
	}
	client, err := s.connect()
	if err != nil {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
		defer cancel()
		_ = s.loadOwners(ctx, client)
	}()
}

// loadOwners reads the slot map with CLUSTER SLOTS and installs it. Only
// one runs at a time (refreshOwners, or prepare before any decision).
func (s *Store) loadOwners(ctx context.Context, c rueidis.Client) error {
	ranges, err := c.Do(ctx, c.B().ClusterSlots().Build()).ToArray()
	if err != nil {
		return fmt.Errorf("redisstore: CLUSTER SLOTS: %w", err)
	}
	o := &owners{read: time.Now()}
	s.primariesMu.Lock()
	defer s.primariesMu.Unlock()
	for _, r := range ranges {
		f, err := r.ToArray()
		if err != nil || len(f) < 3 {
			return fmt.Errorf("redisstore: CLUSTER SLOTS: malformed range %v", r)
		}
		lo, err1 := f[0].AsInt64()
		hi, err2 := f[1].AsInt64()
		node, err3 := f[2].ToArray()
		if err1 != nil || err2 != nil || err3 != nil || len(node) < 2 || lo < 0 || hi > 16383 || lo > hi {
			return fmt.Errorf("redisstore: CLUSTER SLOTS: malformed range %v", r)
		}
		host, _ := node[0].ToString()
		port, _ := node[1].AsInt64()
		addr := fmt.Sprintf("%s:%d", host, port)
		i, ok := s.primaries[addr]
		if !ok {
			if s.primaries == nil {
				s.primaries = map[string]uint16{}
			}
			if len(s.primaries) >= 16383 {
				return fmt.Errorf("redisstore: CLUSTER SLOTS: more than 16383 primaries seen")
			}
			i = uint16(len(s.primaries) + 1)
			s.primaries[addr] = i
		}
		for sl := lo; sl <= hi; sl++ {
			o.node[sl] = i
		}
	}
	o.clients = make([]rueidis.Client, len(s.primaries)+1)
	for addr, nc := range c.Nodes() {
		if i, ok := s.primaries[addr]; ok {
			o.clients[i] = nc
		}
	}
	s.owners.Store(o)
	return nil
}
