package redisstore

// Store benchmarks against a real redis-server on loopback. Besides the
// client-side ns/op they report the server's own time per script call
// (server-µs/call, wall time from INFO commandstats) and the server's CPU
// time per op (server-cpu-µs/op, from INFO cpu), which is what bounds a
// Redis node's throughput. Run with
//
//	go test -run '^$' -bench 'BenchmarkDecideOne|BenchmarkSync' -benchtime 2s ./redisstore/

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/store"
)

var benchConfigs = []algorithm.Config{
	{Algorithm: algorithm.FixedWindow, Limit: 600, Window: time.Minute},
	{Algorithm: algorithm.TokenBucket, Limit: 600, Window: time.Minute, Capacity: 60},
	{Algorithm: algorithm.GCRA, Limit: 600, Window: time.Minute},
	{Algorithm: algorithm.WeightedWindow, Limit: 600, Window: time.Minute},
	{Algorithm: algorithm.SlidingWindow, Limit: 600, Window: time.Minute, Slices: 12},
	{Algorithm: algorithm.BoundedLog, Limit: 600, Window: time.Minute, Tolerance: 0.1},
	{Algorithm: algorithm.BoundedLog, Limit: 600, Window: time.Minute},
	{Algorithm: algorithm.SlidingLog, Limit: 600, Window: time.Minute},
}

var evalStat = regexp.MustCompile(`cmdstat_eval(?:sha)?:calls=(\d+),usec=(\d+)`)

// serverUsec returns the calls and microseconds Redis spent in EVAL and
// EVALSHA since the last CONFIG RESETSTAT.
func serverUsec(b *testing.B) (calls, usec int64) {
	out, err := shared.Do("INFO", "commandstats")
	if err != nil {
		b.Fatal(err)
	}
	for _, m := range evalStat.FindAllStringSubmatch(out, -1) {
		c, _ := strconv.ParseInt(m[1], 10, 64)
		u, _ := strconv.ParseInt(m[2], 10, 64)
		calls += c
		usec += u
	}
	return calls, usec
}

var cpuStat = regexp.MustCompile(`used_cpu_(?:sys|user):([0-9.]+)`)

// serverCPU returns the CPU seconds the redis-server process has used. Unlike
// commandstats' usec, which is wall time inside the command, it does not
// grow while the server waits for a CPU on a busy machine.
func serverCPU(b *testing.B) float64 {
	out, err := shared.Do("INFO", "cpu")
	if err != nil {
		b.Fatal(err)
	}
	var sec float64
	for _, m := range cpuStat.FindAllStringSubmatch(out, -1) {
		v, _ := strconv.ParseFloat(m[1], 64)
		sec += v
	}
	return sec
}

var cpuBefore float64

func resetStats(b *testing.B) {
	if _, err := shared.Do("CONFIG", "RESETSTAT"); err != nil {
		b.Fatal(err)
	}
	cpuBefore = serverCPU(b)
}

// reportServer reports the server's wall time per script call and its CPU
// time per op (all of it: network, parsing and the script).
func reportServer(b *testing.B) {
	calls, usec := serverUsec(b)
	if calls > 0 {
		b.ReportMetric(float64(usec)/float64(calls), "server-µs/call")
	}
	if b.N > 0 {
		b.ReportMetric((serverCPU(b)-cpuBefore)*1e6/float64(b.N), "server-cpu-µs/op")
	}
}

// BenchmarkDecideOne decides one request per call for 10,000 keys, from one
// goroutine (serial: one round trip at a time) and from 64 (parallel:
// rueidis pipelines concurrent calls on one connection).
func BenchmarkDecideOne(b *testing.B) {
	ctx := context.Background()
	s := newStore(b, Options{})
	for _, c := range benchConfigs {
		a := mustAlg(b, c)
		keys := make([]string, 10000)
		for i := range keys {
			keys[i] = fmt.Sprint("client-", i)
		}
		label := fmt.Sprintf("%s-e%v", c.Algorithm, c.Tolerance)
		b.Run(label+"/serial", func(b *testing.B) {
			resetStats(b)
			i := 0
			for b.Loop() {
				i++
				if _, err := s.DecideOne(ctx, 0, store.Request{Algorithm: a, Key: keys[i%len(keys)], Cost: 1}); err != nil {
					b.Fatal(err)
				}
			}
			reportServer(b)
		})
		b.Run(label+"/parallel64", func(b *testing.B) {
			resetStats(b)
			b.SetParallelism(32)
			var n int64
			b.RunParallel(func(pb *testing.PB) {
				i := int(time.Now().UnixNano())
				for pb.Next() {
					i++
					if _, err := s.DecideOne(ctx, 0, store.Request{Algorithm: a, Key: keys[i%len(keys)], Cost: 1}); err != nil {
						b.Error(err)
						return
					}
				}
				_ = n
			})
			reportServer(b)
		})
	}
}

