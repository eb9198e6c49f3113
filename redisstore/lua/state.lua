-- State I/O: a key's value is its state words packed as little-endian
-- doubles, 8 bytes each (exact, since every word is an integer below 2^53),
-- without the trailing zero words; a light bounded-log state is an integer
-- instead (see short8 and blint).
-- struct.pack and struct.unpack handle a whole chunk of words in one C
-- call, several times faster than decimal text; chunks keep the values on
-- the Lua stack well below its limit.
local CHUNK = 256

-- raw holds each loaded key's value as stored, for op 's' to return when it
-- records nothing.
local raw = {}

local op = ARGV[1]
local now, anchor = 0, nil
-- dfmt returns the struct format of n little-endian doubles, made once per
-- call for each n (building it for every key cost measurable CPU).
local DFMT = {}
local function dfmt(n)
  local f = DFMT[n]
  if not f then
    f = '<' .. string.rep('d', n)
    DFMT[n] = f
  end
  return f
end
-- pxarg returns ttl (ms) as the text SET's PX takes, made once per call
-- for each ttl: Redis would format the number again for every key.
local PXARG = {}
local function pxarg(ttl)
  local a = PXARG[ttl]
  if not a then
    a = string.format('%d', ttl)
    PXARG[ttl] = a
  end
  return a
end
-- setkey writes v to key, to expire after ttl ms (0: never).
local function setkey(key, v, ttl)
  if ttl > 0 then
    redis.call('SET', key, v, 'PX', pxarg(ttl))
  else
    redis.call('SET', key, v)
  end
end
-- packwords returns words 1..used of s (default: up to the last nonzero)
-- packed as doubles.
local function packwords(s, used)
  if not used then
    used = #s
    while used > 0 and s[used] == 0 do used = used - 1 end
  end
  if used <= CHUNK then
    return struct.pack(dfmt(used), unpack(s, 1, used))
  end
  local parts, i = {}, 0
  while i < used do
    local n = min(CHUNK, used - i)
    parts[#parts + 1] = struct.pack(dfmt(n), unpack(s, i + 1, i + n))
    i = i + n
  end
  return table.concat(parts)
end

-- fetched holds values read ahead with one MGET for ops 'i' and 's' (false
-- for a missing key), kept equal to what save writes.
local fetched = {}
local function fetch()
  if SLOTS then
    local at = 0
    for _, n in ipairs(SLOTS) do
      local vals = redis.call('MGET', unpack(KEYS, at + 1, at + n))
      for i = 1, n do fetched[KEYS[at + i]] = vals[i] end
      at = at + n
    end
    return
  end
  local vals = redis.call('MGET', unpack(KEYS))
  for i = 1, #KEYS do fetched[KEYS[i]] = vals[i] end
end

-- A bucket's value (codes 5 and 6) holds, after its two state words, the
-- emission interval it was written with, so that a limit of the same
-- counter with another interval reads it: convbucket turns its debt (or
-- queue) into whole units, rounded up, at the call's interval, at most the
-- debt the call's Record keeps, as Go's ConvertFrom does. The merge op
-- reads with now 0, so it converts as of the state's latest time, which
-- counts the debt a little larger, never smaller.
-- converted marks the keys load converted, which loadfixed stores at
-- once (but for a peek), as the memory store moves a key it converts.
local converted = {}
local function convbucket(code, P, s, iv)
  local toiv, debt
  if code == 6 then
    toiv, debt = P[2], P[3] + P[1] * P[2]
  else
    toiv, debt = P[3], 2 * P[4]
  end
  if iv == toiv or iv <= 0 then return false end
  local t0 = max(clamp(now), s[2] or 0)
  if (s[1] or 0) <= t0 then return true end
  local units = idiv(s[1] - t0 + iv - 1, iv)
  local most = idiv(debt, toiv) + 1
  if units > most then units = most end
  s[1] = t0 + min(units * toiv, debt)
  return true
end

-- convtime returns the time a bounded-log state another limit wrote is
-- converted at: the call's now, or for a merge (whose events carry their
-- own times) the time argument or the server's clock, as the memory store
-- converts at its Sync's now.
local function convtime()
  if op == 's' then return anchor or 0 end
  return now
