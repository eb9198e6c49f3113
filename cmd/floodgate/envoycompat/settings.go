// Package envoycompat runs Floodgate as a drop-in replacement for
// envoyproxy/ratelimit: `floodgate serve --compat envoy-ratelimit`, or the
// binary started under the name ratelimit. It reads that service's
// environment variables and runtime directory of rule files, and answers
// exactly as it does: fixed windows aligned to multiples of the unit since
// the Unix epoch, every hit of every limited descriptor counted (rejected
// ones too), the same names, remaining counts, reset durations, headers,
// gRPC errors and /json statuses. With Redis it reads and writes that
// service's own keys (prefix, domain, entries and window start, INCRBY and
// EXPIRE with jitter), so old and new pods on one Redis enforce one limit.
//
// A setting it cannot honour (the memcache backend, DogStatsD) stops the
// start with one line naming it. TRACING_ENABLED exports OTLP spans as
// the reference does; the debug port serves /rlconfig, /stats and pprof. With CONFIG_TYPE=GRPC_XDS_SOTW
// the rules are pushed by an xDS server (Envoy Gateway's controller)
// instead of read from files. GRPC_SERVER_USE_TLS serves gRPC with TLS
// (mutual with GRPC_CLIENT_TLS_CACERT). The stats go to statsd (USE_STATSD,
// the default there and here) or to Prometheus (USE_PROMETHEUS) under the
// names a statsd_exporter mapping gives them (PROMETHEUS_MAPPER_YAML).
package envoycompat

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"time"
)

// Settings are envoyproxy/ratelimit's environment variables, with that
// service's defaults, for the parts this package serves.
type Settings struct {
	Host      string
	Port      int
	DebugHost string
	DebugPort int
	GrpcHost  string
	GrpcPort  int
	GrpcUds   string

	GrpcMaxConnectionAge      time.Duration
	GrpcMaxConnectionAgeGrace time.Duration
	// GrpcTLS is TLS (and mutual TLS) on the gRPC listener.
	GrpcTLS GrpcTLSSettings
	// Guard bounds hostile traffic on the gRPC listener (the reset budget
	// by FLOODGATE_GRPC_* variables).
	Guard GuardSettings

	LogLevel  string
	LogFormat string

	RuntimePath           string
	RuntimeSubdirectory   string
	RuntimeAppDirectory   string
	RuntimeIgnoreDotFiles bool
	RuntimeWatchRoot      bool

	ExpirationJitterMaxSeconds         int64
	LocalCacheSizeInBytes              int
	NearLimitRatio                     float32
	CacheKeyPrefix                     string
	StopCacheKeyIncrementWhenOverlimit bool

	HeadersEnabled  bool
	HeaderLimit     string
	HeaderRemaining string
	HeaderReset     string

	HealthyWithAtLeastOneConfigLoaded bool

	Redis          RedisSettings
	RedisPerSecond bool
	// RedisStartup* retry the first connection to Redis, doubling the
	// wait from Initial up to Max, for at most MaxElapsed (0: until the
	// start is cancelled).
	RedisStartupInitial, RedisStartupMax, RedisStartupMaxElapsed time.Duration
	// PerSecond is the Redis for limits with unit SECOND, when
	// RedisPerSecond is set.
	PerSecond RedisSettings

	// Stats say where the stats go (statsd by default, as there).
	Stats StatsSettings
	// UsePrometheus serves the stats on PrometheusAddr at PrometheusPath.
	UsePrometheus  bool
	PrometheusAddr string
	PrometheusPath string

	// Wildcards is FLOODGATE_WILDCARDS: anywhere (the default, as the
	// current reference) or trailing; see Wildcards.
	Wildcards Wildcards

	// ConfigType is CONFIG_TYPE: file (the runtime directory) or
	// grpc_xds_sotw (rules pushed over xDS, see XDS).
	ConfigType string
	// ForceStart is FORCE_START_WITHOUT_INITIAL_CONFIG: with xDS, serve
	// before the first rules arrive (requests fail until then, as there).
	ForceStart bool
	XDS        XDSSettings

	// Tracing is TRACING_*: OTLP spans as the reference exports them.
	Tracing TracingSettings

	GlobalShadowMode        bool
	GlobalQuotaMode         bool
	ResponseDynamicMetadata bool
	MergeDomainConfig       bool
}

