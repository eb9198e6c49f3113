package envoycompat

import (
	"context"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-dev/floodgate/internal/testkit/redistest"
)

var redisSrv *redistest.Server

func TestMain(m *testing.M) {
	srv, stop, err := redistest.StartShared()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	redisSrv = srv
	code := m.Run()
	stop()
	os.Exit(code)
}

// testRules is a rule set in envoyproxy/ratelimit's format touching every
// feature the tests below decide with.
const testRules = `
domain: test
descriptors:
  - key: generic
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: named
    rate_limit: {name: the-name, unit: hour, requests_per_unit: 5}
  - key: free
    rate_limit: {unlimited: true}
  - key: path
    value: /api/*/action
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: files
    value: "f*"
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: dark
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: q1
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: q2
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: old
    rate_limit: {name: old, unit: minute, requests_per_unit: 1}
  - key: new
    rate_limit: {unit: minute, requests_per_unit: 3, replaces: [{name: old}]}
  - key: meta
    metadata: {team: edge}
    rate_limit: {unit: minute, requests_per_unit: 9}
  - key: sec
    rate_limit: {unit: second, requests_per_unit: 1}
`

// clock is a settable Unix-seconds clock.
type clock struct{ t atomic.Int64 }

func (c *clock) now() int64 { return c.t.Load() }

var prefixes atomic.Int64

