package metrics

import (
	"math"
	"sync"
	"time"
)

// The decisions history the status page's chart starts from when it is
// opened: one point a second for the last hour, in a ring of fixed size.
const (
	// HistoryStep is the span of one point.
	HistoryStep = time.Second
	// HistoryPoints is how many points are kept: an hour's.
	HistoryPoints = 3600
	// HistoryBytes is the memory the points take, whatever the traffic:
	// 16 bytes a point.
	HistoryBytes = HistoryPoints * 16
)

// Point is the decisions of one step of the history.
type Point struct {
	// Time is the end of the step, in Unix milliseconds.
	Time int64 `json:"t"`
	// Decided counts the requests checked in the step (allowed, rejected,
	// unmatched and failed); Rejected those rejected. Both saturate at
	// 2^32-1.
	Decided  uint32 `json:"n"`
	Rejected uint32 `json:"rej"`
}

// history is a ring of the last HistoryPoints points.
type history struct {
	mu     sync.Mutex
	points [HistoryPoints]Point
	next   int // where the next point goes
	full   bool
	// decided and rejected are the totals at the last point.
	decided, rejected uint64
	last              time.Time
}

// RecordHistory adds a point to the history: the requests checked since
// the last point. The server calls it once every HistoryStep; a call less
// than half a step after the last adds nothing.
func (r *Recorder) RecordHistory() {
	now := r.now()
	decided := r.totals.allowed.Load() + r.totals.rejected.Load() + r.totals.unmatched.Load() + r.totals.errors.Load()
	rejected := r.totals.rejected.Load()
	h := &r.history
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.last.IsZero() {
		h.last = r.start
	}
	if now.Sub(h.last) < HistoryStep/2 {
		return
	}
	h.points[h.next] = Point{Time: now.UnixMilli(), Decided: saturate(decided - h.decided), Rejected: saturate(rejected - h.rejected)}
	h.next = (h.next + 1) % HistoryPoints
	h.full = h.full || h.next == 0
	h.decided, h.rejected, h.last = decided, rejected, now
}

// History returns the recorded points, oldest first: at most the last
// hour's.
func (r *Recorder) History() []Point {
	h := &r.history
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.full {
		return append([]Point(nil), h.points[:h.next]...)
	}
	return append(append(make([]Point, 0, HistoryPoints), h.points[h.next:]...), h.points[:h.next]...)
}

func saturate(n uint64) uint32 { return uint32(min(n, math.MaxUint32)) }
