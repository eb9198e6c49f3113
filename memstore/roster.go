package memstore

import (
	"context"
	"errors"
	"sync"

	"github.com/floodgate-dev/floodgate/store"
)

// roster holds the groups of nodes that share the store (store.Roster):
// per group, each member's expiry. It is small (one entry per node) and
// touched once per node per heartbeat period.
type roster struct {
	mu     sync.Mutex
	groups map[string]map[string]int64
}

// Heartbeat implements store.Roster: b.Member is counted in b.Group until
// now + b.Expiry, or removed if b.Leave. Members whose expiry has passed
// at now are removed first.
func (s *Store) Heartbeat(ctx context.Context, now int64, b store.Beat) (store.Census, error) {
	if err := ctx.Err(); err != nil {
		return store.Census{}, err
	}
	if b.Group == "" || b.Member == "" {
		return store.Census{}, errors.New("memstore: a heartbeat needs a Group and a Member")
	}
	if !b.Leave && b.Expiry <= 0 {
		return store.Census{}, errors.New("memstore: a heartbeat needs a positive Expiry")
	}
	r := &s.roster
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.groups == nil {
		r.groups = map[string]map[string]int64{}
	}
	g := r.groups[b.Group]
	if g == nil {
		g = map[string]int64{}
		r.groups[b.Group] = g
	}
	for name, expires := range g {
		if expires <= now {
			delete(g, name)
		}
	}
	if b.Leave {
		delete(g, b.Member)
		if len(g) == 0 {
			delete(r.groups, b.Group)
		}
		return store.Census{Live: len(g), Now: now}, nil
	}
	_, ok := g[b.Member]
	g[b.Member] = now + int64(b.Expiry)
	return store.Census{Live: len(g), New: !ok, Now: now}, nil
}