// newService returns a service on the shared Redis with its own key prefix,
// rules and clock (starting at start, Unix seconds), and a settings tweak.
func newService(t testing.TB, rules string, start int64, tweak func(*Settings)) (*Service, *clock) {
	t.Helper()
	set, err := ParseSettings(mapLookup(map[string]string{
		"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": redisSrv.Addr(),
		"CACHE_KEY_PREFIX": "t" + strconv.FormatInt(prefixes.Add(1), 10) + ":",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if tweak != nil {
		tweak(&set)
	}
	cfg, err := LoadConfig([]File{{Name: "config.test", Text: []byte(rules)}}, false, set.Wildcards)
	if err != nil {
		t.Fatal(err)
	}
	c, err := dialRedis(context.Background(), set.Redis)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	clk := &clock{}
	clk.t.Store(start)
	s, err := NewService(set, cfg, c, nil, clk.now)
	if err != nil {
		t.Fatal(err)
	}
	return s, clk
}

func mapLookup(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func desc(kv ...string) *commonv3.RateLimitDescriptor {
	d := &commonv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &commonv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func call(t *testing.T, s *Service, hits uint32, descs ...*commonv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	t.Helper()
	r, err := s.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "test", Descriptors: descs, HitsAddend: hits})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

const (
	ok   = rlsv3.RateLimitResponse_OK
	over = rlsv3.RateLimitResponse_OVER_LIMIT
)

// t0 is a Unix time 10 s into a minute (and an hour, and a day).
const t0 = 1_800_000_000 - 1_800_000_000%86400 + 10

func TestKeysAndExpiry(t *testing.T) {
	s, _ := newService(t, testRules, t0, func(s *Settings) { s.ExpirationJitterMaxSeconds = 5 })
	call(t, s, 0, desc("generic", "a"))
	key := s.set.CacheKeyPrefix + "test_generic_a_" + strconv.FormatInt(t0-10, 10)
	if v, err := redisSrv.Do("GET", key); err != nil || v != "1" {
		t.Fatalf("GET %s = %q, %v: want the reference's key with count 1", key, v, err)
	}
	ttl, err := redisSrv.Do("TTL", key)
	if n, _ := strconv.Atoi(ttl); err != nil || n < 55 || n > 65 {
		t.Fatalf("TTL %s = %q: want the unit (60 s) plus at most 5 s of jitter", ttl, key)
	}
	// A count another pod (the reference) wrote is the same counter.
	if _, err := redisSrv.Do("INCRBY", key, "18"); err != nil {
		t.Fatal(err)
	}
	if st := call(t, s, 0, desc("generic", "a")).Statuses[0]; st.Code != ok || st.LimitRemaining != 0 {
		t.Fatalf("after 19 counted elsewhere: %v, want OK with 0 remaining", st)
	}
	if st := call(t, s, 0, desc("generic", "a")).Statuses[0]; st.Code != over {
		t.Fatalf("21st hit: %v, want OVER_LIMIT", st)
	}
}

func TestDecisions(t *testing.T) {
	t.Run("every hit counted", func(t *testing.T) {
		s, _ := newService(t, testRules, t0, nil)
		if r := call(t, s, 25, desc("generic", "x")); r.OverallCode != over {
			t.Fatalf("25 hits on 20/min: %v", r)
		}
		if r := call(t, s, 1, desc("generic", "x")); r.OverallCode != over {
			t.Fatalf("the next hit after a rejected 25: %v, want OVER_LIMIT (the 25 were counted)", r)
		}
	})
	t.Run("duplicates count twice", func(t *testing.T) {
		s, _ := newService(t, testRules, t0, nil)
		r := call(t, s, 0, desc("generic", "d"), desc("generic", "d"))
		if r.Statuses[0].LimitRemaining != 19 || r.Statuses[1].LimitRemaining != 18 ||
			r.Statuses[0].CurrentLimit == nil || r.Statuses[1].CurrentLimit == nil {
			t.Fatalf("same descriptor twice: %v, want 19 then 18 remaining, each with its limit", r)
		}
	})
	t.Run("hits_addend 0 at the limit", func(t *testing.T) {
		s, _ := newService(t, testRules, t0, nil)
		call(t, s, 20, desc("generic", "z"))
		d := desc("generic", "z")
		d.HitsAddend = wrapperspb.UInt64(0)
		if st := call(t, s, 0, d).Statuses[0]; st.Code != ok || st.LimitRemaining != 0 {
			t.Fatalf("a check at exactly the limit: %v, want OK with 0 remaining", st)
		}
	})
	t.Run("empty entry key", func(t *testing.T) {
		s, _ := newService(t, testRules, t0, nil)
		r := call(t, s, 0, desc("", "v"))
		if r.OverallCode != ok || r.Statuses[0].CurrentLimit != nil {
			t.Fatalf("empty key: %v, want OK without a limit", r)
		}
	})
	t.Run("unlimited", func(t *testing.T) {
		s, _ := newService(t, testRules, t0, nil)
		if st := call(t, s, 0, desc("free", "x")).Statuses[0]; st.Code != ok || st.LimitRemaining != math.MaxUint32 || st.CurrentLimit != nil {
			t.Fatalf("unlimited: %v", st)
		}
	})
	t.Run("names", func(t *testing.T) {
		s, _ := newService(t, testRules, t0, nil)
		r := call(t, s, 0, desc("generic", "n"), desc("named", "n"))
		if r.Statuses[0].CurrentLimit.GetName() != "" || r.Statuses[1].CurrentLimit.GetName() != "the-name" {
			t.Fatalf("names %q %q: want empty and the-name", r.Statuses[0].CurrentLimit.GetName(), r.Statuses[1].CurrentLimit.GetName())
		}
		if len(r.ResponseHeadersToAdd) != 0 {
			t.Fatalf("headers without LIMIT_RESPONSE_HEADERS_ENABLED: %v", r.ResponseHeadersToAdd)
		}
	})
	t.Run("wildcard in the middle", func(t *testing.T) {
		s, _ := newService(t, testRules, t0, func(s *Settings) { s.Wildcards = WildcardsAnywhere })
		if r := call(t, s, 0, desc("path", "/api/v1/action")); r.Statuses[0].CurrentLimit == nil {
			t.Fatalf("/api/v1/action: %v", r)
		}
		if r := call(t, s, 0, desc("path", "/api/v1/other")); r.Statuses[0].CurrentLimit != nil {
			t.Fatalf("/api/v1/other: %v", r)
		}
	})
	t.Run("share_threshold", func(t *testing.T) {
		s, _ := newService(t, testRules, t0, nil)
		call(t, s, 0, desc("files", "fa"))
		call(t, s, 0, desc("files", "fb"))
		if r := call(t, s, 0, desc("files", "fc")); r.OverallCode != over {
			t.Fatalf("third value matching f*: %v, want OVER_LIMIT (one counter)", r)
		}
		key := s.set.CacheKeyPrefix + "test_files_f*_" + strconv.FormatInt(t0-10, 10)
		if v, _ := redisSrv.Do("GET", key); v != "3" {
			t.Fatalf("GET %s = %q, want 3", key, v)
		}
	})
	t.Run("shadow_mode", func(t *testing.T) {
		s, _ := newService(t, testRules, t0, nil)
		call(t, s, 0, desc("dark", "x"))
		if r := call(t, s, 0, desc("dark", "x")); r.OverallCode != ok || r.Statuses[0].Code != ok {
			t.Fatalf("shadow over its limit: %v, want OK", r)
		}
	})
	t.Run("quota_mode", func(t *testing.T) {
		s, _ := newService(t, testRules, t0, nil)
		call(t, s, 0, desc("q1", "x"), desc("q2", "x"))
		r := call(t, s, 0, desc("q1", "x"), desc("q2", "x"))
		if r.OverallCode != ok || r.Statuses[0].Code != over {
			t.Fatalf("one quota over: %v, want OK overall", r)
		}
		if r := call(t, s, 0, desc("q1", "x"), desc("q2", "x")); r.OverallCode != over {
			t.Fatalf("both quotas over: %v", r)
		}
	})
	t.Run("replaces", func(t *testing.T) {
		s, _ := newService(t, testRules, t0, nil)
		call(t, s, 0, desc("old", "x"), desc("new", "x"))
		r := call(t, s, 0, desc("old", "x"), desc("new", "x"))
		if r.OverallCode != ok || r.Statuses[0].CurrentLimit != nil || r.Statuses[1].LimitRemaining != 1 {
			t.Fatalf("replaced limit: %v, want the old one dropped", r)
		}
	})
	t.Run("global shadow", func(t *testing.T) {
		s, _ := newService(t, testRules, t0, func(s *Settings) { s.GlobalShadowMode = true })
		call(t, s, 1, desc("sec", "x"))
		if r := call(t, s, 1, desc("sec", "x")); r.OverallCode != ok || r.Statuses[0].Code != over {
			t.Fatalf("SHADOW_MODE: %v, want OK overall with the status OVER_LIMIT", r)
		}
	})
}

func TestWindowsAndReset(t *testing.T) {
	s, clk := newService(t, testRules, t0, nil)
	st := call(t, s, 0, desc("named", "w")).Statuses[0]
	if got := st.DurationUntilReset.AsDuration(); got != time.Hour-10*time.Second {
		t.Fatalf("duration_until_reset %v at 10 s into the hour, want 59m50s", got)
	}
	call(t, s, 4, desc("named", "w"))
	if r := call(t, s, 0, desc("named", "w")); r.OverallCode != over {
		t.Fatalf("6th hit in the hour: %v", r)
	}
	clk.t.Store(t0 - 10 + 3600) // the next calendar hour: a new window
	if st := call(t, s, 0, desc("named", "w")).Statuses[0]; st.Code != ok || st.LimitRemaining != 4 ||
		st.DurationUntilReset.AsDuration() != time.Hour {
		t.Fatalf("first hit of the next hour: %v", st)
	}
}

func TestHeaders(t *testing.T) {
	s, _ := newService(t, testRules, t0, func(s *Settings) {
		s.HeadersEnabled, s.HeaderLimit, s.HeaderRemaining, s.HeaderReset = true, "X-L", "X-R", "X-Reset"
	})
	r := call(t, s, 0, desc("generic", "h"), desc("named", "h"))
	got := map[string]string{}
	for _, h := range r.ResponseHeadersToAdd {
		got[h.Key] = h.Value
	}
	if len(got) != 3 || got["X-L"] != "5" || got["X-R"] != "4" || got["X-Reset"] != "3590" {
		t.Fatalf("headers %v: want the tightest limit's (5 per hour, 4 left, 3590 s to reset)", got)
	}
}

func TestErrors(t *testing.T) {
	s, _ := newService(t, testRules, t0, nil)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		req  *rlsv3.RateLimitRequest
		code codes.Code
		msg  string
	}{
		{"empty domain", &rlsv3.RateLimitRequest{Descriptors: []*commonv3.RateLimitDescriptor{desc("a", "b")}}, codes.Unknown, "rate limit domain must not be empty"},
		{"no descriptors", &rlsv3.RateLimitRequest{Domain: "test"}, codes.Unknown, "rate limit descriptor list must not be empty"},
		{"override unit UNKNOWN", &rlsv3.RateLimitRequest{Domain: "test", Descriptors: []*commonv3.RateLimitDescriptor{{
			Entries: desc("a", "b").Entries,
			Limit:   &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_UNKNOWN}}}},
			codes.InvalidArgument, "is not a unit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.ShouldRateLimit(ctx, tc.req)
			if status.Code(err) != tc.code || !strings.Contains(status.Convert(err).Message(), tc.msg) {
				t.Fatalf("error %v, want %v with %q", err, tc.code, tc.msg)
			}
		})
	}
	o := &commonv3.RateLimitDescriptor{Entries: desc("any", "thing").Entries,
		Limit: &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_DAY}}
	call(t, s, 0, o)
	if r := call(t, s, 0, o); r.OverallCode != over || r.Statuses[0].CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_DAY {
		t.Fatalf("second hit under an override of 1 per day: %v", r)
	}
}

