package main

import (
	"bytes"
	"io"
	"log/slog"
	"strings"
	"testing"
)

func TestCompatFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--compat", "istio"}, `--compat "istio": the only mode is envoy-ratelimit`},
		{[]string{"--compat", "envoy-ratelimit", "--http", "127.0.0.1:1"}, "takes no other flag"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			if _, err := parseServeArgs(tc.args, io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
			}
		})
	}
	if f, err := parseServeArgs([]string{"--compat", "envoy-ratelimit"}, io.Discard); err != nil || f.compat != compatEnvoy {
		t.Fatalf("--compat envoy-ratelimit: %+v %v", f, err)
	}
}

func TestCompatRefusesBeforeStarting(t *testing.T) {
	env := map[string]string{"USE_DOG_STATSD": "true"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	err := runCompat(lookup, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "USE_DOG_STATSD=true: DogStatsD is not sent") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("USE_DOG_STATSD=true: %v, want one line naming it", err)
	}
	if err := runReference([]string{"serve"}, lookup, io.Discard); err == nil || !strings.Contains(err.Error(), "takes no arguments") {
		t.Fatalf("ratelimit serve: %v", err)
	}
	for argv0, want := range map[string]bool{"/bin/ratelimit": true, "ratelimit": true, "/floodgate": false, "./ratelimit-x": false} {
		t.Run(argv0, func(t *testing.T) {
			if invokedAsReference(argv0) != want {
				t.Errorf("invokedAsReference(%q) = %v", argv0, !want)
			}
		})
	}
}

// TestReferenceEnvironmentIgnored: own mode with RUNTIME_ROOT set stays
// own mode and says so in one line; without it, it says nothing.
func TestReferenceEnvironmentIgnored(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	warnReferenceEnvironment(log, func(string) (string, bool) { return "", false })
	if buf.Len() != 0 {
		t.Fatalf("without RUNTIME_ROOT: %q", buf.String())
	}
	warnReferenceEnvironment(log, func(k string) (string, bool) { return "/data", k == "RUNTIME_ROOT" })
	if got := buf.String(); strings.Count(got, "\n") != 1 || !strings.Contains(got, "RUNTIME_ROOT is set and ignored") || !strings.Contains(got, "--compat envoy-ratelimit") {
		t.Fatalf("with RUNTIME_ROOT: %q, want one line naming it and how to ask for compatibility mode", got)
	}
}
