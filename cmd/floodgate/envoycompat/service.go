package envoycompat

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/rueidis"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
)

// Service answers RLS requests as envoyproxy/ratelimit does, counting in
// Redis with its keys.
type Service struct {
	rlsv3.UnimplementedRateLimitServiceServer

	set       Settings
	config    atomic.Pointer[Config]
	client    rueidis.Client
	perSecond rueidis.Client // nil: client counts every unit
	// pipe and perSecondPipe send the counting commands of concurrent
	// requests to client and perSecond together.
	pipe, perSecondPipe *sharedPipeline
	local               *localCache  // nil without LOCAL_CACHE_SIZE_IN_BYTES
	stats               *stats       // nil without a stats sink
	trace               *tracing     // nil without TRACING_ENABLED
	now                 func() int64 // Unix seconds

	jitterMu sync.Mutex
	jitter   *rand.Rand
}

// NewService returns a Service deciding with cfg on client (and perSecond
// for limits with unit SECOND, when not nil). now gives Unix seconds (nil:
// the system clock). A PROMETHEUS_MAPPER_YAML that does not load is an
// error.
func NewService(set Settings, cfg *Config, client, perSecond rueidis.Client, now func() int64) (*Service, error) {
	if now == nil {
		now = func() int64 { return time.Now().Unix() }
	}
	s := &Service{set: set, client: client, perSecond: perSecond, now: now,
		pipe:   newSharedPipeline(client, set.Redis.Type, set.Redis.Timeout),
		jitter: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0))}
	if perSecond != nil {
		s.perSecondPipe = newSharedPipeline(perSecond, set.PerSecond.Type, set.PerSecond.Timeout)
	}
	if set.LocalCacheSizeInBytes > 0 {
		s.local = newLocalCache(set.LocalCacheSizeInBytes)
	}
	if set.promOn() {
		m, err := loadMapper(set.Stats.MapperYAML)
		if err != nil {
			return nil, err
		}
		if set.Stats.MapperYAML == "" && set.Stats.ResponseTimeMS {
			m.unscale()
		}
		s.stats = newStats(set.NearLimitRatio, m)
	} else if set.statsdOn() {
		s.stats = newStats(set.NearLimitRatio, nil)
	}
	s.config.Store(cfg)
	if cfg != nil {
		s.countConfigLoad(nil)
	}
	return s, nil
}

// countConfigLoad counts a load of the rules that succeeded (err nil) or
// failed, in the reference's config_load_success and config_load_error.
func (s *Service) countConfigLoad(err error) {
	if s.stats == nil {
		return
	}
	if err != nil {
		s.stats.configLoadError.add(1)
	} else {
		s.stats.configLoadSuccess.add(1)
	}
}

// SetConfig replaces the rule files the service decides with.
func (s *Service) SetConfig(cfg *Config) { s.config.Store(cfg) }

// errServiceDomain and the others are the errors of a request
// envoyproxy/ratelimit refuses, with its words; gRPC reports them as
// UNKNOWN, as it does there.
var (
	errEmptyDomain      = errors.New("rate limit domain must not be empty")
	errEmptyDescriptors = errors.New("rate limit descriptor list must not be empty")
	errNoConfig         = errors.New("no rate limit configuration loaded")
)

// serviceError counts err in the reference's should_rate_limit.service_error.
func (s *Service) serviceError(err error) error {
	if s.stats != nil {
		s.stats.serviceError.add(1)
	}
	return err
}

