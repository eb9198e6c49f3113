package gubernator

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/internal/testkit/modproxy"
	"golang.org/x/mod/semver"
)

// referenceModule is gubernator's module path.
const referenceModule = "github.com/gubernator-io/gubernator/v2"

// TestReferenceVersionIsNewest names the newest gubernator the Go module
// proxy serves and fails when it is newer than the version go.mod pins
// and the Go toolchain running the test can build it: the differential
// here would then hold Floodgate to an old gubernator. A newer version
// that needs a newer Go than this toolchain is named in the log with the
// Go it needs, and the pin stays. When the proxy cannot be reached the
// module cache answers (the newest version downloaded); when neither can,
// the test is skipped, saying why.
func TestReferenceVersionIsNewest(t *testing.T) {
	pinned, err := modproxy.List(context.Background(), ".", []string{"GOWORK=off"}, referenceModule)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	latest, source, err := modproxy.Newest(ctx, t.TempDir(), referenceModule)
	if err != nil {
		t.Skip(err)
	}
	t.Logf("%s serves %s %s (%s, go %s); go.mod pins %s", source, referenceModule, latest.Version, latest.Time, latest.GoVersion, pinned.Version)
	if semver.Compare(latest.Version, pinned.Version) <= 0 {
		return
	}
	toolchain := strings.TrimPrefix(runtime.Version(), "go")
	if latest.GoVersion != "" && semver.Compare("v"+latest.GoVersion, "v"+toolchain) > 0 {
		t.Logf("%s %s needs go %s, newer than this toolchain's %s: the differential stays at %s until the toolchain moves",
			referenceModule, latest.Version, latest.GoVersion, toolchain, pinned.Version)
		return
	}
	t.Errorf("%s serves %s %s, newer than the %s go.mod pins, and go %s builds it: move the pin (go get %s@%s), run the tests and update docs/migration-gubernator.md's figures",
		source, referenceModule, latest.Version, pinned.Version, toolchain, referenceModule, latest.Version)
}
