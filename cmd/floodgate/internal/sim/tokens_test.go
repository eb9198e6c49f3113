package sim

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
)

// The late-charge promise on the scenario: settled and reserved
// budgets keep their bounds, and forgiving late costs does not.
func TestTokensScenario(t *testing.T) {
	s := DefaultTokenShape
	runs, err := Tokens(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := algorithm.New(algorithm.Config{Limit: s.Budget, Window: s.Window})
	tol := cfg.Config().Tolerance
	by := map[string]TokenRun{}
	for _, r := range runs {
		by[r.Mode] = r
		t.Logf("%-9s busiest %7d total %8d served %4d rejected %5d per window %v", r.Mode, r.Busiest, r.Total, r.Served, r.Rejected, r.PerWindow)
	}
	if b := by[TokensSettled].Busiest; b > s.Bound(tol) {
		t.Errorf("settled: busiest window %d above the bound %d", b, s.Bound(tol))
	}
	if b := by[TokensReserved].Busiest; b > int64((1+tol)*float64(s.Budget)) {
		t.Errorf("reserved: busiest window %d above the budget with tolerance", b)
	}
	if f, st := by[TokensForgiven].Total, by[TokensSettled].Total; f <= st*3/2 {
		t.Errorf("forgiven served %d, settled %d: forgiving late costs should let far more through", f, st)
	}
	// A reservation of the largest cost keeps the budget exactly but
	// leaves what responses did not use counted: it serves less.
	if r, st := by[TokensReserved].Total, by[TokensSettled].Total; r >= st {
		t.Errorf("reserved served %d, settled %d: want reserved below settled", r, st)
	}
}

func TestTokensShapeErrors(t *testing.T) {
	bad := []TokenShape{{}, {Clients: 1, Budget: 10, Window: time.Minute, Duration: time.Minute, MinCost: 5, MaxCost: 20}}
	for _, s := range bad {
		t.Run(fmt.Sprintf("%+v", s), func(t *testing.T) {
			if _, err := Tokens(context.Background(), s); err == nil {
				t.Errorf("%+v accepted", s)
			}
		})
	}
}