// BenchmarkSync merges one event into each of 1,000 keys per Sync, as a
// delayed-synchronization node does every interval. One op is one key.
func BenchmarkSync(b *testing.B) {
	ctx := context.Background()
	s := newStore(b, Options{})
	for _, c := range benchConfigs[:6] {
		a := mustAlg(b, c)
		const keys = 1000
		batches := make([]store.SyncBatch, keys)
		for i := range batches {
			batches[i] = store.SyncBatch{Algorithm: a, Key: fmt.Sprint("client-", i), Events: make([]store.Event, 1)}
		}
		b.Run(fmt.Sprintf("%s-e%v/1000keys", c.Algorithm, c.Tolerance), func(b *testing.B) {
			resetStats(b)
			for i := 0; i < b.N; i += keys {
				now := time.Now().UnixNano()
				for j := range batches {
					batches[j].Events[0] = store.Event{Time: now, Cost: 1}
				}
				if err := s.Sync(ctx, now, batches); err != nil {
					b.Fatal(err)
				}
			}
			reportServer(b)
		})
	}
}

var usedMemory = regexp.MustCompile(`used_memory:(\d+)`)

// BenchmarkMemoryPerKey fills 100,000 keys of each limit (one accepted
// request each; 5,000 with -short, scripts/test's smoke pass) and reports
// Redis's used_memory growth per key. It ignores b.N: run it with
// -benchtime 1x. It measures memory, not latency: its store's timeout is
// long enough for a loaded machine.
func BenchmarkMemoryPerKey(b *testing.B) {
	ctx := context.Background()
	s := newStore(b, Options{Prefix: "fg", Timeout: time.Minute})
	keys := 100_000
	if testing.Short() {
		keys = 5_000
	}
	mem := func() int64 {
		out, err := shared.Do("INFO", "memory")
		if err != nil {
			b.Fatal(err)
		}
		v, _ := strconv.ParseInt(usedMemory.FindStringSubmatch(out)[1], 10, 64)
		return v
	}
	for _, c := range benchConfigs {
		b.Run(fmt.Sprintf("%s-e%v", c.Algorithm, c.Tolerance), func(b *testing.B) {
			shared.FlushAll()
			a := mustAlg(b, c)
			before := mem()
			now := time.Now().UnixNano()
			batches := make([]store.SyncBatch, 0, 1000)
			for i := 0; i < keys; i++ {
				batches = append(batches, store.SyncBatch{Algorithm: a, Key: fmt.Sprint("client-", i),
					Events: []store.Event{{Time: now, Cost: 1}}})
				if len(batches) == cap(batches) {
					if err := s.Sync(ctx, now, batches); err != nil {
						b.Fatal(err)
					}
					batches = batches[:0]
				}
			}
			b.ReportMetric(float64(mem()-before)/float64(keys), "bytes/key")
			shared.FlushAll()
		})
	}
}

// BenchmarkClusterSync merges one event into each of 3,000 keys spread over
// 30 limits (so over the three masters of a real cluster) per Sync. One op
// is one key.
func BenchmarkClusterSync(b *testing.B) {
	c := sharedCluster(b)
	s := newStore(b, Options{Addrs: c.Addrs()[:1], Cluster: true})
	ctx := context.Background()
	const keys = 3000
	batches := make([]store.SyncBatch, keys)
	for i := range batches {
		a := mustAlg(b, algorithm.Config{Algorithm: algorithm.BoundedLog, Limit: int64(600 + i%30), Window: time.Minute})
		batches[i] = store.SyncBatch{Algorithm: a, Key: fmt.Sprint("client-", i), Events: make([]store.Event, 1)}
	}
	clusterCPU := func() float64 {
		var sec float64
		for _, srv := range c.Servers() {
			out, err := srv.Do("INFO", "cpu")
			if err != nil {
				b.Fatal(err)
			}
			for _, m := range cpuStat.FindAllStringSubmatch(out, -1) {
				v, _ := strconv.ParseFloat(m[1], 64)
				sec += v
			}
		}
		return sec
	}
	cpu0 := clusterCPU()
	for b.Loop() {
		now := time.Now().UnixNano()
		for j := range batches {
			batches[j].Events[0] = store.Event{Time: now, Cost: 1}
		}
		if err := s.Sync(ctx, now, batches); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*keys), "ns/key")
	b.ReportMetric((clusterCPU()-cpu0)*1e6/float64(b.N*keys), "server-cpu-µs/key")
}

// BenchmarkDecideHot decides for 10 keys only, so each key's state is full
// (a bounded log of 22 entries, a sliding log of 600 timestamps): the case
// where reading and writing the state costs most.
func BenchmarkDecideHot(b *testing.B) {
	ctx := context.Background()
	s := newStore(b, Options{})
	for _, c := range []algorithm.Config{benchConfigs[5], benchConfigs[6], benchConfigs[7]} {
		a := mustAlg(b, c)
		// Fill every key to its limit first, in pipelined batches.
		for k := range 10 {
			reqs := make([]store.Request, 600)
			for i := range reqs {
				reqs[i] = store.Request{Algorithm: a, Key: fmt.Sprint("hot-", k), Cost: 1}
			}
			if err := s.Decide(ctx, 0, reqs, make([]algorithm.Decision, len(reqs))); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(fmt.Sprintf("%s-e%v", c.Algorithm, c.Tolerance), func(b *testing.B) {
			resetStats(b)
			b.SetParallelism(32)
			b.RunParallel(func(pb *testing.PB) {
				i := int(time.Now().UnixNano())
				for pb.Next() {
					i++
					if _, err := s.DecideOne(ctx, 0, store.Request{Algorithm: a, Key: fmt.Sprint("hot-", i%10), Cost: 1}); err != nil {
						b.Error(err)
						return
					}
				}
			})
			reportServer(b)
		})
	}
}
