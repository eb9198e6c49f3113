package distributed

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-dev/floodgate/store"
)

// Membership makes a node count the live nodes that share its rules,
// through heartbeats in the shared store (a store.Roster), instead of a
// fixed Options.Nodes. Every Period the node announces itself; a node whose
// last beat is older than Expiry is no longer counted. A node sees another
// join, or stop (Close announces it), within one Period, and a node that
// crashed within Expiry plus one Period; it is counted meanwhile, so shares
// are smaller, never larger. While the store does not answer a node keeps
// the last count it saw.
type Membership struct {
	// Group names the nodes counted together: the nodes that share the
	// rules. Empty means "default".
	Group string
	// Period is how often the node beats. Zero means one second.
	Period time.Duration
	// Expiry is how long after its last beat a node is still counted.
	// Zero means three periods; it must be at least two.
	Expiry time.Duration
	// Assume is the count a node uses until its first beat is answered
	// (it makes one in New; a node that starts while the store is down
	// uses Assume). Zero means 1.
	Assume int
	// Roster is the store that keeps the count. Nil means Options.Shared,
	// which must then implement store.Roster.
	Roster store.Roster
}

// Membership's defaults.
const (
	defaultPeriod      = time.Second
	defaultGroup       = "default"
	defaultExpiryBeats = 3
)

// membership is a node's view of the live nodes (see Membership).
type membership struct {
	cfg  Membership
	live atomic.Int64 // the count in use

	mu        sync.Mutex
	lastOK    int64 // node clock (Unix ns) of the last answered beat, 0 never
	holdUntil int64 // until then a lower count is not taken (see take)
	beats     uint64
	changes   []countChange // the counts seen, oldest first (shares.go)
	dropped   int           // changes forgotten (maxCountChanges)
	changeSeq atomic.Uint64 // changes seen in all, read without mu

	errors atomic.Uint64
	okAt   atomic.Int64 // lastOK, for Health without the lock
	stop   chan struct{}
	done   chan struct{}
}

// initMembership checks o.Membership and sets up the node's view.
func (n *Node) initMembership(o Options) error {
	if o.Membership == nil {
		return nil
	}
	c := *o.Membership
	if o.Nodes != 0 {
		return fmt.Errorf("distributed: Nodes is %d and Membership is set: a node counts the live nodes or takes a fixed count, not both", o.Nodes)
	}
	if c.Period < 0 || c.Expiry < 0 || c.Assume < 0 {
		return errors.New("distributed: Membership's Period, Expiry and Assume must not be negative")
	}
	if c.Group == "" {
		c.Group = defaultGroup
	}
	if c.Period == 0 {
		c.Period = defaultPeriod
	}
	if c.Expiry == 0 {
		c.Expiry = defaultExpiryBeats * c.Period
	}
	if c.Expiry < 2*c.Period {
		return fmt.Errorf("distributed: Membership.Expiry %v is below two periods (%v): a node whose beat is a little late would drop out of the count", c.Expiry, 2*c.Period)
	}
	if c.Assume == 0 {
		c.Assume = 1
	}
	if c.Roster == nil {
		r, ok := n.shared.(store.Roster)
		if !ok {
			return fmt.Errorf("distributed: Membership needs a store that keeps a roster (store.Roster); %T does not", n.shared)
		}
		c.Roster = r
	}
	n.mem = &membership{cfg: c}
	n.mem.live.Store(int64(c.Assume))
	return nil
}

// count returns the node count shares are computed with: the live count
// last seen, or Options.Nodes.
func (n *Node) count() int {
	if n.mem == nil {
		return n.nodes
	}
	return int(n.mem.live.Load())
}

// Heartbeat announces the node to the shared store's roster once, now, and
// takes the live count it answers. Without Options.Membership it does
// nothing. Nodes with ManualSync beat only when the caller calls it (tests
// and the simulator, under a virtual clock); others beat every
// Membership.Period by themselves.
func (n *Node) Heartbeat(ctx context.Context) error {
	if n.mem == nil {
		return nil
	}
	return n.beat(ctx, false)
}

