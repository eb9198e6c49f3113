package envoyratelimit

import (
	"strings"
	"testing"

	"github.com/floodgate-dev/floodgate/cmd/floodgate/envoycompat"
)

// FuzzConfigLoadAgainstReference loads a rule file with the reference's
// loader and with compatibility mode's: both accept it or both refuse it.
// Its seeds are every config of the reference's and YAML that YAML 1.1 and
// 1.2 read differently (the reference reads YAML 1.1).
func FuzzConfigLoadAgainstReference(f *testing.F) {
	for _, c := range allConfigFiles(f) {
		f.Add(c.text)
	}
	for _, s := range []string{
		"domain: d\ndescriptors:\n  - key: k\n    value: yes\n    rate_limit: {unit: minute, requests_per_unit: 1}\n",
		"domain: d\ndescriptors:\n  - key: k\n    value: 1e3\n    rate_limit: {unit: minute, requests_per_unit: 1}\n",
		"domain: d\ndescriptors:\n  - key: k\n    value: 2001-12-14\n    rate_limit: {unit: minute, requests_per_unit: 1}\n",
		"domain: d\ndescriptors:\n  - key: k\n    metadata: {d: 2001-12-14, y: on, n: {1: x, true: y}}\n    rate_limit: {unit: minute, requests_per_unit: 1}\n",
		"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 4294967296}\n",
		"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1.5}\n",
		"domain: d\ndescriptors:\n  - key: on\n    rate_limit: {unit: minute, requests_per_unit: 1}\n",
		"domain: 5\n", "domain: d\ndescriptors: 5\n", "- a\n", "~\n", "", "domain: d\ndescriptors:\n  - key: a*b*\n    share_threshold: true\n",
	} {
		f.Add(s)
	}
	feat := referenceFeatures(f)
	wild := envoycompat.WildcardsAnywhere
	if !feat.wildcardsAnywhere {
		wild = envoycompat.WildcardsTrailing // as compatEnv runs it beside this reference
	}
	f.Fuzz(func(t *testing.T, text string) {
		if !feat.metadata && strings.Contains(text, "metadata") {
			t.Skipf("the reference here (%s) predates metadata in rule files (envoyproxy/ratelimit#1112), which compatibility mode loads", referenceVersion(t))
		}
		refErr := referenceLoads([]configFile{{origin: "config.f", text: text}})
		_, fgErr := envoycompat.LoadConfig([]envoycompat.File{{Name: "config.f", Text: []byte(text)}}, false, wild)
		if (refErr == nil) != (fgErr == nil) {
			t.Fatalf("reference: %v\ncompat: %v\nfile:\n%s", refErr, fgErr, strings.TrimSpace(text))
		}
	})
}
