// Command floodrls floods a Floodgate RLS listener with new keys and checks
// what the flood costs a delayed node: workers goroutines send calls of
// perCall descriptors, each a key never sent before (one hit each), for the
// given duration. Around the flood it can
//
//   - put -victims clients at their limit (-limit requests each, descriptor
//     entry "client") before the flood,
//   - poll /readyz (-readyz) during the flood and count its changes,
//   - send -new-clients fresh clients their whole limit after the flood and
//     count their rejections (and those on a first request).
//
// Then it waits until the server's floodgate_sync_pending is 0 and reads
// the fixed-window counts Redis holds under the prefix: their total must be
// the allowed count less what the node reports dropped
// (floodgate_sync_dropped_total; every request costs 1), and every victim and new client must
// have in Redis exactly the requests it was allowed. scripts/flood-delayed
// runs it against `floodgate serve` in the delayed arrangement.
package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
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

type options struct {
	rls, metrics, readyz, redis, prefix, domain, floodKey string
	workers, perCall, victims, newClients, limit          int
	duration, window                                      time.Duration
	keys                                                  int64
	victimsDuring                                         bool
}

func main() {
	var o options
	flag.StringVar(&o.rls, "rls", "127.0.0.1:8081", "Floodgate RLS address")
	flag.StringVar(&o.metrics, "metrics", "http://127.0.0.1:8080/metrics", "Floodgate /metrics URL")
	flag.StringVar(&o.readyz, "readyz", "", "Floodgate /readyz URL to poll every 100 ms during the flood (empty: none)")
	flag.StringVar(&o.redis, "redis", "127.0.0.1:6379", "Redis address")
	flag.StringVar(&o.prefix, "prefix", "fg", "Floodgate's key prefix in Redis")
	flag.StringVar(&o.domain, "domain", "flood", "rate-limit domain")
	flag.StringVar(&o.floodKey, "flood-key", "k", "descriptor entry key of the flood's keys")
	flag.IntVar(&o.workers, "workers", 16, "concurrent clients")
	flag.IntVar(&o.perCall, "per-call", 64, "new keys per call")
	flag.DurationVar(&o.duration, "duration", 5*time.Second, "how long to send")
	flag.Int64Var(&o.keys, "keys", 0, "stop once this many new keys were sent (0: send for the whole duration)")
	flag.IntVar(&o.victims, "victims", 0, "clients put at their limit before the flood (entry client=victim-N)")
	flag.IntVar(&o.newClients, "new-clients", 0, "fresh clients sending their whole limit after the flood (entry client=new-N)")
	flag.IntVar(&o.limit, "limit", 5, "the client rule's limit")
	flag.DurationVar(&o.window, "window", time.Hour, "the client rule's window (fixed-window: counts expire at multiples of it)")
	flag.BoolVar(&o.victimsDuring, "victims-during", false, "send the victims' requests in the middle of the flood instead of before it")
	flag.Parse()
	if err := run(o); err != nil {
		log.Fatal(err)
	}
}

// clientName is the descriptor value of victim or new client i: fixed
// width, so that no name is the end of another in a Redis key.
func clientName(kind string, i int) string { return fmt.Sprintf("%s-%06d", kind, i) }

