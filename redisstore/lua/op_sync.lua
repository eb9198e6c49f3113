-- onetime returns the one-time form (see short8 in bounded-log) of the
-- state Record leaves on an empty bounded-log key after its ne events,
-- when they all came at one time t >= 1 and their costs of 1 or more add
-- up to 1..min(m, 999) units: one entry of those units at t, which tostored
-- writes as the count and then t in 16 digits. Else nil.
local function onetime(P, ts, cs, ne)
  local t, c = ts[1], 0
  for k = 1, ne do
    if ts[k] ~= t then return nil end
    if cs[k] >= 1 then c = c + cs[k] end
  end
  t = clamp(t)
  if c < 1 or c > P[3] or c > 999 or t < 1 or t > 9999999999999999 then return nil end
  return string.format('%d%016d', c, t)
end

-- The outbox: a region's counts wait there until they are forwarded to
-- each other region (op 'x' seals and acknowledges). A hash per remote
-- region and hash slot, a field per key: the limit's header (its length,
-- then code, ttl, words, nparams, params, as doubles), then up to OUTMAX
-- events (time µs, cost) as doubles. A push adds one event per key, at its
-- latest time with its summed cost; past OUTMAX the two neighbouring events
-- whose merge moves the least cost by the least time merge into one at the
-- later of their times, so a long cut's counts keep their spread over it. A forwarded request is never
-- counted earlier than it happened, nor less.
local OUTMAX = 32
local function outappend(ob, key, hdr, t, c)
  local v = redis.call('HGET', ob, key)
  if not v then v = hdr end
  v = v .. struct.pack('<dd', t, c)
  local hb = 8 * (1 + struct.unpack('<d', v))
  local n = (#v - hb) / 16
  if n > OUTMAX then
    -- The pair whose merge moves the least cost by the least time.
    local best, shift = 1, nil
    local prev, pc = struct.unpack('<dd', v, hb + 1)
    for j = 2, n do
      local tj, cj = struct.unpack('<dd', v, hb + (j - 1) * 16 + 1)
      local s = tj > prev and pc * (tj - prev) or cj * (prev - tj)
      if shift == nil or s < shift then best, shift = j - 1, s end
      prev, pc = tj, cj
    end
    local at = hb + (best - 1) * 16
    local t1, c1, t2, c2 = struct.unpack('<dddd', v, at + 1)
    v = string.sub(v, 1, at) .. struct.pack('<dd', max(t1, t2), c1 + c2) .. string.sub(v, at + 33)
  end
  redis.call('HSET', ob, key, v)
end
-- outcost returns the cost of an outbox field's events after cutoff (µs).
local function outcost(v, cutoff)
  if not v then return 0 end
  local hb = 8 * (1 + struct.unpack('<d', v))
  local c = 0
  for at = hb + 1, #v, 16 do
    local t, k = struct.unpack('<dd', v, at)
    if t > cutoff then c = c + k end
  end
  return c
end

local replay = false
-- Op 'X' is 'S' for a region that forwards its counts to others (see
-- outbox): after the identity, the number of remote regions and whether
-- to return each key's unseen cost; its KEYS end with the outbox of each
-- remote, then each remote's sealed batch, then the once record.
local outboxes, sealed, unseen, outttl = nil, nil, false, 0
if op == 'X' then
  local rec = table.remove(KEYS)
  local seq = nextarg()
  local chunk = nextarg()
  replay = not once(rec, seq, chunk, nextarg())
  local nout = nextarg()
  unseen = nextarg() == 1
  outboxes, sealed = {}, {}
  for j = nout, 1, -1 do sealed[j] = table.remove(KEYS) end
  for j = nout, 1, -1 do outboxes[j] = table.remove(KEYS) end
  op = 's'
elseif op == 'S' then
  local rec = table.remove(KEYS)
  local seq = nextarg()
  local chunk = nextarg()
  replay = not once(rec, seq, chunk, nextarg())
  op = 's'
end
if op == 's' and #KEYS > 1 then fetch() end

-- Op 's' merges each key's events with the algorithm's Record and returns
-- each key's state. After ARGV[2] (and the identity of 'S'), runs of keys
-- of one limit, in the order of KEYS: the limit's header (code, ttl_ms,
-- words, nparams, params...) once, the number of keys in the run, and per
-- key its number of events and (time_us, cost) per event, or, when every
-- cost is 1, the number negated and the times alone. A key named twice
-- merges into the state its first mention left.
if op == 's' then
  local out, i, nargs, states, built = {}, 0, #ARGV, {}, {}
  local ts, cs = {}, {} -- one key's events, reused: only 1..ne are read
  while pos <= nargs do
    local code, ttl, words, np = nextarg(), nextarg(), nextarg(), nextarg()
    local alg = built[code] or build(code)
    if not alg then return redis.error_reply('floodgate: unknown algorithm code ' .. tostring(code)) end
    built[code] = alg
    local P = {}
    for j = 1, np do P[j] = nextarg() end
    local hdr, cutoff = nil, 0
    if outboxes then
      local h = { code, ttl, words, np }
      for j = 1, np do h[4 + j] = P[j] end
      hdr = struct.pack('<d', #h) .. struct.pack(dfmt(#h), unpack(h))
      if unseen then cutoff = nextarg() end
      outttl = max(outttl, ttl)
    end
    if alg.fromstored and not anchor then
      -- The time a light bounded-log state is read and written around:
      -- merges carry their own times, so the time argument or the
      -- server's clock.
      if ARGV[2] == '' then
        local t = redis.call('TIME')
        anchor = tonumber(t[1]) * 1000000 + tonumber(t[2])
      else
        anchor = clamp(tonumber(ARGV[2]))
      end
    end
    for _ = 1, nextarg() do
      i = i + 1
      local key = KEYS[i]
      local ne = nextarg()
      if ne < 0 then
        ne = -ne
        for k = 1, ne do ts[k], cs[k] = nextarg(), 1 end
      else
        for k = 1, ne do ts[k], cs[k] = nextarg(), nextarg() end
      end
      local s, one = states[key], nil
      if code == 8 and not s and fetched[key] == false and ne > 0 and not replay then
        one = onetime(P, ts, cs, ne)
      end
      if one then
        -- A bounded-log key Redis does not hold (at many light keys, most
        -- keys of a push: their state expired since their last push) whose
        -- events came at one time: Record would leave one entry of their
        -- units at that time, stored in the one-time form, which is
        -- written as it is, without building the state.
        setkey(key, one, ttl)
        fetched[key], raw[key] = one, one
      elseif not s then
        local err
        s, err = loadfixed(key, words, code, ttl, P, alg)
        if not s then return err end
        states[key] = s
      end
      if ne > 0 and not replay and not one then
        if alg.recordall then
          alg.recordall(P, s, ts, cs, ne)
        else
          for k = 1, ne do alg.record(P, s, ts[k], cs[k]) end
        end
        -- The state goes back packed as it is stored (doubles, trailing
        -- zero words left out; a bounded-log key's one-time form as it
        -- is): one string per key instead of one reply integer per word,
        -- which for a log of a hundred words was most of a sync's cost.
        raw[key] = save(key, s, ttl, code, P, alg)
      end
      out[#out + 1] = raw[key]
      if outboxes then
        if ne > 0 and not replay then
          local t, c = ts[1], 0
          for k = 1, ne do
            if ts[k] > t then t = ts[k] end
            c = c + cs[k]
          end
          for j = 1, #outboxes do outappend(outboxes[j], key, hdr, t, c) end
        end
        if unseen then
          local u = 0
          for j = 1, #outboxes do
            u = max(u, outcost(redis.call('HGET', outboxes[j], key), cutoff) +
              outcost(redis.call('HGET', sealed[j], key), cutoff))
          end
          out[#out + 1] = u
        end
      end
    end
  end
  if i ~= #KEYS then return redis.error_reply('floodgate: op s got ' .. #KEYS .. ' keys and ' .. i .. ' states') end
  if outboxes and outttl > 0 then
    -- An outbox lives as long as the longest-lived key it holds counts
    -- of: past that, its counts no longer matter anywhere.
    for j = 1, #outboxes do
      if redis.call('PTTL', outboxes[j]) < outttl then redis.call('PEXPIRE', outboxes[j], outttl) end
    end
  end
  return out
end

