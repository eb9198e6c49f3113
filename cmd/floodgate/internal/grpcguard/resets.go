package grpcguard

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// ResetOptions configures Resets.
//
// A stream reset is spent when the client resets a stream it opened
// (RST_STREAM, "rapid reset") or makes the server reset it: a protocol
// error on the stream (a WINDOW_UPDATE of increment 0, DATA past the
// window, too many streams: "MadeYouReset"), or a stream the server gives
// up on for the client's sake (its deadline passed, its answer could not
// be written). Only a stream still open is spent, once, whichever side
// reset it. A stream the server ends normally (NO_ERROR) spends nothing,
// nor does a call cancelled after it was served for FreeCancelAfter.
type ResetOptions struct {
	// Budget is how many stream resets a client address may have in hand:
	// each reset spends one, each of its streams that completes (the
	// client sent its whole request, the server its whole answer) earns
	// StreamCredit, and time earns RefillPerSecond, up to Budget. With a
	// StreamCredit of 1, a client that resets fewer than half of its
	// streams never runs out; streams the server refuses or answers early
	// earn nothing, so a flood of them buys no resets. A reset with
	// nothing left cuts the connection off. Budget 0 means no budget per
	// address.
	Budget          float64
	StreamCredit    float64
	RefillPerSecond float64
	// ListenerBudget, ListenerStreamCredit and ListenerRefillPerSecond are
	// the same for the listener as a whole, every address's streams and
	// resets together, so that many addresses resetting in turn cannot
	// spend more than it: a reset that finds the listener's budget empty
	// cuts its connection off as one that finds its address's empty does.
	// ListenerBudget 0 means no listener-wide budget.
	ListenerBudget          float64
	ListenerStreamCredit    float64
	ListenerRefillPerSecond float64
	// FreeCancelAfter: a call cancelled (by the client's RST_STREAM, or by
	// the server's RST_STREAM CANCEL when the call's own deadline passed)
	// at least this long after its HEADERS, with its request complete,
	// spends nothing: it was being served, as an Envoy whose RLS timeout
	// fires cancels it, not thrown away. 0 means every cancellation
	// spends.
	FreeCancelAfter time.Duration
	// Cooldown is how long a client address whose connection was cut off
	// has its other connections cut at their next stream and new ones
	// refused.
	Cooldown time.Duration
	// OnCut, if set, is called with CutResets or CutListenerResets for
	// each connection cut off, and with CutCooldown for each connection
	// refused or cut during a cooldown.
	OnCut func(reason string)
	// Now is the clock (time.Now if nil).
	Now func() time.Time
}

// Reasons passed to ResetOptions.OnCut.
const (
	CutResets         = "resets"
	CutListenerResets = "listener_resets"
	CutCooldown       = "cooldown"
)

// Resets keeps the stream-reset budget of a listener and of every client
// address with a connection to it. Wrap the gRPC server's transport
// credentials with Credentials, or each HTTP/2 connection with Watch, to
// apply it.
type Resets struct {
	o ResetOptions

	mu        sync.Mutex
	clients   map[string]*resetAccount
	lastSweep time.Time

	listener resetAccount // when o.ListenerBudget > 0
}

// resetAccount is one budget: a client address's, or the listener's.
type resetAccount struct {
	mu        sync.Mutex
	tokens    float64
	refilled  time.Time // when time's earnings were last added
	coolUntil time.Time // zero unless cut off
	conns     int       // open connections; guarded by Resets.mu
}

// NewResets returns the reset accounting o describes.
func NewResets(o ResetOptions) *Resets {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.OnCut == nil {
		o.OnCut = func(string) {}
	}
	r := &Resets{o: o, clients: map[string]*resetAccount{}}
	r.listener.tokens, r.listener.refilled = o.ListenerBudget, o.Now()
	return r
}

// errCoolingDown refuses a connection from an address that was cut off.
var errCoolingDown = errors.New("grpcguard: client address cut off for resetting too many streams; retry later")

// errCutOff is what the server reads from a connection cut off: a closed
// connection (net.ErrClosed), so that HTTP/2 servers end it as one the
// client closed, without logging a read error for each.
var errCutOff = fmt.Errorf("grpcguard: connection cut off for resetting too many streams: %w", net.ErrClosed)