// ShouldRateLimit decides one request.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if s.trace != nil {
		span := s.trace.startDecision(ctx, req)
		defer span.End()
	}
	if req.GetDomain() == "" {
		return nil, s.serviceError(errEmptyDomain)
	}
	descs := req.GetDescriptors()
	if len(descs) == 0 {
		return nil, s.serviceError(errEmptyDescriptors)
	}
	cfg := s.config.Load()
	if cfg == nil {
		return nil, s.serviceError(errNoConfig)
	}
	now := s.now()
	ds := make([]descriptorState, len(descs))
	var replacing map[string]bool
	known := cfg.domains[req.GetDomain()] != nil
	for i, d := range descs {
		if !known {
			// An unknown domain limits nothing, overrides included, as
			// there; each descriptor counts in its domain_not_found.
			if s.stats != nil {
				s.stats.domainNotFound(req.GetDomain()).add(1)
			}
			continue
		}
		if o := d.GetLimit(); o != nil {
			u := rlsv3.RateLimitResponse_RateLimit_Unit(o.GetUnit())
			if unitSeconds(u) == 0 {
				// envoyproxy/ratelimit's process crashes here; a caller's
				// bad override is the caller's error.
				return nil, status.Errorf(codes.InvalidArgument, "descriptor %d: limit override unit %v is not a unit: use SECOND, MINUTE, HOUR, DAY, WEEK, MONTH or YEAR", i, o.GetUnit())
			}
			ds[i].limit = newLimit(o.GetRequestsPerUnit(), u, "")
			if s.stats != nil {
				ds[i].match.stats = overrideStats(req.GetDomain(), d)
			}
			continue
		}
		m := cfg.lookupStats(req.GetDomain(), entriesOf(d), s.stats != nil)
		ds[i].match = m
		if m.limit == nil {
			continue
		}
		for _, r := range m.limit.replaces {
			if replacing == nil {
				replacing = map[string]bool{}
			}
			replacing[r] = true
		}
		if m.limit.unlimited {
			ds[i].unlimited = true
			continue
		}
		ds[i].limit = m.limit
	}
	for i := range ds {
		if l := ds[i].limit; l != nil && l.name != "" && replacing[l.name] {
			ds[i].limit = nil
		}
	}

	statuses, err := s.doLimit(ctx, req, ds, now)
	if err != nil {
		return nil, err
	}
	return s.respond(req, ds, statuses, now), nil
}

// descriptorState is what one request decides about one of its
// descriptors; a request's are allocated together.
type descriptorState struct {
	limit     *limit // nil: not limited (no rule, unlimited or replaced)
	match     match
	unlimited bool
	localOver bool   // over its limit in the local cache
	hits      uint64 // its hits_addend
	addend    uint64 // what its Redis count is incremented by
	key       string // its Redis key, when limited
	count     uint64 // its count in Redis after this request's hits
}

// overrideStats is the stats name of a request's override: the domain and
// every entry's key_value (key alone for an empty value).
func overrideStats(domain string, d *commonv3.RateLimitDescriptor) string {
	var b strings.Builder
	b.WriteString(domain)
	for _, e := range d.GetEntries() {
		b.WriteByte('.')
		b.WriteString(e.GetKey())
		if e.GetValue() != "" {
			b.WriteString("_" + e.GetValue())
		}
	}
	return b.String()
}

func entriesOf(d *commonv3.RateLimitDescriptor) []entry {
	es := d.GetEntries()
	out := make([]entry, len(es))
	for i, e := range es {
		out[i] = entry{e.GetKey(), e.GetValue()}
	}
	return out
}

// hitsAddends sets the hits each descriptor adds: its own hits_addend
// when set (0 checks without counting), else the request's, at least 1.
func hitsAddends(req *rlsv3.RateLimitRequest, ds []descriptorState) {
	for i, d := range req.GetDescriptors() {
		if h := d.GetHitsAddend(); h != nil {
			ds[i].hits = h.GetValue()
		} else {
			ds[i].hits = max(1, uint64(req.GetHitsAddend()))
		}
	}
}

// cacheKey is the Redis key of a limited descriptor in the window holding
// now: CACHE_KEY_PREFIX, the domain, then key_value_ for every entry (a
// share_threshold entry with its pattern as the value), then the window's
// start in Unix seconds.
func (s *Service) cacheKey(domain string, d *commonv3.RateLimitDescriptor, l *limit, shared []string, now int64) string {
	var window [20]byte
	start := strconv.AppendInt(window[:0], now/l.divider*l.divider, 10)
	size := len(s.set.CacheKeyPrefix) + len(domain) + 1 + len(start)
	for i, e := range d.GetEntries() {
		v := e.GetValue()
		if i < len(shared) && shared[i] != "" {
			v = shared[i]
		}
		size += len(e.GetKey()) + len(v) + 2
	}
	var b strings.Builder
	b.Grow(size)
	b.WriteString(s.set.CacheKeyPrefix)
	b.WriteString(domain)
	b.WriteByte('_')
	for i, e := range d.GetEntries() {
		b.WriteString(e.GetKey())
		b.WriteByte('_')
		v := e.GetValue()
		if i < len(shared) && shared[i] != "" {
			v = shared[i]
		}
		b.WriteString(v)
		b.WriteByte('_')
	}
	b.Write(start)
	return b.String()
}

// redisError is a failure to count, reported and counted (in
// should_rate_limit.redis_error) as envoyproxy/ratelimit does.
func (s *Service) redisError(err error) error {
	if s.stats != nil {
		s.stats.redisError.add(1)
	}
	return status.Error(codes.Unknown, err.Error())
}

