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

