package envoycompat

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
)

// StatsSettings say where the stats go: statsd (USE_STATSD, the
// reference's default), Prometheus (USE_PROMETHEUS) or nowhere
// (DISABLE_STATS).
type StatsSettings struct {
	Disable   bool   // DISABLE_STATS
	UseStatsd bool   // USE_STATSD
	Host      string // STATSD_HOST
	Port      int    // STATSD_PORT
	// Protocol is STATSD_PROTOCOL, tcp (the default) or udp, as the
	// reference's stats library reads it.
	Protocol string
	// FlushInterval is STATS_FLUSH_INTERVAL: counters are sent as their
	// change since the last flush, timers one line per value.
	FlushInterval time.Duration
	// ExtraTags is EXTRA_TAGS (key:value,...), added to every stat name
	// as .__key=value, sorted by key.
	ExtraTags map[string]string
	// MapperYAML is PROMETHEUS_MAPPER_YAML, a statsd_exporter mapping
	// file for the Prometheus names ("" for the reference's default one).
	MapperYAML string
	// ResponseTimeMS is PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS: the
	// default mapping keeps response times in milliseconds.
	ResponseTimeMS bool
}

// tagMap parses EXTRA_TAGS, key:value pairs separated by commas.
func tagMap(v string) (map[string]string, error) {
	m := map[string]string{}
	for _, pair := range strings.Split(v, ",") {
		if strings.TrimSpace(pair) == "" {
			continue
		}
		k, val, ok := strings.Cut(pair, ":")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, fmt.Errorf("%q is not key:value,key:value", clip(v))
		}
		m[strings.TrimSpace(k)] = strings.TrimSpace(val)
	}
	return m, nil
}

// statsSettings are the rows of the stats variables, with the reference's
// defaults.
var statsSettings = []setting{
	{"DISABLE_STATS", "false", boolean(func(s *Settings) *bool { return &s.Stats.Disable })},
	{"USE_STATSD", "true", boolean(func(s *Settings) *bool { return &s.Stats.UseStatsd })},
	{"STATSD_HOST", "localhost", str(func(s *Settings) *string { return &s.Stats.Host })},
	{"STATSD_PORT", "8125", integer(func(s *Settings) *int { return &s.Stats.Port }, 0, maxPort)},
	{"STATSD_PROTOCOL", "tcp", oneOf(func(s *Settings) *string { return &s.Stats.Protocol }, "tcp", "udp", "tcp4", "tcp6", "udp4", "udp6")},
	{"STATS_FLUSH_INTERVAL", "10s", duration(func(s *Settings) *time.Duration { return &s.Stats.FlushInterval })},
	{"EXTRA_TAGS", "", func(s *Settings, v string) error {
		m, err := tagMap(v)
		s.Stats.ExtraTags = m
		return err
	}},
	{"PROMETHEUS_MAPPER_YAML", "", str(func(s *Settings) *string { return &s.Stats.MapperYAML })},
	{"PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", "false", boolean(func(s *Settings) *bool { return &s.Stats.ResponseTimeMS })},
}

// checkStats refuses two sinks at once, as the reference does.
func checkStats(s Settings) error {
	if s.Stats.Disable {
		return nil
	}
	if s.Stats.UseStatsd && s.UsePrometheus {
		return errors.New("USE_STATSD and USE_PROMETHEUS are both true: stats go to one sink at a time, set USE_STATSD=false to serve Prometheus (the reference's default is USE_STATSD=true)")
	}
	if s.Stats.UseStatsd && s.Stats.FlushInterval <= 0 {
		return errors.New("STATS_FLUSH_INTERVAL: give a duration above 0 such as 10s")
	}
	return nil
}

// interceptor counts each gRPC call in the reference's
// ratelimit_server.<method>.total_requests and its whole milliseconds in
// .response_time, as the reference's server does.
func (st *stats) interceptor(toStatsd bool) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		start := time.Now()
		m := st.method(info.FullMethod[strings.LastIndexByte(info.FullMethod, '/')+1:])
		m.calls.add(1)
		resp, err := h(ctx, req)
		m.time.add(float64(time.Since(start).Milliseconds()), toStatsd)
		return resp, err
	}
}

