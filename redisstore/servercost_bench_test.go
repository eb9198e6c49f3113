package redisstore

// BenchmarkServerCost compares redis-server's CPU per operation of a plain SET,
// a tiny counter script and a store decision. The client comparison that used
// to sit beside it (rueidis against go-redis) lives in the bench module, so
// go-redis stays out of this module's go.mod.

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/store"
)

// counterScript is a fixed-window counter: INCRBY, PEXPIRE on first use, and
// reject over the limit: the smallest script that does a limiter's work.
const counterScript = `
local n = redis.call('INCRBY', KEYS[1], ARGV[1])
if n == tonumber(ARGV[1]) then redis.call('PEXPIRE', KEYS[1], ARGV[3]) end
if n > tonumber(ARGV[2]) then return 0 end
return 1`

// BenchmarkServerCost compares the redis-server CPU per operation of a plain
// SET, the small counter script and a store decision (the full script,
// fixed window), all issued from 64 goroutines so rueidis pipelines them.
// Run with
//
//	go test -run '^$' -bench BenchmarkServerCost -benchtime 2s ./redisstore/
func BenchmarkServerCost(b *testing.B) {
	needRedis(b)
	ctx := context.Background()
	ru, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{shared.Addr()}, DisableCache: true})
	if err != nil {
		b.Fatal(err)
	}
	defer ru.Close()
	s := newStore(b, Options{})
	a := mustAlg(b, algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: 600, Window: time.Minute})
	sum := sha1.Sum([]byte(counterScript))
	tinySHA := hex.EncodeToString(sum[:])
	if err := ru.Do(ctx, ru.B().ScriptLoad().Script(counterScript).Build()).Error(); err != nil {
		b.Fatal(err)
	}
	var seq atomic.Int64
	key := func() string { return "cost:" + strconv.FormatInt(seq.Add(1)%10000, 10) }
	ops := []struct {
		name string
		do   func() error
	}{
		{"SET", func() error { return ru.Do(ctx, ru.B().Set().Key(key()).Value("1").Px(time.Minute).Build()).Error() }},
		{"counter-script", func() error {
			return ru.Do(ctx, ru.B().Evalsha().Sha1(tinySHA).Numkeys(1).Key(key()).Arg("1", "1000000000", "60000").Build()).Error()
		}},
		{"store-decision", func() error {
			_, err := s.DecideOne(ctx, 0, store.Request{Algorithm: a, Key: key(), Cost: 1})
			return err
		}},
	}
	for _, op := range ops {
		b.Run(op.name, func(b *testing.B) {
			resetStats(b)
			b.SetParallelism(32)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := op.do(); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric((serverCPU(b)-cpuBefore)*1e6/float64(b.N), "server-cpu-µs/op")
		})
	}
}

