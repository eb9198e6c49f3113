package rulelog

import (
	"log/slog"
	"sync"
	"time"

	"github.com/floodgate-dev/floodgate/rules"
)

// Shadow logs what shadow rules would have rejected without flooding the
// log: at most one record per rule per interval, carrying how many
// rejections that rule had since its previous record. Its memory grows with
// the number of rules, not of keys. It is safe for concurrent use.
type Shadow struct {
	log   *slog.Logger
	every time.Duration
	now   func() time.Time

	mu    sync.Mutex
	rules map[string]*shadowState
}

type shadowState struct {
	last       time.Time
	suppressed int64
}

// NewShadow returns a Shadow writing to log (nil means
// slog.Default()) at most once per rule every interval (0 means every
// rejection).
func NewShadow(log *slog.Logger, every time.Duration) *Shadow {
	if log == nil {
		log = slog.Default()
	}
	return &Shadow{log: log, every: every, now: time.Now, rules: map[string]*shadowState{}}
}

// Record logs the shadow rejections in res; attrs are added to each record
// (the path, the domain).
func (s *Shadow) Record(res rules.Result, attrs ...any) {
	for i := range res.Statuses {
		st := &res.Statuses[i]
		if !st.Shadow || st.Decision.Allowed {
			continue
		}
		n, ok := s.due(st.Rule)
		if !ok {
			continue
		}
		args := append([]any{"rule", st.Rule, "key", st.Key, "limit", st.Limit, "window", st.Window,
			"retry_after", st.Decision.RetryAfter, "rejections", n}, attrs...)
		s.log.Info("shadow rule would reject", args...)
	}
}

// due counts one rejection for rule and reports whether to log it now, with
// the number of rejections the record stands for.
func (s *Shadow) due(rule string) (int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	st, ok := s.rules[rule]
	if !ok {
		st = &shadowState{}
		s.rules[rule] = st
	}
	st.suppressed++
	if ok && now.Sub(st.last) < s.every {
		return 0, false
	}
	n := st.suppressed
	st.suppressed = 0
	st.last = now
	return n, true
}
