// Package testtier tells a test which tier of the suite is running. `go
// test ./...` is the fast, hermetic tier; the integration tier adds the
// tests that run for long or drive programs beyond redis-server (the soak
// run, headless Chromium). scripts/test runs both, the integration tier by
// setting FLOODGATE_INTEGRATION=1 (docs/testing.md).
package testtier

import (
	"os"
	"testing"
)

// Env is the environment variable that turns the integration tier on.
const Env = "FLOODGATE_INTEGRATION"

// Integration reports whether the integration tier runs: Env is set to
// anything but "" or "0".
func Integration() bool {
	v := os.Getenv(Env)
	return v != "" && v != "0"
}

// RequireIntegration skips tb, saying why, unless the integration tier
// runs. what says what the test needs or does that keeps it out of the
// fast tier.
func RequireIntegration(tb testing.TB, what string) {
	tb.Helper()
	if !Integration() {
		tb.Skipf("integration tier (%s): set %s=1 to run it; scripts/test does", what, Env)
	}
}