// RedisSettings say how to reach one Redis (REDIS_* or REDIS_PERSECOND_*).
type RedisSettings struct {
	SocketType   string // tcp or unix
	Type         string // single, cluster or sentinel (lower case)
	URL          string
	PoolSize     int
	Auth         string // password, or user:password
	SentinelAuth string
	TLS          bool
	Timeout      time.Duration
	// ClusterParallelism is REDIS_(PERSECOND_)CLUSTER_PIPELINE_PARALLELISM:
	// how many of a request's key groups the reference sends to a Redis
	// Cluster at once (1, its default: one after the other; 0: up to its
	// pool size). Here a request's commands go to their masters at once,
	// each master's over its one pipelined connection, whatever the value.
	ClusterParallelism int

	// The TLS files and choices are shared by both Redis connections.
	TLSClientCert, TLSClientKey, TLSCACert string
	TLSSkipHostnameVerification            bool
}

// setting is one environment variable: its default and where it goes.
type setting struct {
	name, def string
	set       func(s *Settings, v string) error
}

func str(dst func(*Settings) *string) func(*Settings, string) error {
	return func(s *Settings, v string) error { *dst(s) = v; return nil }
}

func integer(dst func(*Settings) *int, lo, hi int64) func(*Settings, string) error {
	return func(s *Settings, v string) error {
		n, err := strconv.ParseInt(strings.TrimSpace(v), 0, 64)
		if err != nil || n < lo || n > hi {
			return fmt.Errorf("%q is not a whole number from %d to %d", clip(v), lo, hi)
		}
		*dst(s) = int(n)
		return nil
	}
}

func boolean(dst func(*Settings) *bool) func(*Settings, string) error {
	return func(s *Settings, v string) error {
		b, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			return fmt.Errorf("%q is not true or false", clip(v))
		}
		*dst(s) = b
		return nil
	}
}

func duration(dst func(*Settings) *time.Duration) func(*Settings, string) error {
	return func(s *Settings, v string) error {
		d, err := time.ParseDuration(strings.TrimSpace(v))
		if err != nil || d < 0 {
			return fmt.Errorf("%q is not a duration such as 10s", clip(v))
		}
		*dst(s) = d
		return nil
	}
}

// parallelism reads a cluster pipeline parallelism: a whole number, at
// least 0, as the reference checks it.
func parallelism(dst func(*Settings) *int) func(*Settings, string) error {
	return func(s *Settings, v string) error {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			return fmt.Errorf("%q is not a whole number", clip(v))
		}
		if n < 0 {
			return errors.New("redis cluster pipeline parallelism must be >= 0")
		}
		*dst(s) = n
		return nil
	}
}

func oneOf(dst func(*Settings) *string, names ...string) func(*Settings, string) error {
	return func(s *Settings, v string) error {
		l := strings.ToLower(strings.TrimSpace(v))
		for _, n := range names {
			if l == n {
				*dst(s) = l
				return nil
			}
		}
		return fmt.Errorf("%q is not one of %s", clip(v), strings.Join(names, ", "))
	}
}

// maxPort is the largest TCP port.
const maxPort = 65535

