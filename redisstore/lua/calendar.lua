-- 9: fixed-window over calendar periods (Go's calendarWindow). P: limit,
-- carry-over cap, then the starts of five periods, which the caller
-- computed from its own clock with the zone's rules (the script has no
-- time zone database): two before the caller's period, its own, two after.
-- A clock up to a period away from the caller's still finds its period and
-- the one before it. State: the period's start, the units counted in it,
-- the units carried into it. decide reports the carry in the delay field
-- (always 0 otherwise), from which the caller makes the decision's limit.
if code == 9 then
  -- cal_period returns the start of the period before t's, t's start and
  -- end, for t within the five periods (a t outside them is taken to be in
  -- the nearest of the three whose predecessor is known).
  local function cal_period(P, t)
    if t < P[5] then return P[3], P[4], P[5] end
    if t < P[6] then return P[4], P[5], P[6] end
    return P[5], P[6], P[7]
  end
  -- cal_roll returns the period of now and the count and carry as of it
  -- (see Go's roll), with now moved to the state's period if the clock
  -- went back before it.
  local function cal_roll(P, s, now)
    local t = clamp(now)
    local prev, start, fin = cal_period(P, t)
    local n, c = s[2], s[3]
    if s[1] > start then
      t = s[1]
      prev, start, fin = cal_period(P, t)
    elseif s[1] < start then
      local left = 0
      if s[1] == prev and n > 0 then left = nonneg(P[1] + c - n) end
      n, c = 0, min(P[2], left)
    end
    return start, fin, t, n, c
  end
  return {
    decide = function(P, s, now, cost, commit)
      local start, fin, t, n, c = cal_roll(P, s, now)
      local limit = P[1] + c
      local reset = fin - t
      local bc = badcost(cost, limit)
      if bc then return 0, nonneg(limit - n), reset, 0, c, bc end
      if n + cost > limit then return 0, nonneg(limit - n), reset, reset, c, OVER end
      if commit then s[1], s[2], s[3] = start, n + cost, c end
      return 1, limit - n - cost, reset, 0, c, OK
    end,
    record = function(P, s, now, cost)
      if cost < 1 then return end
      local _, start = cal_period(P, clamp(now))
      if s[1] > start then return end
      local st, _, _, n, c = cal_roll(P, s, now)
      s[1], s[2], s[3] = st, addsat(n, min(cost, MAXLIMIT)), c
    end,
  }
end

