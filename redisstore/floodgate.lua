-- Floodgate's decision script: every algorithm of package algorithm, run
-- atomically inside Redis. Each function mirrors its Go counterpart line for
-- line, with time in microseconds instead of nanoseconds, so that every
-- integer stays below 2^53 and Lua's doubles hold it exactly (see
-- docs/redis.md for the bounds).
--
-- KEYS: one per request (or per batch for op 's').
-- ARGV[1]: op. 'd' decides every request on a copy of its state and writes
--          the copies back only if every non-shadow request is allowed;
--          'p' is 'd' without writing; 'a' is 'd' holding concurrency
--          units under a lease; 'r' releases; 'l' releases a lease; 's'
--          records events and returns the states; 'S' is 's' at most once
--          (see once); 'i' decides each key on its own (see below).
-- For 'a' and 'l', ARGV[3] and ARGV[4] are the lease id's two halves.
-- ARGV[2]: now in microseconds, or '' to read the Redis server's TIME.
-- Then (after the lease id for 'a' and 'l') per key: code, ttl_ms (0: no expiry), words, nparams, params...,
-- followed by cost and shadow (0/1). Ops 'i' and 's' send a limit's header
-- once per run of its keys instead (see each).
--
-- 'l' returns 1 per key that held the lease, else 0.
-- 'd', 'p' and 'a' return six integers per request: allowed (0/1), remaining,
-- reset_after_us, retry_after_us, delay_us, reason code. 's' returns, per key,
-- its state packed as stored: little-endian doubles, trailing zero words left
-- out.

