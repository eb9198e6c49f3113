package main

import (
	"io"
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

func TestReferenceEnvironment(t *testing.T) {
	withRoot := func(k string) (string, bool) {
		if k == "RUNTIME_ROOT" {
			return "/data", true
		}
		return "", false
	}
	none := func(string) (string, bool) { return "", false }
	for _, tc := range []struct {
		args   []string
		lookup func(string) (string, bool)
		want   bool
	}{
		{[]string{"--http", "0.0.0.0:8080", "--grpc", "0.0.0.0:8081"}, withRoot, true},
		{nil, withRoot, true},
		{[]string{"--http", "0.0.0.0:8080"}, none, false},
		{[]string{"--rules", "r.yaml"}, withRoot, false},
		{[]string{"--config", "c.yaml"}, withRoot, false},
		{[]string{"--store", "memory"}, withRoot, false},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			f, err := parseServeArgs(tc.args, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if got := f.referenceEnvironment(tc.lookup); got != tc.want {
				t.Errorf("serve %v: reference environment %v, want %v", tc.args, got, tc.want)
			}
		})
	}
}