// statsdOn and promOn report which sink the settings choose.
func (s Settings) statsdOn() bool { return !s.Stats.Disable && s.Stats.UseStatsd }
func (s Settings) promOn() bool   { return !s.Stats.Disable && s.UsePrometheus }

// tagSuffix is the name suffix gostats gives tags: .__key=value for each,
// keys sorted, '.', ':' and '|' in values made '_'.
func tagSuffix(tags map[string]string) string {
	keys := make([]string, 0, len(tags))
	for k, v := range tags {
		if k != "" && v != "" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var b strings.Builder
	r := strings.NewReplacer(".", "_", ":", "_", "|", "_")
	for _, k := range keys {
		b.WriteString(".__" + k + "=" + r.Replace(tags[k]))
	}
	return b.String()
}

// statsdSink sends the stats to a statsd server every flush interval, in
// statsd's line format: name:value|c for the change of a counter since the
// last flush (none when it did not change), name:value|ms for each timer
// value. Over UDP the lines go in datagrams of at most statsdDatagram
// bytes. A failed send is logged and its lines dropped; the next flush
// connects again.
type statsdSink struct {
	set   StatsSettings
	stats *stats
	log   *slog.Logger
	tags  string
	conn  net.Conn
	// failing is set after a logged failure, so a statsd that stays away
	// is logged once.
	failing bool
}

// statsdDatagram is the most bytes of one UDP datagram, as the
// reference's stats library sends them (no fragmentation on common links).
const statsdDatagram = 1432

func newStatsdSink(set StatsSettings, st *stats, log *slog.Logger) *statsdSink {
	return &statsdSink{set: set, stats: st, log: log, tags: tagSuffix(set.ExtraTags)}
}

// run flushes every interval until ctx ends, then flushes once more.
func (d *statsdSink) run(ctx context.Context) {
	t := time.NewTicker(d.set.FlushInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			d.flush()
			if d.conn != nil {
				d.conn.Close()
			}
			return
		case <-t.C:
			d.flush()
		}
	}
}

// lines returns the statsd lines of everything that changed since the
// last call.
func (d *statsdSink) lines() []string {
	var out []string
	for _, c := range d.stats.allCounters() {
		n := c.n.Load()
		if n == c.sent {
			continue
		}
		out = append(out, c.name+d.tags+":"+strconv.FormatUint(n-c.sent, 10)+"|c\n")
		c.sent = n
	}
	for _, t := range d.stats.allTimers() {
		t.mu.Lock()
		vals := t.vals
		t.vals = nil
		t.mu.Unlock()
		for _, v := range vals {
			out = append(out, t.name+d.tags+":"+strconv.FormatFloat(v, 'f', -1, 64)+"|ms\n")
		}
	}
	return out
}

// flush sends what changed since the last flush.
func (d *statsdSink) flush() {
	lines := d.lines()
	if len(lines) == 0 {
		return
	}
	err := d.send(lines)
	if err != nil {
		if d.conn != nil {
			d.conn.Close()
			d.conn = nil
		}
		if !d.failing {
			d.log.Warn("stats not sent to statsd (STATSD_HOST/STATSD_PORT)", "err", err, "lines", len(lines))
		}
	} else if d.failing {
		d.log.Info("stats sent to statsd again")
	}
	d.failing = err != nil
}

func (d *statsdSink) send(lines []string) error {
	if d.conn == nil {
		c, err := net.DialTimeout(d.set.Protocol, net.JoinHostPort(d.set.Host, strconv.Itoa(d.set.Port)), 3*time.Second)
		if err != nil {
			return err
		}
		d.conn = c
	}
	d.conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
	max := statsdDatagram
	if !strings.HasPrefix(d.set.Protocol, "udp") {
		max = 64 << 10
	}
	buf := make([]byte, 0, max)
	for _, l := range lines {
		if len(buf) > 0 && len(buf)+len(l) > max {
			if _, err := d.conn.Write(buf); err != nil {
				return err
			}
			buf = buf[:0]
		}
		buf = append(buf, l...)
	}
	_, err := d.conn.Write(buf)
	return err
}
