package grpcguard

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

// AdmissionOptions configures Admission. A zero bound means no bound.
type AdmissionOptions struct {
	// MaxCalls bounds the calls in flight on the server, and
	// MaxCallsPerClient those from one client address. A call is in flight
	// from its HEADERS until its stream ends; a streaming call stops
	// counting once its first request message has arrived.
	MaxCalls          int
	MaxCallsPerClient int
	// MaxWaiting bounds the calls waiting for their request message on the
	// server, and MaxWaitingPerClient those from one client address. When
	// the server-wide bound is reached, a call from an address with fewer
	// waiting calls than another's takes the place of that address's
	// oldest waiting call, which is cancelled.
	MaxWaiting          int
	MaxWaitingPerClient int
	// MessageTimeout cancels a call whose request message has not arrived
	// this long after its HEADERS. 0 means no deadline.
	MessageTimeout time.Duration
	// OnRefuse, if set, is called with the reason of every call refused or
	// cancelled by a bound (the Refused... and Cancelled... constants).
	OnRefuse func(reason string)
}

// Reasons passed to AdmissionOptions.OnRefuse.
const (
	RefusedCalls         = "calls_full"
	RefusedClientCalls   = "client_calls_full"
	RefusedWaiting       = "waiting_full"
	RefusedClientWaiting = "client_waiting_full"
	CancelledEvicted     = "waiting_evicted"
	CancelledNoMessage   = "message_timeout"
)

// Admission bounds the calls a gRPC server holds at once. Install it with
// ServerOptions.
//
// Its counts cannot drift from the calls they count: every waiting call is
// in one list of all waiting calls (oldest first) as well as its address's,
// so that the purge and the sweep find it whatever became of its address's
// entry; an address's entry is removed only when it counts no call, and a
// new call takes its address's entry only after every removal its
// admission made (a purge, an eviction), so no call is ever admitted into
// an entry already removed.
type Admission struct {
	o AdmissionOptions

	mu       sync.Mutex
	calls    int                     // calls in flight
	waiting  callList                // every waiting call, oldest first
	clients  map[string]*clientCalls // addresses with calls in flight
	sweeping bool                    // the sweep goroutine runs
	purged   time.Time               // when tap last forgot calls whose stream ended
	closed   bool

	stop  chan struct{} // closed by Close
	swept sync.WaitGroup
}

// clientCalls is one client address's calls.
type clientCalls struct {
	key     string
	calls   int      // in flight; the entry is removed when it reaches 0
	waiting callList // oldest first
}

// call is one admitted call; it is the context gRPC runs the call with.
type call struct {
	context.Context
	cancel   context.CancelCauseFunc
	client   *clientCalls
	started  time.Time
	inFlight bool // counted in calls
	waiting  bool // in its client's waiting list and in Admission.waiting
	// links holds the call's places in the list of all waiting calls
	// (byAge) and in its client's (byClient).
	links [2]links
}

// links is a call's place in a callList.
type links struct{ prev, next *call }

// Which of a call's links a list uses.
const (
	byAge = iota
	byClient
)

// callKey finds the call in a context.
type callKey struct{}

func (c *call) Value(k any) any {
	if k == (callKey{}) {
		return c
	}
	return c.Context.Value(k)
}

// callList is a doubly linked list of calls, oldest first, through the
// links of one kind (byAge or byClient).
type callList struct {
	head, tail *call
	n          int
	kind       int
}

func (l *callList) push(c *call) {
	k := &c.links[l.kind]
	k.prev, k.next = l.tail, nil
	if l.tail != nil {
		l.tail.links[l.kind].next = c
	} else {
		l.head = c
	}
	l.tail = c
	l.n++
}

func (l *callList) remove(c *call) {
	k := &c.links[l.kind]
	if k.prev != nil {
		k.prev.links[l.kind].next = k.next
	} else {
		l.head = k.next
	}
	if k.next != nil {
		k.next.links[l.kind].prev = k.prev
	} else {
		l.tail = k.prev
	}
	k.prev, k.next = nil, nil
	l.n--
}

// next is the call after c in a list of kind.
func (c *call) next(kind int) *call { return c.links[kind].next }

// NewAdmission returns the bounds o describes. A goroutine runs while
// calls wait for their message: it keeps the message deadline and forgets
// calls whose stream ended first (see sweep).
func NewAdmission(o AdmissionOptions) *Admission {
	if o.OnRefuse == nil {
		o.OnRefuse = func(string) {}
	}
	return &Admission{o: o, clients: map[string]*clientCalls{}, waiting: callList{kind: byAge}, stop: make(chan struct{})}
}

