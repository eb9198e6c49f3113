package rules

import (
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
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

	counts     sync.Map     // label -> *atomic.Uint64
	last       atomic.Int64 // unix ns of the last record; 0 before the first
	suppressed atomic.Uint64
}

// NewUnmatchedLog returns an UnmatchedLog writing to log (nil means
// slog.Default()) at most once every interval (0 means every unmatched
// request).
func NewUnmatchedLog(log *slog.Logger, every time.Duration) *UnmatchedLog {
	if log == nil {
		log = slog.Default()
	}
	return &UnmatchedLog{log: log, every: every, now: time.Now}
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

// count counts one request under label and reports whether a record is
// due, with the number of requests it stands for. It takes no lock: many
// front-end goroutines may call it at once.
func (u *UnmatchedLog) count(label string) (uint64, bool) {
	c, ok := u.counts.Load(label)
	if !ok {
		c, _ = u.counts.LoadOrStore(label, new(atomic.Uint64))
	}
	c.(*atomic.Uint64).Add(1)
	u.suppressed.Add(1)
	now := u.now().UnixNano()
	last := u.last.Load()
	if last != 0 && now-last < int64(u.every) {
		return 0, false
	}
	if !u.last.CompareAndSwap(last, max(now, 1)) {
		return 0, false // another goroutine writes this record
	}
	return u.suppressed.Swap(0), true
}

// Counts returns the number of unmatched requests recorded, by label.
func (u *UnmatchedLog) Counts() map[string]uint64 {
	out := map[string]uint64{}
	u.counts.Range(func(k, v any) bool {
		out[k.(string)] = v.(*atomic.Uint64).Load()
		return true
	})
	return out
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
