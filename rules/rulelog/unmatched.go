package rulelog

import (
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-dev/floodgate/rules"
)

// other is the label unmatched requests of unknown domains are counted
// under, so that the number of labels stays bounded by the rule files and
// not by what clients send.
const other = "other"

// label returns the label an unmatched result is counted under: the rule
// set's domain it was checked in, or other when no rule set has the
// request's domain. It returns "" for a result some rule applied to.
func label(res rules.Result) string {
	switch {
	case res.Unmatched == "":
		return ""
	case res.Domain == "":
		return other
	default:
		return res.Domain
	}
}

// Unmatched counts requests no rule applied to, by label, and
// logs them without flooding the log: at most one record per interval, with
// one example request and the number of unmatched requests since the
// previous record. Such requests pass without being limited, so a mistyped
// domain or a rule on an entry no client sends would otherwise go unseen.
// Its memory grows with the number of domains, not of requests. It is safe
// for concurrent use.
type Unmatched struct {
	log   *slog.Logger
	every time.Duration
	now   func() time.Time

	counts     sync.Map     // label -> *atomic.Uint64
	last       atomic.Int64 // unix ns of the last record; 0 before the first
	suppressed atomic.Uint64
}

// NewUnmatched returns an Unmatched writing to log (nil means
// slog.Default()) at most once every interval (0 means every unmatched
// request).
func NewUnmatched(log *slog.Logger, every time.Duration) *Unmatched {
	if log == nil {
		log = slog.Default()
	}
	return &Unmatched{log: log, every: every, now: time.Now}
}

// Record counts req if no rule applied to it (res.Unmatched is set) and
// logs it if a record is due; attrs are added to the record (the path, the
// front end). It reports whether req was unmatched.
func (u *Unmatched) Record(req rules.Request, res rules.Result, attrs ...any) bool {
	name := label(res)
	if name == "" {
		return false
	}
	n, due := u.count(name)
	if !due {
		return true
	}
	why := "no rule set has this domain"
	if res.Unmatched == rules.UnmatchedRules {
		why = "no rule of the domain matches the descriptors"
	}
	args := append([]any{"domain", req.Domain, "counted_as", name, "reason", why,
		"example", formatDescriptors(req.Descriptors, 64), "unmatched_since_last_record", n}, attrs...)
	u.log.Warn("request matched no rule and was not limited", args...)
	return true
}

// count counts one request under label and reports whether a record is
// due, with the number of requests it stands for. It takes no lock: many
// front-end goroutines may call it at once.
func (u *Unmatched) count(label string) (uint64, bool) {
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
func (u *Unmatched) Counts() map[string]uint64 {
	out := map[string]uint64{}
	u.counts.Range(func(k, v any) bool {
		out[k.(string)] = v.(*atomic.Uint64).Load()
		return true
	})
	return out
}

// formatDescriptors writes descriptors as "k=v,k=v; k=v" for logs, each
// value cut to at most maxValue bytes (values may be long or carry
// credentials such as API keys).
func formatDescriptors(ds []rules.Descriptor, maxValue int) string {
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
