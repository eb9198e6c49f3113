package envoycompat

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestDebugPort holds the debug listener to the reference's: the index of
// its endpoints at /, the loaded rules at /rlconfig in the reference's
// lines, the expvar variables at /stats, pprof, and 404 elsewhere.
func TestDebugPort(t *testing.T) {
	srv, _ := startServer(t, testRules, nil)
	base := "http://" + srv.Addr(ListenerDebug)
	code, index := get(t, base+"/")
	wantIndex := "/debug/pprof/: root of various pprof endpoints. hit for help.\n" +
		"/debug/pprof/profile: CPU profiling endpoint\n" +
		"/debug/pprof/trace: trace endpoint\n" +
		"/rlconfig: print out the currently loaded configuration for debugging\n" +
		"/stats: print out stats\n"
	if code != 200 || index != wantIndex {
		t.Errorf("index: %d %q, want %q", code, index, wantIndex)
	}
	code, cfg := get(t, base+"/rlconfig")
	for _, line := range []string{
		"test.generic: unit=MINUTE requests_per_unit=20, shadow_mode: false, quota_mode: false\n",
		"test.free: unit=UNKNOWN requests_per_unit=0, shadow_mode: false, quota_mode: false\n",
		"test.path_/api/*/action: unit=MINUTE requests_per_unit=1, shadow_mode: false, quota_mode: false\n",
		"test.dark: unit=MINUTE requests_per_unit=1, shadow_mode: true, quota_mode: false\n",
		"test.q1: unit=MINUTE requests_per_unit=1, shadow_mode: false, quota_mode: true\n",
	} {
		if code != 200 || !strings.Contains(cfg, line) {
			t.Errorf("/rlconfig: %d, no line %q in\n%s", code, line, cfg)
		}
	}
	if n := strings.Count(cfg, "\n"); n != strings.Count(testRules, "rate_limit:") {
		t.Errorf("/rlconfig has %d lines, want one per rate_limit (%d)", n, strings.Count(testRules, "rate_limit:"))
	}
	if code, stats := get(t, base+"/stats"); code != 200 || !strings.Contains(stats, "memstats: {") || !strings.Contains(stats, "cmdline: [") {
		t.Errorf("/stats: %d %.200q", code, stats)
	}
	if code, body := get(t, base+"/debug/pprof/"); code != 200 || !strings.Contains(body, "goroutine") {
		t.Errorf("/debug/pprof/: %d", code)
	}
	for _, p := range []string{"/nothing", "/rlconfig/x", "/debug/"} {
		if code, _ := get(t, base+p); code != http.StatusNotFound {
			t.Errorf("%s: %d, want 404", p, code)
		}
	}
}
