package rlqs

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	rlqfilter "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rate_limit_quota/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3" // HttpRequestHeaderMatchInput, for the Any
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/floodgate-dev/floodgate/rules"
)

// TestDocsEnvoyConfig reads the rate_limit_quota filter configuration and
// the rule docs/integrations.md shows: the filter's typed_config decodes
// into Envoy's proto (every Any included) and passes its validation, and
// the rule parses and decides the bucket the filter builds.
func TestDocsEnvoyConfig(t *testing.T) {
	b, err := os.ReadFile("../../../../docs/integrations.md")
	if err != nil {
		t.Fatal(err)
	}
	block := func(first string) string {
		_, rest, ok := strings.Cut(string(b), "```yaml\n"+first)
		if !ok {
			t.Fatalf("docs/integrations.md has no yaml block starting %q", first)
		}
		text, _, _ := strings.Cut(rest, "```")
		return first + text
	}
	var filters []map[string]any
	if err := yaml.Unmarshal([]byte(block("# Envoy: the filter")), &filters); err != nil {
		t.Fatal(err)
	}
	j, err := json.Marshal(filters[0]["typed_config"])
	if err != nil {
		t.Fatal(err)
	}
	var a anypb.Any
	if err := protojson.Unmarshal(j, &a); err != nil {
		t.Fatalf("the filter's typed_config: %v", err)
	}
	var cfg rlqfilter.RateLimitQuotaFilterConfig
	if err := a.UnmarshalTo(&cfg); err != nil {
		t.Fatal(err)
	}
	if err := cfg.ValidateAll(); err != nil {
		t.Fatalf("the filter's configuration: %v", err)
	}
	var settings rlqfilter.RateLimitQuotaBucketSettings
	if err := cfg.GetBucketMatchers().GetOnNoMatch().GetAction().GetTypedConfig().UnmarshalTo(&settings); err != nil {
		t.Fatal(err)
	}
	if err := settings.ValidateAll(); err != nil {
		t.Fatalf("the bucket settings: %v", err)
	}
	if _, err := rules.Parse("docs.yaml", []byte(block("# floodgate: the rule"))); err != nil {
		t.Fatalf("the rule: %v", err)
	}
}