// beat sends one beat (or, with leave, the node's departure) and takes
// the answer.
func (n *Node) beat(ctx context.Context, leave bool) error {
	m := n.mem
	now := n.clock()
	b := store.Beat{Group: m.cfg.Group, Member: n.origin, Expiry: m.cfg.Expiry, Leave: leave}
	var c store.Census
	var mu sync.Mutex // c is written by a call that may outlive the wait
	err := call(ctx, m.cfg.Period, func(cctx context.Context) error {
		got, err := m.cfg.Roster.Heartbeat(cctx, now.UnixNano(), b)
		mu.Lock()
		c = got
		mu.Unlock()
		return err
	}, nil)
	if err != nil {
		m.errors.Add(1)
		return fmt.Errorf("distributed: heartbeat to %s: %w", n.name, err)
	}
	if leave {
		return nil
	}
	mu.Lock()
	defer mu.Unlock()
	n.take(now.UnixNano(), c)
	n.takeLinks(c)
	return nil
}

// take takes in the census c answered at now. After a gap in the node's
// own beats longer than the expiry (the store was away, and every member
// may have expired meanwhile), a lower count is taken only once a little
// more than a period has passed, so that the first node back does not take
// itself for the only one.
func (n *Node) take(now int64, c store.Census) {
	m := n.mem
	m.mu.Lock()
	defer m.mu.Unlock()
	period := int64(m.cfg.Period)
	if m.lastOK != 0 && now-m.lastOK > int64(m.cfg.Expiry) {
		m.holdUntil = now + period + period/4
	}
	if c.New && m.beats > 0 && now-m.lastOK <= int64(m.cfg.Expiry) {
		n.log.Warn("floodgate: this node had dropped out of the roster although it beat in time (two processes with one ID, or a clock skew?)",
			"node", n.id, "group", m.cfg.Group)
	}
	m.lastOK = now
	m.okAt.Store(now)
	m.beats++
	live := max(c.Live, 1) // this node counts, whatever the store says
	if len(m.changes) == 0 {
		m.seen(now, live)
		m.live.Store(int64(live))
		return
	}
	cur := int(m.live.Load())
	if live < cur && now < m.holdUntil {
		return
	}
	if live != cur {
		m.seen(now, live)
		n.log.Info("floodgate: live nodes changed", "node", n.id, "group", m.cfg.Group, "from", cur, "to", live)
		m.live.Store(int64(live))
	}
}

// startMembership makes the first beat and starts the beat loop.
func (n *Node) startMembership(manual bool) {
	if n.mem == nil {
		return
	}
	if err := n.beat(context.Background(), false); err != nil {
		n.log.Warn("floodgate: first heartbeat failed; assuming the configured count until one is answered",
			"node", n.id, "assume", n.mem.cfg.Assume, "err", err)
		n.mem.mu.Lock()
		n.mem.seen(n.clock().UnixNano(), n.mem.cfg.Assume)
		n.mem.mu.Unlock()
	}
	if manual {
		return
	}
	m := n.mem
	m.stop, m.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(m.done)
		for {
			// ±10% so that nodes started together do not beat together.
			p := m.cfg.Period
			d := p - p/10 + time.Duration(rand.Int64N(int64(p/5)+1))
			t := time.NewTimer(d)
			select {
			case <-m.stop:
				t.Stop()
				return
			case <-t.C:
			}
			if err := n.beat(context.Background(), false); err != nil {
				n.log.Debug("floodgate: heartbeat failed; keeping the last count", "node", n.id, "live", m.live.Load(), "err", err)
			}
		}
	}()
}

// stopMembership stops the beat loop and announces the node's departure.
func (n *Node) stopMembership(ctx context.Context) {
	if n.mem == nil {
		return
	}
	if n.mem.stop != nil {
		close(n.mem.stop)
		<-n.mem.done
	}
	if err := n.beat(ctx, true); err != nil {
		n.log.Warn("floodgate: could not announce this node's departure; the others count it until its beat expires",
			"node", n.id, "expiry", n.mem.cfg.Expiry, "err", err)
	}
}