// perKeyScripts are the floors a shared call is measured against: a script
// that reads its keys and does nothing, and one that GETs and SETs each key
// (the commands a decision makes), with no decision in Lua. A third floor,
// "native" in BenchmarkSharedCall, is no script: the reference's INCRBY and
// PEXPIRE per key, pipelined in one write.
//
// Two lean fixed-window scripts, exact for the server's clock, measure how
// far a shared fixed-window decision can go (ARGV: limit, window µs, ttl
// ms, then one cost per key; two reply integers per key): "fixed-lean"
// keeps the store's form (window number and count as two doubles) with
// no code around it, MGET and one SET PX per allowed key; "fixed-incr"
// keeps one integer, window number mod 2^20 times 2^32 plus the count, and
// counts with INCRBY inside a window (the TTL set once per window with
// SET PX), so most keys cost one INCRBY.
var perKeyScripts = map[string]string{
	"null":    `return #KEYS`,
	"get-set": `for i = 1, #KEYS do local v = redis.call('GET', KEYS[i]); redis.call('SET', KEYS[i], 'xxxxxxxxxxxxxxxx', 'PX', 60000) end return #KEYS`,
	"fixed-lean": `
local t = redis.call('TIME')
local limit, W, ttl = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local k = math.floor((t[1] * 1000000 + t[2]) / W)
local vals, out = redis.call('MGET', unpack(KEYS)), {}
for i = 1, #KEYS do
  local v, sk, n = vals[i], 0, 0
  if v then sk, n = struct.unpack('<dd', v) end
  local cost, kk = tonumber(ARGV[3 + i]), k
  if kk < sk then kk = sk elseif kk > sk then n = 0 end
  if n + cost <= limit then
    n = n + cost
    redis.call('SET', KEYS[i], struct.pack('<dd', kk, n), 'PX', ttl)
    out[2 * i - 1], out[2 * i] = 1, limit - n
  else
    out[2 * i - 1], out[2 * i] = 0, limit - n
  end
end
return out`,
	"fixed-incr": `
local t = redis.call('TIME')
local limit, W, ttl = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local k = math.floor((t[1] * 1000000 + t[2]) / W) % 1048576
local vals, out = redis.call('MGET', unpack(KEYS)), {}
for i = 1, #KEYS do
  local v, sk, n = tonumber(vals[i]), -1, 0
  if v then sk = math.floor(v / 4294967296); n = v - sk * 4294967296 end
  local cost = tonumber(ARGV[3 + i])
  if sk ~= k then n = 0 end
  if n + cost <= limit then
    n = n + cost
    if sk == k then
      redis.call('INCRBY', KEYS[i], cost)
    else
      redis.call('SET', KEYS[i], k * 4294967296 + n, 'PX', ttl)
    end
    out[2 * i - 1], out[2 * i] = 1, limit - n
  else
    out[2 * i - 1], out[2 * i] = 0, limit - n
  end
end
return out`,
}

// BenchmarkSharedCall measures redis-server CPU per key of one script call
// carrying many keys, for the floors (perKeyScripts) and for the store's
// shared decisions (op 'i') of fixed-window and bounded-log, at 1, 16 and
// 128 keys per call over 10,000 keys. Run with
//
//	go test -run '^$' -bench BenchmarkSharedCall -benchtime 2000x ./redisstore/
func BenchmarkSharedCall(b *testing.B) {
	needRedis(b)
	ctx := context.Background()
	s := newStore(b, Options{})
	client, err := s.connect()
	if err != nil {
		b.Fatal(err)
	}
	shas := map[string]string{}
	for name, src := range perKeyScripts {
		if shas[name], err = client.Do(ctx, client.B().ScriptLoad().Script(src).Build()).ToString(); err != nil {
			b.Fatal(err)
		}
	}
	var seq atomic.Int64
	for _, per := range []int{1, 16, 128} {
		for _, name := range []string{"null", "native", "get-set", "fixed-lean", "fixed-incr", "fixed-window", "bounded-log"} {
			b.Run(name+"/keys-"+strconv.Itoa(per), func(b *testing.B) {
				var sp *spec
				switch name {
				case "fixed-window":
					sp, _ = s.specFor(mustAlg(b, algorithm.Config{Algorithm: algorithm.FixedWindow, Limit: 1000000, Window: time.Second}))
				case "bounded-log":
					sp, _ = s.specFor(mustAlg(b, algorithm.Config{Algorithm: algorithm.BoundedLog, Limit: 1000000, Window: time.Second}))
				}
				build := func() rueidis.Completed {
					keys := make([]string, per)
					for i := range keys {
						keys[i] = "{cost}:" + name + ":" + strconv.FormatInt(seq.Add(1)%10000, 10)
					}
					if name == "fixed-lean" || name == "fixed-incr" {
						args := []string{"1000000", "1000000", "2000"}
						for range keys {
							args = append(args, "1")
						}
						return client.B().Evalsha().Sha1(shas[name]).Numkeys(int64(per)).Key(keys...).Arg(args...).Build()
					}
					if sp == nil {
						return client.B().Evalsha().Sha1(shas[name]).Numkeys(int64(per)).Key(keys...).Build()
					}
					args := append(append([]string{"i", ""}, sp.header...), strconv.Itoa(per))
					for i := range keys {
						keys[i] = s.key(sp, keys[i])
						args = append(args, "1")
					}
					return client.B().Evalsha().Sha1(scriptSHA).Numkeys(int64(per)).Key(keys...).Arg(args...).Build()
				}
				// native: the reference's commands, INCRBY and PEXPIRE per
				// key, pipelined in one write with no script at all.
				native := func() error {
					cmds := make(rueidis.Commands, 0, 2*per)
					for range per {
						k := "{cost}:native:" + strconv.FormatInt(seq.Add(1)%10000, 10)
						cmds = append(cmds, client.B().Incrby().Key(k).Increment(1).Build(), client.B().Pexpire().Key(k).Milliseconds(2000).Build())
					}
					for _, r := range client.DoMulti(ctx, cmds...) {
						if err := r.Error(); err != nil {
							return err
						}
					}
					return nil
				}
				resetStats(b)
				b.SetParallelism(4)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if name == "native" {
							if err := native(); err != nil {
								b.Error(err)
								return
							}
							continue
						}
						if err := client.Do(ctx, build()).Error(); err != nil {
							b.Error(err)
							return
						}
					}
				})
				b.ReportMetric((serverCPU(b)-cpuBefore)*1e6/float64(b.N*per), "server-cpu-µs/key")
			})
		}
	}
}

