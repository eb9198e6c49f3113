package rules

import "context"

// Usage reports, for every rule that applies to req, what its key has used
// and has left, counting nothing: the statuses of a Check of req with Peek
// set, whatever req.Hits and req.Peek say. Each Status gives Used (the
// units the rule counts for the key; above the limit when charges
// overspent it), Decision.Limit and Decision.Remaining, Decision.ResetAfter,
// PeriodEnd for fixed-window and calendar rules, and Warning for rules
// with warn_at. Decision.Allowed says whether one more unit would be
// allowed. CrossedWarning is always false: nothing is counted.
func (e *Engine) Usage(ctx context.Context, req Request) (Result, error) {
	req.Hits, req.Peek = 0, true
	set := e.set.Load()
	apps, err := set.resolve(req, nil)
	if err != nil || len(apps) == 0 {
		res := Result{Allowed: true, Tightest: -1}
		if err == nil {
			res.Domain, res.Unmatched = set.unmatched(req.Domain)
		}
		return res, err
	}
	return e.settle(ctx, apps, settlePeek)
}
