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

