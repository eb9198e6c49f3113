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

