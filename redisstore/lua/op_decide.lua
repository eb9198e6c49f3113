-- decideall runs ops 'd', 'p', 'a', 'r' and 'l' on KEYS[first..last], whose
-- arguments start at pos, appending their answers to out; for 'd', 'a'
-- and 'g' it writes the keys back only if every request that is not shadow
-- is allowed. It returns an error reply, or nil.
local built = {}
local function decideall(first, last, out)
  local states, meta, dirty = {}, {}, {}
  local commit = true
  for i = first, last do
    local key = KEYS[i]
    local code, ttl, words, np = nextarg(), nextarg(), nextarg(), nextarg()
    local alg = built[code]
    if not alg then
      alg = build(code)
      if not alg then return redis.error_reply('floodgate: unknown algorithm code ' .. tostring(code)) end
      built[code] = alg
    end
    local P = {}
    for j = 1, np do P[j] = nextarg() end
    if alg.fromstored and not anchor then
      -- The time a light bounded-log state is read and written around: now,
      -- or for a merge (whose events carry their own times) the time
      -- argument or the server's clock.
      anchor = clamp(now)
    end
    local s = states[key]
    if not s then
      local err
      s, err = loadfixed(key, words, code, ttl, P, alg)
      if not s then return err end
      states[key] = s
      meta[key] = { ttl, code, P, alg }
    end
    if op == 'r' then
      local cost = nextarg()
      nextarg() -- shadow: unused
      if alg.release then
        alg.release(P, s, now, cost)
        save(key, s, ttl, code, P, alg)
      end
    elseif op == 'l' then
      nextarg() -- cost: unused
      nextarg() -- shadow: unused
      local held = 0
      if alg.release_lease and alg.release_lease(P, s, now, leasehi, leaselo) then
        save(key, s, ttl, code, P, alg)
        held = 1
      end
      out[#out + 1] = held
    else
      local cost, shadow = nextarg(), nextarg()
      local a, rem, reset, retry, delay, reason
      if op == 'a' and alg.acquire then
        a, rem, reset, retry, delay, reason = alg.acquire(P, s, now, cost, leasehi, leaselo)
      else
        a, rem, reset, retry, delay, reason = alg.decide(P, s, now, cost, true)
      end
      out[#out + 1] = a
      out[#out + 1] = rem
      out[#out + 1] = reset
      out[#out + 1] = retry
      out[#out + 1] = delay
      out[#out + 1] = reason
      if a == 1 then
        dirty[key] = true
      elseif shadow == 0 then
        commit = false
      end
    end
  end

  if (op == 'd' or op == 'a' or op == 'g') and commit then
    for key in pairs(dirty) do
      local mk = meta[key]
      save(key, states[key], mk[1], mk[2], mk[3], mk[4])
    end
  end
end

-- Op 'g' is many calls of op 'd' in one, for concurrent requests with
-- several limits each: ARGV[2] is '' (the server's clock) or 't' (each
-- group's time follows its count), then per group the number of its
-- requests and their arguments as op 'd' takes them. Each group is decided
-- all or nothing on its own, after the groups before it. A group with a
-- key whose stored value cannot be read gets reason code -1 for each of its
-- requests and nothing else happens to it.
if op == 'g' then
  local out, at, nargs, pertime = {}, 0, #ARGV, ARGV[2] ~= ''
  fetch()
  while pos <= nargs do
    local k = nextarg()
    if pertime then now = nextarg() end
    anchor = nil
    local start, n = pos, #out
    local err = decideall(at + 1, at + k, out)
    if err then
      if not string.find(tostring(err.err), 'holds', 1, true) then return err end
      -- Skip the group's arguments: per request its header, cost, shadow.
      pos = start
      for _ = 1, k do
        pos = pos + 3
        pos = pos + nextarg() + 2
      end
      for j = n + 1, n + 6 * k do out[j] = nil end
      for _ = 1, k do
        local o = #out
        out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5], out[o + 6] = 0, 0, 0, 0, 0, -1
      end
    end
    at = at + k
  end
  if at ~= #KEYS then return redis.error_reply('floodgate: op g got ' .. #KEYS .. ' keys and ' .. at .. ' requests') end
  return out
end

local out = {}
local err = decideall(1, #KEYS, out)
if err then return err end
return out
