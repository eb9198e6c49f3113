package distributed

import (
	"errors"
	"time"

	"github.com/floodgate-dev/floodgate/store"
)

// Region makes a node one of a region's nodes, among Regions regions that
// share the limits, each deciding against a shared store of its own, which
// forward their counts to each other (redisstore.Exchange) in the
// background: a decision never waits on another region.
//
// While its region is cut off from another (a link has not carried counts
// either way for LinkTimeout), a node counts its region's own requests
// that some other region has not received (store.SyncBatch.Unseen) Regions
// times instead of once: each region then keeps at most 1/Regions of what
// was left when the link stopped, and together they stay within the limit.
// When the link carries counts again, the other regions have them, once
// each (the exchange's pushes carry an identity), and the charge ends at
// the next pull. Fail-local and split shares are a region's part too:
// limit/(Regions·nodes).
type Region struct {
	// Regions counts the regions sharing the limits, this one included.
	Regions int
	// LinkTimeout is how long a link may go without counts in either
	// direction before the region counts as cut off. Zero means 3 s.
	LinkTimeout time.Duration
}

const defaultLinkTimeout = 3 * time.Second

// initRegion checks o.Region.
func (n *Node) initRegion(o Options) error {
	if o.Region == nil {
		n.regions = 1
		return nil
	}
	r := *o.Region
	switch {
	case r.Regions < 1 || r.LinkTimeout < 0:
		return errors.New("distributed: Region.Regions must be at least 1 and LinkTimeout not negative")
	case o.Membership == nil:
		return errors.New("distributed: Region needs Membership: the heartbeats bring the links' times")
	case o.Arrangement == Centralized:
		return errors.New("distributed: a region's nodes take the delayed or split arrangement: a centralized decision is not forwarded to the other regions")
	}
	if r.LinkTimeout == 0 {
		r.LinkTimeout = defaultLinkTimeout
	}
	n.regions, n.linkTimeout = r.Regions, r.LinkTimeout
	return nil
}

// takeLinks takes the links' times of a census: the region is cut off if
// any link has not carried counts either way within the link timeout.
func (n *Node) takeLinks(c store.Census) {
	if n.regions <= 1 {
		return
	}
	cut := len(c.Links) < n.regions-1
	for _, l := range c.Links {
		if c.Now-l.Sent > int64(n.linkTimeout) || c.Now-l.Received > int64(n.linkTimeout) {
			cut = true
		}
	}
	if n.cut.Swap(cut) != cut {
		if cut {
			n.log.Warn("floodgate: this region is cut off from another; it keeps its share of what is left", "node", n.id, "regions", n.regions)
		} else {
			n.log.Info("floodgate: this region's links carry counts again", "node", n.id)
		}
	}
}

// unseenSince returns, while the region is cut off, the time after which
// a pull of a key of alg asks for its unseen cost: one window back.
func (n *Node) unseenSince(e *entry, now int64) int64 {
	if !n.cut.Load() {
		return 0
	}
	return now - int64(rampSpan(e.alg))
}

// takeUnseen takes a pulled key's unseen cost: while cut off, what the
// key's requests that other regions have not received count beyond once.
// The caller holds e's shard lock.
func (n *Node) takeUnseen(e *entry, unseen int64) {
	if n.cut.Load() {
		e.cut = unseen * int64(n.regions-1)
	} else {
		e.cut = 0
	}
}
