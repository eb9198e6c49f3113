package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// gatewayExampleCoverage is the gateway example's coverage table.
const gatewayExampleCoverage = `-- coverage: which placement counts a request --
path                access        gateway  middle layer
/loan/borrow        gateway       counted       counted
/loan/borrow        direct        skipped       counted
/loan/list          gateway       counted       counted
/loan/list          direct        skipped       counted
/loan-bulk/list     gateway       skipped       counted
/loan-bulk/list     direct        skipped       counted
/catalog/search     gateway       skipped       skipped
/catalog/search     direct        skipped       skipped
of 8 path-access pairs, the gateway sees 2, the middle layer sees 6; 2 pairs are outside every placement
`

func TestSimCoverageReproducesGatewayStudy(t *testing.T) {
	var out, errb strings.Builder
	if err := runSimCoverage(nil, &out, &errb); err != nil {
		t.Fatalf("%v\n%s", err, errb.String())
	}
	if !strings.HasPrefix(out.String(), gatewayExampleCoverage) {
		t.Fatalf("table differs from the gateway example's:\n%s\nwant:\n%s", out.String(), gatewayExampleCoverage)
	}
	for _, want := range []string{
		"GET  /loan-bulk/list  NOT COVERED by any rule",
		"GET  /catalog/search  NOT COVERED by any rule",
		"GET  /loan/list       loan-prefix",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("check's report lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "floodgate-coverage-") {
		t.Errorf("temporary directory leaked into the output")
	}
}

func TestSimCoverageJSON(t *testing.T) {
	var out, errb strings.Builder
	if err := runSimCoverage([]string{"--json"}, &out, &errb); err != nil {
		t.Fatalf("%v\n%s", err, errb.String())
	}
	var rep struct {
		Pairs []struct {
			Path, Access, Gateway string
			Middle                string `json:"middle_layer"`
		}
		Total, Gateway, Outside int
		Middle                  int `json:"middle_layer"`
		Check                   struct {
			Uncovered []string
		}
	}
	if err := json.Unmarshal([]byte(out.String()), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if rep.Total != 8 || rep.Gateway != 2 || rep.Middle != 6 || rep.Outside != 2 || len(rep.Pairs) != 8 {
		t.Fatalf("totals %+v", rep)
	}
	if p := rep.Pairs[4]; p.Path != "/loan-bulk/list" || p.Access != "gateway" || p.Gateway != "skipped" || p.Middle != "counted" {
		t.Fatalf("pair 4 %+v", p)
	}
	if len(rep.Check.Uncovered) != 2 {
		t.Fatalf("check's uncovered routes %v, want /loan-bulk/list and /catalog/search", rep.Check.Uncovered)
	}
}
