// Command floodrls floods a Floodgate RLS listener with new keys and checks
// that the shared Redis counts each allowed request exactly once: workers
// goroutines send calls of perCall descriptors, each a key never sent
// before (one hit each), for the given duration; then it waits until the
// server's floodgate_sync_pending is 0 and sums the fixed-window counts
// Redis holds under the prefix. scripts/flood-delayed runs it against
// `floodgate serve` in the delayed arrangement.
package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"log"
	"math"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/rueidis"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func main() {
	rls := flag.String("rls", "127.0.0.1:8081", "Floodgate RLS address")
	metrics := flag.String("metrics", "http://127.0.0.1:8080/metrics", "Floodgate /metrics URL")
	redisAddr := flag.String("redis", "127.0.0.1:6379", "Redis address")
	prefix := flag.String("prefix", "fg", "Floodgate's key prefix in Redis")
	domain := flag.String("domain", "flood", "rate-limit domain")
	workers := flag.Int("workers", 16, "concurrent clients")
	perCall := flag.Int("per-call", 64, "new keys per call")
	duration := flag.Duration("duration", 5*time.Second, "how long to send")
	flag.Parse()
	if err := run(*rls, *metrics, *redisAddr, *prefix, *domain, *workers, *perCall, *duration); err != nil {
		log.Fatal(err)
	}
}

func run(rls, metrics, redisAddr, prefix, domain string, workers, perCall int, d time.Duration) error {
	conn, err := grpc.NewClient(rls, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	var allowed, sent, errs atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	stop := start.Add(d)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := 0; time.Now().Before(stop); c++ {
				req := &rlsv3.RateLimitRequest{Domain: domain, HitsAddend: 1}
				for i := range perCall {
					req.Descriptors = append(req.Descriptors, &commonrl.RateLimitDescriptor{
						Entries: []*commonrl.RateLimitDescriptor_Entry{{Key: "k", Value: fmt.Sprintf("w%d-c%d-%d", w, c, i)}},
					})
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				resp, err := client.ShouldRateLimit(ctx, req)
				cancel()
				if err != nil {
					errs.Add(1)
					continue
				}
				sent.Add(int64(perCall))
				if resp.GetOverallCode() == rlsv3.RateLimitResponse_OK {
					allowed.Add(int64(perCall))
				}
			}
		}()
	}
	wg.Wait()
	fmt.Printf("sent %d new keys in %v (%d calls failed), allowed %d\n", sent.Load(), time.Since(start).Round(time.Millisecond), errs.Load(), allowed.Load())

	drainStart := time.Now()
	var m map[string]float64
	for {
		if m, err = scrape(metrics); err != nil {
			return err
		}
		if m["floodgate_sync_pending"] == 0 {
			break
		}
		if time.Since(drainStart) > 5*time.Minute {
			return fmt.Errorf("still %v pending after 5 minutes", m["floodgate_sync_pending"])
		}
		time.Sleep(100 * time.Millisecond)
	}
	fmt.Printf("pending 0 after %v; resends %v, merged %v, dropped %v, evictions %v, keys tracked %v\n",
		time.Since(drainStart).Round(time.Millisecond), m["floodgate_sync_resends_total"], m["floodgate_sync_merged_total"],
		m["floodgate_sync_dropped_total"], m["floodgate_node_evictions_total"], m["floodgate_keys_tracked"])

	total, keys, err := redisTotal(redisAddr, prefix)
	if err != nil {
		return err
	}
	fmt.Printf("redis: %d counter keys, total %d; allowed %d; ratio %.4f\n", keys, total, allowed.Load(), float64(total)/float64(max(allowed.Load(), 1)))
	if total != allowed.Load() {
		fmt.Println("MISMATCH: Redis total differs from the allowed count")
		os.Exit(1)
	}
	fmt.Println("OK: Redis total equals the allowed count")
	return nil
}

// scrape reads the un-labelled samples of a Prometheus text page.
func scrape(url string) (map[string]float64, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	m := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || strings.Contains(line, "{") {
			continue
		}
		name, val, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		if v, err := strconv.ParseFloat(val, 64); err == nil {
			m[name] = v
		}
	}
	return m, sc.Err()
}

// redisTotal sums the counts of every fixed-window state under prefix: the
// second of its little-endian doubles. The node's own bookkeeping keys (its
// sync count and the records of applied syncs) are left out.
func redisTotal(addr, prefix string) (total, keys int64, err error) {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		return 0, 0, err
	}
	defer c.Close()
	ctx := context.Background()
	var cursor uint64
	for {
		e, err := c.Do(ctx, c.B().Scan().Cursor(cursor).Match(prefix+":*").Count(1000).Build()).AsScanEntry()
		if err != nil {
			return 0, 0, err
		}
		var names []string
		for _, k := range e.Elements {
			if !strings.Contains(k, ":sync-once:") && !strings.Contains(k, "floodgate-node-syncs") {
				names = append(names, k)
			}
		}
		if len(names) > 0 {
			vals, err := c.Do(ctx, c.B().Mget().Key(names...).Build()).ToArray()
			if err != nil {
				return 0, 0, err
			}
			for _, v := range vals {
				s, err := v.ToString()
				if err != nil || len(s) < 16 {
					continue
				}
				total += int64(math.Float64frombits(binary.LittleEndian.Uint64([]byte(s[8:16]))))
				keys++
			}
		}
		cursor = e.Cursor
		if cursor == 0 {
			return total, keys, nil
		}
	}
}
