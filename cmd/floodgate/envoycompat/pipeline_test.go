package envoycompat

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-dev/floodgate/internal/testkit/redistest"
)

// pipelineOn returns a shared pipeline on its own redis-server, which the
// test may pause and kill.
func pipelineOn(t *testing.T) (*sharedPipeline, rueidis.Client, *redistest.Server) {
	t.Helper()
	srv := redistest.Start(t)
	set, err := ParseSettings(mapLookup(map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": srv.Addr()}))
	if err != nil {
		t.Fatal(err)
	}
	c, err := dialRedis(context.Background(), set.Redis)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return newSharedPipeline(c, set.Redis.Type, set.Redis.Timeout), c, srv
}

// incr is a request's commands: INCRBY key 1 and EXPIRE key 60 for each key.
func incr(c rueidis.Client, keys ...string) rueidis.Commands {
	var cmds rueidis.Commands
	for _, k := range keys {
		cmds = append(cmds, c.B().Incrby().Key(k).Increment(1).Build(), c.B().Expire().Key(k).Seconds(60).Build())
	}
	return cmds
}

// state reads what the pipeline holds: whether one is in flight, how many
// requests are queued and how many shared pipelines were sent.
func (p *sharedPipeline) state() (inflight bool, queued, shared int) {
	p.mu.Lock()
	shared = p.shared
	p.mu.Unlock()
	return p.q.InFlight() > 0, p.q.Waiting(), shared
}

// TestSharedPipelineQueuesWhileInFlight: with Redis paused, the first
// request is in flight alone; the requests that come meanwhile queue and go
// out as one pipeline when it returns, and each gets the counts of its own
// commands.
func TestSharedPipelineQueuesWhileInFlight(t *testing.T) {
	p, c, srv := pipelineOn(t)
	if rs := p.do(context.Background(), incr(c, "warm")); rs[0].Error() != nil {
		t.Fatal(rs[0].Error())
	}
	if inflight, _, _ := p.state(); inflight {
		t.Fatal("a request alone left the pipeline in flight")
	}
	srv.Pause()
	first := make(chan []rueidis.RedisResult)
	go func() { first <- p.do(context.Background(), incr(c, "first", "shared")) }()
	waitFor(t, "the first request in flight", func() bool { inflight, _, _ := p.state(); return inflight })
	const n = 20
	results := make([][]rueidis.RedisResult, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { results[i] = p.do(context.Background(), incr(c, fmt.Sprintf("own%d", i), "shared")) })
	}
	waitFor(t, "the requests queued", func() bool { _, q, _ := p.state(); return q == n })
	srv.Resume()
	wg.Wait()
	if rs := <-first; len(rs) != 4 || mustInt(t, rs[0]) != 1 || mustInt(t, rs[2]) != 1 {
		t.Fatalf("first request: %v, want counts 1 and 1", rs)
	}
	var shared []int64
	for i, rs := range results {
		if len(rs) != 4 {
			t.Fatalf("request %d: %d results, want 4", i, len(rs))
		}
		if own := mustInt(t, rs[0]); own != 1 {
			t.Errorf("request %d: its own key counts %d, want 1", i, own)
		}
		for _, e := range []rueidis.RedisResult{rs[1], rs[3]} {
			if e.Error() != nil {
				t.Errorf("request %d: EXPIRE: %v", i, e.Error())
			}
		}
		shared = append(shared, mustInt(t, rs[2]))
	}
	slices.Sort(shared)
	for i, v := range shared {
		if v != int64(i+2) {
			t.Fatalf("the shared key's counts %v, want 2 to %d once each", shared, n+1)
		}
	}
	if inflight, q, sent := p.state(); inflight || q != 0 || sent != 1 {
		t.Fatalf("after: in flight %v, %d queued, %d shared pipelines; want false, 0, 1", inflight, q, sent)
	}
}

// TestSharedPipelineCallerGivesUp: a queued request whose caller gives up
// returns the caller's error at once and is never sent; the pipeline goes
// on serving.
func TestSharedPipelineCallerGivesUp(t *testing.T) {
	p, c, srv := pipelineOn(t)
	srv.Pause()
	first := make(chan []rueidis.RedisResult)
	go func() { first <- p.do(context.Background(), incr(c, "first")) }()
	waitFor(t, "the first request in flight", func() bool { inflight, _, _ := p.state(); return inflight })
	ctx, cancel := context.WithCancel(context.Background())
	gaveUp := make(chan []rueidis.RedisResult)
	go func() { gaveUp <- p.do(ctx, incr(c, "gave-up")) }()
	waitFor(t, "the request queued", func() bool { _, q, _ := p.state(); return q == 1 })
	cancel()
	for _, r := range <-gaveUp {
		if !errors.Is(r.Error(), context.Canceled) {
			t.Fatalf("a request whose caller gave up: %v, want context.Canceled", r.Error())
		}
	}
	srv.Resume()
	if rs := <-first; mustInt(t, rs[0]) != 1 {
		t.Fatalf("first request: %v", rs)
	}
	waitFor(t, "the pipeline idle", func() bool { inflight, _, _ := p.state(); return !inflight })
	if v, err := c.Do(context.Background(), c.B().Exists().Key("gave-up").Build()).AsInt64(); err != nil || v != 0 {
		t.Fatalf("the abandoned request's key exists: %d, %v; want it never sent", v, err)
	}
	if rs := p.do(context.Background(), incr(c, "after")); mustInt(t, rs[0]) != 1 {
		t.Fatalf("a request after: %v", rs)
	}
}

// TestSharedPipelineRedisKilled: when Redis dies with a request in flight
// and others queued, every one of them returns an error; none waits on.
func TestSharedPipelineRedisKilled(t *testing.T) {
	p, c, srv := pipelineOn(t)
	srv.Pause()
	results := make(chan []rueidis.RedisResult, 4)
	go func() { results <- p.do(context.Background(), incr(c, "first")) }()
	waitFor(t, "the first request in flight", func() bool { inflight, _, _ := p.state(); return inflight })
	for i := range 3 {
		go func() { results <- p.do(context.Background(), incr(c, fmt.Sprint("queued", i))) }()
	}
	waitFor(t, "the requests queued", func() bool { _, q, _ := p.state(); return q == 3 })
	srv.Kill()
	for range 4 {
		rs := <-results
		if rs[0].Error() == nil {
			t.Fatalf("Redis killed: a request got %v, want an error", rs)
		}
	}
}

func mustInt(t *testing.T, r rueidis.RedisResult) int64 {
	t.Helper()
	v, err := r.AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestSharedPipelineClusterAlone: on a Redis Cluster each request goes out
// on its own, so a request to a healthy master answers while one to a
// paused master is in flight.
func TestSharedPipelineClusterAlone(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	cl := redistest.StartCluster(t)
	set, err := ParseSettings(mapLookup(map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_TYPE": "cluster",
		"REDIS_URL": strings.Join(cl.Addrs(), ",")}))
	if err != nil {
		t.Fatal(err)
	}
	c, err := dialRedis(context.Background(), set.Redis)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	p := newSharedPipeline(c, set.Redis.Type, set.Redis.Timeout)
	slow, fast := "k0", ""
	for i := 1; fast == ""; i++ {
		if k := fmt.Sprint("k", i); cl.Owner(cl.Slot(k)) != cl.Owner(cl.Slot(slow)) {
			fast = k
		}
	}
	paused := cl.Servers()[cl.Owner(cl.Slot(slow))]
	paused.Pause()
	first := make(chan []rueidis.RedisResult)
	go func() { first <- p.do(context.Background(), incr(c, slow)) }()
	waitFor(t, "the request to the paused master sent", func() bool { return unread(t, paused.Port()) })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if rs := p.do(ctx, incr(c, fast)); mustInt(t, rs[0]) != 1 {
		t.Fatalf("a request to a healthy master: %v", rs)
	}
	paused.Resume()
	if rs := <-first; mustInt(t, rs[0]) != 1 {
		t.Fatalf("the request to the paused master, once resumed: %v", rs)
	}
}

// unread reports whether a loopback TCP connection to port holds bytes its
// server has not read (/proc/net/tcp's rx_queue).
func unread(t *testing.T, port int) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Skipf("no /proc/net/tcp: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 5 || !strings.HasSuffix(f[1], fmt.Sprintf(":%04X", port)) {
			continue
		}
		if _, rx, ok := strings.Cut(f[4], ":"); ok && strings.Trim(rx, "0") != "" {
			return true
		}
	}
	return false
}
