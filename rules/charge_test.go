package rules

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/memstore"
	"github.com/floodgate-dev/floodgate/store"
)

const chargeRules = `
domain: ai
rules:
  - name: tokens
    match: {tenant: "*"}
    count_by: [tenant]
    limit: 100
    window: 1m
    charge_after_response: true
  - name: requests
    match: {tenant: "*"}
    count_by: [tenant]
    limit: 1000
    window: 1m
  - name: streams
    match: {stream: "*"}
    count_by: [stream]
    algorithm: concurrency
    limit: 5
`

func chargeEngine(t *testing.T, st store.Store) (*Engine, *time.Time) {
	t.Helper()
	set, err := Parse("rules.yaml", []byte(chargeRules))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(5000, 0)
	return NewEngine(set, st, WithClock(func() time.Time { return now })), &now
}

func remainingOf(t *testing.T, res Result, rule string) (int64, bool) {
	t.Helper()
	for _, s := range res.Statuses {
		if s.Rule == rule {
			return s.Decision.Remaining, s.Decision.Allowed
		}
	}
	t.Fatalf("no status for %s in %+v", rule, res)
	return 0, false
}

func TestEngineLateRuleChargesOthersDecide(t *testing.T) {
	e, _ := chargeEngine(t, nil)
	ctx := context.Background()
	req := Request{Descriptors: []Descriptor{{{Key: "tenant", Value: "acme"}}}}
	peek := req
	peek.Peek = true
	res, err := e.Check(ctx, peek)
	if err != nil || !res.Allowed {
		t.Fatalf("peek: %+v %v", res, err)
	}
	if r, _ := remainingOf(t, res, "tokens"); r != 100 {
		t.Fatalf("peek counted something: tokens remaining %d", r)
	}
	// A request of 150 on the late rule is a charge: counted past the
	// limit, never rejected; the ordinary rule decides and counts 150 too.
	charge := req
	charge.Hits = 150
	res, err = e.Check(ctx, charge)
	if err != nil || !res.Allowed {
		t.Fatalf("charge: %+v %v, want allowed", res, err)
	}
	if r, _ := remainingOf(t, res, "requests"); r != 850 {
		t.Fatalf("requests remaining %d, want 850", r)
	}
	res, _ = e.Check(ctx, peek)
	if res.Allowed {
		t.Fatalf("peek in debt: %+v, want rejected", res)
	}
}

func TestEngineChargeCountsEveryRuleButConcurrency(t *testing.T) {
	e, _ := chargeEngine(t, nil)
	ctx := context.Background()
	req := Request{Hits: 40, Descriptors: []Descriptor{{{Key: "tenant", Value: "acme"}, {Key: "stream", Value: "s"}}}}
	res, err := e.Charge(ctx, req)
	if err != nil || !res.Allowed {
		t.Fatalf("charge: %+v %v", res, err)
	}
	for rule, want := range map[string]int64{"tokens": 60, "requests": 960} {
		if r, _ := remainingOf(t, res, rule); r != want {
			t.Errorf("%s remaining %d, want %d", rule, r, want)
		}
	}
	// The concurrency rule was not charged: 5 requests still fit.
	one := Request{Descriptors: req.Descriptors}
	one.Peek = true
	res, _ = e.Check(ctx, one)
	if r, _ := remainingOf(t, res, "streams"); r != 5 {
		t.Errorf("streams remaining %d, want 5", r)
	}
}

// noSync is a store that cannot count without deciding.
type noSync struct{ store.Store }

func TestEngineChargeNeedsASyncer(t *testing.T) {
	e, _ := chargeEngine(t, noSync{memstore.New(memstore.Options{})})
	_, err := e.Charge(context.Background(), Request{Hits: 1, Descriptors: []Descriptor{{{Key: "tenant", Value: "a"}}}})
	if !errors.Is(err, ErrChargeUnsupported) {
		t.Fatalf("err %v, want ErrChargeUnsupported", err)
	}
	mem := memstore.New(memstore.Options{})
	e, _ = chargeEngine(t, noSync{mem})
	e.charger = mem
	if _, err := e.Charge(context.Background(), Request{Hits: 1, Descriptors: []Descriptor{{{Key: "tenant", Value: "a"}}}}); err != nil {
		t.Fatalf("with a charger: %v", err)
	}
}

func TestChargeAfterResponseParsed(t *testing.T) {
	set, err := Parse("rules.yaml", []byte(chargeRules))
	if err != nil {
		t.Fatal(err)
	}
	if ri := set.Rules()[0]; !ri.ChargeAfterResponse || set.Rules()[1].ChargeAfterResponse {
		t.Fatalf("rule infos %+v", set.Rules())
	}
	_, err = Parse("rules.yaml", []byte(`
rules:
  - name: x
    match: {a: "*"}
    count_by: [a]
    limit: 1
    window: 1s
    charge_after_response: sometimes
`))
	if err == nil {
		t.Fatal("a non-boolean charge_after_response was accepted")
	}
}
