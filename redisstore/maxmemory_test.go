package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/internal/testkit/redistest"
	"github.com/floodgate-dev/floodgate/store"
)

// usedMemoryOf reads used_memory from a server's INFO memory.
func usedMemoryOf(t *testing.T, srv *redistest.Server) int64 {
	t.Helper()
	info, err := srv.Do("INFO", "memory")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no used_memory in %q", info)
	return 0
}

// TestKeyFloodOnAFullRedis floods a real redis-server whose maxmemory
// holds about 20,000 counters with 60,000 new keys (bounded-log, 5 an
// hour), while after every 2,000 flood keys 100 victims at their limit
// ask once more and 20 new clients ask once, under each maxmemory policy.
// The chart's bundled Redis uses volatile-lfu: a flood's one-off keys are
// evicted first, victims that keep asking keep their counters (none
// admitted), new clients get their requests and no call fails. noeviction
// refuses every write once full, so the calls that write fail, new
// clients' among them, and their decisions go to the rule's failure policy
// (open by default: no limit). volatile-lru, whose clock counts seconds,
// cannot tell a victim from a flood key written in the same second.
func TestKeyFloodOnAFullRedis(t *testing.T) {
	needRedis(t)
	const (
		victims    = 100
		floodKeys  = 60000
		checkEvery = 2000
		batch      = 64
		// new clients asking once at each check: their first request
		// writes a counter
		lightPerCheck = 20
	)
	for _, policy := range []string{"noeviction", "volatile-lfu", "volatile-lru"} {
		t.Run(policy, func(t *testing.T) {
			srv := redistest.Start(t)
			s := newStore(t, Options{Addrs: []string{srv.Addr()}})
			ctx := context.Background()
			a := mustAlg(t, algorithm.Config{Algorithm: algorithm.BoundedLog, Limit: 5, Window: time.Hour})
			decide := func(keys []string) ([]algorithm.Decision, error) {
				reqs := make([]store.Request, len(keys))
				for i, k := range keys {
					reqs[i] = store.Request{Algorithm: a, Key: k, Cost: 1}
				}
				out := make([]algorithm.Decision, len(reqs))
				return out, s.Decide(ctx, time.Now().UnixNano(), reqs, out)
			}
			victimKeys := make([]string, victims)
			for i := range victimKeys {
				victimKeys[i] = fmt.Sprintf("victim-%d", i)
			}
			for range 5 {
				if _, err := decide(victimKeys); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := srv.Do("CONFIG", "SET", "maxmemory-policy", policy); err != nil {
				t.Fatal(err)
			}
			if _, err := srv.Do("CONFIG", "SET", "maxmemory", strconv.FormatInt(usedMemoryOf(t, srv)+3<<20, 10)); err != nil {
				t.Fatal(err)
			}
			var admitted, victimErrs, floodErrs, floodCalls, lightRefused, lightErrs int
			keys := make([]string, 0, batch)
			for sent := 0; sent < floodKeys; {
				keys = keys[:0]
				for range batch {
					keys = append(keys, fmt.Sprintf("flood-%d", sent))
					sent++
				}
				floodCalls++
				if _, err := decide(keys); err != nil {
					floodErrs++
				}
				if sent%checkEvery < batch {
					light := make([]string, lightPerCheck)
					for i := range light {
						light[i] = fmt.Sprintf("light-%d-%d", sent, i)
					}
					if ds, err := decide(light); err != nil {
						lightErrs++
					} else {
						for _, d := range ds {
							if !d.Allowed {
								lightRefused++
							}
						}
					}
					ds, err := decide(victimKeys)
					if err != nil {
						victimErrs++
						continue
					}
					for _, d := range ds {
						if d.Allowed {
							admitted++
						}
					}
				}
			}
			evicted, _ := srv.Do("INFO", "stats")
			var ev string
			for _, line := range strings.Split(evicted, "\n") {
				if v, ok := strings.CutPrefix(strings.TrimSpace(line), "evicted_keys:"); ok {
					ev = v
				}
			}
			checks := floodKeys / checkEvery
			t.Logf("%s: %d flood keys: %d of %d flood calls failed; %d of %d calls of new clients failed, %d of their requests refused; %d of %d victim checks failed, %d victim requests admitted of %d; %s keys evicted",
				policy, floodKeys, floodErrs, floodCalls, lightErrs, checks, lightRefused, victimErrs, checks, admitted, checks*victims, ev)
			switch policy {
			case "noeviction":
				if floodErrs == 0 || lightErrs == 0 {
					t.Errorf("a full Redis with noeviction took every write: the test did not fill it")
				}
			case "volatile-lfu":
				if floodErrs != 0 || victimErrs != 0 || lightErrs != 0 || lightRefused != 0 || admitted != 0 {
					t.Errorf("volatile-lfu: %d flood calls, %d victim checks and %d calls of new clients failed, %d new clients' requests refused, %d victim requests admitted; want none",
						floodErrs, victimErrs, lightErrs, lightRefused, admitted)
				}
				if ev == "0" || ev == "" {
					t.Errorf("nothing evicted: the test did not fill Redis")
				}
			}
		})
	}
}
