package rulelog

import (
	"hash/maphash"
	"log/slog"
	"sync"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/rules"
)

// WarningSlots is the number of keys Warnings remembers: 4,096 slots of 16
// bytes, 64 KiB whatever the number of keys.
const WarningSlots = 4096

// Warnings logs the keys that reach their rule's warning level (warn_at):
// one record per key and period, written by the call whose units crossed
// the level (rules.Status.CrossedWarning). The period is a fixed window's
// or calendar period's own (until the count starts afresh), and for a
// rolling window the window's length from the record: a key whose count
// falls back under the level and climbs again within it is not logged
// again.
//
// Its memory is bounded: a table of WarningSlots slots, each holding the
// hash of one rule and key and the end of the period it was logged in. A
// key's slot is chosen by its hash; a key that finds its slot taken by
// another key whose period has not ended takes it over, so with more keys
// crossing in one period than there are slots a key may be logged twice
// in a period, never less than once. It is safe for concurrent use.
type Warnings struct {
	log  *slog.Logger
	now  func() time.Time
	seed maphash.Seed

	mu    sync.Mutex
	slots [WarningSlots]warnSlot
}

// warnSlot is one remembered key: its hash and the end of the period it
// was logged in (Unix nanoseconds).
type warnSlot struct {
	hash  uint64
	until int64
}

// NewWarnings returns a Warnings writing to log (nil means slog.Default()).
func NewWarnings(log *slog.Logger) *Warnings {
	if log == nil {
		log = slog.Default()
	}
	return &Warnings{log: log, now: time.Now, seed: maphash.MakeSeed()}
}

// Record logs the crossings in res that were not logged in their key's
// period yet, and returns how many statuses of res crossed (logged or
// not); attrs are added to each record (the domain). A nil Warnings logs
// nothing.
func (w *Warnings) Record(res rules.Result, attrs ...any) int {
	crossed := 0
	if w == nil {
		return 0
	}
	for i := range res.Statuses {
		st := &res.Statuses[i]
		if !st.CrossedWarning {
			continue
		}
		crossed++
		if !w.due(st) {
			continue
		}
		args := append([]any{"rule", st.Rule, "key", st.Key, "used", st.Used, "limit", st.Decision.Limit,
			"warn_at", st.WarnAt, "reset_after", st.Decision.ResetAfter}, attrs...)
		if st.Calendar != "" {
			args = append(args, "period", st.Calendar)
		}
		w.log.Warn("rule warning level reached", args...)
	}
	return crossed
}

// due reports whether st's key is to be logged now, remembering it until
// the end of its period if so.
func (w *Warnings) due(st *rules.Status) bool {
	var h maphash.Hash
	h.SetSeed(w.seed)
	h.WriteString(st.Rule)
	h.WriteByte(0)
	h.WriteString(st.Key)
	sum := h.Sum64()
	now := w.now().UnixNano()
	until := now + int64(st.Window)
	switch {
	case !st.PeriodEnd.IsZero():
		until = st.PeriodEnd.UnixNano()
	case st.Algorithm == algorithm.FixedWindow:
		until = now + int64(st.Decision.ResetAfter)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	s := &w.slots[sum%WarningSlots]
	if s.hash == sum && now < s.until {
		return false
	}
	*s = warnSlot{hash: sum, until: until}
	return true
}
