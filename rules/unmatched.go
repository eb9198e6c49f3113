package rules

import (
	"log/slog"
	"maps"
	"strings"
	"sync"
	"time"
)

// Why no rule applied to a request, as Result.Unmatched says.
const (
	// UnmatchedDomain: no rule set has the request's domain (a mistyped
	// domain, or a client configured for another rule file).
	UnmatchedDomain = "domain"
	// UnmatchedRules: the domain exists, but none of its rules matched any
	// of the request's descriptors (or lacked an entry a rule counts by).
	UnmatchedRules = "rules"
)

// UnmatchedOther is the label unmatched requests of unknown domains are
// counted under, so that the number of labels stays bounded by the rule
// files and not by what clients send.
const UnmatchedOther = "other"

// UnmatchedLabel returns the label an unmatched result is counted under:
// the rule set's domain it was checked in, or UnmatchedOther when no rule
// set has the request's domain. It returns "" for a result some rule
// applied to.
func UnmatchedLabel(res Result) string {
	switch {
	case res.Unmatched == "":
		return ""
	case res.Domain == "":
		return UnmatchedOther
	default:
		return res.Domain
	}
}

// unmatched tells why no rule of s applied to a request for domain, and the
// domain it was checked in ("" when no set has it).
func (s *Set) unmatched(domain string) (checkedIn, why string) {
	if domain == "" || domain == s.domain {
		return s.domain, UnmatchedRules
	}
	for _, m := range s.more {
		if m.domain == domain {
			return m.domain, UnmatchedRules
		}
	}
	return "", UnmatchedDomain
}

// UnmatchedLog counts requests no rule applied to, by UnmatchedLabel, and
// logs them without flooding the log: at most one record per interval, with
// one example request and the number of unmatched requests since the
// previous record. Such requests pass without being limited, so a mistyped
// domain or a rule on an entry no client sends would otherwise go unseen.
// Its memory grows with the number of domains, not of requests. It is safe
// for concurrent use.
type UnmatchedLog struct {
	log   *slog.Logger
	every time.Duration
	now   func() time.Time

	mu         sync.Mutex
	counts     map[string]uint64
	last       time.Time
	logged     bool
	suppressed uint64
}

// NewUnmatchedLog returns an UnmatchedLog writing to log (nil means
// slog.Default()) at most once every interval (0 means every unmatched
// request).
func NewUnmatchedLog(log *slog.Logger, every time.Duration) *UnmatchedLog {
	if log == nil {
		log = slog.Default()
	}
	return &UnmatchedLog{log: log, every: every, now: time.Now, counts: map[string]uint64{}}
}

// Record counts req if no rule applied to it (res.Unmatched is set) and
// logs it if a record is due; attrs are added to the record (the path, the
// front end). It reports whether req was unmatched.
func (u *UnmatchedLog) Record(req Request, res Result, attrs ...any) bool {
	label := UnmatchedLabel(res)
	if label == "" {
		return false
	}
	n, due := u.count(label)
	if !due {
		return true
	}
	why := "no rule set has this domain"
	if res.Unmatched == UnmatchedRules {
		why = "no rule of the domain matches the descriptors"
	}
	args := append([]any{"domain", req.Domain, "counted_as", label, "reason", why,
		"example", FormatDescriptors(req.Descriptors, 64), "unmatched_since_last_record", n}, attrs...)
	u.log.Warn("request matched no rule and was not limited", args...)
	return true
}

func (u *UnmatchedLog) count(label string) (uint64, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.counts[label]++
	u.suppressed++
	now := u.now()
	if u.logged && now.Sub(u.last) < u.every {
		return 0, false
	}
	n := u.suppressed
	u.suppressed, u.last, u.logged = 0, now, true
	return n, true
}

// Counts returns the number of unmatched requests recorded, by label.
func (u *UnmatchedLog) Counts() map[string]uint64 {
	u.mu.Lock()
	defer u.mu.Unlock()
	return maps.Clone(u.counts)
}

// FormatDescriptors writes descriptors as "k=v,k=v; k=v" for logs, each
// value cut to at most maxValue bytes (values may be long or carry
// credentials such as API keys).
func FormatDescriptors(ds []Descriptor, maxValue int) string {
	var b strings.Builder
	for i, d := range ds {
		if i > 0 {
			b.WriteString("; ")
		}
		for j, e := range d {
			if j > 0 {
				b.WriteByte(',')
			}
			v := e.Value
			if len(v) > maxValue {
				v = v[:maxValue] + "..."
			}
			b.WriteString(e.Key)
			b.WriteByte('=')
			b.WriteString(v)
		}
		if b.Len() > 1024 {
			b.WriteString(" ...")
			break
		}
	}
	return b.String()
}