-- Op 'i' sent to one Redis Cluster primary for keys of several hash slots
-- declares no keys (a script's declared keys must share a slot) and names
-- them among its arguments: ARGV[2] is 'K' (or 'T', for 't'), then the
-- number of keys, the keys, the number of slots and each slot's number of
-- keys (a slot's keys adjacent), then the arguments of op 'i' after ARGV[2]. The
-- keys become KEYS and the rest ARGV, as op 'i' reads them (new tables
-- in locals of those names: the call's own tables are left as they are);
-- SLOTS tells fetch to read each slot's keys with its own MGET. Every key
-- is read before any is written, so a primary that does not serve one of
-- them refuses the call before it changes anything.
local KEYS, ARGV, SLOTS = KEYS, ARGV, nil
if ARGV[1] == 'i' and (ARGV[2] == 'K' or ARGV[2] == 'T') then
  local nk = tonumber(ARGV[3])
  local ns = tonumber(ARGV[4 + nk])
  local keys, args = {}, { 'i', '' }
  for i = 1, nk do keys[i] = ARGV[3 + i] end
  SLOTS = {}
  for i = 1, ns do SLOTS[i] = tonumber(ARGV[4 + nk + i]) end
  if ARGV[2] == 'T' then args[2] = 't' end
  for i = 5 + nk + ns, #ARGV do args[#args + 1] = ARGV[i] end
  KEYS, ARGV = keys, args
end

local floor = math.floor

local MAXT = 4611686018427387 -- the algorithms' latest time (2^62 ns) in whole microseconds
local MAXLIMIT = 4294967295   -- algorithm.MaxLimit
local MAXCOUNT = 9007199254740992 -- counts saturate at 2^53 here (2^62 in Go)
local MAXU32 = 4294967295

-- A bounded-log header's fields (see code 8): every nonempty header holds
-- MARK, the merged flag is MERGED, the open entry's count counts in CUNIT.
local MARK, MERGED, CUNIT = 4503599627370496, 131072, 262144

-- Reason codes, decoded by the Go side.
local OK, OVER, COSTOVER, QUEUEFULL, BADCOST = 0, 1, 2, 3, 4

local function max(a, b) if a > b then return a end return b end
local function min(a, b) if a < b then return a end return b end
local function nonneg(x) if x < 0 then return 0 end return x end

local function clamp(t)
  if t < 0 then return 0 end
  if t > MAXT then return MAXT end
  return t
end

-- idiv returns floor(a/b) exactly for integers 0 <= a, 0 < b below 2^53:
-- the double quotient can round to the next integer, so correct it.
local function idiv(a, b)
  local q = floor(a / b)
  local r = a - q * b
  if r < 0 then
    q = q - 1
  elseif r >= b then
    q = q + 1
  end
  return q
end

local function imod(a, b) return a - idiv(a, b) * b end

local function addsat(a, b)
  if a > MAXCOUNT - b then return MAXCOUNT end
  return a + b
end

local function badcost(cost, mx)
  if cost < 1 then return BADCOST end
  if cost > mx then return COSTOVER end
  return nil
end

-- muldiv returns floor(a*b/c) and whether it was inexact, for integers
-- 0 <= a, b < 2^53 and 0 < c < 2^52, with the quotient below 2^53, without
-- ever forming the product: shift-and-add over the bits of b, keeping
-- a*prefix(b) = q*c + r with 0 <= r < c.
local function muldiv(a, b, c)
  local qa = idiv(a, c)
  local ra = a - qa * c
  local pw = 1
  while pw * 2 <= b do pw = pw * 2 end
  local q, r = 0, 0
  while pw >= 1 do
    q, r = q * 2, r * 2
    if r >= c then r = r - c; q = q + 1 end
    if b >= pw then
      b = b - pw
      q, r = q + qa, r + ra
      if r >= c then r = r - c; q = q + 1 end
    end
    pw = pw / 2
  end
  return q, r ~= 0
end

local function muldivup(a, b, c)
  local q, inexact = muldiv(a, b, c)
  if inexact then q = q + 1 end
  return q
end

-- lightfns returns bounded-log's light forms' writer and reader (code 8's
-- tostored and fromstored use them). They work on numbers, not a state
-- table, and are made apart from build so that op 'i' decides light keys
-- without building the whole algorithm (whose closures cost about 19,000
-- instructions a call, measured with callgrind).
local function lightfns()
  -- A light state is stored as a decimal integer, which Redis keeps in its
  -- integer encoding: 88 bytes of MEMORY USAGE with a 34-byte key name,
  -- where 24 or 32 bytes of doubles take 120 or 136 (and any string of 1 to
  -- 12 bytes 104). lightread tells the two integer forms from doubles by
  -- their first byte and digits: a state's doubles start with a header
  -- whose eighth byte is 0x43, or a ring form's count, never a digit.
  --
  -- short8: one entry whose units all came at one time (a key that sent
  -- one request): the count, then the time in 16 digits. It needs no clock
  -- to read.
  --
  -- blint: a state not merged whose open entry holds c <= m units, first
  -- taken d < W before the newest time t, alone (n = 1) or after a closed
  -- entry whose first time is at or before t - W (n = 2). Neither Decide
  -- nor Record reads more from that closed entry's first time than that it
  -- is at or before every later cut (newest - W), so it is stored as
  -- exactly t - W. The value is -(Z * 10^9 + lo) with
  --   X = 1 + ((n - 1) * m + c - 1) * W + d   (1 <= X <= 2 * m * W)
  --   Y = t mod R, R = r * 10^9, r = floor(9213372036 / (2 * m * W + 1))
  --   Z * 10^9 + lo = (10^7 + r * X) * 10^9 + Y
  -- (18 to 20 characters, never a multiple of 8, so a script from before
  -- this form reports it as foreign rather than reading doubles; below 2^63,
  -- Redis's integer range; r is capped at 10^6). Only t mod R is kept: it is read back as the one time congruent
  -- to it in (now - R/2, now + R/2], now being the reading call's (the
  -- server's TIME, or the caller's with ClientTime). The form is written
  -- only when the key's TTL is at most R/4 and t is within R/8 of the
  -- writing call's now, so a read is exact whenever the nows of two calls
  -- on a live key differ by less than 3R/8: the key expires a TTL after its
  -- last write, so that fails only if the clock steps back, or callers'
  -- clocks differ, by more than 3R/8 - TTL. At 600 per minute, e = 0.05 (m
  -- = 30): r = 2, R = 2,000 s, 3R/8 = 12 min 30 s. Any other state, or one
  -- whose fields do not fit, stays doubles.
  local ZMAX, E9, ZOFF = 9223372035, 1000000000, 10000000
  -- lightform returns the short8 or blint form of a state not merged (W,
  -- m: window and units per entry) of n entries whose open entry holds c
  -- units, with newest time t, first times f1 (oldest) and fl (newest's,
  -- read only when n <= 2), used words up to the last nonzero, or nil when
  -- it has neither.
  local function lightform(W, m, n, c, t, f1, fl, used, ttl, at)
    if n == 1 and used == 3 and f1 == t and c >= 1 and c <= 999 and t <= 9999999999999999 then
      return string.format('%d%016d', c, t)
    end
    if used ~= 2 + n or n > 2 or c < 1 or c > m then return nil end
    local d = t - fl
    if d < 0 or d >= W or t < W then return nil end
    if n == 2 and f1 > t - W then return nil end
    local r = min(floor((ZMAX + 1 - ZOFF) / (2 * m * W + 1)), 1000000)
    local R = r * E9
    if r < 1 or 4 * ttl * 1000 > R or 8 * (t - at) > R or 8 * (at - t) > R then return nil end
    local X = 1 + ((n - 1) * m + c - 1) * W + d
    local Y = t - idiv(t, R) * R
    local yh = floor(Y / E9)
    return string.format('-%d%09d', ZOFF + r * X + yh, Y - yh * E9)
  end
  -- lightread reads a short8 or blint value v (at most 20 bytes) read at
  -- time at: n, the open count, the newest time and the first times of
  -- the n <= 2 entries (the second is nil for one), or nil.
  local function lightread(W, m, v, at)
    local b = string.byte(v, 1)
    if b >= 49 and b <= 57 then -- short8
      if #v < 17 or #v > 19 or not string.find(v, '^%d+$') then return nil end
      local c, t = tonumber(string.sub(v, 1, -17)), tonumber(string.sub(v, -16))
      if t > MAXT then return nil end
      return 1, c, t, t
    end
    -- A value Redis keeps as an integer reads back in canonical digits.
    -- tonumber(v) is v to within 2^10, so Z is exact once lo is taken off;
    -- one tonumber of the whole value and one of its last nine digits
    -- instead of a pattern match and two of its parts (less CPU per call).
    if b ~= 45 or #v < 11 then return nil end
    local x, lo = tonumber(v), tonumber(string.sub(v, -9))
    if not x or not lo or x ~= floor(x) or lo ~= floor(lo) or lo < 0 or lo >= E9 then return nil end
    local Z = floor((-x - lo) / E9 + 0.5) - ZOFF
    local r = min(floor((ZMAX + 1 - ZOFF) / (2 * m * W + 1)), 1000000)
    local R = r * E9
    if r < 1 or Z > ZMAX - ZOFF then return nil end
    local X = floor(Z / r)
    local Y = (Z - X * r) * E9 + lo
    local q = floor((X - 1) / W)
    local d = X - 1 - q * W
    local n = floor(q / m) + 1
    local c = q - (n - 1) * m + 1
    if X < 1 or n > 2 then return nil end
    -- The time congruent to Y mod R in (at - R/2, at + R/2]; at + R/2 - Y
    -- may be negative, and idiv takes only a >= 0.
    local a = at + floor(R / 2) - Y + R
    local t = at + floor(R / 2) - (a - idiv(a, R) * R)
    if t < W or t > MAXT then return nil end
    if n == 2 then return 2, c, t, t - W, t - d end
    return 1, c, t, t - d
  end
  return lightform, lightread
end

-- build returns the functions of the algorithm with the given code (nil
-- for an unknown code), made on first use in a call. The script's body runs
-- on every call, and each closure it makes costs time in proportion to its
-- upvalues; one builder holding every algorithm makes one closure per call
-- where a table of builders made one per algorithm, which measured about 2
-- µs of Redis CPU per call.
local function build(code)

-- 1: fixed-window. P: limit, window. State: window number, count.
if code == 1 then
  return {
    decide = function(P, s, now, cost, commit)
      local limit, window = P[1], P[2]
      now = clamp(now)
      local k, n = idiv(now, window), s[2]
      if k < s[1] then
        k, now = s[1], s[1] * window
      elseif k > s[1] then
        n = 0
      end
      local reset = (k + 1) * window - now
      local bc = badcost(cost, limit)
      if bc then return 0, nonneg(limit - n), reset, 0, 0, bc end
      if n + cost > limit then return 0, nonneg(limit - n), reset, reset, 0, OVER end
      n = n + cost
      if commit then s[1], s[2] = k, n end
      return 1, limit - n, reset, 0, 0, OK
    end,
    record = function(P, s, now, cost)
      if cost < 1 then return end
      local k = idiv(clamp(now), P[2])
      if k < s[1] then return end
      if k > s[1] then s[1], s[2] = k, 0 end
      s[2] = addsat(s[2], min(cost, MAXLIMIT))
    end,
  }
end

-- 2: sliding-window. P: limit, slice, slices. State: newest slice number,
-- then one count per ring position (Go packs them four to a word when the
-- limit is below 2^16, else two; the Go side converts). A count saturates
-- at its Go field's maximum: 65535 or 2^32-1.
if code == 2 then
  local function sw_count(P, s, z) return s[2 + imod(z, P[3])] end
  local function sw_set(P, s, z, v)
    local field = MAXU32
    if P[1] < 65536 then field = 65535 end
    s[2 + imod(z, P[3])] = min(v, field)
  end
  local function sw_view(P, s, now)
    local slice, N = P[2], P[3]
    now = clamp(now)
    local k = idiv(now, slice)
    if k < s[1] then k, now = s[1], s[1] * slice end
    local oldest = max(max(k - N + 1, s[1] - N + 1), 0)
    local total = 0
    for z = oldest, s[1] do total = total + sw_count(P, s, z) end
    return k, now, oldest, total
  end
  local function sw_reset(P, s, now, oldest, newest)
    for z = newest, oldest, -1 do
      if sw_count(P, s, z) > 0 then return (z + P[3]) * P[2] - now end
    end
    return 0
  end
  local function sw_advance(P, s, k)
    if k <= s[1] then return end
    for z = max(s[1] + 1, k - P[3] + 1), k do sw_set(P, s, z, 0) end
    s[1] = k
  end
  return {
    decide = function(P, s, now, cost, commit)
      local limit, slice, N = P[1], P[2], P[3]
      local k, oldest, total
      k, now, oldest, total = sw_view(P, s, now)
      local bc = badcost(cost, limit)
      if bc then return 0, nonneg(limit - total), sw_reset(P, s, now, oldest, s[1]), 0, 0, bc end
      if total + cost > limit then
        local need, z = total + cost - limit, oldest
        while z < s[1] do
          need = need - sw_count(P, s, z)
          if need <= 0 then break end
          z = z + 1
        end
        return 0, nonneg(limit - total), sw_reset(P, s, now, oldest, s[1]), (z + N) * slice - now, 0, OVER
      end
      if commit then
        sw_advance(P, s, k)
        sw_set(P, s, k, sw_count(P, s, k) + cost)
      end
      return 1, limit - total - cost, (k + N) * slice - now, 0, 0, OK
    end,
    record = function(P, s, now, cost)
      if cost < 1 then return end
      local z = idiv(clamp(now), P[2])
      if z <= s[1] - P[3] then return end
      sw_advance(P, s, z)
      sw_set(P, s, z, sw_count(P, s, z) + min(cost, MAXLIMIT))
    end,
  }
end

-- 3: weighted-window. P: limit, window. State: window number, current
-- count, previous count.
if code == 3 then
  local function ww_view(P, s, now)
    local window = P[2]
    now = clamp(now)
    local k = idiv(now, window)
    local curr, prev = 0, 0
    if k <= s[1] then
      if k < s[1] then k, now = s[1], s[1] * window end
      curr, prev = s[2], s[3]
    elseif k == s[1] + 1 then
      prev = s[2]
    end
    return k, now - k * window, curr, prev
  end
  local function ww_reset(P, elapsed, curr, prev)
    if curr > 0 then return 2 * P[2] - elapsed end
    if prev > 0 then return P[2] - elapsed end
    return 0
  end
  local function ww_retry(P, elapsed, curr, prev, cost)
    local limit, w = P[1], P[2]
    local r = limit - curr - cost
    if r >= 0 then return w - muldiv(r, w, prev) - elapsed end
    r = limit - cost
    if curr <= r then return w - elapsed end
    return w - elapsed + w - muldiv(r, w, curr)
  end
  return {
    decide = function(P, s, now, cost, commit)
      local limit, window = P[1], P[2]
      local k, elapsed, curr, prev = ww_view(P, s, now)
      local est = curr + muldivup(prev, window - elapsed, window)
      local bc = badcost(cost, limit)
      if bc then return 0, nonneg(limit - est), ww_reset(P, elapsed, curr, prev), 0, 0, bc end
      if est + cost > limit then
        return 0, nonneg(limit - est), ww_reset(P, elapsed, curr, prev),
          ww_retry(P, elapsed, curr, prev, cost), 0, OVER
      end
      curr = curr + cost
      if commit then s[1], s[2], s[3] = k, curr, prev end
      return 1, nonneg(limit - est - cost), ww_reset(P, elapsed, curr, prev), 0, 0, OK
    end,
    record = function(P, s, now, cost)
      if cost < 1 then return end
      cost = min(cost, MAXLIMIT)
      local k = idiv(clamp(now), P[2])
      if k == s[1] - 1 then
        s[3] = addsat(s[3], cost)
        return
      elseif k < s[1] then
        return
      elseif k == s[1] + 1 then
        s[1], s[2], s[3] = k, 0, s[2]
      elseif k > s[1] then
        s[1], s[2], s[3] = k, 0, 0
      end
      s[2] = addsat(s[2], cost)
    end,
  }
end

-- 4: sliding-log. P: limit, window. State: count, ring index of the
-- oldest, then limit timestamps.
if code == 4 then
  local function sl_idx(P, s, i) return 3 + (s[2] + i) % P[1] end
  local function sl_view(P, s, now)
    local n = s[1]
    now = clamp(now)
    if n > 0 then now = max(now, s[sl_idx(P, s, n - 1)]) end
    local drop = 0
    while drop < n and s[sl_idx(P, s, drop)] <= now - P[2] do drop = drop + 1 end
    return now, drop
  end
  return {
    decide = function(P, s, now, cost, commit)
      local limit, window = P[1], P[2]
      local drop
      now, drop = sl_view(P, s, now)
      local n = s[1] - drop
      local reset = 0
      if n > 0 then reset = s[sl_idx(P, s, s[1] - 1)] + window - now end
      local bc = badcost(cost, limit)
      if bc then return 0, limit - n, reset, 0, 0, bc end
      if n + cost > limit then
        return 0, limit - n, reset, s[sl_idx(P, s, drop + n + cost - limit - 1)] + window - now, 0, OVER
      end
      if commit then
        s[2] = (s[2] + drop) % limit
        s[1] = n
        for _ = 1, cost do
          s[3 + (s[2] + s[1]) % limit] = now
          s[1] = s[1] + 1
        end
      end
      return 1, limit - n - cost, window, 0, 0, OK
    end,
    record = function(P, s, now, cost)
      local limit = P[1]
      if cost < 1 then return end
      local latest, drop = sl_view(P, s, now)
      s[2] = (s[2] + drop) % limit
      s[1] = s[1] - drop
      now = clamp(now)
      if now <= latest - P[2] then return end
      for _ = 1, min(cost, limit) do
        if s[1] == limit then
          if s[sl_idx(P, s, 0)] > now then return end
          s[2] = (s[2] + 1) % limit
          s[1] = s[1] - 1
        end
        local i = s[1]
        while i > 0 and s[sl_idx(P, s, i - 1)] > now do
          s[sl_idx(P, s, i)] = s[sl_idx(P, s, i - 1)]
          i = i - 1
        end
        s[sl_idx(P, s, i)] = now
        s[1] = s[1] + 1
      end
    end,
  }
end

-- 5: token-bucket and gcra (the generic cell rate algorithm). P: limit,
-- capacity, interval, span. State: theoretical arrival time, latest time.
if code == 5 then
  return {
    decide = function(P, s, now, cost, commit)
      local limit, capacity, interval, span = P[1], P[2], P[3], P[4]
      now = max(clamp(now), s[2])
      local tat = max(s[1], now)
      local reset = tat - now
      local rem = idiv(nonneg(span - (tat - now)), interval)
      local bc = badcost(cost, capacity)
      if bc then return 0, rem, reset, 0, 0, bc end
      local newtat = tat + cost * interval
      local diff = now - (newtat - span)
      if diff < 0 then return 0, rem, reset, -diff, 0, OVER end
      if commit then s[1], s[2] = newtat, now end
      return 1, idiv(diff, interval), newtat - now, 0, 0, OK
    end,
    record = function(P, s, now, cost)
      if cost < 1 then return end
      now = clamp(now)
      local tat = max(s[1], now) + min(cost, P[2]) * P[3]
      s[1] = min(tat, max(s[2], now) + 2 * P[4])
      s[2] = max(s[2], now)
    end,
  }
end

-- 6: leaky-bucket. P: limit, interval, max delay. State: the time the
-- queue drains, latest time.
if code == 6 then
  local function lb_remaining(P, now, free)
    local wait = free - now
    if wait > P[3] then return 0 end
    return min(P[1], idiv(P[3] - wait, P[2]) + 1)
  end
  return {
    decide = function(P, s, now, cost, commit)
      local limit, interval, maxdelay = P[1], P[2], P[3]
      now = max(clamp(now), s[2])
      local free = max(s[1], now)
      local wait = free - now
      local bc = badcost(cost, limit)
      if bc then return 0, lb_remaining(P, now, free), wait, 0, 0, bc end
      if wait > maxdelay then return 0, 0, wait, wait - maxdelay, 0, QUEUEFULL end
      free = free + cost * interval
      if commit then s[1], s[2] = free, now end
      return 1, lb_remaining(P, now, free), free - now, 0, wait, OK
    end,
    record = function(P, s, now, cost)
      if cost < 1 then return end
      now = clamp(now)
      local free = max(s[1], now) + min(cost, P[1]) * P[2]
      s[1] = min(free, max(s[2], now) + P[3] + P[1] * P[2])
      s[2] = max(s[2], now)
    end,
  }
end

-- 7: concurrency. P: limit, window (0: no leak guard), most leases,
-- lease TTL. State: anonymous units, time of the last change, number of
-- leases n, then n leases of four words: id (two halves), expiry, cost.
if code == 7 then
  local function cc_valid(P, s)
    return s[1] >= 0 and s[2] >= 0 and s[2] <= MAXT and s[3] >= 0 and s[3] <= P[3]
  end
  local function cc_leases(P, s)
    if not cc_valid(P, s) then return 0 end
    return s[3]
  end
  local function cc_look(P, s, now)
    if not cc_valid(P, s) then return clamp(now), 0, 0 end
    now = max(clamp(now), s[2])
    local n, live = 0, 0
    if P[2] == 0 or now - s[2] <= P[2] then n = s[1] end
    for i = 0, s[3] - 1 do
      local o = 4 + 4 * i
      if s[o + 2] > now and s[o + 3] > 0 then
        n = addsat(n, s[o + 3])
        live = live + 1
      end
    end
    return now, n, live
  end
  local function cc_drop(s, i)
    local last = s[3] - 1
    local o, l = 4 + 4 * i, 4 + 4 * last
    for k = 0, 3 do s[o + k] = s[l + k] end
    for k = 0, 3 do s[l + k] = 0 end
    s[3] = last
  end
  local function cc_compact(P, s, now)
    if not cc_valid(P, s) then
      for k = 1, #s do s[k] = 0 end
      return
    end
    now = max(clamp(now), s[2])
    if P[2] > 0 and now - s[2] > P[2] then s[1] = 0 end
    local i = 0
    while i < s[3] do
      local o = 4 + 4 * i
      if s[o + 2] <= now or s[o + 3] < 1 then
        cc_drop(s, i)
      else
        i = i + 1
      end
    end
  end
  local function cc_find(P, s, hi, lo)
    for i = 0, cc_leases(P, s) - 1 do
      local o = 4 + 4 * i
      if s[o] == hi and s[o + 1] == lo then return i end
    end
    return -1
  end
  local function cc_expiry(P, s, now, last, anon)
    local e = 0
    if P[2] > 0 and anon > 0 then e = last + P[2] + 1 - now end
    for i = 0, cc_leases(P, s) - 1 do
      local o = 4 + 4 * i
      if s[o + 2] > now and s[o + 3] > 0 and (e == 0 or s[o + 2] - now < e) then e = s[o + 2] - now end
    end
    return nonneg(e)
  end
  local function cc_anon(P, s, now)
    if P[2] > 0 and now - s[2] > P[2] then return 0 end
    return s[1]
  end
  local function cc_held(P, s, now, hi, lo)
    local i = cc_find(P, s, hi, lo)
    if i >= 0 then
      local o = 4 + 4 * i
      if s[o + 2] <= now or s[o + 3] < 1 then return -1 end
    end
    return i
  end
  -- cc_decide mirrors concurrency.decide: hi, lo is the lease (0, 0: none).
  local function cc_decide(P, s, now, cost, hi, lo, commit)
    local limit = P[1]
    local n, live
    now, n, live = cc_look(P, s, now)
    local last, anon = 0, 0
    if cc_valid(P, s) then last, anon = s[2], cc_anon(P, s, now) end
    local rem = nonneg(limit - n)
    local bc = badcost(cost, limit)
    if bc then return 0, rem, cc_expiry(P, s, now, last, anon), 0, 0, bc end
    local leased = hi ~= 0 or lo ~= 0
    if n + cost > limit or (leased and live >= P[3] and cc_held(P, s, now, hi, lo) < 0) then
      local e = cc_expiry(P, s, now, last, anon)
      return 0, rem, e, e, 0, OVER
    end
    if not commit then
      return 1, limit - n - cost, cc_expiry(P, s, now, now, anon + cost), 0, 0, OK
    end
    cc_compact(P, s, now)
    s[2] = now
    local at = cc_find(P, s, hi, lo)
    if not leased then
      s[1] = s[1] + cost
    elseif at >= 0 then
      local o = 4 + 4 * at
      s[o + 2], s[o + 3] = now + P[4], s[o + 3] + cost
    else
      local o = 4 + 4 * s[3]
      s[o], s[o + 1], s[o + 2], s[o + 3] = hi, lo, now + P[4], cost
      s[3] = s[3] + 1
    end
    return 1, limit - n - cost, cc_expiry(P, s, now, now, s[1]), 0, 0, OK
  end
  return {
    decide = function(P, s, now, cost, commit)
      return cc_decide(P, s, now, cost, 0, 0, commit)
    end,
    acquire = function(P, s, now, cost, hi, lo)
      return cc_decide(P, s, now, cost, hi, lo, true)
    end,
    record = function(P, s, now, cost)
      if cost < 1 then return end
      cc_compact(P, s, now)
      now = cc_look(P, s, now)
      s[1], s[2] = addsat(s[1], min(cost, MAXLIMIT)), now
    end,
    release = function(P, s, now, cost)
      if cost < 1 then return end
      cc_compact(P, s, now)
      now = cc_look(P, s, now)
      s[1], s[2] = nonneg(s[1] - cost), now
    end,
    release_lease = function(P, s, now, hi, lo)
      local t = cc_look(P, s, now)
      if cc_held(P, s, t, hi, lo) < 0 then return false end
      cc_compact(P, s, now)
      cc_drop(s, cc_find(P, s, hi, lo))
      s[2] = t
      return true
    end,
  }
end

-- 8: bounded-log. P: limit, window, m (units per entry), size (capacity in
-- entries). State, as in Go (see algorithm/boundedlog.go), 0-based entry i:
-- [1] header 2^52 + open count * 2^18 + merged * 2^17 + n (0: no entries),
-- [2] newest timestamp, [3+i] first timestamp of entry i, and only when
-- merged: [3+size+i] m - count and [3+2*size+i] next first - last of
-- closed entry i. Decide touches the first 2+n words only; Record expands
-- the state into the ring form bounded-log had before (entries, oldest
-- index, then first, last, count per entry), merges there and packs it
-- back. A key stored in the ring form is converted when first loaded.
-- Light and merged states are stored in shorter forms (tostored and
-- fromstored below); Sync always gets this layout back.
if code == 8 then
  -- bl_hdr returns n, the open entry's count and the merged flag, or nil
  -- for a header no bounded-log writes.
  local function bl_hdr(P, s)
    local h = s[1]
    if h == 0 then return 0, 0, false end
    local rest = h - MARK
    local n = rest % MERGED
    if rest < 0 or h >= 2 * MARK or n < 1 or n > P[4] then return nil end
    return n, floor(rest / CUNIT), floor(rest / MERGED) % 2 == 1
  end
  local function bl_sethdr(s, n, open, merged)
    if n == 0 then
      s[1], s[2] = 0, 0
      return
    end
    local h = MARK + min(open, MAXLIMIT) * CUNIT + n
    if merged then h = h + MERGED end
    s[1] = h
  end
  -- The ring form's functions are made only when a call needs them:
  -- Record, or a key stored in the ring form.
  local ring
  local function ringfns()
    if ring then return ring end
    local function bl_at(P, s, i) return 3 + 3 * ((s[2] + i) % P[4]) end
    local function bl_view(P, s, now)
      local n = s[1]
      now = clamp(now)
      if n > 0 then now = max(now, s[bl_at(P, s, n - 1) + 1]) end
      local cut = now - P[2]
      local drop = 0
      while drop < n and s[bl_at(P, s, drop) + 1] <= cut do drop = drop + 1 end
      local start = drop
      if start < n and s[bl_at(P, s, start)] <= cut then start = start + 1 end
      local sum = 0
      for i = start, n - 1 do sum = sum + s[bl_at(P, s, i) + 2] end
      return now, drop, start, sum
    end
    local function bl_openfirst(P, s, now, cost)
      local n = s[1]
      if n == 0 then return now end
      local o = bl_at(P, s, n - 1)
      if s[o] > now - P[2] and s[o + 2] + cost <= P[3] then return s[o] end
      return now
    end
    -- bl_insert puts an empty entry at time t at index i, moving the entries
    -- from i on one place newer, and returns its offset.
    local function bl_insert(P, s, i, t)
      local n, size = s[1], P[4]
      if i == 0 then
        s[2] = (s[2] + size - 1) % size
      else
        for j = n, i + 1, -1 do
          local d, o = bl_at(P, s, j), bl_at(P, s, j - 1)
          s[d], s[d + 1], s[d + 2] = s[o], s[o + 1], s[o + 2]
        end
      end
      s[1] = n + 1
      local o = bl_at(P, s, i)
      s[o], s[o + 1], s[o + 2] = t, t, 0
      return o
    end
    -- bl_add appends in time order as Go's logRing.add does: the open
    -- entry fills while its first time is after cut and, with entries
    -- before it, it spans less than span; a straddler is dropped.
    local function bl_add(P, s, now, cost, cut, span)
      local m, size = P[3], P[4]
      local n = s[1]
      if n > 0 then
        local o = bl_at(P, s, n - 1)
        if s[o] <= cut then
          n, s[2] = 0, 0
        elseif s[o + 2] < m and (n == 1 or now - s[o] < span) then
          local k = min(cost, m - s[o + 2])
          s[o + 1], s[o + 2] = now, s[o + 2] + k
          cost = cost - k
        end
      end
      while cost > 0 and n < size do
        local k = min(cost, m)
        local o = bl_at(P, s, n)
        s[o], s[o + 1], s[o + 2] = now, now, k
        n = n + 1
        cost = cost - k
      end
      s[1] = n
      if cost > 0 then
        local o = bl_at(P, s, n - 1)
        s[o + 1], s[o + 2] = now, addsat(s[o + 2], cost)
      end
    end
    local function ring_record(P, s, now, cost)
      local limit, window, m, size = P[1], P[2], P[3], P[4]
      if cost < 1 then return end
      cost = min(cost, MAXLIMIT)
      -- Late events (and, past the first entry, in-order ones) do not make
      -- an entry span ceil(W*m/L) or more (see Go's logRing.record).
      local span = muldivup(window, m, limit)
      local function room(count, first, last) return count < m and last - first < span end
      local latest, drop = bl_view(P, s, now)
      s[2] = (s[2] + drop) % size
      s[1] = s[1] - drop
      now = clamp(now)
      local n = s[1]
      if n == 0 or now >= s[bl_at(P, s, n - 1) + 1] then
        bl_add(P, s, now, cost, latest - window, span)
        return
      end
      if now <= latest - window then return end
      while cost > 0 do
        n = s[1]
        local i = n - 1
        while i >= 0 and s[bl_at(P, s, i)] > now do i = i - 1 end
        local o
        if i < 0 then
          -- Before every entry.
          o = bl_at(P, s, 0)
          if room(s[o + 2], now, s[o + 1]) then
            s[o] = now
          elseif n < size then
            o = bl_insert(P, s, 0, now)
          else
            s[o], s[o + 2] = now, addsat(s[o + 2], cost)
            return
          end
        else
          local oi = bl_at(P, s, i)
          if s[oi + 2] < m and (now <= s[oi + 1] or room(0, s[oi], now)) then
            o = oi
            s[o + 1] = max(s[o + 1], now)
          elseif now > s[oi + 1] then
            -- In the gap after a full entry.
            o = bl_at(P, s, i + 1)
            if room(s[o + 2], now, s[o + 1]) then
              s[o] = now
            elseif n < size then
              o = bl_insert(P, s, i + 1, now)
            else
              s[oi + 1], s[oi + 2] = now, addsat(s[oi + 2], cost)
              return
            end
          else
            -- Inside a full entry.
            local j = i + 1
            while j < n and s[bl_at(P, s, j) + 2] >= m do j = j + 1 end
            if j < n then
              o = bl_at(P, s, j)
              local t = max(now, s[bl_at(P, s, j - 1) + 1])
              if s[o + 1] - t < span then s[o] = min(s[o], t) end
            elseif n < size then
              o = bl_insert(P, s, i + 1, s[oi + 1])
            else
              s[oi + 2] = addsat(s[oi + 2], cost)
              return
            end
          end
        end
        local k = min(cost, m - s[o + 2])
        s[o + 2] = s[o + 2] + k
        cost = cost - k
      end
    end
    local function bl_last(P, s, i, n, merged)
      if i == n - 1 then return s[2] end
      if merged then return s[4 + i] - s[3 + 2 * P[4] + i] end
      return s[4 + i]
    end
    local function bl_count(P, s, i, n, open, merged)
      if i == n - 1 then return open end
      if merged then return P[3] - s[3 + P[4] + i] end
      return P[3]
    end
    -- bl_expand returns the ring form of s; bl_pack writes ring r into s.
    local function bl_expand(P, s, words)
      local r = {}
      for j = 1, words do r[j] = 0 end
      local n, open, merged = bl_hdr(P, s)
      r[1] = n
      for i = 0, n - 1 do
        local o = 3 + 3 * i
        r[o], r[o + 1], r[o + 2] = s[3 + i], bl_last(P, s, i, n, merged), bl_count(P, s, i, n, open, merged)
      end
      return r
    end
    local function bl_pack(P, r, s, words)
      for j = 1, words do s[j] = 0 end
      local n, size = r[1], P[4]
      if n < 0 or n > size or r[2] < 0 or r[2] >= size then return end
      local merged = false
      for i = 0, n - 1 do
        local o = bl_at(P, r, i)
        s[3 + i] = r[o]
        local c = min(r[o + 2], MAXLIMIT)
        if i == n - 1 then
          s[2] = r[o + 1]
          bl_sethdr(s, n, c, merged)
        else
          local d, g = P[3] - c, r[bl_at(P, r, i + 1)] - r[o + 1]
          s[3 + size + i], s[3 + 2 * size + i] = d, g
          merged = merged or d ~= 0 or g ~= 0
        end
      end
    end
    ring = { record = ring_record, expand = bl_expand, pack = bl_pack }
    return ring
  end
  local lightform, lightread = lightfns()
  -- The short merged form: the header and the newest time as doubles, then
  -- as 4-byte unsigned integers each entry's first time below the newest,
  -- and for each closed entry (its gap to the next entry's first) * (2m +
  -- 1) + its count, then the byte 'c': 8n + 13 bytes for n entries (5 mod
  -- 8, so neither doubles nor the 'm' form) where the 'm' form takes 24n +
  -- 1. It is written only when every value fits in 32 bits and every count
  -- is at most 2m: with times in microseconds, entries within 71 minutes of
  -- the newest and gaps below 2^32 / (2m + 1) microseconds (70 s at m =
  -- 30). Other merged states keep the 'm' form.
  local U32, UCHUNK = 4294967296, 200 -- UCHUNK: values per struct call
  local function mergedc(P, s, n)
    local size, m, t = P[4], P[3], s[2]
    local w = { s[1], t }
    for i = 1, n do
      local d = t - s[2 + i]
      if d < 0 or d >= U32 then return nil end
      w[2 + i] = d
    end
    for i = 0, n - 2 do
      local c, gap = m - s[3 + size + i], s[3 + 2 * size + i]
      local x = gap * (2 * m + 1) + c
      if c < 0 or c > 2 * m or gap < 0 or x >= U32 then return nil end
      w[3 + n + i] = x
    end
    local k, parts = 2 * n - 1, { struct.pack('<dd', w[1], w[2]) }
    for i = 0, k - 1, UCHUNK do
      local j = min(UCHUNK, k - i)
      parts[#parts + 1] = struct.pack('<' .. string.rep('I4', j), unpack(w, 3 + i, 2 + i + j))
    end
    parts[#parts + 1] = 'c'
    return table.concat(parts)
  end
  -- frommergedc returns the state words of a value mergedc wrote, or nil.
  local function frommergedc(P, v, words)
    local n = (#v - 13) / 8
    local size, m = P[4], P[3]
    if n < 2 or n > size or n ~= floor(n) then return nil end
    local h, t, pos = struct.unpack('<dd', v)
    local rest = h - MARK
    if rest < 0 or rest % MERGED ~= n or floor(rest / MERGED) % 2 ~= 1 or t > MAXT or t < 0 then return nil end
    local w, k = {}, 2 * n - 1
    while #w < k do
      local vals = { struct.unpack('<' .. string.rep('I4', min(UCHUNK, k - #w)), v, pos) }
      pos = table.remove(vals)
      for j = 1, #vals do w[#w + 1] = vals[j] end
    end
    local s = {}
    for j = 1, words do s[j] = 0 end
    s[1], s[2] = h, t
    for i = 1, n do s[2 + i] = t - w[i] end
    for i = 0, n - 2 do
      local x = w[n + 1 + i]
      local gap = floor(x / (2 * m + 1))
      s[3 + size + i], s[3 + 2 * size + i] = m - (x - gap * (2 * m + 1)), gap
    end
    return s
  end
  -- tostored returns the stored form of s (used words) when it has a
  -- shorter one than its doubles: merged, short8 or blint; else nil.
  local function tostored(P, s, used, ttl, at)
    local h = s[1] - MARK
    if h < 0 then return nil end
    local n, c = h % MERGED, floor(h / CUNIT)
    if floor(h / MERGED) % 2 == 1 then
      -- Merged: the header, the newest time, n firsts, then the n - 1
      -- deficits and n - 1 gaps without the zeros between the regions.
      local size = P[4]
      if n < 1 or n > size or 3 * n >= used or 3 * n > 255 then return nil end
      -- Anything nonzero outside those (no script writes it) keeps the
      -- full form.
      local dlo, glo = 3 + size, 3 + 2 * size
      for j = 3 + n, used do
        if s[j] ~= 0 and (j < dlo or j > dlo + n - 2) and (j < glo or j > glo + n - 2) then return nil end
      end
      -- The short merged form 'c' (see mergedc) when every field fits.
      local c = mergedc(P, s, n)
      if c then return c end
      local w = { s[1], s[2] }
      for i = 1, n do w[2 + i] = s[2 + i] end
      for i = 0, n - 2 do w[3 + n + i], w[2 + 2 * n + i] = s[dlo + i], s[glo + i] end
      return struct.pack('<' .. string.rep('d', 3 * n), unpack(w, 1, 3 * n)) .. 'm'
    end
    return lightform(P[2], P[3], n, c, s[2], s[3], s[2 + n], used, ttl, at)
  end
  -- fromstored returns the state words of a value tostored wrote, or nil.
  local function fromstored(P, v, at, words)
    if #v % 8 == 5 and string.byte(v, #v) == 99 then -- 'c': short merged
      return frommergedc(P, v, words)
    end
    if #v % 8 == 1 and string.byte(v, #v) == 109 then -- 'm': merged
      local k = (#v - 1) / 8
      local n = k / 3
      if n < 1 or n > P[4] or n ~= floor(n) then return nil end
      local w, pos = {}, 1
      while #w < k do -- at most 255 values per struct.unpack
        local vals = { struct.unpack('<' .. string.rep('d', min(255, k - #w)), v, pos) }
        pos = table.remove(vals)
        for j = 1, #vals do w[#w + 1] = vals[j] end
      end
      local size, h = P[4], w[1] - MARK
      if h < 0 or h % MERGED ~= n or floor(h / MERGED) % 2 ~= 1 then return nil end
      local s = {}
      for j = 1, words do s[j] = 0 end
      for j = 1, 2 + n do s[j] = w[j] end
      for i = 0, n - 2 do s[3 + size + i], s[3 + 2 * size + i] = w[3 + n + i], w[2 + 2 * n + i] end
      return s
    end
    if #v > 20 then return nil end
    local n, c, t, f1, f2 = lightread(P[2], P[3], v, at)
    if not n then return nil end
    return { MARK + c * CUNIT + n, t, f1, f2 }
  end
  return {
    -- decide is Go's view, decide and append in one function (one closure
    -- per call instead of four).
    decide = function(P, s, now, cost, commit)
      local limit, window, m, size = P[1], P[2], P[3], P[4]
      local n, open, merged = bl_hdr(P, s)
      now = clamp(now)
      local drop, start, sum = 0, 0, 0
      if n > 0 then
        now = max(now, s[2])
        local cut = now - window
        -- Drop the entries whose last timestamp is at or before cut: entry
        -- i ends where entry i+1 starts (less its gap when merged), the
        -- newest at s[2].
        if not merged then
          while drop < n - 1 and s[4 + drop] <= cut do drop = drop + 1 end
          if drop == n - 1 and s[2] <= cut then drop = n end
        else
          while drop < n do
            local last = s[2]
            if drop < n - 1 then last = s[4 + drop] - s[3 + 2 * size + drop] end
            if last > cut then break end
            drop = drop + 1
          end
        end
        start = drop
        if start < n and s[3 + start] <= cut then start = start + 1 end
        if start < n then
          sum = (n - 1 - start) * m + open
          if merged then
            for i = start, n - 2 do sum = sum - s[3 + size + i] end
          end
        end
      end
      local reset = 0
      if start < n then reset = s[2 + n] + window - now end
      local bc = badcost(cost, limit)
      if bc then return 0, nonneg(limit - sum), reset, 0, 0, bc end
      if sum + cost > limit then
        local need, i = sum + cost - limit, start
        if not merged then
          i = min(start + idiv(need + m - 1, m) - 1, n - 1)
        else
          while i < n - 1 do
            need = need - (m - s[3 + size + i])
            if need <= 0 then break end
            i = i + 1
          end
        end
        return 0, nonneg(limit - sum), reset, s[3 + i] + window - now, 0, OVER
      end
      local first = now
      if drop < n and s[2 + n] > now - window and open + cost <= m then first = s[2 + n] end
      if commit then
        local add = cost
        if drop > 0 then
          local left = n - drop
          local regions = { 3 }
          if merged then regions = { 3, 3 + size, 3 + 2 * size } end
          for _, r in ipairs(regions) do
            for i = 0, left - 1 do s[r + i] = s[r + drop + i] end
            for i = left, n - 1 do s[r + i] = 0 end
          end
          n = left
          if n == 0 then open, merged = 0, false end
        end
        if n > 0 and s[2 + n] > now - window and open < m then
          local k = min(add, m - open)
          open, add = open + k, add - k
        end
        -- Closing the open entry leaves its deficit and gap at 0 (see Go).
        while add > 0 and n < size do
          local k = min(add, m)
          s[3 + n] = now
          n, open, add = n + 1, k, add - k
        end
        bl_sethdr(s, n, open + add, merged)
        s[2] = now
      end
      return 1, limit - sum - cost, first + window - now, 0, 0, OK
    end,
    tostored = tostored,
    fromstored = fromstored,
    -- recordall merges a key's ne events (times ts, costs cs) as Record
    -- one after another would. An event in time order that leaves a state
    -- of at most one entry, not merged, with at most m units is merged in
    -- place, as the ring form would merge it: a key with a few events
    -- never builds the ring. The first other event expands the state into
    -- the ring form once; the rest merge there and it is packed back once.
    recordall = function(P, s, ts, cs, ne)
      local W, m = P[2], P[3]
      local R, r, words
      for k = 1, ne do
        local cost = cs[k]
        if cost >= 1 and not r then
          local now = clamp(ts[k])
          local n, open, merged = bl_hdr(P, s)
          if n and not merged and n <= 1 and (n == 0 or now >= s[2]) then
            local first = now
            if n == 1 and s[3] > now - W then
              first = s[3]
            else
              open = 0
            end
            if open + cost <= m then
              for j = 4, #s do s[j] = 0 end
              s[1], s[2], s[3] = MARK + (open + cost) * CUNIT + 1, now, first
              cost = 0
            end
          end
          if cost >= 1 then
            R, words = ringfns(), 2 + 3 * P[4]
            r = R.expand(P, s, words)
          end
        end
        if r and cost >= 1 then R.record(P, r, ts[k], cost) end
      end
      if r then R.pack(P, r, s, words) end
    end,
    -- fix runs on a freshly loaded state, which load did not pad: it pads
    -- the words Decide reads (all of them for a merged key), clears a
    -- state no bounded-log wrote, and converts the ring form, returning
    -- true so the caller stores the converted state.
    fix = function(P, s, words)
      for j = #s + 1, 2 do s[j] = 0 end
      local h = s[1]
      if h ~= 0 and h < MARK then
        for j = #s + 1, words do s[j] = 0 end
        local r = {}
        for j = 1, words do r[j] = s[j] end
        ringfns().pack(P, r, s, words)
        return true
      end
      local n, _, merged = bl_hdr(P, s)
      if not n then
        for j = 1, #s do s[j] = 0 end
        return false
      end
      local upto = 2 + n
      if merged then upto = words end
      for j = #s + 1, upto do s[j] = 0 end
      return false
    end,
  }
end
end

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

local function load(key, words, code, P, alg)
  local v = fetched[key]
  if v == nil then v = redis.call('GET', key) end
  local s = {}
  if not v then v = '' end
  if alg.fromstored and #v > 0 and (#v <= 20 or #v % 8 == 1 or #v % 8 == 5) then
    local st = alg.fromstored(P, v, anchor, words)
    if st then
      if op == 's' then raw[key] = packwords(st) end
      return st, nil, #st < words -- an integer form is valid; fix checks a merged one
    end
  end
  if op == 's' then raw[key] = v end
  if #v % 8 ~= 0 or #v > 8 * words then
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
  if code ~= 8 then -- bounded-log pads what it reads (see its fix)
    for j = stored + 1, words do s[j] = 0 end
  end
  return s
end

local function save(key, s, ttl, code, P, alg)
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
  if alg.fix and not valid and alg.fix(P, s, words) then raw[key] = save(key, s, ttl, code, P, alg) end
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

-- Op 'i' decides each key on its own, as if each were a call of op 'd'
-- with that key alone, one after another: the key's state is read, the
-- decision made and, if allowed, the state written before the next key is
-- read, so a key named twice sees its first decision. It lets the store
-- put concurrent decisions for different callers in one call. ARGV[2] is
-- '' (the server's clock for every key) or 't' (each key's time follows its
-- cost). Then groups of keys of one limit, in the order of KEYS: the
-- limit's header (code, ttl_ms, words, nparams, params...) once, the
-- number of keys in the group, and per key its cost (and time). A key
-- whose stored value cannot be read gets reason code -1 and nothing else
-- happens to it.
if op == 'i' then
  local pertime = ARGV[2] ~= ''
  -- keycost reads a key's cost and, with pertime, its time into now.
  local function keycost()
    local cost = nextarg()
    if pertime then now = nextarg() end
    return cost
  end
  local out, i, nargs = {}, 0, #ARGV
  fetch()
  -- decide decides key at now with the algorithm's load, decide and save.
  local function decide(key, cost, code, ttl, words, P, alg)
    if alg.fromstored then anchor = clamp(now) end
    local s = loadfixed(key, words, code, ttl, P, alg)
    local n = #out
    if not s then
      out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5], out[n + 6] = 0, 0, 0, 0, 0, -1
      return
    end
    local a, rem, reset, retry, delay, reason = alg.decide(P, s, now, cost, true)
    out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5], out[n + 6] = a, rem, reset, retry, delay, reason
    if a == 1 then save(key, s, ttl, code, P, alg) end
  end
  while pos <= nargs do
    local code, ttl, words, np = nextarg(), nextarg(), nextarg(), nextarg()
    -- The inline paths below build no algorithm; the generic one does.
    local alg = code == 1 or code == 8 or build(code)
    if not alg then return redis.error_reply('floodgate: unknown algorithm code ' .. tostring(code)) end
    local P = {}
    for j = 1, np do P[j] = nextarg() end
    local count = nextarg()
    if code == 1 and words == 2 then
      -- fixed-window, inline: its decide and its load and save of two
      -- doubles (trailing zeros left out) without the generic code around
      -- them, which cost more than the decision (BenchmarkSharedCall).
      local limit, window = P[1], P[2]
      for _ = 1, count do
        i = i + 1
        local key, cost = KEYS[i], keycost()
        local v, w, n, o = fetched[key], 0, 0, #out
        local len = v and #v or 0
        if len == 16 then
          w, n = struct.unpack('<dd', v)
        elseif len == 8 then
          w = struct.unpack('<d', v)
        end
        if len ~= 0 and len ~= 8 and len ~= 16 then
          out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5], out[o + 6] = 0, 0, 0, 0, 0, -1
        else
          local t = clamp(now)
          local k = idiv(t, window)
          if k < w then
            k, t = w, w * window
          elseif k > w then
            n = 0
          end
          local reset = (k + 1) * window - t
          local bc = badcost(cost, limit)
          if bc then
            out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5], out[o + 6] = 0, nonneg(limit - n), reset, 0, 0, bc
          elseif n + cost > limit then
            out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5], out[o + 6] = 0, nonneg(limit - n), reset, reset, 0, OVER
          else
            n = n + cost
            out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5], out[o + 6] = 1, limit - n, reset, 0, 0, OK
            local st = ''
            if n ~= 0 then
              st = struct.pack('<dd', k, n)
            elseif k ~= 0 then
              st = struct.pack('<d', k)
            end
            setkey(key, st, ttl)
            fetched[key] = st
          end
        end
      end
      count = 0
    end
    if code == 8 and np == 4 and words == 2 + 3 * P[4] then
      -- bounded-log, inline for light keys: no key, the short8 and blint
      -- forms, and doubles of one or two entries not merged. Such a state
      -- is read into numbers (n entries, the open count c, the newest time
      -- t, the entries' first times f1, f2), decided as decide does on it
      -- and written in the form tostored would choose, without the state
      -- table, the closures and the padding of the generic path, which
      -- cost more than the decision (BenchmarkSharedCall). Any other key,
      -- or a request that would open a third entry, goes the generic way
      -- (decide above), which reads the key afresh: nothing was written.
      local limit, W, m, size = P[1], P[2], P[3], P[4]
      local lightform, lightread = lightfns()
      for _ = 1, count do
        i = i + 1
        local key, cost = KEYS[i], keycost()
        local at, v = clamp(now), fetched[key]
        local n, c, t, f1, f2 = 0, 0, 0, 0, 0
        if v == nil then
          n = nil
        elseif v and v ~= '' then
          n = nil
          local len = #v
          if len == 24 or len == 32 then
            local h
            if len == 24 then
              h, t, f1 = struct.unpack('<ddd', v)
              f2 = f1
            else
              h, t, f1, f2 = struct.unpack('<dddd', v)
            end
            local rest = h - MARK
            -- A header of len / 8 - 2 entries, not merged, and times in
            -- order (any other doubles take the generic path).
            if rest >= 0 and h < 2 * MARK and rest % MERGED == len / 8 - 2 and floor(rest / MERGED) % 2 == 0
              and f1 >= 0 and f1 <= f2 and f2 <= t and t <= MAXT then
              n, c = len / 8 - 2, floor(rest / CUNIT)
            end
          elseif len <= 20 and string.byte(v, len) >= 48 and string.byte(v, len) <= 57 then
            n, c, t, f1, f2 = lightread(W, m, v, at)
            f2 = f2 or f1
          end
        end
        local o = #out
        if n then
          -- decide, on n <= 2 entries not merged: entry 1 ends where entry
          -- 2 starts, the newest at t; fl is the newest entry's first.
          local T, drop, start, sum, fl = at, 0, 0, 0, f1
          if n == 2 then fl = f2 end
          if n > 0 then
            T = max(T, t)
            local cut = T - W
            if n == 2 and f2 <= cut then drop = 1 end
            if drop == n - 1 and t <= cut then drop = n end
            start = drop
            if start < n then
              local fs = f1
              if start == 1 then fs = f2 end
              if fs <= cut then start = start + 1 end
            end
            if start < n then sum = (n - 1 - start) * m + c end
          end
          local reset = 0
          if start < n then reset = fl + W - T end
          local bc = badcost(cost, limit)
          if bc then
            out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5], out[o + 6] = 0, nonneg(limit - sum), reset, 0, 0, bc
          elseif sum + cost > limit then
            local e, fe = min(start + idiv(sum + cost - limit + m - 1, m) - 1, n - 1), f1
            if e == 1 then fe = f2 end
            out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5], out[o + 6] = 0, nonneg(limit - sum), reset, fe + W - T, 0, OVER
          else
            local first = T
            if drop < n and fl > T - W and c + cost <= m then first = fl end
            -- append: drop, fill the open entry, then open new ones.
            local add, open = cost, c
            if drop > 0 then
              n = n - drop
              f1 = f2
              if n == 0 then open = 0 end
            end
            fl = f1
            if n == 2 then fl = f2 end
            if n > 0 and fl > T - W and open < m then
              local k = min(add, m - open)
              open, add = open + k, add - k
            end
            while add > 0 and n < 2 do
              local k = min(add, m)
              if n == 0 then f1 = T else f2 = T end
              n, open, add = n + 1, k, add - k
            end
            if add > 0 then
              n = nil -- a third entry
            else
              open = min(open, MAXLIMIT)
              local h = MARK + open * CUNIT + n
              fl = f1
              if n == 2 then fl = f2 end
              local used = 2 + n
              if used == 4 and f2 == 0 then used = 3 end
              if used == 3 and f1 == 0 then used = 2 end
              if used == 2 and T == 0 then used = 1 end
              local st = lightform(W, m, n, open, T, f1, fl, used, ttl, at)
              if st then
              elseif used == 4 then
                st = struct.pack('<dddd', h, T, f1, f2)
              elseif used == 3 then
                st = struct.pack('<ddd', h, T, f1)
              elseif used == 2 then
                st = struct.pack('<dd', h, T)
              else
                st = struct.pack('<d', h)
              end
              setkey(key, st, ttl)
              fetched[key] = st
              out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5], out[o + 6] = 1, limit - sum - cost, first + W - T, 0, 0, OK
            end
          end
        end
        if not n then
          if alg == true then alg = build(code) end
          decide(key, cost, code, ttl, words, P, alg)
        end
      end
      count = 0
    end
    if alg == true and count > 0 then alg = build(code) end
    for _ = 1, count do
      i = i + 1
      decide(KEYS[i], keycost(), code, ttl, words, P, alg)
    end
  end
  if i ~= #KEYS then return redis.error_reply('floodgate: op i got ' .. #KEYS .. ' keys and ' .. i .. ' costs') end
  return out
end

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

local replay = false
if op == 'S' then
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
    end
  end
  if i ~= #KEYS then return redis.error_reply('floodgate: op s got ' .. #KEYS .. ' keys and ' .. i .. ' states') end
  return out
end

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
