-- 10: gubernator's token and leaky buckets (Go's algorithm/gubernator),
-- with each request's own parameters. Unlike the other algorithms it
-- counts time in milliseconds, as gubernator does. P: leaky (0/1), limit,
-- duration, burst, behavior, created_at (0: now), then a
-- DURATION_IS_GREGORIAN request's period: the clock's reading, the
-- period's last millisecond, its length, invalid (0/1); the version (0
-- v2.21.0, 1 v2.13.0), max_wait and the wait ceiling (ms). State: kind (0
-- none, 1 token, 2 leaky), expiry, limit, duration, remaining (a leaky
-- bucket's is fractional), creation (token) or last leak (leaky), status
-- (token: 1 over limit) or burst (leaky). Every decision is applied
-- (allowed, with reason OVER for gubernator's OVER_LIMIT, NEVERFITS and
-- SCHEDULED for v2.21.0's max_wait answers); a key expires with its state
-- (expiry).
if code == 10 then
  local GREGORIAN, RESETREM, DRAIN = 4, 8, 32
  local MAXRESET = 8796093022208       -- 2^43 ms: reset_time - created_at saturates
  local MAXREM = 4503599627370496      -- 2^52: a token bucket's remaining saturates
  local I63 = 9223372036854775808      -- 2^63
  local last = 0 -- the latest decision's time (ms): a key's TTL counts from it

  -- has reports whether flag (a power of two) is set in behavior b, as Go's
  -- b&flag on a two's complement b.
  local function has(b, flag) return floor(b / flag) % 2 == 1 end
  -- trunc is Go's int64(x) on amd64: toward zero, and -2^63 for NaN and
  -- values out of range.
  local function trunc(x)
    if x ~= x or x >= I63 or x < -I63 then return -I63 end
    if x < 0 then return -floor(-x) end
    return floor(x)
  end
  -- sub is a - b as Go's int64 wraps it: b is -2^63 when a fractional
  -- remaining overflowed (trunc), then only its sign and size matter (mulsat).
  local function sub(a, b)
    local d = a - b
    if d >= I63 then d = d - 2 * I63 end
    return d
  end
  local function mulsat(a, b)
    local f = a * b
    if f >= MAXRESET then return MAXRESET end
    if f <= -MAXRESET then return -MAXRESET end
    return f
  end
  local function wipe(s) for i = 1, 7 do s[i] = 0 end end
  local function answer(over, limit, remaining, reset, created)
    local off = min(max(reset - created, -MAXRESET), MAXRESET)
    local reason = OK
    if over then reason = OVER end
    return 1, remaining, off * 1000, 0, 0, reason
  end
  local function badperiod(P) return 1, 0, 0, 0, 0, BADPERIOD end
  -- answer2 is answer with a reason code and a retry_after (ms).
  local function answer2(reason, remaining, reset, created, retry)
    local off = min(max(reset - created, -MAXRESET), MAXRESET)
    return 1, remaining, off * 1000, retry * 1000, 0, reason
  end
  -- snap, whole, satms and fullat are Go's snapToZero, wholeTokens,
  -- satMillis and fullAt (v2.21.0's leaky bucket).
  local function snap(x)
    if math.abs(x) < 1e-9 then return 0 end
    return x
  end
  local function whole(x) return trunc(x + 1e-9) end
  local function satms(f) return trunc(min(max(f, -MAXRESET), MAXRESET)) end
  local function fullat(updated, burst, rem, rate)
    local ahead = math.ceil(updated + (burst - rem) * rate)
    return updated + satms(ahead - updated)
  end
  -- extend is gubernator's extendDebtExpiry.
  local function extend(s, now, duration, rate)
    s[2] = max(max(s[2], now + duration), fullat(s[6], s[7], s[5], rate))
  end

  -- newtoken is gubernator's tokenBucketNewItem (Go's newToken).
  local function newtoken(P, s, b, created, hits)
    local limit, duration = P[2], P[3]
    wipe(s)
    local expire = created + duration
    if has(b, GREGORIAN) then
      if P[10] == 1 then return badperiod(P) end
      expire = P[8]
    end
    local remaining, over = limit - hits, false
    if hits > limit then remaining, over = limit, true end
    s[1], s[2], s[3], s[4] = 1, expire, limit, duration
    s[5], s[6], s[7] = min(remaining, MAXREM), created, 0
    return answer(over, limit, remaining, expire, created)
  end

  -- relimit and retime are what both versions' token buckets do to a live
  -- item: take the request's limit (moving the remaining count by the
  -- change), then its duration. retime returns the reset_time, or nil when
  -- the period is invalid.
  local function relimit(P, s)
    local limit = P[2]
    if s[3] ~= limit then
      s[5] = min(max(s[5] + limit - s[3], 0), MAXREM)
      s[3] = limit
    end
  end
  local function retime(P, s, b, created)
    local duration = P[3]
    if s[4] == duration then return s[2] end
    local expire = s[6] + duration
    if has(b, GREGORIAN) then
      if P[10] == 1 then return nil end
      expire = P[8]
    end
    if expire <= created then
      expire = created + duration
      s[6] = created
      s[5] = s[3]
    end
    s[2], s[4] = expire, duration
    return expire
  end

  -- token221 is gubernator v2.21.0's tokenBucket (Go's gubReq.token221).
  local function token221(P, s, b, created, hits)
    local limit = P[2]
    if s[1] ~= 0 and has(b, RESETREM) then
      wipe(s)
      return answer(false, limit, limit, 0, created)
    end
    if s[1] ~= 1 then return newtoken(P, s, b, created, hits) end
    relimit(P, s)
    local reset = retime(P, s, b, created)
    if reset == nil then return badperiod(P) end
    local remaining = s[5]
    if hits == 0 then
      if remaining ~= 0 then s[7] = 0 end
      return answer(remaining == 0 and s[7] == 1, limit, remaining, reset, created)
    elseif remaining == 0 and hits > 0 then
      s[7] = 1
      return answer(true, limit, remaining, reset, created)
    end
    s[7] = 0
    local over = false
    if remaining == hits then
      s[5], remaining = 0, 0
    elseif hits > remaining then
      over = true
      if has(b, DRAIN) then s[5], remaining = 0, 0 end
    else
      s[5] = min(s[5] - hits, MAXREM)
      remaining = s[5]
    end
    return answer(over, limit, remaining, reset, created)
  end

  -- token is gubernator v2.13.0's tokenBucket (Go's gubReq.token).
  local function token(P, s, b, created, hits)
    local limit = P[2]
    if s[1] ~= 0 and has(b, RESETREM) then
      wipe(s)
      return answer(false, limit, limit, 0, created)
    end
    if s[1] ~= 1 then return newtoken(P, s, b, created, hits) end
    relimit(P, s)
    local over, remaining = s[7] == 1, s[5]
    local reset = retime(P, s, b, created)
    if reset == nil then return badperiod(P) end
    if hits == 0 then
      -- the stored status, unchanged
    elseif remaining == 0 and hits > 0 then
      over = true
      s[7] = 1
    elseif s[5] == hits then
      s[5], remaining = 0, 0
    elseif hits > s[5] then
      over = true
      if has(b, DRAIN) then s[5], remaining = 0, 0 end
    else
      s[5] = min(s[5] - hits, MAXREM)
      remaining = s[5]
    end
    return answer(over, limit, remaining, reset, created)
  end

  -- leaky is gubernator v2.13.0's leakyBucket (Go's gubReq.leaky and newLeaky).
  local function leaky(P, s, b, created, hits)
    local limit, duration = P[2], P[3]
    local burst = P[4]
    if burst == 0 then burst = limit end
    if s[1] ~= 2 then
      wipe(s)
      local rate = duration / limit
      if has(b, GREGORIAN) then
        if P[10] == 1 then return badperiod(P) end
        duration = P[8] - P[7]
      end
      local irate = trunc(rate)
      local remaining, over = burst - hits, false
      if hits > burst then remaining, over = 0, true end
      s[1], s[2], s[3], s[4] = 2, created + duration, limit, duration
      s[5], s[6], s[7] = remaining, created, burst
      return answer(over, limit, remaining, created + mulsat(limit - remaining, irate), created)
    end
    local rem = s[5]
    if has(b, RESETREM) then rem = burst end
    if s[7] ~= burst then
      if burst > trunc(rem) then rem = burst end
      s[7] = burst
    end
    s[3], s[4] = limit, duration
    local rate = duration / limit
    if has(b, GREGORIAN) then
      if P[10] == 1 then
        s[5] = rem
        return badperiod(P)
      end
      rate = P[9] / limit
      duration = P[8] - P[7]
    end
    if hits ~= 0 then s[2] = created + duration end
    local leak = (created - s[6]) / rate
    if trunc(leak) > 0 then
      rem = rem + leak
      s[6] = created
    end
    if trunc(rem) > burst then rem = burst end
    local irate = trunc(rate)
    local remaining = trunc(rem)
    local function reset(r) return created + mulsat(sub(limit, r), irate) end
    if remaining == 0 and hits > 0 then
      s[5] = rem
      return answer(true, limit, remaining, reset(remaining), created)
    elseif remaining == hits then
      s[5] = 0
      return answer(false, limit, 0, reset(0), created)
    elseif hits > remaining then
      local at = reset(remaining)
      if has(b, DRAIN) then rem, remaining = 0, 0 end
      s[5] = rem
      return answer(true, limit, remaining, at, created)
    elseif hits == 0 then
      s[5] = rem
      return answer(false, limit, remaining, reset(remaining), created)
    end
    rem = rem - hits
    s[5] = rem
    remaining = trunc(rem)
    return answer(false, limit, remaining, reset(remaining), created)
  end

  -- newleaky221 is gubernator v2.21.0's leakyBucketNewItem (Go's newLeaky221).
  local function newleaky221(P, s, b, created, hits, nowms, burst)
    local limit, duration, maxwait = P[2], P[3], P[12]
    local at = created
    if maxwait > 0 then at = nowms end
    local irate = trunc(duration / limit)
    if has(b, GREGORIAN) then
      if P[10] == 1 then return badperiod(P) end
      duration = P[8] - P[7]
    end
    if maxwait > 0 and hits > burst then
      return answer2(NEVERFITS, burst, at + mulsat(limit - burst, irate), created, 0)
    end
    local remaining, reason = min(burst, burst - hits), OK
    if hits > burst then remaining, reason = 0, OVER end
    s[1], s[2], s[3], s[4] = 2, at + duration, limit, duration
    s[5], s[6], s[7] = remaining, at, burst
    return answer2(reason, remaining, at + mulsat(limit - remaining, irate), created, 0)
  end

  -- schedule is gubernator v2.21.0's scheduleHits (Go's gubReq.schedule):
  -- remaining and at are the answer without hits.
  local function schedule(P, s, hits, now, duration, rate, indebt, created, remaining, at)
    local limit, burst = P[2], s[7]
    if hits > burst or not (rate > 0) or rate == math.huge then
      return answer2(NEVERFITS, remaining, at, created, 0)
    end
    local rem = s[5]
    if hits <= whole(rem) then
      s[5] = snap(rem - hits)
      local r = max(0, whole(s[5]))
      if indebt then extend(s, now, duration, rate) end
      return answer2(OK, r, now + mulsat(limit - r, trunc(rate)), created, 0)
    end
    local need = (max(s[6], now) - now) + (hits - rem) * rate
    local wait = max(1, satms(math.ceil(need - 1e-6)))
    if wait > min(P[12], P[13]) then return answer2(OVER, remaining, at, created, wait) end
    s[5] = rem - hits
    local full = fullat(s[6], burst, s[5], rate)
    extend(s, now, duration, rate)
    return answer2(SCHEDULED, 0, full, created, wait)
  end

  -- leaky221 is gubernator v2.21.0's leakyBucket (Go's gubReq.leaky221).
  -- The balance lives in s[5] throughout.
  local function leaky221(P, s, b, created, hits, nowms)
    local limit, duration, maxwait = P[2], P[3], P[12]
    local burst = P[4]
    if burst == 0 then burst = limit end
    if s[1] ~= 2 then
      wipe(s)
      return newleaky221(P, s, b, created, hits, nowms, burst)
    end
    local at = created
    if maxwait > 0 or s[5] < 0 then at = nowms end
    s[3], s[4] = limit, duration
    local rate = duration / limit
    if has(b, GREGORIAN) then
      if P[10] == 1 then return badperiod(P) end
      rate = P[9] / limit
      duration = P[8] - P[7]
    end
    local indebt = s[5] < 0 and not has(b, RESETREM)
    local burstchanged = s[7] ~= burst
    if hits ~= 0 and not indebt then s[2] = at + duration end
    if at > s[6] then
      local leak = (at - s[6]) / rate
      if leak == leak then s[5] = s[5] + leak end
      s[6] = at
    end
    if burstchanged then
      if snap(s[5]) >= 0 then s[5] = max(0, s[5] + (burst - s[7])) end
      s[7] = burst
    end
    if has(b, RESETREM) then s[5] = burst end
    s[5] = snap(min(burst, s[5]))
    local irate = trunc(rate)
    local function reset(r) return at + mulsat(sub(limit, r), irate) end
    local function body()
      local rem = s[5]
      local w = whole(rem)
      local remaining, when = max(0, w), reset(w)
      if rem < 0 then when = fullat(s[6], burst, rem, rate) end
      if hits == 0 then return answer2(OK, remaining, when, created, 0) end
      if maxwait > 0 then return schedule(P, s, hits, at, duration, rate, indebt, created, remaining, when) end
      if hits < 0 and rem < 0 then
        extend(s, at, duration, rate)
        return answer2(OK, remaining, when, created, 0)
      end
      if hits > w then
        if has(b, DRAIN) then s[5], remaining = min(rem, 0), 0 end
        return answer2(OVER, remaining, when, created, 0)
      end
      s[5] = snap(min(burst, rem - hits))
      local r = whole(s[5])
      if indebt then extend(s, at, duration, rate) end
      return answer2(OK, r, reset(r), created, 0)
    end
    local res = { body() }
    -- gubernator extends a debt's expiry after everything else.
    if indebt and burstchanged then extend(s, at, duration, rate) end
    return unpack(res)
  end

  -- decide is Go's gubernator.decide: now in µs judges expiry; the
  -- arithmetic runs at created (ms; 0 means now's millisecond).
  local function decide(P, s, now, hits, b, created)
    local nowms = idiv(max(now, 0), 1000)
    last = nowms
    if created == 0 then created = nowms end
    if (s[1] ~= 1 and s[1] ~= 2) or s[2] < nowms then wipe(s) end
    if P[11] == 1 then
      if P[1] == 1 then return leaky(P, s, b, created, hits) end
      return token(P, s, b, created, hits)
    end
    if P[1] == 1 then return leaky221(P, s, b, created, hits, nowms) end
    return token221(P, s, b, created, hits)
  end

  return {
    decide = function(P, s, now, cost, commit)
      return decide(P, s, now, cost, P[5], P[6])
    end,
    -- record applies hits as a gubernator owner applies what GLOBAL peers
    -- forward: with DRAIN_OVER_LIMIT, at the event's time.
    record = function(P, s, now, cost)
      local b = P[5]
      if not has(b, DRAIN) then b = b + DRAIN end
      decide(P, s, now, cost, b, 0)
    end,
    -- expiry returns a key's TTL (ms): until its state expires, seen from
    -- the latest decision's time, and ttl (the store's slack) beyond.
    expiry = function(P, s, ttl)
      return max(s[2] - last, 0) + 1 + ttl
    end,
  }
end