// BenchmarkSharedSync measures redis-server CPU per key of a Sync push as
// the delayed arrangement sends it: 200 keys per push, each with 1 or 8
// events of cost 1, over 20,000 keys (so most keys already hold a state),
// or one event on a new key (events-0),
// for fixed-window and bounded-log at 1,000,000 per second (the limit
// scripts/compare-redis-cpu uses), beside the floor of a push of new keys
// (a script that GETs and SETs each key and merges nothing). One op is one
// key pushed. Run with
//
//	go test -run '^$' -bench BenchmarkSharedSync -benchtime 20000x ./redisstore/
func BenchmarkSharedSync(b *testing.B) {
	needRedis(b)
	ctx := context.Background()
	s := newStore(b, Options{})
	var seq atomic.Int64
	b.Run("floor-get-set/events-0", func(b *testing.B) {
		// The least a push of new keys can cost in Redis: one script call
		// per 200 keys that reads them with one MGET and SETs each with PX,
		// with no merge and nothing returned.
		client, err := s.connect()
		if err != nil {
			b.Fatal(err)
		}
		lua := rueidis.NewLuaScript(`local vals = redis.call('MGET', unpack(KEYS))
for i = 1, #KEYS do redis.call('SET', KEYS[i], vals[i] or '1234567890123456789', 'PX', 2000) end
return #KEYS`)
		const per = 200
		keys := make([]string, per)
		resetStats(b)
		for i := 0; i < b.N; i += per {
			for j := range keys {
				keys[j] = "{floor}:push-" + strconv.FormatInt(seq.Add(1), 10)
			}
			if err := lua.Exec(ctx, client, keys, nil).Error(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric((serverCPU(b)-cpuBefore)*1e6/float64((b.N+per-1)/per*per), "server-cpu-µs/key")
	})
	for _, events := range []int{0, 1, 8} {
		for _, alg := range []algorithm.Name{algorithm.FixedWindow, algorithm.BoundedLog} {
			a := mustAlg(b, algorithm.Config{Algorithm: alg, Limit: 1000000, Window: time.Second})
			// events 0 stands for one event on a key never pushed before
			// (as with 200,000 keys, each pushed again after its state
			// expired).
			b.Run(string(alg)+"/events-"+strconv.Itoa(events), func(b *testing.B) {
				const per = 200
				keys, events := int64(20000), events
				if events == 0 {
					keys, events = 1<<62, 1
				}
				batches := make([]store.SyncBatch, per)
				resetStats(b)
				for i := 0; i < b.N; i += per {
					now := time.Now().UnixNano()
					for j := range batches {
						evs := make([]store.Event, events)
						for k := range evs {
							evs[k] = store.Event{Time: now + int64(k)*int64(time.Millisecond), Cost: 1}
						}
						batches[j] = store.SyncBatch{Algorithm: a, Key: "push-" + strconv.FormatInt(seq.Add(1)%keys, 10), Events: evs}
					}
					if err := s.Sync(ctx, now, batches); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric((serverCPU(b)-cpuBefore)*1e6/float64((b.N+per-1)/per*per), "server-cpu-µs/key")
			})
		}
	}
}
