package rlqs

import (
	"context"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/floodgate-dev/floodgate/internal/testkit/redistest"
	"github.com/floodgate-dev/floodgate/memstore"
	"github.com/floodgate-dev/floodgate/redisstore"
	"github.com/floodgate-dev/floodgate/rules"
	"github.com/floodgate-dev/floodgate/store"
)

// testRules: 600 requests per 10 s (60/s) per bucket name, bounded-log
// (m = 30: any 10 s holds at most 630 allowed).
const testRules = `
domain: envoy
rules:
  - name: per-bucket
    match: {name: "*"}
    count_by: [name]
    limit: 600
    window: 10s
    leases: {ttl: 4s}
  - name: plain
    match: {plain: "*"}
    count_by: [plain]
    limit: 5
    window: 10s
  - name: open
    match: {open: "*"}
    unlimited: true
  - name: closed
    match: {closed: "*"}
    count_by: [closed]
    limit: 0
    window: 1s
`

const testBound = 630

// serve starts an RLQS service over st on loopback and returns its address.
func serve(t *testing.T, st store.Store) string {
	t.Helper()
	set, err := rules.Parse("t.yaml", []byte(testRules))
	if err != nil {
		t.Fatal(err)
	}
	e := rules.NewEngine(set, st)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	New(e, slog.New(slog.NewTextHandler(io.Discard, nil))).Register(g)
	go g.Serve(ln)
	t.Cleanup(g.Stop)
	return ln.Addr().String()
}

// dataPlane is an RLQS client written from the proto, behaving as Envoy's
// rate_limit_quota filter does: the first request of a bucket is reported
// at once, then every interval; an assignment's token bucket starts full
// and is kept while the same strategy is sent again, replaced (full) when
// another is; an expired assignment, and a bucket with none yet, deny
// (no_assignment_behavior and expired_assignment_behavior: DENY_ALL); an
// abandoned bucket is forgotten.
type dataPlane struct {
	addr     string
	interval time.Duration
	mu       sync.Mutex
	buckets  map[string]*dpBucket
	stream   rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient
	cancel   context.CancelFunc
	sendMu   sync.Mutex
	allowed  []time.Time
	abandons int
}

type dpBucket struct {
	id              *rlqsv3.BucketId
	allowed, denied uint64
	last            time.Time
	strategy        *typev3.RateLimitStrategy
	expires         time.Time
	tokens, max     float64
	rate            float64 // tokens per second
	filled          time.Time
}

func newDataPlane(t *testing.T, addr string, interval time.Duration) *dataPlane {
	dp := &dataPlane{addr: addr, interval: interval, buckets: map[string]*dpBucket{}}
	dp.connect(t)
	return dp
}

// connect opens a stream and starts its report and receive loops.
func (dp *dataPlane) connect(t *testing.T) {
	t.Helper()
	conn, err := grpc.NewClient(dp.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := rlqsv3.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dp.mu.Lock()
	dp.stream, dp.cancel = stream, func() { cancel(); conn.Close() }
	dp.buckets = map[string]*dpBucket{}
	dp.mu.Unlock()
	go func() {
		for {
			resp, err := stream.Recv()
			if err != nil {
				return
			}
			dp.apply(resp)
		}
	}()
	go func() {
		tick := time.NewTicker(dp.interval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				dp.reportAll()
			}
		}
	}()
}

// vanish cuts the stream without a word, as a crashed client would.
func (dp *dataPlane) vanish() {
	dp.mu.Lock()
	dp.cancel()
	dp.stream = nil
	dp.buckets = map[string]*dpBucket{}
	dp.mu.Unlock()
}

func (dp *dataPlane) apply(resp *rlqsv3.RateLimitQuotaResponse) {
	dp.mu.Lock()
	defer dp.mu.Unlock()
	now := time.Now()
	for _, a := range resp.GetBucketAction() {
		b := dp.buckets[a.GetBucketId().GetBucket()["name"]]
		if b == nil {
			continue
		}
		if a.GetAbandonAction() != nil {
			delete(dp.buckets, a.GetBucketId().GetBucket()["name"])
			dp.abandons++
			continue
		}
		qa := a.GetQuotaAssignmentAction()
		s := qa.GetRateLimitStrategy()
		same := b.strategy != nil && now.Before(b.expires) && proto.Equal(b.strategy, s)
		b.expires = now.Add(qa.GetAssignmentTimeToLive().AsDuration())
		if same {
			continue
		}
		b.strategy = s
		if tb := s.GetTokenBucket(); tb != nil {
			b.max = float64(tb.GetMaxTokens())
			b.tokens = b.max
			b.rate = float64(tb.GetTokensPerFill().GetValue()) / tb.GetFillInterval().AsDuration().Seconds()
			b.filled = now
		}
	}
}