// doLimit counts every limited descriptor in Redis and returns one status
// per descriptor.
func (s *Service) doLimit(ctx context.Context, req *rlsv3.RateLimitRequest, ds []descriptorState, now int64) ([]*rlsv3.RateLimitResponse_DescriptorStatus, error) {
	descs := req.GetDescriptors()
	hitsAddends(req, ds)
	anyLocalOver := false
	for i := range ds {
		d := &ds[i]
		if d.limit == nil {
			continue
		}
		d.key = s.cacheKey(req.GetDomain(), descs[i], d.limit, d.match.shared, now)
		if s.local != nil && s.local.has(d.key, now) {
			d.localOver, anyLocalOver = true, true
		}
	}
	if err := s.addends(ctx, ds, anyLocalOver); err != nil {
		return nil, s.redisError(err)
	}
	if err := s.incr(ctx, ds); err != nil {
		return nil, s.redisError(err)
	}
	if s.stats != nil {
		for i := range ds {
			if d := &ds[i]; d.limit != nil {
				s.stats.record(d.match.stats, d.limit, d.hits, d.count, d.localOver)
			}
		}
	}
	return s.statuses(ds, now), nil
}

// answer is a descriptor status with its time to reset, allocated
// together.
type answer struct {
	status rlsv3.RateLimitResponse_DescriptorStatus
	reset  durationpb.Duration
}

// set fills a's status: code, the limit, remaining, and the time to the
// end of the unit's window holding now.
func (a *answer) set(code rlsv3.RateLimitResponse_Code, l *limit, remaining uint32, now int64) {
	a.reset.Seconds = l.divider - now%l.divider
	a.status.Code, a.status.CurrentLimit, a.status.LimitRemaining = code, l.answer, remaining
	a.status.DurationUntilReset = &a.reset
}

// statuses are the answers of the descriptors, allocated at once.
func (s *Service) statuses(ds []descriptorState, now int64) []*rlsv3.RateLimitResponse_DescriptorStatus {
	answers := make([]answer, len(ds))
	out := make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(ds))
	for i := range ds {
		d, a := &ds[i], &answers[i]
		out[i] = &a.status
		l := d.limit
		switch {
		case l == nil:
			a.status.Code = rlsv3.RateLimitResponse_OK
			continue
		case d.localOver:
			a.set(rlsv3.RateLimitResponse_OVER_LIMIT, l, 0, now)
		case d.count > uint64(l.perUnit):
			a.set(rlsv3.RateLimitResponse_OVER_LIMIT, l, 0, now)
			if s.local != nil {
				s.local.set(d.key, now+l.divider)
			}
		default:
			a.set(rlsv3.RateLimitResponse_OK, l, uint32(uint64(l.perUnit)-d.count), now)
		}
		if l.shadow && a.status.Code == rlsv3.RateLimitResponse_OVER_LIMIT {
			a.status.Code = rlsv3.RateLimitResponse_OK
		}
	}
	return out
}

// addends sets what each key is incremented by: its hits, except with
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT, where the counts are read first
// and, as in the reference, nothing is added when a key is over in the
// local cache, and only the keys this request takes over their limit are
// incremented when some are.
func (s *Service) addends(ctx context.Context, ds []descriptorState, anyLocalOver bool) error {
	for i := range ds {
		ds[i].addend = ds[i].hits
	}
	if !s.set.StopCacheKeyIncrementWhenOverlimit {
		return nil
	}
	if anyLocalOver {
		for i := range ds {
			ds[i].addend = 0
		}
		return nil
	}
	current, err := s.get(ctx, ds)
	if err != nil {
		return err
	}
	anyOver := false
	for i := range ds {
		if d := &ds[i]; d.key != "" && current[i]+d.hits > uint64(d.limit.perUnit) {
			anyOver = true
		}
	}
	if !anyOver {
		return nil
	}
	for i := range ds {
		if d := &ds[i]; d.key == "" || current[i]+d.hits <= uint64(d.limit.perUnit) {
			d.addend = 0
		}
	}
	return nil
}