// open counts a new connection from addr, or refuses it during the
// address's cooldown.
func (r *Resets) open(addr net.Addr) (*resetAccount, error) {
	now := r.o.Now()
	key := ClientAddr(addr)
	r.mu.Lock()
	defer r.mu.Unlock()
	if now.Sub(r.lastSweep) >= time.Second {
		r.sweep(now)
	}
	a := r.clients[key]
	if a == nil {
		a = &resetAccount{tokens: r.o.Budget, refilled: now}
		r.clients[key] = a
	}
	a.mu.Lock()
	cooling := now.Before(a.coolUntil)
	a.mu.Unlock()
	if cooling {
		r.o.OnCut(CutCooldown)
		return nil, errCoolingDown
	}
	a.conns++
	return a, nil
}

// close stops counting a connection of a.
func (r *Resets) close(a *resetAccount) {
	r.mu.Lock()
	a.conns--
	r.mu.Unlock()
}

// sweep forgets addresses without connections whose budget is full again
// and whose cooldown is over. r.mu must be held.
func (r *Resets) sweep(now time.Time) {
	r.lastSweep = now
	for k, a := range r.clients {
		if a.conns > 0 {
			continue
		}
		a.mu.Lock()
		done := !now.Before(a.coolUntil) && a.tokens+now.Sub(a.refilled).Seconds()*r.o.RefillPerSecond >= r.o.Budget
		a.mu.Unlock()
		if done {
			delete(r.clients, k)
		}
	}
}

// Clients returns the number of client addresses being accounted.
func (r *Resets) Clients() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.clients)
}

// opened reports whether a may open a stream: false if the address is
// cooling down (the connection must then be cut off).
func (r *Resets) opened(a *resetAccount) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.coolUntil.IsZero() || r.cooled(a)
}

// completed earns a's credit, and the listener's, for a stream that
// completed.
func (r *Resets) completed(a *resetAccount) {
	a.mu.Lock()
	a.tokens = min(a.tokens+r.o.StreamCredit, r.o.Budget)
	a.mu.Unlock()
	if r.o.ListenerBudget > 0 {
		l := &r.listener
		l.mu.Lock()
		l.tokens = min(l.tokens+r.o.ListenerStreamCredit, r.o.ListenerBudget)
		l.mu.Unlock()
	}
}

// reset spends one of a's resets and one of the listener's. It returns ""
// if both had one, or else why the connection must be cut off
// (CutResets, CutListenerResets or CutCooldown); a's cooldown then starts.
func (r *Resets) reset(a *resetAccount) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.coolUntil.IsZero() && !r.cooled(a) {
		return CutCooldown
	}
	a.tokens--
	if r.o.Budget > 0 && a.tokens < 0 {
		// Out: add what time has earned since the last refill, then decide.
		now := r.o.Now()
		a.tokens = min(a.tokens+now.Sub(a.refilled).Seconds()*r.o.RefillPerSecond, r.o.Budget)
		a.refilled = now
		if a.tokens < 0 {
			a.coolUntil = now.Add(r.o.Cooldown)
			return CutResets
		}
	}
	if r.o.ListenerBudget > 0 && !r.listenerReset() {
		a.coolUntil = r.o.Now().Add(r.o.Cooldown)
		return CutListenerResets
	}
	return ""
}

// listenerReset spends one of the listener's resets; it reports false,
// spending nothing, if none is left.
func (r *Resets) listenerReset() bool {
	l := &r.listener
	now := r.o.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.tokens = min(l.tokens+now.Sub(l.refilled).Seconds()*r.o.ListenerRefillPerSecond, r.o.ListenerBudget)
	l.refilled = now
	if l.tokens < 1 {
		return false
	}
	l.tokens--
	return true
}

// cooled reports whether a's cooldown is over, and then clears it. a.mu
// must be held.
func (r *Resets) cooled(a *resetAccount) bool {
	now := r.o.Now()
	if now.Before(a.coolUntil) {
		return false
	}
	a.coolUntil = time.Time{}
	a.tokens = min(a.tokens+now.Sub(a.refilled).Seconds()*r.o.RefillPerSecond, r.o.Budget)
	a.refilled = now
	return true
}

// ClientAddr is the part of a remote address client accounting goes by:
// the IP address without the port.
func ClientAddr(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		return string(ta.IP.To16())
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}
