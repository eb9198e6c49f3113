//go:build redisfloor

package redisstore

import (
	"context"
	"fmt"
	"os"

	"github.com/redis/rueidis"

	"github.com/floodgate-dev/floodgate/algorithm"
	"github.com/floodgate-dev/floodgate/store"
)

// This file is built only with the redisfloor tag, for
// scripts/compare-redis-cpu's floor rows: the environment variable
// FLOODGATE_REDIS_FLOOR replaces every centralized decision's Redis work with
// the least a decision could cost, sent through the same batcher (the same
// calls, the same decisions per call), so that Redis CPU per decision end to
// end can be set beside the store's own. Modes:
//
//	null     a script that touches no key and answers allowed
//	get-set  a script that reads every key with one MGET and SETs each with PX
//	native   no script: INCRBY and PEXPIRE per key, pipelined in one write
//
// and, for a delayed node's pushes (Sync), any mode but native sends each
// push's calls, with the same keys and arguments, to a script that reads
// the keys with one MGET, SETs each to its count and newest time with PX
// and returns that: no merge with what a key held.
//
// The answers are not decisions (everything is allowed); never run it where
// limits matter.
var floorMode = os.Getenv("FLOODGATE_REDIS_FLOOR")

var floorScripts = map[string]*rueidis.Lua{
	"null": rueidis.NewLuaScript(`local out = {}
for i = 1, #KEYS do local o = #out; out[o+1], out[o+2], out[o+3], out[o+4], out[o+5], out[o+6] = 1, 0, 0, 0, 0, 0 end
return out`),
	// sync is the least a push of new keys can do: read them (one MGET),
	// write each key's count and newest time in the one-time form a new
	// bounded-log key with events of one time takes, and return it; no
	// merge with what the key held. The node's sync counter (the one key
	// of another algorithm in a push) gets its count added, so the node
	// does not take the floor for a store that lost its data.
	"sync": rueidis.NewLuaScript(`local pos, n = 3, #KEYS
if ARGV[1] == 'S' then pos, n = 6, n - 1 end
local vals = redis.call('MGET', unpack(KEYS, 1, n))
local out, i = {}, 0
while pos <= #ARGV do
  local code, ttl, np = ARGV[pos], ARGV[pos + 1], tonumber(ARGV[pos + 3])
  pos = pos + 4 + np
  local nk = tonumber(ARGV[pos])
  pos = pos + 1
  for _ = 1, nk do
    i = i + 1
    local ne, c, t = tonumber(ARGV[pos]), 0, 0
    pos = pos + 1
    if ne < 0 then
      c = -ne
      for _ = 1, c do t = math.max(t, tonumber(ARGV[pos])); pos = pos + 1 end
    else
      for _ = 1, ne do t = math.max(t, tonumber(ARGV[pos])); c = c + tonumber(ARGV[pos + 1]); pos = pos + 2 end
    end
    local v = string.format('%d%016d', c, t)
    if code ~= '8' then
      -- The node's own sync counter (concurrency): its count must grow.
      local u, last = 0, 0
      if vals[i] and #vals[i] >= 16 then u, last = struct.unpack('<dd', vals[i]) end
      v = struct.pack('<dd', u + c, math.max(last, t))
    end
    if ttl == '0' then redis.call('SET', KEYS[i], v) else redis.call('SET', KEYS[i], v, 'PX', ttl) end
    out[i] = v
  end
end
return out`),
	"get-set": rueidis.NewLuaScript(`local vals, out = redis.call('MGET', unpack(KEYS)), {}
for i = 1, #KEYS do
  redis.call('SET', KEYS[i], vals[i] or 'xxxxxxxxxxxxxxxx', 'PX', ARGV[1])
  local o = #out; out[o+1], out[o+2], out[o+3], out[o+4], out[o+5], out[o+6] = 1, 0, 0, 0, 0, 0
end
return out`),
}

// floorShared answers batch by the floor mode and wakes each caller.
func (s *Store) floorShared(ctx context.Context, batch []*pending) {
	err := s.floorCall(ctx, batch)
	for _, p := range batch {
		p.err = err
		p.d = algorithm.Decision{Allowed: true, Limit: p.sp.limit}
		close(p.done)
	}
}

// floorAlone answers one decision by the floor mode.
func (s *Store) floorAlone(ctx context.Context, req store.Request, sp *spec, key string) (algorithm.Decision, error) {
	p := &pending{req: req, sp: sp, key: key}
	err := s.floorCall(ctx, []*pending{p})
	return algorithm.Decision{Allowed: true, Limit: sp.limit}, err
}

// floorCall makes the floor's Redis calls for batch.
func (s *Store) floorCall(ctx context.Context, batch []*pending) error {
	client, err := s.connect()
	if err != nil {
		return err
	}
	keys := make([]string, len(batch))
	for i, p := range batch {
		keys[i] = p.key
	}
	const ttl = 2000 // ms, the compare script's 1 s window and its slack
	if floorMode == "native" {
		cmds := make(rueidis.Commands, 0, 2*len(keys))
		for i, k := range keys {
			cmds = append(cmds, client.B().Incrby().Key(k).Increment(batch[i].req.Cost).Build(), client.B().Pexpire().Key(k).Milliseconds(ttl).Build())
		}
		for _, r := range client.DoMulti(ctx, cmds...) {
			if err := r.Error(); err != nil {
				return fmt.Errorf("redisstore: floor: %w", err)
			}
		}
		return nil
	}
	lua, ok := floorScripts[floorMode]
	if !ok {
		return fmt.Errorf("redisstore: unknown FLOODGATE_REDIS_FLOOR %q (null, get-set or native)", floorMode)
	}
	if err := lua.Exec(ctx, client, keys, []string{itoa(ttl)}).Error(); err != nil {
		return fmt.Errorf("redisstore: floor: %w", err)
	}
	return nil
}

// floorSync sends calls, a push's script calls, to the floor's sync script
// instead.
func (s *Store) floorSync(ctx context.Context, calls []call) ([]rueidis.RedisResult, error) {
	client, err := s.connect()
	if err != nil {
		return nil, err
	}
	lua := floorScripts["sync"]
	execs := make([]rueidis.LuaExec, len(calls))
	for i, c := range calls {
		execs[i] = rueidis.LuaExec{Keys: c.keys, Args: c.args}
	}
	res := lua.ExecMulti(ctx, client, execs...)
	for _, r := range res {
		if err := r.Error(); err != nil {
			return nil, fmt.Errorf("redisstore: floor: %w", err)
		}
	}
	return res, nil
}
