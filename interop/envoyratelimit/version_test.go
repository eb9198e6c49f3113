package envoyratelimit

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	pb_struct "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	"github.com/envoyproxy/ratelimit/src/config"
	"github.com/envoyproxy/ratelimit/src/settings"
	"github.com/envoyproxy/ratelimit/src/stats"
	"github.com/floodgate-dev/floodgate/internal/testkit/modproxy"
	gostats "github.com/lyft/gostats"
	"golang.org/x/mod/semver"
)

// referenceModule is the reference's module path.
const referenceModule = "github.com/envoyproxy/ratelimit"

// features are the reference's changes since the version go.mod pins that
// change answers, found by asking the reference running in this process,
// so the same tests hold Floodgate to the pinned version in CI and to a
// newer one built from its sources (scripts/compare-envoy-ratelimit-current).
type features struct {
	// wildcardsAnywhere: a '*' anywhere in a value is a wildcard
	// (envoyproxy/ratelimit#1085); before, only a trailing one.
	wildcardsAnywhere bool
	// metadata: a descriptor's metadata field loads and the dynamic
	// metadata carries the metadata of the limits that passed (#1112);
	// before, the field was refused and the dynamic metadata said
	// quotaModeEnabled.
	metadata bool
	// b3: a call's B3 headers give its trace's parent (#1110).
	b3 bool
}

var (
	featuresOnce sync.Once
	refFeatures  features
)

// referenceFeatures probes the reference's loader for its features.
func referenceFeatures(t testing.TB) features {
	t.Helper()
	featuresOnce.Do(func() {
		trace, err := os.ReadFile(filepath.Join(referenceDir(t), "src/trace/trace.go"))
		refFeatures.b3 = err == nil && strings.Contains(string(trace), "b3.New()")
		refFeatures.metadata = referenceLoads([]configFile{{origin: "probe", text: "domain: d\ndescriptors:\n  - key: k\n    metadata: {a: b}\n    rate_limit: {unit: minute, requests_per_unit: 1}\n"}}) == nil
		refFeatures.wildcardsAnywhere = func() (ok bool) {
			defer func() {
				if recover() != nil {
					ok = false
				}
			}()
			mgr := stats.NewStatManager(gostats.NewStore(gostats.NewNullSink(), false), settings.Settings{})
			text := "domain: d\ndescriptors:\n  - key: k\n    value: a*c\n    rate_limit: {unit: minute, requests_per_unit: 1}\n"
			cfg := config.NewRateLimitConfigImpl([]config.RateLimitConfigToLoad{{Name: "probe", ConfigYaml: config.ConfigFileContentToYaml("probe", text)}}, mgr, false)
			return cfg.GetLimit(context.Background(), "d", &pb_struct.RateLimitDescriptor{
				Entries: []*pb_struct.RateLimitDescriptor_Entry{{Key: "k", Value: "abc"}}}) != nil
		}()
	})
	return refFeatures
}

// compatEnv is what compatibility mode is given beside the reference's
// environment so that it answers as this reference: the reference's
// wildcards when it predates #1085.
func compatEnv(t testing.TB) map[string]string {
	if !referenceFeatures(t).wildcardsAnywhere {
		return map[string]string{"FLOODGATE_WILDCARDS": "trailing"}
	}
	return nil
}

// versionDifferences are the differences between compatibility mode,
// which follows the current reference, and an older reference running
// here, each naming the change that made it.
func versionDifferences(t testing.TB) []knownDifference {
	var out []knownDifference
	if !referenceFeatures(t).metadata {
		out = append(out, knownDifference{"dynamic_metadata", "", "the reference here predates envoyproxy/ratelimit#1112: its dynamic metadata says quotaModeEnabled; the current one, and compatibility mode, carry the passed limits' metadata instead"})
	}
	return out
}

// referenceVersion names the reference running here: the version go.mod
// pins, or the directory a replace points to.
func referenceVersion(t testing.TB) string {
	m, err := modproxy.List(context.Background(), ".", nil, referenceModule)
	if err != nil {
		t.Fatal(err)
	}
	if m.Replace != nil {
		return "sources at " + m.Replace.Path
	}
	return m.Version
}

// TestReferenceVersionIsNewest fails when the Go module proxy serves a
// version of envoyproxy/ratelimit newer than the one go.mod pins: the
// differential here would then be held to an old reference. It asks the
// proxy GOPROXY names; when that cannot be reached, the module cache
// answers (as a file:// proxy: the newest version downloaded), and when
// neither can, the test is skipped, saying why.
func TestReferenceVersionIsNewest(t *testing.T) {
	pinned, err := modproxy.List(context.Background(), ".", nil, referenceModule)
	if err != nil {
		t.Fatal(err)
	}
	if pinned.Replace != nil {
		t.Skipf("the reference is replaced by %s: this run is held to those sources, not to a version of the proxy", pinned.Replace.Path)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	latest, source, err := modproxy.Newest(ctx, t.TempDir(), referenceModule)
	if err != nil {
		t.Skip(err)
	}
	t.Logf("%s serves %s %s (%s); go.mod pins %s", source, referenceModule, latest.Version, latest.Time, pinned.Version)
	if semver.Compare(latest.Version, pinned.Version) > 0 {
		t.Errorf("%s serves %s %s, newer than the %s go.mod pins: move the pin (go get %s@%s), run the tests and update docs/migration-envoy-ratelimit.md's figures",
			source, referenceModule, latest.Version, pinned.Version, referenceModule, latest.Version)
	}
}