end

-- A bounded-log with holds (code 24) is stored as doubles followed by the
-- inner log's m and size, as code 8's heavy forms are (see its tostored):
-- heldlog returns the state of such a value v that another m or size
-- wrote, its inner log converted (at convtime) and its holds kept; or, for
-- one this limit wrote, v without them and nil; or v and nil for a value
-- without them.
local HELDTRAIL = 281474976710656 -- code 8's TRAIL
local function heldlog(v, words, P)
  if #v < 16 or #v % 8 ~= 0 then return v, nil end
  local a, b = struct.unpack('<dd', v, #v - 15)
  if a > -HELDTRAIL or b > -HELDTRAIL then return v, nil end
  local m, size = -HELDTRAIL - a, -HELDTRAIL - b
  v = string.sub(v, 1, #v - 16)
  if m == P[3] and size == P[4] then return v, nil end
  if m < 1 or m ~= floor(m) or size < 4 or size ~= floor(size) or size > 33554432 then return '', nil end
  local k, w, pos = #v / 8, {}, 1
  while #w < k do
    local vals = { struct.unpack(dfmt(min(CHUNK, k - #w)), v, pos) }
    pos = table.remove(vals)
    for j = 1, #vals do w[#w + 1] = vals[j] end
  end
  local iwf, iw = 2 + 3 * size, P[#P - 2]
  local inner = {}
  for j = 1, iwf do inner[j] = w[j] or 0 end
  local Pi = { P[1], P[2], P[3], P[4] }
  local s = build(8).convert({ P[1], P[2], m, size }, inner, Pi, iw, convtime())
  for j = iwf + 1, #w do s[iw + j - iwf] = w[j] end
  for j = #s + 1, words do s[j] = 0 end
  for j = words + 1, #s do s[j] = nil end
  return v, s
end

local function load(key, words, code, P, alg)
  local v = fetched[key]
  if v == nil then v = redis.call('GET', key) end
  local s = {}
  if not v then v = '' end
  if code == 24 then
    local held
    v, held = heldlog(v, words, P)
    if held then
      converted[key] = true
      if op == 's' then raw[key] = packwords(held) end
      return held
    end
  end
  if alg.fromstored and #v > 0 and (#v <= 20 or #v % 8 == 1 or #v % 8 == 5 or #v >= 32 and #v % 8 == 0) then
    local st, conv = alg.fromstored(P, v, anchor, words, convtime())
    if st then
      if conv then converted[key] = true end
      if op == 's' then raw[key] = packwords(st) end
      return st, nil, #st < words -- an integer form is valid; fix checks a merged one
    end
  end
  if op == 's' then raw[key] = v end
  local extra = 0
  if code == 5 or code == 6 then extra = 1 end -- the interval (convbucket)
  if #v % 8 ~= 0 or #v > 8 * (words + extra) then
    return nil, 'floodgate: key ' .. key .. ' holds ' .. #v .. ' bytes, want a multiple of 8 up to ' ..
      8 * words .. ' (' .. words .. ' state words); was it written by another program or version?'
  end
  local stored, pos, i = #v / 8, 1, 0
  if stored <= CHUNK then
    -- One C call fills the table; the position it also returns is cut off.
    if stored > 0 then
      s = { struct.unpack(dfmt(stored), v) }
      s[stored + 1] = nil
    end
    i = stored
  end
  while i < stored do
    local n = min(CHUNK, stored - i)
    local vals = { struct.unpack(dfmt(n), v, pos) }
    for j = 1, n do s[i + j] = vals[j] end
    pos = vals[n + 1]
    i = i + n
  end
  if extra == 1 and stored == words + 1 then
    local iv = s[stored]
    s[stored] = nil
    if convbucket(code, P, s, iv) then converted[key] = true end
    if op == 's' then raw[key] = packwords(s) end
    stored = words
  end
  if code ~= 8 then -- bounded-log pads what it reads (see its fix)
    for j = stored + 1, words do s[j] = 0 end
  end
  return s
end

local function save(key, s, ttl, code, P, alg)
  -- An algorithm whose keys expire with their state (gubernator's) gives
  -- the TTL itself; the header's ttl is then the store's slack.
  if alg.expiry then ttl = alg.expiry(P, s, ttl) end
  if code == 7 and ttl == 0 and s[1] == 0 then
    -- A concurrency limit without a window keeps its keys while units are
    -- in flight; with none, the state only remembers the last time (which
    -- guards against a clock going back), so let it go after a minute.
    ttl = 60000
  end
  -- Trailing zero words are left out (load restores them): a log that is
  -- mostly empty stays small.
  local used = #s
  while used > 0 and s[used] == 0 do used = used - 1 end
  local stored, packed
  if alg.tostored then stored = alg.tostored(P, s, used, ttl, anchor) end
  if code == 24 and used > 0 then
    stored = packwords(s, used) .. struct.pack('<dd', -HELDTRAIL - P[3], -HELDTRAIL - P[4]) -- see heldlog
  end
  if (code == 5 or code == 6) and used > 0 then
    local iv = P[3]
    if code == 6 then iv = P[2] end
    stored = struct.pack('<ddd', s[1], s[2], iv) -- see convbucket
  end
  if stored and op == 's' and #stored >= 17 and #stored <= 19 and string.byte(stored, 1) ~= 45 then
    packed = stored -- the one-time form, which Sync reads as it is
  elseif not stored or op == 's' then
    packed = packwords(s, used)
  end
  stored = stored or packed
  setkey(key, stored, ttl)
  if fetched[key] ~= nil then fetched[key] = stored end
  return packed
end

-- loadfixed loads key's state for a call's first mention of it and, for
-- an algorithm with fix, pads or converts it (storing a converted state;
-- for op 's' its stored form in raw). It returns the state, or nil and
-- an error reply.
local function loadfixed(key, words, code, ttl, P, alg)
  local s, err, valid = load(key, words, code, P, alg)
  if not s then return nil, redis.error_reply(err) end
  if alg.fix and not valid and alg.fix(P, s, words, convtime()) then raw[key] = save(key, s, ttl, code, P, alg) end
  if converted[key] then
    converted[key] = nil
    if op ~= 'p' then raw[key] = save(key, s, ttl, code, P, alg) end
  end
  return s
end

-- once is op 'S', a sync call that carries an identity: the node
-- instance's record (a hash: 's' the highest batch-list number seen, 'c<n>'
-- for each call of that list applied), the list's number and the call's
-- place in it. It reports whether the call is new; a call sent again is
-- not applied but still returns the states. Lists of one instance are sent
-- in increasing order, each after the one before was applied, so a lower
-- number than the record's is always a copy.
local function once(rec, seq, chunk, remember)
  local cur = tonumber(redis.call('HGET', rec, 's'))
  if cur and seq < cur then return false end
  if cur == seq then
    if redis.call('HSETNX', rec, 'c' .. chunk, 1) == 0 then return false end
  else
    redis.call('DEL', rec)
    redis.call('HSET', rec, 's', seq, 'c' .. chunk, 1)
  end
  redis.call('PEXPIRE', rec, remember)
  return true
end

if op ~= 's' then -- merging uses the events' own times
  if ARGV[2] == '' then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  elseif op ~= 'i' and op ~= 'g' then
    now = tonumber(ARGV[2])
  end
end

local pos = 3
-- Ops 'a' (decide, holding concurrency units under a lease) and 'l'
-- (release a lease) carry the lease id's two halves first.
local leasehi, leaselo = 0, 0
if op == 'a' or op == 'l' then
  leasehi, leaselo = tonumber(ARGV[3]), tonumber(ARGV[4])
  pos = 5
end
local function nextarg()
  local v = tonumber(ARGV[pos])
  pos = pos + 1
  return v
end

