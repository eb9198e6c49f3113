-- Codes above 16: the algorithm code - 16 with holds (quota leases),
-- mirroring package algorithm's held line for line. P: the inner
-- algorithm's params, then its state words, the most holds, the hold ttl
-- (µs). State: the inner words, the number of holds n, then n holds of
-- HOLDW words: the lease id's halves, expiry, units held, the holder's
-- target, and seq*2 (+1 if the holder's last cost was allowed).
local HOLDW = 6
local MAXSEQ = 2251799813685247 -- lease.MaxSeq
local LEASETOP = 281474976710656 -- 2^48: each half of a lease id is below it
local function holdfns(inner)
  local irecord = inner.record
  if not irecord then
    irecord = function(P, s, now, cost) inner.recordall(P, s, { now }, { cost }, 1) end
  end
  local function iw(P) return P[#P - 2] end
  local function at(P, i) return P[#P - 2] + 2 + HOLDW * i end
  local function count(P, s)
    local b = P[#P - 2] + 1
    local n = s[b]
    if n < 0 or n > P[#P - 1] then
      for j = b, b + HOLDW * P[#P - 1] do s[j] = 0 end
      return 0
    end
    return n
  end
  local function drop(P, s, i)
    local b = iw(P) + 1
    local last = s[b] - 1
    local o, l = at(P, i), at(P, last)
    for k = 0, HOLDW - 1 do s[o + k] = s[l + k] end
    for k = 0, HOLDW - 1 do s[l + k] = 0 end
    s[b] = last
  end
  -- expire records every hold whose expiry is at or before now in full,
  -- at now, and drops it.
  local function expire(P, s, now)
    local i = 0
    while i < count(P, s) do
      local o = at(P, i)
      if s[o + 2] <= now then
        if s[o + 3] > 0 then irecord(P, s, now, s[o + 3]) end
        drop(P, s, i)
      else
        i = i + 1
      end
    end
  end
  local function sums(P, s, skip)
    local units, targets, first = 0, 0, 0
    for i = 0, count(P, s) - 1 do
      local o = at(P, i)
      if i ~= skip then
        units = addsat(units, s[o + 3])
        targets = addsat(targets, s[o + 4])
      end
      if first == 0 or s[o + 2] < first then first = s[o + 2] end
    end
    return units, targets, first
  end
  local function find(P, s, hi, lo)
    for i = 0, count(P, s) - 1 do
      local o = at(P, i)
      if s[o] == hi and s[o + 1] == lo then return i end
    end
    return -1
  end
  local function left(a, rem)
    if a == 1 then return rem + 1 end
    return rem
  end
  local function decide(P, s, now, cost, commit)
    local units, _, first = sums(P, s, -1)
    if units == 0 then return inner.decide(P, s, now, cost, commit) end
    local limit = P[1]
    local bc = badcost(cost, limit)
    if bc or cost + units > limit then
      local a, rem, reset = inner.decide(P, s, now, 1, false)
      rem = nonneg(left(a, rem) - units)
      if bc then return 0, rem, reset, 0, 0, bc end
      return 0, rem, reset, max(first - clamp(now), 1), 0, OVER
    end
    local a, rem, reset, retry, delay, reason = inner.decide(P, s, now, cost + units, false)
    if a ~= 1 then return a, nonneg(rem - units), reset, retry, delay, reason end
    if commit then
      a, rem, reset, retry, delay, reason = inner.decide(P, s, now, cost, true)
      rem = nonneg(rem - units)
    end
    return a, rem, reset, retry, delay, reason
  end
  -- look describes the key without deciding: allowed, what is left.
  local function look(P, s, now)
    local a, rem, reset, _, delay = decide(P, s, now, 1, false)
    return 1, left(a, rem), reset, 0, delay, OK
  end
  return {
    decide = function(P, s, now, cost, commit)
      if commit then expire(P, s, now) else count(P, s) end
      return decide(P, s, now, cost, commit)
    end,
    record = function(P, s, now, cost)
      expire(P, s, now)
      irecord(P, s, now, cost)
    end,
    -- hold is algorithm's held.Hold: six decision values, then the units
    -- held, granted, the µs they stay held, repeat (0/1).
    hold = function(P, s, now, cost, hi, lo, seq, spent, target)
      if (hi == 0 and lo == 0) or hi < 0 or lo < 0 or hi >= LEASETOP or lo >= LEASETOP or seq < 1 or seq > MAXSEQ or
        spent < 0 or target < 0 or cost < 0 then
        return 0, 0, 0, 0, 0, BADCOST, 0, 0, 0, 0
      end
      expire(P, s, now)
      local i = find(P, s, hi, lo)
      if i >= 0 then
        local o = at(P, i)
        if seq <= floor(s[o + 5] / 2) then
          local a, rem, reset, retry, delay, reason = look(P, s, now)
          if cost > 0 and s[o + 5] % 2 == 0 then a, reason = 0, OVER end
          return a, rem, reset, retry, delay, reason, s[o + 3], 0, s[o + 2] - clamp(now), 1
        end
        if spent > 0 then
          irecord(P, s, now, min(spent, P[1]))
          s[o + 3] = s[o + 3] - min(spent, s[o + 3])
        end
        if target == 0 then
          drop(P, s, i)
          i = -1
        end
      end
      local a, rem, reset, retry, delay, reason = look(P, s, now)
      if cost > 0 then a, rem, reset, retry, delay, reason = decide(P, s, now, cost, true) end
      if target == 0 then return a, rem, reset, retry, delay, reason, 0, 0, 0, 0 end
      target = min(target, P[1])
      local own = 0
      if i >= 0 then own = s[at(P, i) + 3] end
      local _, targets = sums(P, s, i)
      local free = rem
      if a ~= 1 then free = 0 end
      local add, want = 0, target - own
      if want > 0 and free > 1 then add = min(want, (muldiv(free, target, 2 * addsat(target, targets)))) end
      if i < 0 then
        if add == 0 or count(P, s) >= P[#P - 1] then return a, rem, reset, retry, delay, reason, 0, 0, 0, 0 end
        i = s[iw(P) + 1]
        s[iw(P) + 1] = i + 1
        local o = at(P, i)
        s[o], s[o + 1] = hi, lo
      end
      local o = at(P, i)
      s[o + 2], s[o + 3], s[o + 4], s[o + 5] = clamp(now) + P[#P], s[o + 3] + add, target, 2 * seq
      if a == 1 and cost > 0 then s[o + 5] = s[o + 5] + 1 end
      return a, nonneg(rem - add), reset, retry, delay, reason, s[o + 3], add, P[#P], 0
    end,
  }
end
do
  local plain = build
  build = function(code)
    if code > 16 then
      local inner = plain(code - 16)
      if not inner then return nil end
      return holdfns(inner)
    end
    return plain(code)
  end
end
