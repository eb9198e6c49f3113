package server

import (
	"context"

	"github.com/floodgate-dev/floodgate/rules"
)

// Charge counts a cost known after the response (POST /v1/charge). Charges
// are not decisions, so they are not in the decision metrics.
func (o *observed) Charge(ctx context.Context, req rules.Request) (rules.Result, error) {
	return o.engine.Charge(ctx, req)
}