// Close stops the goroutine that keeps the message deadline and waits for
// it to end. Call it once the gRPC server has stopped.
func (a *Admission) Close() {
	a.mu.Lock()
	if !a.closed {
		a.closed = true
		close(a.stop)
	}
	a.mu.Unlock()
	a.swept.Wait()
}

// ServerOptions installs a on a gRPC server: a tap handle that admits or
// refuses each call as its HEADERS arrive, and interceptors that see its
// request message arrive. Put them before other interceptors.
func (a *Admission) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.InTapHandle(a.tap),
		grpc.ChainUnaryInterceptor(a.unary),
		grpc.ChainStreamInterceptor(a.stream),
	}
}

// Counts returns the calls in flight and those waiting for their request
// message, after forgetting the waiting calls whose stream has ended.
func (a *Admission) Counts() (calls, waiting int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.purge()
	return a.calls, a.waiting.n
}

// purgeEvery is how often, at most, tap looks for calls whose stream ended
// before their message.
const purgeEvery = 50 * time.Millisecond

var errEvicted = errors.New("call cancelled: its request message did not come and another client needed its place")

// tap admits a call when its HEADERS arrive, before gRPC starts a handler
// for it. gRPC calls it with the connection's lock held: it never blocks.
func (a *Admission) tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return ctx, nil
	}
	a.mu.Lock()
	reason, evict := a.check(a.lookup(p.Addr))
	if (reason != "" || evict != nil) && time.Since(a.purged) >= purgeEvery {
		// Calls whose stream ended before their message still count:
		// forget them and look again. Not at every call past a bound: a
		// flood of them would spend the server's time scanning.
		a.purge()
		a.purged = time.Now()
		reason, evict = a.check(a.lookup(p.Addr))
	}
	if reason != "" {
		a.mu.Unlock()
		a.o.OnRefuse(reason)
		return nil, status.Error(codes.ResourceExhausted, "server busy: "+reasonText[reason])
	}
	if evict != nil {
		a.forget(evict)
	}
	// The address's entry, taken after every removal above: one of them
	// may have removed it.
	cl := a.client(p.Addr)
	cctx, cancel := context.WithCancelCause(ctx)
	c := &call{Context: cctx, cancel: cancel, client: cl, started: time.Now(), inFlight: true, waiting: true}
	a.calls++
	cl.calls++
	a.waiting.push(c)
	cl.waiting.push(c)
	startSweep := !a.sweeping && !a.closed
	if startSweep {
		a.sweeping = true
		a.swept.Add(1)
	}
	a.mu.Unlock()
	if evict != nil {
		evict.cancel(errEvicted)
		a.o.OnRefuse(CancelledEvicted)
	}
	if startSweep {
		go a.sweep()
	}
	return c, nil
}

// check says which bound refuses a call from cl (nil: an address without
// calls), or which waiting call to cancel to make room for it. a.mu must
// be held.
func (a *Admission) check(cl *clientCalls) (reason string, evict *call) {
	var calls, waiting int
	if cl != nil {
		calls, waiting = cl.calls, cl.waiting.n
	}
	switch {
	case a.o.MaxCalls > 0 && a.calls >= a.o.MaxCalls:
		return RefusedCalls, nil
	case a.o.MaxCallsPerClient > 0 && calls >= a.o.MaxCallsPerClient:
		return RefusedClientCalls, nil
	case a.o.MaxWaitingPerClient > 0 && waiting >= a.o.MaxWaitingPerClient:
		return RefusedClientWaiting, nil
	case a.o.MaxWaiting > 0 && a.waiting.n >= a.o.MaxWaiting:
		if evict = a.victim(waiting); evict == nil {
			return RefusedWaiting, nil
		}
		return "", evict
	}
	return "", nil
}

// purge forgets the waiting calls whose stream has ended (reset by the
// client, or the connection closed): such a call never reaches the
// interceptors. a.mu must be held.
func (a *Admission) purge() {
	for c := a.waiting.head; c != nil; {
		next := c.next(byAge)
		if c.Context.Err() != nil {
			a.forget(c)
		}
		c = next
	}
}