// incr adds each key's addend with INCRBY and sets its expiry (the unit
// plus a jitter) with EXPIRE, in one pipeline per Redis, and sets the
// counts. Keys over their limit in the local cache are left alone.
func (s *Service) incr(ctx context.Context, ds []descriptorState) error {
	var mainCmds, perSecCmds rueidis.Commands
	for i := range ds {
		d := &ds[i]
		if d.key == "" || d.localOver {
			continue
		}
		if d.addend > math.MaxInt64 {
			return fmt.Errorf("hits_addend %d is out of range", d.addend)
		}
		exp := d.limit.divider
		if j := s.set.ExpirationJitterMaxSeconds; j > 0 {
			s.jitterMu.Lock()
			exp += s.jitter.Int64N(j)
			s.jitterMu.Unlock()
		}
		client, cmds := s.client, &mainCmds
		if s.onPerSecond(d) {
			client, cmds = s.perSecond, &perSecCmds
		}
		if *cmds == nil {
			*cmds = make(rueidis.Commands, 0, 2*len(ds))
		}
		*cmds = append(*cmds,
			client.B().Incrby().Key(d.key).Increment(int64(d.addend)).Build(),
			client.B().Expire().Key(d.key).Seconds(exp).Build())
	}
	if s.trace != nil {
		span := s.trace.startPipeline(ctx, len(mainCmds), len(perSecCmds))
		defer span.End()
	}
	if len(mainCmds) > 0 {
		if err := s.exec(ctx, s.pipe, mainCmds, ds, false); err != nil {
			return err
		}
	}
	if len(perSecCmds) > 0 {
		return s.exec(ctx, s.perSecondPipe, perSecCmds, ds, true)
	}
	return nil
}

// onPerSecond reports whether d counts on REDIS_PERSECOND's Redis.
func (s *Service) onPerSecond(d *descriptorState) bool {
	return s.perSecond != nil && d.limit.unit == rlsv3.RateLimitResponse_RateLimit_SECOND
}

// exec sends cmds (INCRBY and EXPIRE of each key in turn, in the order of
// ds) through pipe and sets the counts of the keys it holds: those on
// REDIS_PERSECOND's Redis when perSecond, else the others.
func (s *Service) exec(ctx context.Context, pipe *sharedPipeline, cmds rueidis.Commands, ds []descriptorState, perSecond bool) error {
	rs := pipe.do(ctx, cmds)
	k := 0
	for i := range ds {
		d := &ds[i]
		if d.key == "" || d.localOver || s.onPerSecond(d) != perSecond {
			continue
		}
		v, err := rs[2*k].AsInt64()
		if err == nil {
			err = rs[2*k+1].Error()
		}
		if err != nil {
			return err
		}
		d.count = uint64(v)
		k++
	}
	return nil
}

