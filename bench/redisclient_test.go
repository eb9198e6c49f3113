package bench

// Redis client choice: the same small counter script, called by EVALSHA
// through go-redis v9 and through rueidis, one call per round trip (serial),
// from many goroutines at once (parallel: rueidis pipelines these
// automatically, go-redis uses one pooled connection per call), and in
// explicit pipelines of 100 calls. Run with
//
//	cd bench && go test -run '^$' -bench BenchmarkClient -benchtime 2s .
//
// It is why the Redis store uses rueidis (docs/design.md).

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/floodgate-dev/floodgate/internal/testkit/redistest"
)

// benchScript is a fixed-window counter: INCRBY, PEXPIRE on first use, and
// reject over the limit. It is deliberately small so the benchmark measures
// the client and the round trip, not the script.
const benchScript = `
local n = redis.call('INCRBY', KEYS[1], ARGV[1])
if n == tonumber(ARGV[1]) then redis.call('PEXPIRE', KEYS[1], ARGV[3]) end
if n > tonumber(ARGV[2]) then return 0 end
return 1`

const benchPipeline = 100

func BenchmarkClient(b *testing.B) {
	srv := redistest.Start(b)
	ctx := context.Background()

	gr := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), PoolSize: 64})
	defer gr.Close()
	grScript := goredis.NewScript(benchScript)
	if err := grScript.Load(ctx, gr).Err(); err != nil {
		b.Fatal(err)
	}
	ru, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		b.Fatal(err)
	}
	defer ru.Close()
	sha := grScript.Hash()

	var seq atomic.Int64
	key := func() string { return "bench:" + strconv.FormatInt(seq.Add(1)%10000, 10) }
	args := []string{"1", "1000000000", "60000"}

	b.Run("go-redis/serial", func(b *testing.B) {
		for b.Loop() {
			if err := grScript.EvalSha(ctx, gr, []string{key()}, "1", "1000000000", "60000").Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("rueidis/serial", func(b *testing.B) {
		for b.Loop() {
			cmd := ru.B().Evalsha().Sha1(sha).Numkeys(1).Key(key()).Arg(args...).Build()
			if err := ru.Do(ctx, cmd).Error(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("go-redis/parallel64", func(b *testing.B) {
		b.SetParallelism(32) // 32 x GOMAXPROCS(2) goroutines
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := grScript.EvalSha(ctx, gr, []string{key()}, "1", "1000000000", "60000").Err(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("rueidis/parallel64", func(b *testing.B) {
		b.SetParallelism(32)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				cmd := ru.B().Evalsha().Sha1(sha).Numkeys(1).Key(key()).Arg(args...).Build()
				if err := ru.Do(ctx, cmd).Error(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("go-redis/pipeline100", func(b *testing.B) {
		// One b.N unit is one script call; calls go out 100 per round trip.
		for i := 0; i < b.N; i += benchPipeline {
			p := gr.Pipeline()
			for j := 0; j < benchPipeline; j++ {
				grScript.EvalSha(ctx, p, []string{key()}, "1", "1000000000", "60000")
			}
			if _, err := p.Exec(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("rueidis/pipeline100", func(b *testing.B) {
		cmds := make(rueidis.Commands, benchPipeline)
		for i := 0; i < b.N; i += benchPipeline {
			for j := range cmds {
				cmds[j] = ru.B().Evalsha().Sha1(sha).Numkeys(1).Key(key()).Arg(args...).Build()
			}
			for _, r := range ru.DoMulti(ctx, cmds...) {
				if err := r.Error(); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}