var reasonText = map[string]string{
	RefusedCalls:         "too many calls in flight",
	RefusedClientCalls:   "too many calls in flight from this client",
	RefusedWaiting:       "too many calls waiting for their request message",
	RefusedClientWaiting: "too many calls from this client waiting for their request message",
}

// lookup returns the calls of the address addr, or nil if it has none.
// a.mu must be held.
func (a *Admission) lookup(addr net.Addr) *clientCalls {
	if ta, ok := addr.(*net.TCPAddr); ok {
		return a.clients[string(ta.IP.To16())] // no allocation
	}
	return a.clients[ClientAddr(addr)]
}

// client returns the calls of the address addr, creating the entry. a.mu
// must be held.
func (a *Admission) client(addr net.Addr) *clientCalls {
	cl := a.lookup(addr)
	if cl == nil {
		cl = &clientCalls{key: ClientAddr(addr), waiting: callList{kind: byClient}}
		a.clients[cl.key] = cl
	}
	return cl
}

// victim picks the waiting call to cancel to make room for one from an
// address with waiting calls waiting: the oldest of the address with the
// most waiting calls, if it has at least two more. a.mu must be held.
func (a *Admission) victim(waiting int) *call {
	var top *clientCalls
	for _, x := range a.clients {
		if top == nil || x.waiting.n > top.waiting.n {
			top = x
		}
	}
	if top == nil || top.waiting.n < waiting+2 {
		return nil
	}
	return top.waiting.head
}

// received stops counting c as waiting. a.mu must be held.
func (a *Admission) received(c *call) {
	if c.waiting {
		c.waiting = false
		a.waiting.remove(c)
		c.client.waiting.remove(c)
	}
}

// leave stops counting c as in flight. A call leaves only after it stopped
// waiting (see forget). a.mu must be held.
func (a *Admission) leave(c *call) {
	if !c.inFlight {
		return
	}
	c.inFlight = false
	a.calls--
	c.client.calls--
	if c.client.calls == 0 {
		delete(a.clients, c.client.key)
	}
}

// forget stops counting c at all. a.mu must be held.
func (a *Admission) forget(c *call) {
	a.received(c)
	a.leave(c)
}

// arrived records that c's request message arrived; a streaming call then
// also stops counting as in flight.
func (a *Admission) arrived(c *call, streaming bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.received(c)
	if streaming {
		a.leave(c)
	}
}

// end stops counting c: its handler returned.
func (a *Admission) end(c *call) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.forget(c)
}

// sweep forgets calls whose stream ended before their message and cancels
// those whose message is overdue, every tenth of MessageTimeout (every
// second without one), until no call waits or Close.
func (a *Admission) sweep() {
	every := time.Second
	if a.o.MessageTimeout > 0 {
		every = max(a.o.MessageTimeout/10, time.Millisecond)
	}
	defer a.swept.Done()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		var now time.Time
		select {
		case now = <-tick.C:
		case <-a.stop:
			return
		}
		var overdue []*call
		a.mu.Lock()
		for c := a.waiting.head; c != nil; {
			next := c.next(byAge)
			switch {
			case c.Context.Err() != nil:
				a.forget(c)
			case a.o.MessageTimeout > 0 && now.Sub(c.started) >= a.o.MessageTimeout:
				a.forget(c)
				overdue = append(overdue, c)
			}
			c = next
		}
		idle := a.waiting.n == 0
		if idle {
			a.sweeping = false
		}
		a.mu.Unlock()
		for _, c := range overdue {
			c.cancel(errMessageTimeout)
			a.o.OnRefuse(CancelledNoMessage)
		}
		if idle {
			return
		}
	}
}

var errMessageTimeout = errors.New("call cancelled: its request message did not arrive in time")

func (a *Admission) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	// gRPC calls unary interceptors once the message is in.
	if c, ok := ctx.Value(callKey{}).(*call); ok {
		a.arrived(c, false)
		defer a.end(c)
	}
	return h(ctx, req)
}

func (a *Admission) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	c, ok := ss.Context().Value(callKey{}).(*call)
	if !ok {
		return h(srv, ss)
	}
	defer a.end(c)
	return h(srv, &firstMessage{ServerStream: ss, a: a, c: c})
}

// firstMessage reports a streaming call's first request message.
type firstMessage struct {
	grpc.ServerStream
	a    *Admission
	c    *call
	seen bool
}

func (s *firstMessage) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if !s.seen && err == nil {
		s.seen = true
		s.a.arrived(s.c, true)
	}
	return err
}
