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