func run(o options) error {
	conn, err := grpc.NewClient(o.rls, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	ctx := context.Background()

	// Clients put at their limit: each must have exactly its allowed
	// requests in Redis at the end. A fixed window's counts expire at its
	// end, so the run notes the window they were counted in.
	allowedBy := map[string]int64{}
	firstWindow := time.Now().UnixNano() / int64(o.window)
	sendVictims := func(when string) error {
		rejected := 0
		for i := range o.victims {
			name := clientName("victim", i)
			for range o.limit {
				ok, err := allowedOne(ctx, client, o.domain, name)
				if err != nil {
					return err
				}
				if ok {
					allowedBy[name]++
				} else {
					rejected++
				}
			}
		}
		fmt.Printf("victims: %d clients sent %d requests each %s, %d rejected\n", o.victims, o.limit, when, rejected)
		return nil
	}
	if o.victims > 0 && !o.victimsDuring {
		if err := sendVictims("before the flood"); err != nil {
			return err
		}
	}

	stopPoll := make(chan struct{})
	pollDone := make(chan readiness, 1)
	go func() { pollDone <- pollReadyz(o.readyz, stopPoll) }()

	var allowed, sent, errs atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	stop := start.Add(o.duration)
	for w := range o.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := 0; time.Now().Before(stop) && (o.keys == 0 || sent.Load() < o.keys); c++ {
				req := &rlsv3.RateLimitRequest{Domain: o.domain, HitsAddend: 1}
				for i := range o.perCall {
					req.Descriptors = append(req.Descriptors, &commonrl.RateLimitDescriptor{
						Entries: []*commonrl.RateLimitDescriptor_Entry{{Key: o.floodKey, Value: fmt.Sprintf("w%d-c%d-%d", w, c, i)}},
					})
				}
				cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				resp, err := client.ShouldRateLimit(cctx, req)
				cancel()
				if err != nil {
					errs.Add(1)
					continue
				}
				sent.Add(int64(o.perCall))
				if resp.GetOverallCode() == rlsv3.RateLimitResponse_OK {
					allowed.Add(int64(o.perCall))
				}
			}
		}()
	}
	if o.victims > 0 && o.victimsDuring {
		time.Sleep(o.duration / 2)
		if err := sendVictims("in the middle of the flood"); err != nil {
			return err
		}
	}
	wg.Wait()
	close(stopPoll)
	rd := <-pollDone
	fmt.Printf("sent %d new keys in %v (%d calls failed), allowed %d\n", sent.Load(), time.Since(start).Round(time.Millisecond), errs.Load(), allowed.Load())
	if o.readyz != "" {
		fmt.Printf("readyz during the flood: %d polls, %d not ready, %d changes of state, %d failed\n", rd.polls, rd.notReady, rd.changes, rd.failed)
	}
	total := allowed.Load()
	for _, n := range allowedBy {
		total += n
	}

	// Fresh clients after the flood: a new key must not be rejected
	// because of the flood.
	if o.newClients > 0 {
		rejected, firstRejected := 0, 0
		for i := range o.newClients {
			name := clientName("new", i)
			for j := range o.limit {
				ok, err := allowedOne(ctx, client, o.domain, name)
				if err != nil {
					return err
				}
				if ok {
					allowedBy[name]++
					total++
				} else {
					rejected++
					if j == 0 {
						firstRejected++
					}
				}
			}
		}
		fmt.Printf("new clients after the flood: %d sent %d requests each: %d of %d rejected (%.1f%%), %d on their first request\n",
			o.newClients, o.limit, rejected, o.newClients*o.limit, 100*float64(rejected)/float64(o.newClients*o.limit), firstRejected)
	}

	drainStart := time.Now()
	var m map[string]float64
	for {
		if m, err = scrape(o.metrics); err != nil {
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
	// Every request here costs 1: the dropped requests are the dropped
	// units.
	dropped := int64(m["floodgate_sync_dropped_total"])
	fmt.Printf("pending 0 after %v; resends %v, merged %v, dropped %d, orphaned %v, evictions %v, keys tracked %v\n",
		time.Since(drainStart).Round(time.Millisecond), m["floodgate_sync_resends_total"], m["floodgate_sync_merged_total"],
		dropped, m["floodgate_sync_orphaned_total"], m["floodgate_node_evictions_total"], m["floodgate_keys_tracked"])
	fmt.Printf("eviction summary: %v keys charged, %v reads of Redis's count for requests only the charge rejected, %v charges settled by them\n",
		m["floodgate_node_summary_charged_total"], m["floodgate_node_summary_reads_total"], m["floodgate_node_summary_settled_total"])

	counts, err := redisCounts(o.redis, o.prefix)
	if err != nil {
		return err
	}
	if w := time.Now().UnixNano() / int64(o.window); w != firstWindow && len(allowedBy) > 0 {
		// Not a loss: the clients' counts expired with their window.
		fmt.Printf("the clients' %v window ended during the run (window %d, now %d): their counts in Redis are not checked\n", o.window, firstWindow, w)
		allowedBy = nil
	}
	var sum int64
	for _, c := range counts {
		sum += c
	}
	fmt.Printf("redis: %d counter keys, total %d; allowed %d, dropped %d; total + dropped - allowed = %d\n",
		len(counts), sum, total, dropped, sum+dropped-total)
	fail := false
	if sum+dropped != total {
		fmt.Println("MISMATCH: Redis total plus the dropped count differs from the allowed count")
		fail = true
	}
	if len(allowedBy) > 0 {
		byName := map[string]int64{}
		for k, c := range counts {
			if i := strings.LastIndex(k, "victim-"); i >= 0 {
				byName[k[i:]] += c
			} else if i := strings.LastIndex(k, "new-"); i >= 0 {
				byName[k[i:]] += c
			}
		}
		absent, partial, over := 0, 0, 0
		for name, want := range allowedBy {
			got, ok := byName[name]
			switch {
			case !ok || got == 0:
				absent++
			case got < want:
				partial++
			case got > want:
				over++
			}
		}
		fmt.Printf("clients' counts in Redis: %d clients, %d absent, %d partial, %d over\n", len(allowedBy), absent, partial, over)
		if absent+partial+over > 0 {
			fmt.Println("MISSING: some clients' counts are not in Redis as allowed")
			fail = true
		}
	}
	if fail {
		os.Exit(1)
	}
	fmt.Println("OK: every allowed count is in Redis or counted as dropped")
	return nil
}

// allowedOne sends one request for client and reports whether it was
// allowed.
func allowedOne(ctx context.Context, c rlsv3.RateLimitServiceClient, domain, client string) (bool, error) {
	req := &rlsv3.RateLimitRequest{Domain: domain, HitsAddend: 1, Descriptors: []*commonrl.RateLimitDescriptor{{
		Entries: []*commonrl.RateLimitDescriptor_Entry{{Key: "client", Value: client}},
	}}}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := c.ShouldRateLimit(cctx, req)
	if err != nil {
		return false, err
	}
	return resp.GetOverallCode() == rlsv3.RateLimitResponse_OK, nil
}

// readiness is what polling /readyz saw.
type readiness struct {
	polls, notReady, changes, failed int
}

// pollReadyz asks url every 100 ms until stop and counts the answers that
// were not 200 and the changes between ready and not.
func pollReadyz(url string, stop <-chan struct{}) readiness {
	var r readiness
	if url == "" {
		return r
	}
	c := &http.Client{Timeout: 2 * time.Second}
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	last := true
	for {
		select {
		case <-stop:
			return r
		case <-t.C:
		}
		resp, err := c.Get(url)
		if err != nil {
			r.failed++
			continue
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		r.polls++
		ready := resp.StatusCode == http.StatusOK
		if !ready {
			r.notReady++
		}
		if ready != last {
			r.changes++
		}
		last = ready
	}
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

// redisCounts reads the count of every fixed-window state under prefix:
// the second of its little-endian doubles. The node's own bookkeeping keys
// (its sync count and the records of applied syncs) are left out.
func redisCounts(addr, prefix string) (map[string]int64, error) {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	ctx := context.Background()
	counts := map[string]int64{}
	var cursor uint64
	for {
		e, err := c.Do(ctx, c.B().Scan().Cursor(cursor).Match(prefix+":*").Count(1000).Build()).AsScanEntry()
		if err != nil {
			return nil, err
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
				return nil, err
			}
			for i, v := range vals {
				s, err := v.ToString()
				if err != nil || len(s) < 16 {
					continue
				}
				counts[names[i]] = int64(math.Float64frombits(binary.LittleEndian.Uint64([]byte(s[8:16]))))
			}
		}
		cursor = e.Cursor
		if cursor == 0 {
			return counts, nil
		}
	}
}
