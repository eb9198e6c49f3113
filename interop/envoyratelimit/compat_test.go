package envoyratelimit

import (
	"context"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/floodgate-dev/floodgate/cmd/floodgate/envoycompat"
)

// startCompat runs Floodgate's `serve --compat envoy-ratelimit` in this
// process: the envoycompat server, with the settings it reads from the
// reference's environment variables env (as the command reads them from
// its environment). It stops when the test ends.
//
// Beside env it gets compatEnv: what makes it answer as the reference
// running here when that predates a change it follows.
func startCompat(t testing.TB, env map[string]string) (*rls, error) {
	t.Helper()
	return startCompatWith(t, env, compatEnv(t))
}

// listenPorts are the reference's port variables, which compatibility
// mode is given as 0.
var listenPorts = map[string]bool{"PORT": true, "GRPC_PORT": true, "DEBUG_PORT": true}

// startCompatWith is startCompat with extra variables of compatibility
// mode's own (nil: none, for the current reference).
func startCompatWith(t testing.TB, env, extra map[string]string) (*rls, error) {
	t.Helper()
	set, err := envoycompat.ParseSettings(func(k string) (string, bool) {
		if _, ok := env[k]; ok && listenPorts[k] {
			// Compatibility mode reports the ports it bound: port 0 leaves
			// no gap in which another test's listener takes a port picked
			// free beforehand (the reference cannot report one).
			return "0", true
		}
		if v, ok := env[k]; ok {
			return v, true
		}
		v, ok := extra[k]
		return v, ok
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := envoycompat.New(ctx, set, slog.New(slog.DiscardHandler))
	if err != nil {
		cancel()
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && ctx.Err() == nil {
			t.Errorf("compat server stopped with: %v", err)
		}
	})
	r := dial(t, "floodgate --compat envoy-ratelimit", srv.Addr(envoycompat.ListenerGRPC), "http://"+srv.Addr(envoycompat.ListenerHTTP))
	r.debugURL = "http://" + srv.Addr(envoycompat.ListenerDebug)
	return r, nil
}

// TestCompatModeAgainstReference compares `serve --compat envoy-ratelimit`
// with the reference on the reference's configs, both started with the
// same environment variables (each with its own Redis and ports). The
// compatibility mode's promise is to answer as the reference does: any
// difference not listed in compatModeDifferences fails.
func TestCompatModeAgainstReference(t *testing.T) {
	ms, n := compareOnSets(t, configSets(t), nil, func(t *testing.T, l runtimeLayout, redisAddr string) (*rls, error) {
		return startCompat(t, referenceEnv(t, l, redisAddr, nil))
	})
	checkKnown(t, "compat mode", n, ms, append(versionDifferences(t), compatModeDifferences...))
}

// TestCompatModeSettingsAgainstReference compares the two again with the
// reference's settings that change answers, one at a time, on the
// example directory, the integration runtime directory and the unit
// tests' basic config (and the two files MERGE_DOMAIN_CONFIG merges).
func TestCompatModeSettingsAgainstReference(t *testing.T) {
	var sets []configSet
	for _, s := range configSets(t) {
		switch s.name {
		case "examples/ratelimit/config", "test/integration/runtime/current/ratelimit/config", "test/config/basic_config.yaml":
			sets = append(sets, s)
		}
	}
	// The dynamic metadata: the example directory, the integration
	// directory, and every file with metadata or quota_mode.
	withMetadata := slices.Clone(sets[:2])
	for _, s := range configSets(t) {
		for _, f := range s.files {
			if strings.Contains(f.text, "metadata:") || strings.Contains(f.text, "quota_mode:") {
				if len(s.files) == 1 {
					withMetadata = append(withMetadata, s)
				}
				break
			}
		}
	}
	merged := configSet{name: "test/config/merge_domain_key1.yaml + merge_domain_key2.yaml",
		files: []configFile{readConfig(t, "test/config/merge_domain_key1.yaml"), readConfig(t, "test/config/merge_domain_key2.yaml")}}
	variants := []struct {
		env  map[string]string
		sets []configSet
	}{
		{map[string]string{"LIMIT_RESPONSE_HEADERS_ENABLED": "true"}, sets},
		{map[string]string{"LIMIT_RESPONSE_HEADERS_ENABLED": "true", "LIMIT_LIMIT_HEADER": "X-Limit",
			"LIMIT_REMAINING_HEADER": "X-Remaining", "LIMIT_RESET_HEADER": "X-Reset"}, sets[:1]},
		{map[string]string{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "true"}, sets},
		{map[string]string{"SHADOW_MODE": "true"}, sets},
		{map[string]string{"CACHE_KEY_PREFIX": "prefix:", "NEAR_LIMIT_RATIO": "0.5"}, sets[:1]},
		{map[string]string{"MERGE_DOMAIN_CONFIG": "true"}, []configSet{merged}},
		{map[string]string{"RESPONSE_DYNAMIC_METADATA": "true"}, withMetadata},
	}
	var all []mismatch
	total := 0
	for _, v := range variants {
		var names []string
		for k, val := range v.env {
			names = append(names, k+"="+val)
		}
		sort.Strings(names)
		t.Run(strings.Join(names, ","), func(t *testing.T) {
			ms, n := compareOnSets(t, v.sets, v.env, func(t *testing.T, l runtimeLayout, redisAddr string) (*rls, error) {
				return startCompat(t, referenceEnv(t, l, redisAddr, v.env))
			})
			for i := range ms {
				ms[i].set = strings.Join(names, ",") + " " + ms[i].set
			}
			all = append(all, ms...)
			total += n
		})
	}
	checkKnown(t, "compat mode with settings", total, all, append(versionDifferences(t), compatModeDifferences...))
}

// compatModeDifferences are the differences that remain in the
// compatibility mode, each with its reason: none.
var compatModeDifferences = []knownDifference{}

// TestIntegrationPortAgainstCompatMode runs the ported integration test
// against `serve --compat envoy-ratelimit` started with the reference's
// environment: all 58 assertions must pass, as they do on the reference.
func TestIntegrationPortAgainstCompatMode(t *testing.T) {
	layout, reload := integrationRuntime(t)
	redis := startRedis(t)
	fg, err := startCompat(t, referenceEnv(t, layout, redis.Addr(), integrationEnv))
	if err != nil {
		t.Fatalf("compat mode refuses the reference's integration directory: %v", err)
	}
	checks := runIntegrationPort(t, fg.client, layout.configDir(), reload, true)
	t.Logf("compat mode: %d of %d assertions pass", checks.passed, checks.total)
	if checks.total != 58 || checks.passed != checks.total {
		t.Errorf("compat mode: %d of %d assertions pass, want 58 of 58: %v", checks.passed, checks.total, checks.failed)
	}
}
