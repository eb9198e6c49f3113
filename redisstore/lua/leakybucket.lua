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

