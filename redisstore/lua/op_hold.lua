-- Op 'q' applies one quota lease op (algorithm's held.Hold) to KEYS[1],
-- whose algorithm has holds: ARGV[3..7] are the lease id's halves, seq,
-- spent and target, then the key's header and its cost. It returns the six
-- decision values, then held, granted, ttl (µs) and repeat.
if op == 'q' then
  local hi, lo, seq, spent, target = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
  pos = 8
  local key = KEYS[1]
  local code, ttl, words, np = nextarg(), nextarg(), nextarg(), nextarg()
  local alg = build(code)
  if not alg or not alg.hold then return redis.error_reply('floodgate: op q needs an algorithm with holds, got code ' .. tostring(code)) end
  local P = {}
  for j = 1, np do P[j] = nextarg() end
  local cost = nextarg()
  local s, err = loadfixed(key, words, code, ttl, P, alg)
  if not s then return err end
  local r = { alg.hold(P, s, now, cost, hi, lo, seq, spent, target) }
  save(key, s, ttl, code, P, alg)
  return r
end
