package envoyratelimit

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// statsdSums is a UDP statsd listener on loopback summing the values of
// each counter line (name:value|c) and counting each timer's lines.
type statsdSums struct {
	port   string
	mu     sync.Mutex
	counts map[string]float64
	timers map[string]int
}

func listenStatsd(t *testing.T) *statsdSums {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	s := &statsdSums{counts: map[string]float64{}, timers: map[string]int{}}
	_, s.port, _ = net.SplitHostPort(pc.LocalAddr().String())
	go func() {
		buf := make([]byte, 65536)
		for {
			n, _, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			for _, l := range strings.Split(string(buf[:n]), "\n") {
				name, rest, ok := strings.Cut(l, ":")
				val, typ, _ := strings.Cut(rest, "|")
				v, err := strconv.ParseFloat(val, 64)
				if !ok || err != nil {
					continue
				}
				s.mu.Lock()
				switch typ {
				case "c":
					s.counts[name] += v
				case "ms":
					s.timers[name]++
				}
				s.mu.Unlock()
			}
		}
	}()
	return s
}

// count is a counter's sum so far.
func (s *statsdSums) count(name string) float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts[name]
}

// rateLimitStats returns the counters of the service (ratelimit.service.*
// and ratelimit_server.ShouldRateLimit.*) as "name = sum" lines, sorted,
// and the number of ShouldRateLimit response time lines.
func (s *statsdSums) rateLimitStats() ([]string, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for k, v := range s.counts {
		if strings.HasPrefix(k, "ratelimit.service.") || strings.HasPrefix(k, "ratelimit_server.ShouldRateLimit.") {
			out = append(out, fmt.Sprintf("%s = %v", k, v))
		}
	}
	sort.Strings(out)
	return out, s.timers["ratelimit_server.ShouldRateLimit.response_time"]
}

// statsRules exercise how the reference names its per-limit stats: a key
// alone, key_value, nesting, value_to_metric, detailed_metric,
// share_threshold, shadow_mode, and a value with an IPv4 address.
const statsRules = `domain: stats
descriptors:
  - key: plain
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: exact
    value: v1
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: parent
    value: p
    descriptors:
      - key: child
        rate_limit: {unit: hour, requests_per_unit: 3}
  - key: vm
    value_to_metric: true
    rate_limit: {unit: hour, requests_per_unit: 4}
  - key: det
    detailed_metric: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: files
    value: "f*"
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: dark
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: ip
    rate_limit: {unit: hour, requests_per_unit: 10}
`

// TestStatsdAgainstReference sends the same requests to the reference and
// to compatibility mode, each with USE_STATSD=true to a statsd listener of
// its own, and compares the counters they send: the same names, the same
// sums.
func TestStatsdAgainstReference(t *testing.T) {
	layout := runtimeLayout{root: t.TempDir(), subdir: "ratelimit"}
	if err := os.MkdirAll(layout.configDir(), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(layout.configDir(), "stats.yaml"), []byte(statsRules), 0o644); err != nil {
		t.Fatal(err)
	}
	redis := startRedis(t)
	run := time.Now().UnixNano()
	statsEnv := func(sd *statsdSums, prefix string) map[string]string {
		return referenceEnv(t, layout, redis.Addr(), map[string]string{
			"USE_STATSD": "true", "DISABLE_STATS": "false", "STATSD_HOST": "127.0.0.1", "STATSD_PORT": sd.port,
			"STATSD_PROTOCOL": "udp", "STATS_FLUSH_INTERVAL": "100ms", "NEAR_LIMIT_RATIO": "0.5",
			"CACHE_KEY_PREFIX": fmt.Sprintf("%s%d:", prefix, run),
		})
	}
	refStats, fgStats := listenStatsd(t), listenStatsd(t)
	ref := startReference(t, statsEnv(refStats, "ref"))
	fg, err := startCompat(t, statsEnv(fgStats, "fg"))
	if err != nil {
		t.Fatal(err)
	}

	d := func(kv ...string) *commonv3.RateLimitDescriptor {
		out := &commonv3.RateLimitDescriptor{}
		for i := 0; i+1 < len(kv); i += 2 {
			out.Entries = append(out.Entries, &commonv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
		}
		return out
	}
	reqs := []*pb.RateLimitRequest{
		{Domain: "stats", HitsAddend: 3, Descriptors: []*commonv3.RateLimitDescriptor{d("plain", "a")}},
		{Domain: "stats", HitsAddend: 3, Descriptors: []*commonv3.RateLimitDescriptor{d("plain", "b"), d("exact", "v1")}},
		{Domain: "stats", Descriptors: []*commonv3.RateLimitDescriptor{d("exact", "v1"), d("exact", "v1")}},
		{Domain: "stats", HitsAddend: 2, Descriptors: []*commonv3.RateLimitDescriptor{d("parent", "p", "child", "c")}},
		{Domain: "stats", HitsAddend: 2, Descriptors: []*commonv3.RateLimitDescriptor{d("parent", "p", "child", "c")}},
		{Domain: "stats", HitsAddend: 5, Descriptors: []*commonv3.RateLimitDescriptor{d("vm", "x1"), d("vm", "x2")}},
		{Domain: "stats", HitsAddend: 2, Descriptors: []*commonv3.RateLimitDescriptor{d("det", "one"), d("det", "two")}},
		{Domain: "stats", Descriptors: []*commonv3.RateLimitDescriptor{d("files", "f1"), d("files", "f2"), d("files", "f3")}},
		{Domain: "stats", HitsAddend: 2, Descriptors: []*commonv3.RateLimitDescriptor{d("dark", "x")}},
		{Domain: "stats", Descriptors: []*commonv3.RateLimitDescriptor{d("ip", "10.1.2.3")}},
		{Domain: "stats", Descriptors: []*commonv3.RateLimitDescriptor{d("unknown", "x")}},
		{Domain: "nowhere", Descriptors: []*commonv3.RateLimitDescriptor{d("plain", "a")}},
		{Domain: "", Descriptors: []*commonv3.RateLimitDescriptor{d("plain", "a")}},
	}
	for _, r := range []*rls{ref, fg} {
		for i, req := range reqs {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := r.client.ShouldRateLimit(ctx, req)
			cancel()
			if err != nil && req.Domain != "" {
				t.Fatalf("%s: request %d: %v", r.name, i, err)
			}
		}
	}
	calls := fmt.Sprintf("ratelimit_server.ShouldRateLimit.total_requests = %d", len(reqs))
	var refLines, fgLines []string
	deadline := time.Now().Add(30 * time.Second)
	for {
		var refTimes, fgTimes int
		refLines, refTimes = refStats.rateLimitStats()
		fgLines, fgTimes = fgStats.rateLimitStats()
		done := refTimes == len(reqs) && fgTimes == len(reqs) && contains(refLines, calls) && contains(fgLines, calls)
		if done && strings.Join(refLines, "\n") == strings.Join(fgLines, "\n") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stats differ (or not all sent: %d and %d response times of %d)\nreference:\n%s\n\nfloodgate --compat envoy-ratelimit:\n%s",
				refTimes, fgTimes, len(reqs), strings.Join(refLines, "\n"), strings.Join(fgLines, "\n"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("%d counters, the same names and sums from both:\n%s", len(refLines), strings.Join(refLines, "\n"))
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