// request decides one request of bucket name.
func (dp *dataPlane) request(name string) bool {
	dp.mu.Lock()
	now := time.Now()
	b := dp.buckets[name]
	first := b == nil
	if first {
		b = &dpBucket{id: &rlqsv3.BucketId{Bucket: map[string]string{"name": name}}, last: now}
		dp.buckets[name] = b
	}
	ok := false
	switch {
	case b.strategy == nil || now.After(b.expires):
	case b.strategy.GetBlanketRule() == typev3.RateLimitStrategy_ALLOW_ALL && b.strategy.GetTokenBucket() == nil:
		ok = true
	case b.strategy.GetTokenBucket() != nil:
		b.tokens = min(b.max, b.tokens+now.Sub(b.filled).Seconds()*b.rate)
		b.filled = now
		if b.tokens >= 1 {
			b.tokens--
			ok = true
		}
	}
	if ok {
		b.allowed++
		dp.allowed = append(dp.allowed, now)
	} else {
		b.denied++
	}
	dp.mu.Unlock()
	if first {
		dp.reportAll()
	}
	return ok
}

// reportAll sends every bucket's usage since its last report: on the
// first request of a bucket at once, then every interval.
func (dp *dataPlane) reportAll() {
	dp.mu.Lock()
	stream := dp.stream
	r := &rlqsv3.RateLimitQuotaUsageReports{Domain: "envoy"}
	now := time.Now()
	for _, b := range dp.buckets {
		r.BucketQuotaUsages = append(r.BucketQuotaUsages, &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId: b.id, TimeElapsed: durationpb.New(max(now.Sub(b.last).Truncate(time.Second), time.Second)),
			NumRequestsAllowed: b.allowed, NumRequestsDenied: b.denied,
		})
		b.allowed, b.denied, b.last = 0, 0, now
	}
	dp.mu.Unlock()
	if stream == nil || len(r.BucketQuotaUsages) == 0 {
		return
	}
	dp.sendMu.Lock()
	stream.Send(r)
	dp.sendMu.Unlock()
}

func (dp *dataPlane) allowedSince(t time.Time) int {
	dp.mu.Lock()
	defer dp.mu.Unlock()
	n := 0
	for _, a := range dp.allowed {
		if !a.Before(t) {
			n++
		}
	}
	return n
}

// drive sends requests of bucket name at rate() per second until stop.
func drive(dp *dataPlane, name string, rate func() float64, stop <-chan struct{}) {
	next := time.Now()
	for {
		select {
		case <-stop:
			return
		default:
		}
		r := rate()
		if r <= 0 {
			time.Sleep(50 * time.Millisecond)
			next = time.Now()
			continue
		}
		next = next.Add(time.Duration(float64(time.Second) / r))
		if d := time.Until(next); d > 0 {
			time.Sleep(d)
		}
		dp.request(name)
	}
}

