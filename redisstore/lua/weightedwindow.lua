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