func TestStopIncrementAndLocalCache(t *testing.T) {
	t.Run("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", func(t *testing.T) {
		s, _ := newService(t, testRules, t0, func(s *Settings) { s.StopCacheKeyIncrementWhenOverlimit = true })
		call(t, s, 20, desc("generic", "s"))
		// As in the reference, the key going over is still counted; the
		// request's other keys are not.
		if r := call(t, s, 1, desc("generic", "s"), desc("named", "s")); r.OverallCode != over {
			t.Fatalf("over: %v", r)
		}
		minute := strconv.FormatInt(t0-10, 10)
		hour := strconv.FormatInt(t0-10, 10)
		if v, _ := redisSrv.Do("GET", s.set.CacheKeyPrefix+"test_generic_s_"+minute); v != "21" {
			t.Fatalf("count of the key going over %q, want 21", v)
		}
		if v, _ := redisSrv.Do("GET", s.set.CacheKeyPrefix+"test_named_s_"+hour); v != "0" {
			t.Fatalf("count of the other key %q, want 0 (INCRBY 0)", v)
		}
	})
	t.Run("LOCAL_CACHE_SIZE_IN_BYTES", func(t *testing.T) {
		s, _ := newService(t, testRules, t0, func(s *Settings) { s.LocalCacheSizeInBytes = 1 << 20 })
		call(t, s, 21, desc("generic", "l"))
		key := s.set.CacheKeyPrefix + "test_generic_l_" + strconv.FormatInt(t0-10, 10)
		if r := call(t, s, 1, desc("generic", "l")); r.OverallCode != over {
			t.Fatalf("over from the local cache: %v", r)
		}
		if v, _ := redisSrv.Do("GET", key); v != "21" {
			t.Fatalf("count %q, want 21: a key over its limit in the local cache is not sent to Redis", v)
		}
	})
}

