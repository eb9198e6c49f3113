package store

import (
	"context"
	"time"
)

// Roster is a shared store that keeps count of the nodes sharing it. Each
// node announces itself with a Heartbeat every period; a member whose last
// beat is older than its Expiry is no longer counted. The memory and Redis
// stores are Rosters.
type Roster interface {
	// Heartbeat records b at now (Unix nanoseconds; a store with its own
	// clock, such as Redis server time, may use it instead) and returns the
	// group's census after it.
	Heartbeat(ctx context.Context, now int64, b Beat) (Census, error)
}

// Beat is one node's announcement to a Roster.
type Beat struct {
	// Group names the nodes counted together (the nodes sharing rules).
	Group string
	// Member names the node instance, unique per process.
	Member string
	// Expiry is how long after this beat the member is still counted.
	Expiry time.Duration
	// Leave removes the member at once (a node stopping).
	Leave bool
}

// Census is a Roster's count of a group after a beat.
type Census struct {
	// Live counts the members whose last beat has not expired, the beating
	// one included (after a Leave, not included).
	Live int
	// New reports that this beat added the member: its first beat, or one
	// after its entry expired.
	New bool
	// Now is the store's clock at the beat (Unix nanoseconds), the clock
	// of Links' times.
	Now int64
	// Links are, for a store that exchanges counts with other regions'
	// (redisstore.Exchange), when counts last went to each other region
	// and came from it.
	Links []Link
}

// Link is a region's exchange with another as its store records it.
type Link struct {
	// Region names the other region.
	Region string
	// Sent and Received are when counts last went to the region and last
	// came from it, in the store's clock (Unix nanoseconds); zero never.
	Sent, Received int64
}
