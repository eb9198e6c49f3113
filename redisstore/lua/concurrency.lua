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