// scenario runs three data planes on one bucket over the servers at
// addrs (client i on addrs[i%len]): demands 40, 40 and 10 per second
// against 60; at 5 s client a drops to 5 and client c rises to 50;
// client b vanishes at 3 s and comes back on a new stream at 7 s. It
// checks the rule's bound on every allowed request of every client, that
// the bucket was used, and that the shares followed demand.
func scenario(t *testing.T, addrs []string) {
	interval := 200 * time.Millisecond
	dps := make([]*dataPlane, 3)
	for i := range dps {
		dps[i] = newDataPlane(t, addrs[i%len(addrs)], interval)
	}
	t.Cleanup(func() {
		for _, dp := range dps {
			dp.vanish()
		}
	})
	start := time.Now()
	phase := func(before, after float64, at time.Duration) func() float64 {
		return func() float64 {
			if time.Since(start) < at {
				return before
			}
			return after
		}
	}
	var bGone sync.Mutex
	bRate := func() float64 {
		bGone.Lock()
		defer bGone.Unlock()
		if d := time.Since(start); d > 3*time.Second && d < 7*time.Second {
			return 0
		}
		return 40
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { drive(dps[0], "b1", phase(40, 5, 5*time.Second), stop) })
	wg.Go(func() { drive(dps[1], "b1", bRate, stop) })
	wg.Go(func() { drive(dps[2], "b1", phase(10, 50, 5*time.Second), stop) })
	time.Sleep(3 * time.Second)
	bGone.Lock()
	dps[1].vanish()
	bGone.Unlock()
	time.Sleep(4 * time.Second)
	bGone.Lock()
	dps[1].connect(t)
	bGone.Unlock()
	time.Sleep(5 * time.Second)
	close(stop)
	wg.Wait()

	var all []time.Time
	for _, dp := range dps {
		dp.mu.Lock()
		all = append(all, dp.allowed...)
		dp.mu.Unlock()
	}
	slices.SortFunc(all, func(a, b time.Time) int { return a.Compare(b) })
	peak := 0
	for i, j := 0, 0; i < len(all); i++ {
		for all[i].Sub(all[j]) >= 10*time.Second {
			j++
		}
		peak = max(peak, i-j+1)
	}
	late := start.Add(9 * time.Second)
	a, b, c := dps[0].allowedSince(late), dps[1].allowedSince(late), dps[2].allowedSince(late)
	t.Logf("%d allowed in 12 s, busiest 10 s window %d (bound %d); last 3 s: a %d (demand 5/s), b %d (40/s, back after vanishing), c %d (50/s)",
		len(all), peak, testBound, a, b, c)
	if peak > testBound {
		t.Fatalf("busiest window %d, bound %d", peak, testBound)
	}
	if len(all) < 300 {
		t.Fatalf("only %d allowed in 12 s of a 60/s bucket", len(all))
	}
	if c <= a || b == 0 {
		t.Fatalf("shares did not follow demand: last 3 s a %d (5/s), b %d (40/s), c %d (50/s)", a, b, c)
	}
}

func TestScenarioMemory(t *testing.T) {
	scenario(t, []string{serve(t, memstore.New(memstore.Options{}))})
}

// Two servers on one Redis share the bucket: the bound holds across both.
func TestScenarioRedisTwoServers(t *testing.T) {
	srv := redistest.Start(t)
	var addrs []string
	for range 2 {
		rs, err := redisstore.New(context.Background(), redisstore.Options{Addrs: []string{srv.Addr()}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rs.Close() })
		addrs = append(addrs, serve(t, rs))
	}
	scenario(t, addrs)
}

// TestAssignments: unlimited and unmatched buckets are allowed, a blocked
// one denied, one whose rule keeps no leases gets no assignment, and a
// malformed report ends the stream with INVALID_ARGUMENT.
func TestAssignments(t *testing.T) {
	addr := serve(t, memstore.New(memstore.Options{}))
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := rlqsv3.NewRateLimitQuotaServiceClient(conn)
	stream, err := c.StreamRateLimitQuotas(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	usage := func(k, v string) *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage {
		return &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{BucketId: &rlqsv3.BucketId{Bucket: map[string]string{k: v}},
			TimeElapsed: durationpb.New(time.Second), NumRequestsAllowed: 1}
	}
	if err := stream.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: "envoy", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
		usage("open", "x"), usage("other", "y"), usage("closed", "z"), usage("plain", "p"), usage("name", "n"),
	}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, a := range resp.GetBucketAction() {
		for k := range a.GetBucketId().GetBucket() {
			s := a.GetQuotaAssignmentAction().GetRateLimitStrategy()
			if tb := s.GetTokenBucket(); tb != nil {
				got[k] = "token-bucket"
			} else {
				got[k] = s.GetBlanketRule().String()
			}
		}
	}
	want := map[string]string{"open": "ALLOW_ALL", "other": "ALLOW_ALL", "closed": "DENY_ALL", "name": "token-bucket"}
	if len(got) != len(want) {
		t.Fatalf("assignments %v, want %v (plain: none)", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("assignments %v, want %v", got, want)
		}
	}
	// A later report in another domain is refused.
	stream.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: "other", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{usage("name", "n")}})
	if _, err := stream.Recv(); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a second domain: %v", err)
	}
	for _, r := range []*rlqsv3.RateLimitQuotaUsageReports{
		{BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{usage("name", "n")}},
		{Domain: "envoy", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{}}},
		{Domain: "envoy", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{usage("", "n")}},
	} {
		s, err := c.StreamRateLimitQuotas(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		s.Send(r)
		if _, err := s.Recv(); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%v: %v, want InvalidArgument", r, err)
		}
	}
}
