// Command redis-latency-rig is a TCP proxy that puts a network distance
// between a client and Redis: Shopify's Toxiproxy, run in-process, with a
// latency toxic in microseconds (Toxiproxy's own counts whole milliseconds)
// on each direction, and optionally stalls and connection resets toggled on
// for a short time at a fixed period. It runs until SIGINT or SIGTERM.
//
//	go run . -listen 127.0.0.1:7001 -upstream 127.0.0.1:6379 -latency 500us -jitter 100us
//
// scripts/redis-latency-rig/run starts Redis, this proxy and `floodgate serve`
// in each arrangement and measures them (BENCHMARKS.md, "Redis 0.5 ms
// away").
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/Shopify/toxiproxy/v2"
	"github.com/Shopify/toxiproxy/v2/toxics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// latencyMicros delays each chunk by Latency ± Jitter microseconds, counted
// from when the chunk was read, so chunks that queue behind a delayed one are
// not delayed twice (pipelined commands keep their spacing). Chunks stay in
// order, as on one TCP connection.
type latencyMicros struct {
	Latency int64 `json:"latency"`
	Jitter  int64 `json:"jitter"`
}

func (t *latencyMicros) delay() time.Duration {
	d := t.Latency
	if t.Jitter > 0 {
		d += rand.Int64N(2*t.Jitter+1) - t.Jitter
	}
	return time.Duration(d) * time.Microsecond
}

// GetBufferSize implements toxics.BufferedToxic: chunks read while one is
// delayed wait in this buffer with their own read time, instead of holding
// the reader back and adding their delays up.
func (t *latencyMicros) GetBufferSize() int { return 1024 }

// Pipe implements toxics.Toxic.
func (t *latencyMicros) Pipe(stub *toxics.ToxicStub) {
	for {
		select {
		case <-stub.Interrupt:
			return
		case c := <-stub.Input:
			if c == nil {
				stub.Close()
				return
			}
			sleep := t.delay() - time.Since(c.Timestamp)
			if sleep < 2*time.Millisecond {
				// Go's timers wake no sooner than the next whole
				// millisecond on an idle runtime (epoll's timeout), which
				// would turn 0.5 ms into 1 ms; a thread's nanosleep does not.
				if sleep > 0 {
					ts := syscall.NsecToTimespec(sleep.Nanoseconds())
					_ = syscall.Nanosleep(&ts, nil)
				}
				c.Timestamp = c.Timestamp.Add(sleep)
				stub.Output <- c
				continue
			}
			timer := time.NewTimer(sleep)
			select {
			case <-timer.C:
				c.Timestamp = c.Timestamp.Add(sleep)
				stub.Output <- c
			case <-stub.Interrupt:
				timer.Stop()
				stub.Output <- c
				return
			}
		}
	}
}

func init() { toxics.Register("latency_us", new(latencyMicros)) }

func main() {
	listen := flag.String("listen", "127.0.0.1:7001", "address the proxy listens on (loopback)")
	upstream := flag.String("upstream", "127.0.0.1:6379", "Redis address behind the proxy")
	latency := flag.Duration("latency", 500*time.Microsecond, "added latency in each direction")
	jitter := flag.Duration("jitter", 100*time.Microsecond, "uniform jitter around the latency, ±")
	stallEvery := flag.Duration("stall-every", 0, "period of stalls (0: none)")
	stall := flag.Duration("stall", 300*time.Millisecond, "a stall: extra latency on every connection for this long")
	resetEvery := flag.Duration("reset-every", 0, "period of connection resets (0: none)")
	resetFor := flag.Duration("reset-for", 20*time.Millisecond, "how long the reset toxic stays on: connections that carry data meanwhile are reset (RST)")
	flag.Parse()
	for _, a := range []string{*listen, *upstream} {
		if !strings.HasPrefix(a, "127.") && !strings.HasPrefix(a, "[::1]") && !strings.HasPrefix(a, "localhost:") {
			log.Fatalf("redis-latency-rig: %s is not a loopback address", a)
		}
	}

	logger := zerolog.New(os.Stderr).Level(zerolog.WarnLevel)
	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), logger)
	proxy := toxiproxy.NewProxy(server, "redis", *listen, *upstream)
	if err := server.Collection.Add(proxy, true); err != nil {
		log.Fatalf("redis-latency-rig: %v", err)
	}
	for _, stream := range []string{"upstream", "downstream"} {
		add(proxy, fmt.Sprintf(`{"name":"latency_%s","type":"latency_us","stream":%q,"attributes":{"latency":%d,"jitter":%d}}`,
			stream, stream, latency.Microseconds(), jitter.Microseconds()))
	}
	log.Printf("redis-latency-rig: %s -> %s, %v ± %v each way", *listen, *upstream, *latency, *jitter)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The toggles print their counts when ctx ends; wait for them, or the
	// process can exit before a count is printed.
	var toggles sync.WaitGroup
	if *stallEvery > 0 {
		toggles.Add(1)
		go func() {
			defer toggles.Done()
			toggle(ctx, proxy, *stallEvery, *stall, "stall",
				fmt.Sprintf(`{"name":"stall","type":"latency_us","stream":"downstream","attributes":{"latency":%d}}`, stall.Microseconds()))
		}()
	}
	if *resetEvery > 0 {
		toggles.Add(1)
		go func() {
			defer toggles.Done()
			toggle(ctx, proxy, *resetEvery, *resetFor, "reset",
				`{"name":"reset","type":"reset_peer","stream":"downstream","attributes":{"timeout":0}}`)
		}()
	}
	<-ctx.Done()
	toggles.Wait()
	server.Collection.Clear()
}

func add(proxy *toxiproxy.Proxy, spec string) {
	if _, err := proxy.Toxics.AddToxicJson(strings.NewReader(spec)); err != nil {
		log.Fatalf("redis-latency-rig: adding toxic %s: %v", spec, err)
	}
}

// toggle turns the toxic spec on for length every period and counts the times.
func toggle(ctx context.Context, proxy *toxiproxy.Proxy, period, length time.Duration, name, spec string) {
	tick := time.NewTicker(period)
	defer tick.Stop()
	n := 0
	for {
		select {
		case <-ctx.Done():
			log.Printf("redis-latency-rig: %d %ss of %v", n, name, length)
			return
		case <-tick.C:
		}
		add(proxy, spec)
		n++
		select {
		case <-ctx.Done():
		case <-time.After(length):
		}
		if err := proxy.Toxics.RemoveToxic(context.Background(), name); err != nil {
			log.Printf("redis-latency-rig: removing %s: %v", name, err)
		}
	}
}