var settings = []setting{
	{"HOST", "0.0.0.0", str(func(s *Settings) *string { return &s.Host })},
	{"PORT", "8080", integer(func(s *Settings) *int { return &s.Port }, 0, maxPort)},
	{"DEBUG_HOST", "0.0.0.0", str(func(s *Settings) *string { return &s.DebugHost })},
	{"DEBUG_PORT", "6070", integer(func(s *Settings) *int { return &s.DebugPort }, 0, maxPort)},
	{"GRPC_HOST", "0.0.0.0", str(func(s *Settings) *string { return &s.GrpcHost })},
	{"GRPC_PORT", "8081", integer(func(s *Settings) *int { return &s.GrpcPort }, 0, maxPort)},
	{"GRPC_UDS", "", str(func(s *Settings) *string { return &s.GrpcUds })},
	{"GRPC_MAX_CONNECTION_AGE", "24h", duration(func(s *Settings) *time.Duration { return &s.GrpcMaxConnectionAge })},
	{"GRPC_MAX_CONNECTION_AGE_GRACE", "1h", duration(func(s *Settings) *time.Duration { return &s.GrpcMaxConnectionAgeGrace })},
	{"LOG_LEVEL", "WARN", oneOf(func(s *Settings) *string { return &s.LogLevel }, "trace", "debug", "info", "warn", "warning", "error", "fatal", "panic")},
	{"LOG_FORMAT", "text", oneOf(func(s *Settings) *string { return &s.LogFormat }, "text", "json")},
	{"RUNTIME_ROOT", "/srv/runtime_data/current", str(func(s *Settings) *string { return &s.RuntimePath })},
	{"RUNTIME_SUBDIRECTORY", "", str(func(s *Settings) *string { return &s.RuntimeSubdirectory })},
	{"RUNTIME_APPDIRECTORY", "config", str(func(s *Settings) *string { return &s.RuntimeAppDirectory })},
	{"RUNTIME_IGNOREDOTFILES", "false", boolean(func(s *Settings) *bool { return &s.RuntimeIgnoreDotFiles })},
	{"RUNTIME_WATCH_ROOT", "true", boolean(func(s *Settings) *bool { return &s.RuntimeWatchRoot })},
	{"EXPIRATION_JITTER_MAX_SECONDS", "300", func(s *Settings, v string) error {
		var n int
		if err := integer(func(*Settings) *int { return &n }, 0, math.MaxInt32)(s, v); err != nil {
			return err
		}
		s.ExpirationJitterMaxSeconds = int64(n)
		return nil
	}},
	{"LOCAL_CACHE_SIZE_IN_BYTES", "0", integer(func(s *Settings) *int { return &s.LocalCacheSizeInBytes }, 0, 1<<40)},
	{"NEAR_LIMIT_RATIO", "0.8", func(s *Settings, v string) error {
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 32)
		if err != nil || f < 0 || f > 1 || math.IsNaN(f) {
			return fmt.Errorf("%q is not a ratio from 0 to 1", clip(v))
		}
		s.NearLimitRatio = float32(f)
		return nil
	}},
	{"CACHE_KEY_PREFIX", "", str(func(s *Settings) *string { return &s.CacheKeyPrefix })},
	{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "false", boolean(func(s *Settings) *bool { return &s.StopCacheKeyIncrementWhenOverlimit })},
	{"LIMIT_RESPONSE_HEADERS_ENABLED", "false", boolean(func(s *Settings) *bool { return &s.HeadersEnabled })},
	{"LIMIT_LIMIT_HEADER", "RateLimit-Limit", str(func(s *Settings) *string { return &s.HeaderLimit })},
	{"LIMIT_REMAINING_HEADER", "RateLimit-Remaining", str(func(s *Settings) *string { return &s.HeaderRemaining })},
	{"LIMIT_RESET_HEADER", "RateLimit-Reset", str(func(s *Settings) *string { return &s.HeaderReset })},
	{"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "false", boolean(func(s *Settings) *bool { return &s.HealthyWithAtLeastOneConfigLoaded })},

	{"REDIS_SOCKET_TYPE", "unix", oneOf(func(s *Settings) *string { return &s.Redis.SocketType }, "tcp", "unix")},
	{"REDIS_TYPE", "SINGLE", oneOf(func(s *Settings) *string { return &s.Redis.Type }, "single", "cluster", "sentinel")},
	{"REDIS_URL", "/var/run/nutcracker/ratelimit.sock", str(func(s *Settings) *string { return &s.Redis.URL })},
	{"REDIS_POOL_SIZE", "10", integer(func(s *Settings) *int { return &s.Redis.PoolSize }, 1, 1<<16)},
	{"REDIS_AUTH", "", str(func(s *Settings) *string { return &s.Redis.Auth })},
	{"REDIS_SENTINEL_AUTH", "", str(func(s *Settings) *string { return &s.Redis.SentinelAuth })},
	{"REDIS_TLS", "false", boolean(func(s *Settings) *bool { return &s.Redis.TLS })},
	{"REDIS_TLS_CLIENT_CERT", "", str(func(s *Settings) *string { return &s.Redis.TLSClientCert })},
	{"REDIS_TLS_CLIENT_KEY", "", str(func(s *Settings) *string { return &s.Redis.TLSClientKey })},
	{"REDIS_TLS_CACERT", "", str(func(s *Settings) *string { return &s.Redis.TLSCACert })},
	{"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "false", boolean(func(s *Settings) *bool { return &s.Redis.TLSSkipHostnameVerification })},
	{"REDIS_TIMEOUT", "10s", duration(func(s *Settings) *time.Duration { return &s.Redis.Timeout })},
	{"REDIS_CLUSTER_PIPELINE_PARALLELISM", "1", parallelism(func(s *Settings) *int { return &s.Redis.ClusterParallelism })},

	{"REDIS_STARTUP_INITIAL_INTERVAL", "1s", duration(func(s *Settings) *time.Duration { return &s.RedisStartupInitial })},
	{"REDIS_STARTUP_MAX_INTERVAL", "30s", duration(func(s *Settings) *time.Duration { return &s.RedisStartupMax })},
	{"REDIS_STARTUP_MAX_ELAPSED_TIME", "0", duration(func(s *Settings) *time.Duration { return &s.RedisStartupMaxElapsed })},
	{"REDIS_PERSECOND", "false", boolean(func(s *Settings) *bool { return &s.RedisPerSecond })},
	{"REDIS_PERSECOND_SOCKET_TYPE", "unix", oneOf(func(s *Settings) *string { return &s.PerSecond.SocketType }, "tcp", "unix")},
	{"REDIS_PERSECOND_TYPE", "SINGLE", oneOf(func(s *Settings) *string { return &s.PerSecond.Type }, "single", "cluster", "sentinel")},
	{"REDIS_PERSECOND_URL", "/var/run/nutcracker/ratelimitpersecond.sock", str(func(s *Settings) *string { return &s.PerSecond.URL })},
	{"REDIS_PERSECOND_POOL_SIZE", "10", integer(func(s *Settings) *int { return &s.PerSecond.PoolSize }, 1, 1<<16)},
	{"REDIS_PERSECOND_AUTH", "", str(func(s *Settings) *string { return &s.PerSecond.Auth })},
	{"REDIS_PERSECOND_SENTINEL_AUTH", "", str(func(s *Settings) *string { return &s.PerSecond.SentinelAuth })},
	{"REDIS_PERSECOND_TLS", "false", boolean(func(s *Settings) *bool { return &s.PerSecond.TLS })},
	{"REDIS_PERSECOND_TIMEOUT", "10s", duration(func(s *Settings) *time.Duration { return &s.PerSecond.Timeout })},
	{"REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM", "1", parallelism(func(s *Settings) *int { return &s.PerSecond.ClusterParallelism })},

	{"SHADOW_MODE", "false", boolean(func(s *Settings) *bool { return &s.GlobalShadowMode })},
	{"QUOTA_MODE", "false", boolean(func(s *Settings) *bool { return &s.GlobalQuotaMode })},
	{"RESPONSE_DYNAMIC_METADATA", "false", boolean(func(s *Settings) *bool { return &s.ResponseDynamicMetadata })},
	{"MERGE_DOMAIN_CONFIG", "false", boolean(func(s *Settings) *bool { return &s.MergeDomainConfig })},
	{"USE_PROMETHEUS", "false", boolean(func(s *Settings) *bool { return &s.UsePrometheus })},
	{"PROMETHEUS_ADDR", ":9090", str(func(s *Settings) *string { return &s.PrometheusAddr })},
	{"PROMETHEUS_PATH", "/metrics", str(func(s *Settings) *string { return &s.PrometheusPath })},
	{"FLOODGATE_WILDCARDS", "anywhere", func(s *Settings, v string) error {
		switch strings.ToLower(strings.TrimSpace(v)) {
		case "trailing":
			s.Wildcards = WildcardsTrailing
		case "anywhere":
			s.Wildcards = WildcardsAnywhere
		default:
			return fmt.Errorf("%q: want trailing (a '*' is a wildcard only at the end of a value) or anywhere", clip(v))
		}
		return nil
	}},
}

// refusal is a setting of envoyproxy/ratelimit this package does not serve:
// refused reports whether the value asks for it, and why says what to do.
type refusal struct {
	name    string
	refused func(v string) bool
	why     string
}

func isTrue(v string) bool {
	b, err := strconv.ParseBool(strings.TrimSpace(v))
	return err == nil && b
}

func notEqualFold(want string) func(string) bool {
	return func(v string) bool { return !strings.EqualFold(strings.TrimSpace(v), want) }
}

func nonEmpty(v string) bool { return strings.TrimSpace(v) != "" }

var refusals = []refusal{
	{"BACKEND_TYPE", notEqualFold("redis"), "only the redis backend is served; memcache is not"},
	{"USE_DOG_STATSD", isTrue, "DogStatsD is not sent; set USE_DOG_STATSD=false and use plain statsd (USE_STATSD=true) or USE_PROMETHEUS=true"},
	{"MEMCACHE_HOST_PORT", nonEmpty, "the memcache backend is not served"},
	{"MEMCACHE_SRV", nonEmpty, "the memcache backend is not served"},
	{"REDIS_POOL_ON_EMPTY_BEHAVIOR", notEqualFold("WAIT"), "only WAIT is served (as by the reference since radix v4)"},
	{"REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR", notEqualFold("WAIT"), "only WAIT is served (as by the reference since radix v4)"},
}

// ParseSettings reads envoyproxy/ratelimit's settings through lookup
// (os.LookupEnv in the binary), with that service's defaults. A value that
// does not parse, or a setting this package cannot honour, is an error
// that names the variable.
func ParseSettings(lookup func(string) (string, bool)) (Settings, error) {
	s := Settings{Guard: defaultGuard()}
	for _, r := range refusals {
		if v, ok := lookup(r.name); ok && r.refused(v) {
			return s, fmt.Errorf("%s=%s: %s", r.name, clip(v), r.why)
		}
	}
	rows := append(settings[:len(settings):len(settings)], xdsSettings...)
	rows = append(rows, grpcTLSSettings...)
	rows = append(rows, guardSettings...)
	rows = append(rows, tracingSettings...)
	for _, st := range append(rows, statsSettings...) {
		v, ok := lookup(st.name)
		if !ok {
			v = st.def
		}
		if err := st.set(&s, v); err != nil {
			return s, fmt.Errorf("%s: %v", st.name, err)
		}
	}
	if err := checkConfigSource(s); err != nil {
		return s, err
	}
	if err := s.GrpcTLS.check(); err != nil {
		return s, err
	}
	if err := checkStats(s); err != nil {
		return s, err
	}
	// The per-second Redis shares the TLS files and choices.
	s.PerSecond.TLSClientCert, s.PerSecond.TLSClientKey, s.PerSecond.TLSCACert = s.Redis.TLSClientCert, s.Redis.TLSClientKey, s.Redis.TLSCACert
	s.PerSecond.TLSSkipHostnameVerification = s.Redis.TLSSkipHostnameVerification
	for _, r := range []struct {
		name string
		r    RedisSettings
		used bool
	}{{"REDIS", s.Redis, true}, {"REDIS_PERSECOND", s.PerSecond, s.RedisPerSecond}} {
		if !r.used {
			continue
		}
		if strings.TrimSpace(r.r.URL) == "" {
			return s, fmt.Errorf("%s_URL is empty: give the Redis address", r.name)
		}
		if r.r.Type == "sentinel" && len(strings.Split(r.r.URL, ",")) < 2 {
			return s, fmt.Errorf("%s_URL: a sentinel address is <master name>,<sentinel1>,...,<sentinelN>", r.name)
		}
	}
	return s, nil
}

// clip shortens a value for an error message.
func clip(s string) string {
	const n = 64
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// Logger returns the logger LOG_LEVEL and LOG_FORMAT ask for, writing to w.
func (s Settings) Logger(w io.Writer) *slog.Logger {
	lvl := slog.LevelWarn
	switch s.LogLevel {
	case "trace", "debug":
		lvl = slog.LevelDebug
	case "info":
		lvl = slog.LevelInfo
	case "error", "fatal", "panic":
		lvl = slog.LevelError
	}
	o := &slog.HandlerOptions{Level: lvl}
	if s.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, o))
	}
	return slog.New(slog.NewTextHandler(w, o))
}