// get reads the current counts of the limited descriptors' keys (0 where
// missing).
func (s *Service) get(ctx context.Context, ds []descriptorState) ([]uint64, error) {
	out := make([]uint64, len(ds))
	for i := range ds {
		k := ds[i].key
		if k == "" {
			continue
		}
		c := s.client
		if s.onPerSecond(&ds[i]) {
			c = s.perSecond
		}
		v, err := c.Do(ctx, c.B().Get().Key(k).Build()).AsInt64()
		if rueidis.IsRedisNil(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out[i] = uint64(v)
	}
	return out, nil
}

// respond builds the answer from the statuses: the overall code, the
// headers and the dynamic metadata. It reuses statuses as the answer's.
func (s *Service) respond(req *rlsv3.RateLimitRequest, ds []descriptorState, statuses []*rlsv3.RateLimitResponse_DescriptorStatus, now int64) *rlsv3.RateLimitResponse {
	resp := &rlsv3.RateLimitResponse{Statuses: statuses}
	minRemaining := uint32(math.MaxUint32)
	var tightest *rlsv3.RateLimitResponse_DescriptorStatus
	var passed []int
	failedLimits, failedQuota, totalQuota := 0, 0, 0
	for i, st := range statuses {
		if s.set.HeadersEnabled && st.CurrentLimit != nil && st.LimitRemaining < minRemaining {
			tightest, minRemaining = st, st.LimitRemaining
		}
		if ds[i].unlimited {
			// Not limited, so its status is an empty OK: answer as unlimited.
			st.LimitRemaining = math.MaxUint32
			continue
		}
		quota := s.set.GlobalQuotaMode || (ds[i].limit != nil && ds[i].limit.quota)
		if st.Code == rlsv3.RateLimitResponse_OVER_LIMIT {
			if quota {
				failedQuota++
			} else {
				failedLimits++
				tightest, minRemaining = st, 0
			}
		} else if s.set.ResponseDynamicMetadata {
			passed = append(passed, i)
		}
		if quota {
			totalQuota++
		}
	}
	resp.OverallCode = rlsv3.RateLimitResponse_OK
	if failedLimits > 0 || (totalQuota > 0 && totalQuota == failedQuota) {
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	if s.set.HeadersEnabled && tightest != nil {
		cl := tightest.CurrentLimit
		resp.ResponseHeadersToAdd = []*corev3.HeaderValue{
			{Key: s.set.HeaderLimit, Value: strconv.FormatUint(uint64(cl.GetRequestsPerUnit()), 10)},
			{Key: s.set.HeaderRemaining, Value: strconv.FormatUint(uint64(tightest.LimitRemaining), 10)},
			{Key: s.set.HeaderReset, Value: strconv.FormatInt(resetSeconds(cl.GetUnit(), now), 10)},
		}
	}
	if resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT && s.set.GlobalShadowMode {
		resp.OverallCode = rlsv3.RateLimitResponse_OK
		if s.stats != nil {
			s.stats.globalShadow.add(1)
		}
	}
	if s.set.ResponseDynamicMetadata {
		resp.DynamicMetadata = dynamicMetadata(req, passed, ds)
	}
	return resp
}

func resetSeconds(u rlsv3.RateLimitResponse_RateLimit_Unit, now int64) int64 {
	d := unitSeconds(u)
	if d == 0 {
		return 0
	}
	return d - now%d
}

// dynamicMetadata is RESPONSE_DYNAMIC_METADATA's answer: the domain, the
// descriptors, the hits, and the metadata of the limits that passed.
func dynamicMetadata(req *rlsv3.RateLimitRequest, passed []int, ds []descriptorState) *structpb.Struct {
	fields := map[string]*structpb.Value{"domain": structpb.NewStringValue(req.GetDomain())}
	var descs []*structpb.Value
	for _, d := range req.GetDescriptors() {
		if d == nil {
			continue
		}
		f := map[string]*structpb.Value{}
		var entries []*structpb.Value
		for _, e := range d.GetEntries() {
			entries = append(entries, structpb.NewStringValue(fmt.Sprintf("%s=%s", e.GetKey(), e.GetValue())))
		}
		f["entries"] = structpb.NewListValue(&structpb.ListValue{Values: entries})
		if d.GetLimit() != nil {
			f["limit"] = structpb.NewStringValue(d.GetLimit().String())
		}
		if h := d.GetHitsAddend(); h != nil {
			f["hitsAddend"] = structpb.NewNumberValue(float64(h.GetValue()))
		}
		descs = append(descs, structpb.NewStructValue(&structpb.Struct{Fields: f}))
	}
	fields["descriptors"] = structpb.NewListValue(&structpb.ListValue{Values: descs})
	if h := req.GetHitsAddend(); h != 0 {
		fields["hitsAddend"] = structpb.NewNumberValue(float64(h))
	}
	merged := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for _, i := range passed {
		if ds[i].limit != nil && ds[i].match.metadata != nil {
			mergeMetadata(merged, ds[i].match.metadata)
		}
	}
	if len(merged.Fields) > 0 {
		fields["metadata"] = structpb.NewStructValue(merged)
	}
	return &structpb.Struct{Fields: fields}
}

// mergeMetadata adds src's fields to dst: new fields are added, structs in
// both are merged, anything else keeps dst's value.
func mergeMetadata(dst, src *structpb.Struct) {
	for k, v := range src.GetFields() {
		d, ok := dst.Fields[k]
		if !ok {
			dst.Fields[k] = v
			continue
		}
		if ds, ss := d.GetStructValue(), v.GetStructValue(); ds != nil && ss != nil {
			mergeMetadata(ds, ss)
		}
	}
}

// localCache remembers keys over their limit until their window ends, so
// that they are answered without Redis (LOCAL_CACHE_SIZE_IN_BYTES). When
// full it forgets the expired keys, then everything: a forgotten key is
// asked of Redis again, which still has its count.
type localCache struct {
	mu    sync.Mutex
	max   int
	bytes int
	until map[string]int64
}

// localEntryOverhead is what one entry costs beyond its key, in bytes.
const localEntryOverhead = 48

func newLocalCache(maxBytes int) *localCache {
	return &localCache{max: maxBytes, until: map[string]int64{}}
}

func (c *localCache) has(key string, now int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	u, ok := c.until[key]
	if ok && u <= now {
		delete(c.until, key)
		c.bytes -= len(key) + localEntryOverhead
		return false
	}
	return ok
}

func (c *localCache) set(key string, until int64) {
	size := len(key) + localEntryOverhead
	c.mu.Lock()
	defer c.mu.Unlock()
	if size > c.max {
		return
	}
	if _, ok := c.until[key]; !ok {
		if c.bytes+size > c.max {
			clear(c.until)
			c.bytes = 0
		}
		c.bytes += size
	}
	c.until[key] = until
}
