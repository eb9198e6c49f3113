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
type Admission struct {
	o AdmissionOptions

	mu       sync.Mutex
	calls    int
	waiting  int
	clients  map[string]*clientCalls
	sweeping bool      // the sweep goroutine runs
	purged   time.Time // when tap last forgot calls whose stream ended
	closed   bool

	stop  chan struct{} // closed by Close
	swept sync.WaitGroup
}

// clientCalls is one client address's calls.
type clientCalls struct {
	key     string
	calls   int
	waiting callList // oldest first
}

// call is one admitted call; it is the context gRPC runs the call with.
type call struct {
	context.Context
	cancel   context.CancelCauseFunc
	client   *clientCalls
	started  time.Time
	inFlight bool // counted in calls
	// prev and next link the call into its client's waiting list while it
	// waits for its request message.
	prev, next *call
	listed     bool
}

// callKey finds the call in a context.
type callKey struct{}

func (c *call) Value(k any) any {
	if k == (callKey{}) {
		return c
	}
	return c.Context.Value(k)
}

// callList is a doubly linked list of calls, oldest first.
type callList struct {
	head, tail *call
	n          int
}

func (l *callList) push(c *call) {
	c.prev, c.next, c.listed = l.tail, nil, true
	if l.tail != nil {
		l.tail.next = c
	} else {
		l.head = c
	}
	l.tail = c
	l.n++
}

func (l *callList) remove(c *call) {
	if !c.listed {
		return
	}
	if c.prev != nil {
		c.prev.next = c.next
	} else {
		l.head = c.next
	}
	if c.next != nil {
		c.next.prev = c.prev
	} else {
		l.tail = c.prev
	}
	c.prev, c.next, c.listed = nil, nil, false
	l.n--
}

// NewAdmission returns the bounds o describes. A goroutine runs while
// calls wait for their message: it keeps the message deadline and forgets
// calls whose stream ended first (see sweep).
func NewAdmission(o AdmissionOptions) *Admission {
	if o.OnRefuse == nil {
		o.OnRefuse = func(string) {}
	}
	return &Admission{o: o, clients: map[string]*clientCalls{}, stop: make(chan struct{})}
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
// message.
func (a *Admission) Counts() (calls, waiting int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.purge(nil)
	return a.calls, a.waiting
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
	cl := a.client(p.Addr)
	reason, evict := a.check(cl)
	if (reason != "" || evict != nil) && time.Since(a.purged) >= purgeEvery {
		// Calls whose stream ended before their message still count:
		// forget them and look again. Not at every call past a bound: a
		// flood of them would spend the server's time scanning.
		a.purge(nil)
		a.purged = time.Now()
		reason, evict = a.check(cl)
	}
	if evict != nil {
		a.received(evict)
		a.leave(evict)
	}
	if reason != "" {
		if cl.calls == 0 {
			delete(a.clients, cl.key)
		}
		a.mu.Unlock()
		a.o.OnRefuse(reason)
		return nil, status.Error(codes.ResourceExhausted, "server busy: "+reasonText[reason])
	}
	cctx, cancel := context.WithCancelCause(ctx)
	c := &call{Context: cctx, cancel: cancel, client: cl, started: time.Now(), inFlight: true}
	a.calls++
	cl.calls++
	a.waiting++
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

// check says which bound refuses a call from cl, or which waiting call to
// cancel to make room for it. a.mu must be held.
func (a *Admission) check(cl *clientCalls) (reason string, evict *call) {
	switch {
	case a.o.MaxCalls > 0 && a.calls >= a.o.MaxCalls:
		return RefusedCalls, nil
	case a.o.MaxCallsPerClient > 0 && cl.calls >= a.o.MaxCallsPerClient:
		return RefusedClientCalls, nil
	case a.o.MaxWaitingPerClient > 0 && cl.waiting.n >= a.o.MaxWaitingPerClient:
		return RefusedClientWaiting, nil
	case a.o.MaxWaiting > 0 && a.waiting >= a.o.MaxWaiting:
		if evict = a.victim(cl); evict == nil {
			return RefusedWaiting, nil
		}
		return "", evict
	}
	return "", nil
}

// purge stops counting the waiting calls whose stream has ended (reset by
// the client, or the connection closed), of cl or, if cl is nil, of every
// client. Such a call never reaches the interceptors. a.mu must be held.
func (a *Admission) purge(cl *clientCalls) {
	if cl != nil {
		a.purgeClient(cl)
		return
	}
	for _, cl := range a.clients {
		a.purgeClient(cl)
	}
}

func (a *Admission) purgeClient(cl *clientCalls) {
	for c := cl.waiting.head; c != nil; {
		next := c.next
		if c.Context.Err() != nil {
			a.received(c)
			a.leave(c)
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

// client returns the calls of the address a, creating the entry. a.mu must
// be held.
func (a *Admission) client(addr net.Addr) *clientCalls {
	var cl *clientCalls
	if ta, ok := addr.(*net.TCPAddr); ok {
		cl = a.clients[string(ta.IP.To16())] // no allocation on a hit
	} else {
		cl = a.clients[ClientAddr(addr)]
	}
	if cl == nil {
		cl = &clientCalls{key: ClientAddr(addr)}
		a.clients[cl.key] = cl
	}
	return cl
}

// victim picks the waiting call to cancel to make room for one from cl: the
// oldest of the address with the most waiting calls, if it has at least
// two more than cl. a.mu must be held.
func (a *Admission) victim(cl *clientCalls) *call {
	var top *clientCalls
	for _, x := range a.clients {
		if top == nil || x.waiting.n > top.waiting.n {
			top = x
		}
	}
	if top == nil || top.waiting.n < cl.waiting.n+2 {
		return nil
	}
	return top.waiting.head
}

// received stops counting c as waiting. a.mu must be held.
func (a *Admission) received(c *call) {
	if c.listed {
		c.client.waiting.remove(c)
		a.waiting--
	}
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
	a.received(c)
	a.leave(c)
}

// leave stops counting c as in flight. a.mu must be held.
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
		a.purge(nil)
		if a.o.MessageTimeout > 0 {
			for _, cl := range a.clients {
				for c := cl.waiting.head; c != nil && now.Sub(c.started) >= a.o.MessageTimeout; c = c.next {
					overdue = append(overdue, c)
				}
			}
		}
		for _, c := range overdue {
			a.received(c)
			a.leave(c)
		}
		idle := a.waiting == 0
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
