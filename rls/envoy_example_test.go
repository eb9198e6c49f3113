package rls

import (
	"context"
	"encoding/json"
	"os"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestEnvoyTokenBudgetExample holds examples/envoy-token-budget to what it
// claims: envoy.yaml passes Envoy's API validation and has the two rate
// limit entries (a check with hits_addend 0, a charge on stream done), and
// the descriptors they send, decided by the example's rules.yaml over RLS,
// check, charge past the budget and then reject.
func TestEnvoyTokenBudgetExample(t *testing.T) {
	const dir = "../examples/envoy-token-budget/"
	data, err := os.ReadFile(dir + "envoy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(doc)
	var bs bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(raw, &bs); err != nil {
		t.Fatalf("envoy.yaml is not an Envoy bootstrap: %v", err)
	}
	if err := bs.ValidateAll(); err != nil {
		t.Fatalf("envoy.yaml fails Envoy's validation: %v", err)
	}
	var hcm hcmv3.HttpConnectionManager
	if err := bs.GetStaticResources().GetListeners()[0].GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(&hcm); err != nil {
		t.Fatal(err)
	}
	if err := hcm.ValidateAll(); err != nil {
		t.Fatal(err)
	}
	rls := hcm.GetRouteConfig().GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetRateLimits()
	if len(rls) != 2 || rls[0].GetHitsAddend().GetNumber() == nil || rls[0].GetHitsAddend().GetNumber().GetValue() != 0 ||
		rls[0].GetApplyOnStreamDone() || !rls[1].GetApplyOnStreamDone() || rls[1].GetHitsAddend().GetFormat() == "" {
		t.Fatalf("want a check (hits_addend 0) and a charge on stream done, got %v", rls)
	}

	rules, err := os.ReadFile(dir + "rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c := dialRules(t, string(rules))
	call := func(rl *routev3.RateLimit, addend uint64) *rlsv3.RateLimitResponse {
		t.Helper()
		d := &commonv3.RateLimitDescriptor{HitsAddend: wrapperspb.UInt64(addend)}
		for _, a := range rl.GetActions() {
			switch {
			case a.GetGenericKey() != nil:
				d.Entries = append(d.Entries, &commonv3.RateLimitDescriptor_Entry{Key: a.GetGenericKey().GetDescriptorKey(), Value: a.GetGenericKey().GetDescriptorValue()})
			case a.GetRequestHeaders() != nil:
				d.Entries = append(d.Entries, &commonv3.RateLimitDescriptor_Entry{Key: a.GetRequestHeaders().GetDescriptorKey(), Value: "acme"})
			}
		}
		resp, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "llm", Descriptors: []*commonv3.RateLimitDescriptor{d}})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	ok, over := rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
	for i, s := range []struct {
		entry  int
		addend uint64
		want   rlsv3.RateLimitResponse_Code
	}{{0, 0, ok}, {1, 60000, ok}, {0, 0, ok}, {1, 60000, ok}, {0, 0, over}} {
		if got := call(rls[s.entry], s.addend).GetOverallCode(); got != s.want {
			t.Fatalf("step %d (entry %d, hits_addend %d): %v, want %v", i, s.entry, s.addend, got, s.want)
		}
	}
}