func TestRedisDown(t *testing.T) {
	srv := redistest.Start(t)
	set, err := ParseSettings(mapLookup(map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": srv.Addr()}))
	if err != nil {
		t.Fatal(err)
	}
	set.Redis.Timeout = time.Second
	cfg, _ := LoadConfig([]File{{Name: "config.test", Text: []byte(testRules)}}, false, WildcardsAnywhere)
	c, err := dialRedis(context.Background(), set.Redis)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := NewService(set, cfg, c, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = s.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "test", Descriptors: []*commonv3.RateLimitDescriptor{desc("generic", "x")}})
	if status.Code(err) != codes.Unknown {
		t.Fatalf("Redis down: %v, want an UNKNOWN error as envoyproxy/ratelimit answers", err)
	}
}

// TestUnknownDomainOverride: a domain no rule file has limits nothing, not
// even a request's override, as in the reference (whose config lookup
// returns no limit for an unknown domain before it reads the override).
func TestUnknownDomainOverride(t *testing.T) {
	s, _ := newService(t, testRules, t0, nil)
	d := desc("generic", "x")
	d.Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_MINUTE}
	for range 2 {
		r, err := s.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "nowhere", Descriptors: []*commonv3.RateLimitDescriptor{d}})
		if err != nil || r.OverallCode != ok || r.Statuses[0].CurrentLimit != nil {
			t.Fatalf("override in an unknown domain: %v %v, want OK without a limit", r, err)
		}
	}
	if got := s.stats.domainNotFound("nowhere").n.Load(); got != 2 {
		t.Fatalf("domain_not_found %d, want 2", got)
	}
}
