package envoycompat

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// statsdServer is a statsd server on a loopback port: it records the sum
// and the number of the values of every stat line it receives.
type statsdServer struct {
	port string
	mu   sync.Mutex
	sums map[string]float64 // by "name|type"
	seen map[string]int
	bad  []string // lines that are not name:value|type
}

func (s *statsdServer) line(l string) {
	if l == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	name, rest, ok := strings.Cut(l, ":")
	val, typ, ok2 := strings.Cut(rest, "|")
	v, err := strconv.ParseFloat(val, 64)
	if !ok || !ok2 || err != nil || (typ != "c" && typ != "ms" && typ != "g") {
		s.bad = append(s.bad, l)
		return
	}
	s.sums[name+"|"+typ] += v
	s.seen[name+"|"+typ]++
}

func (s *statsdServer) sum(key string) (float64, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sums[key], s.seen[key]
}

// startStatsd listens with protocol udp or tcp on 127.0.0.1.
func startStatsd(t *testing.T, protocol string) *statsdServer {
	t.Helper()
	s := &statsdServer{sums: map[string]float64{}, seen: map[string]int{}}
	if protocol == "udp" {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pc.Close() })
		_, s.port, _ = net.SplitHostPort(pc.LocalAddr().String())
		go func() {
			buf := make([]byte, 65536)
			for {
				n, _, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				if n > statsdDatagram {
					s.line(fmt.Sprintf("datagram of %d bytes", n))
				}
				for _, l := range strings.Split(string(buf[:n]), "\n") {
					s.line(l)
				}
			}
		}()
		return s
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	_, s.port, _ = net.SplitHostPort(ln.Addr().String())
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					s.line(sc.Text())
				}
			}()
		}
	}()
	return s
}

// TestStatsd sends known traffic and reads the reference's stat names and
// values on a real statsd listener, over UDP and TCP.
func TestStatsd(t *testing.T) {
	for _, tc := range []struct {
		protocol string
		tags     string // EXTRA_TAGS
		suffix   string // what they add to each name
	}{
		{"udp", "", ""},
		{"tcp", "zone:eu.west,app:rl", ".__app=rl.__zone=eu_west"},
	} {
		t.Run(tc.protocol, func(t *testing.T) {
			sd := startStatsd(t, tc.protocol)
			srv, _ := startServer(t, testRules, map[string]string{"USE_STATSD": "true", "STATSD_HOST": "127.0.0.1",
				"STATSD_PORT": sd.port, "STATSD_PROTOCOL": tc.protocol, "STATS_FLUSH_INTERVAL": "20ms", "EXTRA_TAGS": tc.tags,
				"CACHE_KEY_PREFIX": fmt.Sprintf("%s:%d:", t.Name(), time.Now().UnixNano())})
			conn, err := grpc.NewClient(srv.Addr(ListenerGRPC), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			c := rlsv3.NewRateLimitServiceClient(conn)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			// named: 5 an hour, NEAR_LIMIT_RATIO 0.8 (near from 4). Three
			// calls of 3 hits: counts 3, 6, 9.
			for range 3 {
				if _, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "test", HitsAddend: 3, Descriptors: descs(desc("named", "x"))}); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "test"}); err == nil {
				t.Fatal("no descriptors answered")
			}
			p := "ratelimit.service.rate_limit.test.named."
			want := map[string]float64{
				p + "total_hits|c": 9, p + "within_limit|c": 3, p + "near_limit|c": 1, p + "over_limit|c": 4,
				"ratelimit.service.config_load_success|c":                  1,
				"ratelimit.service.call.should_rate_limit.service_error|c": 1,
				"ratelimit_server.ShouldRateLimit.total_requests|c":        4,
			}
			for k, v := range want {
				name, typ, _ := strings.Cut(k, "|")
				key := name + tc.suffix + "|" + typ
				waitFor(t, fmt.Sprintf("%s = %v", key, v), func() bool { got, _ := sd.sum(key); return got == v })
			}
			waitFor(t, "4 response times", func() bool {
				_, n := sd.sum("ratelimit_server.ShouldRateLimit.response_time" + tc.suffix + "|ms")
				return n == 4
			})
			for _, never := range []string{p + "shadow_mode|c", p + "over_limit_with_local_cache|c"} {
				if got, n := sd.sum(strings.Replace(never, "|", tc.suffix+"|", 1)); n != 0 {
					t.Errorf("%s sent %d times (sum %v); the reference sends no counter that did not change", never, n, got)
				}
			}
			sd.mu.Lock()
			defer sd.mu.Unlock()
			if len(sd.bad) > 0 {
				t.Fatalf("lines that are not statsd: %q", sd.bad)
			}
		})
	}
}

func descs(d ...*commonv3.RateLimitDescriptor) []*commonv3.RateLimitDescriptor { return d }

// TestStatsdUnreachable: a flush with nothing listening fails, is logged
// once, and its lines are dropped, not sent again.
func TestStatsdUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	ln.Close()
	set, err := ParseSettings(mapLookup(map[string]string{"STATSD_HOST": "127.0.0.1", "STATSD_PORT": port}))
	if err != nil {
		t.Fatal(err)
	}
	st := newStats(0.8, nil)
	s := newStatsdSink(set.Stats, st, slog.New(slog.NewTextHandler(io.Discard, nil)))
	st.configLoadSuccess.add(1)
	s.flush()
	if !s.failing {
		t.Fatal("a flush to a closed port did not fail")
	}
	if lines := s.lines(); len(lines) != 0 {
		t.Fatalf("lines kept after a failed flush: %q", lines)
	}
}

func TestStatsSettings(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string // part of the error, "" for none
	}{
		{"default statsd", nil, ""},
		{"prometheus needs statsd off", map[string]string{"USE_PROMETHEUS": "true"}, "USE_STATSD and USE_PROMETHEUS are both true"},
		{"prometheus", map[string]string{"USE_PROMETHEUS": "true", "USE_STATSD": "false"}, ""},
		{"disabled", map[string]string{"USE_PROMETHEUS": "true", "DISABLE_STATS": "true"}, ""},
		{"dogstatsd", map[string]string{"USE_DOG_STATSD": "true"}, "USE_DOG_STATSD=true"},
		{"protocol", map[string]string{"STATSD_PROTOCOL": "sctp"}, "STATSD_PROTOCOL"},
		{"tags", map[string]string{"EXTRA_TAGS": "novalue"}, "EXTRA_TAGS"},
		{"interval", map[string]string{"STATS_FLUSH_INTERVAL": "0s"}, "STATS_FLUSH_INTERVAL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseSettings(mapLookup(tc.env))
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
		})
	}
}
