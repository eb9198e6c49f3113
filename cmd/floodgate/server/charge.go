package server

import (
	"context"

	"github.com/floodgate-dev/floodgate/rules"
)

// Charge counts a cost known after the response (POST /v1/charge). Charges
// are not decisions, so they are not in the decision metrics; the keys
// they take to a rule's warning level are counted and logged.
func (o *observed) Charge(ctx context.Context, req rules.Request) (rules.Result, error) {
	res, err := o.engine.Charge(ctx, req)
	if err == nil {
		o.rec.ObserveCharge(res)
		o.warnings.Record(res, "domain", req.Domain)
	}
	return res, err
}

// Usage reports what keys have used and have left (POST /v1/usage). It
// counts nothing, so it is not in the decision metrics.
func (o *observed) Usage(ctx context.Context, req rules.Request) (rules.Result, error) {
	return o.engine.Usage(ctx, req)
}
