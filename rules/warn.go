package rules

import (
	"math"

	"github.com/floodgate-dev/floodgate/algorithm"
)

// Soft limits
//
// A rule with warn_at: f (0 < f <= 1) warns before it rejects: a key is in
// warning once the units its rule counts reach ceil(f·limit) of the limit
// that applies (a calendar period's limit includes its carry). Every
// status of such a rule says whether its key is in warning (Status.Warning)
// and whether this call's own units took it there (Status.CrossedWarning):
// a counted request or a charge whose units take the key from below the
// level to it. Peeks, rejected requests and charges of nothing cross
// nothing. A fixed or calendar window crosses at most once per key and
// window (its count only grows within a window); a rolling window crosses
// again when its count falls back under the level and climbs again.

// warnAt reads a rule's warn_at: a fraction of the limit above 0 and at
// most 1, kept in millionths so that the level is exact in integers.
func (d *decoder) warnAt(r *rule, v field, what string, unlimited bool) {
	f, ok := d.number(v.value, what+": warn_at (a fraction of the limit, such as 0.8)", 0, 1)
	switch {
	case !ok:
	case unlimited:
		d.errorf(v.key, "%s: warn_at needs a limit; an unlimited rule never warns", what)
	default:
		r.warnPPM = max(1, int64(math.Round(f*1e6)))
	}
}

// warningLevel returns the units at which a key of a rule with warnPPM
// millionths is in warning under limit: ceil(limit·warnPPM/1e6), at least 1.
func warningLevel(limit, warnPPM int64) int64 {
	// limit <= MaxLimit < 2^32 and warnPPM <= 1e6 < 2^20: no overflow.
	return max(1, (limit*warnPPM+999_999)/1_000_000)
}

// warn sets Warning and CrossedWarning on the statuses of apps, whose
// decisions res holds; counted reports, per app, the units this call
// counted for it (0 when it counted nothing).
func warn(apps []applied, res *Result, counted func(i int) int64) {
	for i := range apps {
		a := &apps[i]
		st := &res.Statuses[i]
		if a.r.warnPPM == 0 || st.Unlimited || a.lim.block || a.costErr != "" {
			continue
		}
		limit := st.Decision.Limit
		if limit <= 0 {
			limit = st.Limit
		}
		used := st.Used
		level := warningLevel(limit, a.r.warnPPM)
		st.Warning = used >= level
		st.CrossedWarning = st.Warning && used-counted(i) < level
	}
}

// countedByCheck returns the counted function of a Check's result: a
// request counts on every rule only when it was allowed as a whole, and on
// a rule only when that rule allowed it.
func countedByCheck(apps []applied, res *Result) func(int) int64 {
	return func(i int) int64 {
		if !res.Allowed || !res.Statuses[i].Decision.Allowed {
			return 0
		}
		return apps[i].cost
	}
}

// countedBySettle returns the counted function of a settle in mode: a peek
// counts nothing, a charge every rule's cost (concurrency rules' excepted),
// and a late check the late rules' cost and the others' as Check does.
func countedBySettle(apps []applied, res *Result, mode settleMode) func(int) int64 {
	check := countedByCheck(apps, res)
	return func(i int) int64 {
		a := &apps[i]
		switch {
		case mode == settlePeek:
			return 0
		case a.lim.alg != nil && a.lim.alg.Name() == algorithm.Concurrency && mode == settleAll:
			return 0
		case mode == settleAll || a.r.late:
			return a.cost
		}
		return check(i)
	}
}

// Warning reports whether any status of res that is not in shadow mode is
// in warning.
func (res Result) Warning() bool {
	for i := range res.Statuses {
		if st := &res.Statuses[i]; st.Warning && !st.Shadow {
			return true
		}
	}
	return false
}
