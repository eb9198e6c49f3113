package envoyratelimit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// TestMixedFleet runs the reference and `serve --compat envoy-ratelimit`
// side by side on one Redis with the same rule files and environment, as
// during a rolling replacement, and alternates requests for one key
// between them: one limit is enforced (the number allowed per window is
// the limit, not twice it), every OK answer's remaining count continues
// the other server's, and Redis holds every hit of both (none lost).
func TestMixedFleet(t *testing.T) {
	for _, env := range []map[string]string{nil, {"CACHE_KEY_PREFIX": "ratelimit:"}} {
		t.Run(fmt.Sprint(env), func(t *testing.T) { testMixedFleet(t, env) })
	}
}

func testMixedFleet(t *testing.T, env map[string]string) {
	layout, _ := integrationRuntime(t)
	redis := startRedis(t)
	ref := startReference(t, referenceEnv(t, layout, redis.Addr(), env))
	fg, err := startCompat(t, referenceEnv(t, layout, redis.Addr(), env))
	if err != nil {
		t.Fatal(err)
	}
	fleet := []*rls{ref, fg}
	cases := []struct {
		name, domain, key string
		limit, unit       int64 // requests per unit, unit in seconds
		requests          int
	}{
		{"20 a minute", "another", "key2", 20, 60, 40},
		{"10 an hour", "another", "key3", 10, 3600, 30},
		{"1 a minute", "basic", "one_per_minute", 1, 60, 10},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// Five runs of each limit (one for the hour), each for a new
			// value of the key, so each starts a window of its own; a run
			// that crosses a window boundary is repeated with a new value.
			runs := 5
			if c.unit > 60 {
				runs = 1
			}
			for r := 1; r <= runs; r++ {
				allowed, perServer, keys, hits := runFleetWindow(t, fleet, redis.Do, c.domain, c.key, c.unit, c.requests)
				t.Logf("run %d: %d of %d alternating requests allowed (reference %d, floodgate %d); Redis holds %d hits in %d key",
					r, allowed, c.requests, perServer[0], perServer[1], hits, keys)
				if allowed != int(c.limit) {
					t.Errorf("run %d: %d allowed in one window, want the limit %d: one limit is not enforced", r, allowed, c.limit)
				}
				if keys != 1 || hits != int64(c.requests) {
					t.Errorf("run %d: Redis holds %d hits of %d sent in %d keys, want them all in one key", r, hits, c.requests, keys)
				}
			}
		})
	}
}

// runFleetWindow sends requests for one new value of key, alternating
// between the servers, all in one window of unit seconds (repeating with
// a new value when a run crosses a boundary), and returns how many were
// allowed, by each server, and the keys and count Redis holds for the value.
func runFleetWindow(t *testing.T, fleet []*rls, do func(...string) (string, error), domain, key string, unit int64, requests int) (int, [2]int, int, int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for attempt := 0; attempt < 5; attempt++ {
		awayFromBoundary(unit, 5*time.Second)
		value := fmt.Sprintf("fleet-%d", rand.Int64())
		w := window(unit)
		allowed, per := 0, [2]int{}
		wantRemaining := -1
		var broken []string // counts that do not continue the other server's
		for i := 0; i < requests; i++ {
			srv := fleet[i%2]
			resp, err := srv.client.ShouldRateLimit(ctx, newRequest(domain, [][][2]string{{{key, value}}}, 1))
			if err != nil {
				t.Fatalf("%s: %v", srv.name, err)
			}
			st := resp.GetStatuses()[0]
			if st.GetCode() == pb.RateLimitResponse_OK {
				allowed++
				per[i%2]++
				// The remaining count goes down by one per request,
				// whichever server answers: one counter.
				if wantRemaining >= 0 && int(st.GetLimitRemaining()) != wantRemaining {
					broken = append(broken, fmt.Sprintf("request %d to %s: remaining %d, want %d (after the other server's answer)",
						i, srv.name, st.GetLimitRemaining(), wantRemaining))
				}
				wantRemaining = int(st.GetLimitRemaining()) - 1
			}
		}
		if window(unit) != w {
			continue // the counts of a new window start again
		}
		for _, b := range broken {
			t.Error(b)
		}
		keys, hits := redisHits(t, do, value)
		return allowed, per, keys, hits
	}
	t.Fatalf("five runs crossed a window boundary")
	return 0, [2]int{}, 0, 0
}

// redisHits counts the keys naming value in Redis (the reference's key
// format: PREFIX + domain_key_value_windowstart) and sums their counts.
func redisHits(t *testing.T, do func(...string) (string, error), value string) (int, int64) {
	t.Helper()
	return redisHitsMatching(t, do, "*"+value+"*")
}

// redisHitsMatching counts the keys matching a KEYS pattern and sums their
// counts.
func redisHitsMatching(t *testing.T, do func(...string) (string, error), pattern string) (int, int64) {
	t.Helper()
	out, err := do("KEYS", pattern)
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	keys := strings.Fields(out)
	for _, k := range keys {
		v, err := do("GET", k)
		if err != nil {
			t.Fatal(err)
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			t.Fatalf("key %s holds %q, not a count", k, v)
		}
		sum += n
	}
	return len(keys), sum
}

// TestMixedFleetWildcards runs the mixed fleet on wildcards inside a
// value: a value matching /api/*/action, and values matching the
// share_threshold pattern svc*ep*rpc, which all count in one key named by
// the pattern. Requests alternate between the servers; one limit holds
// and every hit is in one Redis key. It needs a reference with wildcards
// inside a value (scripts/compare-envoy-ratelimit-current runs it).
func TestMixedFleetWildcards(t *testing.T) {
	sets := ownSets(t)
	if len(sets) == 0 {
		t.Skipf("the reference here (%s) predates wildcards inside a value: scripts/compare-envoy-ratelimit-current runs this against a newer one", referenceVersion(t))
	}
	layout := writeRuntime(t, sets[0])
	redis := startRedis(t)
	ref := startReference(t, referenceEnv(t, layout, redis.Addr(), nil))
	fg, err := startCompat(t, referenceEnv(t, layout, redis.Addr(), nil))
	if err != nil {
		t.Fatal(err)
	}
	fleet := []*rls{ref, fg}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, c := range []struct {
		name, key string
		value     func(run string, i int) string
		limit     int
		keys      func(run string) string // the Redis keys of the run, as a KEYS pattern
	}{
		{"wildcard inside", "path", func(run string, _ int) string { return "/api/" + run + "/action" }, 2,
			func(run string) string { return "*" + run + "*" }},
		{"shared by a pattern", "route", func(run string, i int) string { return fmt.Sprintf("svc%s-%dep%drpc", run, i, i) }, 4,
			func(string) string { return `edge_route_svc\*ep\*rpc_*` }},
	} {
		t.Run(c.name, func(t *testing.T) {
			for attempt := 0; ; attempt++ {
				awayFromBoundary(60, 5*time.Second)
				if _, err := redis.Do("FLUSHALL"); err != nil {
					t.Fatal(err)
				}
				run := fmt.Sprintf("r%d", rand.Int64())
				w := window(60)
				allowed, sent := 0, 3*c.limit
				for i := range sent {
					resp, err := fleet[i%2].client.ShouldRateLimit(ctx, newRequest("edge", [][][2]string{{{c.key, c.value(run, i)}}}, 1))
					if err != nil {
						t.Fatal(err)
					}
					if resp.GetOverallCode() == pb.RateLimitResponse_OK {
						allowed++
					}
				}
				if window(60) != w && attempt < 4 {
					continue
				}
				keys, hits := redisHitsMatching(t, redis.Do, c.keys(run))
				t.Logf("%d of %d alternating requests allowed on a limit of %d; Redis holds %d hits in %d key", allowed, sent, c.limit, hits, keys)
				if allowed != c.limit || keys != 1 || hits != int64(sent) {
					t.Errorf("%d allowed (want %d), %d hits in %d keys (want %d in 1): one limit is not enforced", allowed, c.limit, hits, keys, sent)
				}
				return
			}
		})
	}
}
