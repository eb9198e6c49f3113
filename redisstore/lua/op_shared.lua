-- Op 'i' decides each key on its own, as if each were a call of op 'd'
-- with that key alone, one after another: the key's state is read, the
-- decision made and, if allowed, the state written before the next key is
-- read, so a key named twice sees its first decision. It lets the store
-- put concurrent decisions for different callers in one call. ARGV[2] is
-- '' (the server's clock for every key) or 't' (each key's time follows its
-- cost). Then groups of keys of one limit, in the order of KEYS: the
-- limit's header (code, ttl_ms, words, nparams, params...) once, the
-- number of keys in the group, and per key its cost (and time). A key
-- whose stored value cannot be read gets reason code -1 and nothing else
-- happens to it.
if op == 'i' then
  local pertime = ARGV[2] ~= ''
  -- keycost reads a key's cost and, with pertime, its time into now.
  local function keycost()
    local cost = nextarg()
    if pertime then now = nextarg() end
    return cost
  end
  local out, i, nargs = {}, 0, #ARGV
  fetch()
  -- decide decides key at now with the algorithm's load, decide and save.
  local function decide(key, cost, code, ttl, words, P, alg)
    if alg.fromstored then anchor = clamp(now) end
    local s = loadfixed(key, words, code, ttl, P, alg)
    local n = #out
    if not s then
      out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5], out[n + 6] = 0, 0, 0, 0, 0, -1
      return
    end
    local a, rem, reset, retry, delay, reason = alg.decide(P, s, now, cost, true)
    out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5], out[n + 6] = a, rem, reset, retry, delay, reason
    if a == 1 then save(key, s, ttl, code, P, alg) end
  end
  while pos <= nargs do
    local code, ttl, words, np = nextarg(), nextarg(), nextarg(), nextarg()
    -- The inline paths below build no algorithm; the generic one does.
    local alg = code == 1 or code == 8 or build(code)
    if not alg then return redis.error_reply('floodgate: unknown algorithm code ' .. tostring(code)) end
    local P = {}
    for j = 1, np do P[j] = nextarg() end
    local count = nextarg()
    if code == 1 and words == 2 then
      -- fixed-window, inline: its decide and its load and save of two
      -- doubles (trailing zeros left out) without the generic code around
      -- them, which cost more than the decision (BenchmarkSharedCall).
      local limit, window = P[1], P[2]
      for _ = 1, count do
        i = i + 1
        local key, cost = KEYS[i], keycost()
        local v, w, n, o = fetched[key], 0, 0, #out
        local len = v and #v or 0
        if len == 16 then
          w, n = struct.unpack('<dd', v)
        elseif len == 8 then
          w = struct.unpack('<d', v)
        end
        if len ~= 0 and len ~= 8 and len ~= 16 then
          out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5], out[o + 6] = 0, 0, 0, 0, 0, -1
        else
          local t = clamp(now)
          local k = idiv(t, window)
          if k < w then
            k, t = w, w * window
          elseif k > w then
            n = 0
          end
          local reset = (k + 1) * window - t
          local bc = badcost(cost, limit)
          if bc then
            out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5], out[o + 6] = 0, nonneg(limit - n), reset, 0, 0, bc
          elseif n + cost > limit then
            out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5], out[o + 6] = 0, nonneg(limit - n), reset, reset, 0, OVER
          else
            n = n + cost
            out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5], out[o + 6] = 1, limit - n, reset, 0, 0, OK
            local st = ''
            if n ~= 0 then
              st = struct.pack('<dd', k, n)
            elseif k ~= 0 then
              st = struct.pack('<d', k)
            end
            setkey(key, st, ttl)
            fetched[key] = st
          end
        end
      end
      count = 0
    end
    if code == 8 and np == 4 and words == 2 + 3 * P[4] then
      -- bounded-log, inline for light keys: no key, the short8 and blint
      -- forms, and doubles of one or two entries not merged. Such a state
      -- is read into numbers (n entries, the open count c, the newest time
      -- t, the entries' first times f1, f2), decided as decide does on it
      -- and written in the form tostored would choose, without the state
      -- table, the closures and the padding of the generic path, which
      -- cost more than the decision (BenchmarkSharedCall). Any other key,
      -- or a request that would open a third entry, goes the generic way
      -- (decide above), which reads the key afresh: nothing was written.
      local limit, W, m, size = P[1], P[2], P[3], P[4]
      local lightform, lightread = lightfns()
      local BLTRAIL = 281474976710656 -- code 8's TRAIL
      for _ = 1, count do
        i = i + 1
        local key, cost = KEYS[i], keycost()
        local at, v = clamp(now), fetched[key]
        local n, c, t, f1, f2 = 0, 0, 0, 0, 0
        if v == nil then
          n = nil
        elseif v and v ~= '' then
          n = nil
          local len = #v
          if len == 48 then
            -- Two entries' doubles and the m and size they were written
            -- with (see code 8's tostored): inline when they are this
            -- limit's, else converted on the generic path.
            local a, b = struct.unpack('<dd', v, 33)
            if a == -BLTRAIL - m and b == -BLTRAIL - size then len = 32 end
          end
          if len == 24 or len == 32 then
            local h
            if len == 24 then
              h, t, f1 = struct.unpack('<ddd', v)
              f2 = f1
            else
              h, t, f1, f2 = struct.unpack('<dddd', v)
            end
            local rest = h - MARK
            -- A header of len / 8 - 2 entries, not merged, and times in
            -- order (any other doubles take the generic path).
            if rest >= 0 and h < 2 * MARK and rest % MERGED == len / 8 - 2 and floor(rest / MERGED) % 2 == 0
              and f1 >= 0 and f1 <= f2 and f2 <= t and t <= MAXT then
              n, c = len / 8 - 2, floor(rest / CUNIT)
            end
          elseif len <= 20 and string.byte(v, len) >= 48 and string.byte(v, len) <= 57 then
            n, c, t, f1, f2 = lightread(W, m, v, at)
            f2 = f2 or f1
          end
          -- An entry of more than m units was written under a larger m:
          -- the generic path splits it.
          if n and c > m then n = nil end
        end
        local o = #out
        if n then
          -- decide, on n <= 2 entries not merged: entry 1 ends where entry
          -- 2 starts, the newest at t; fl is the newest entry's first.
          local T, drop, start, sum, fl = at, 0, 0, 0, f1
          if n == 2 then fl = f2 end
          if n > 0 then
            T = max(T, t)
            local cut = T - W
            if n == 2 and f2 <= cut then drop = 1 end
            if drop == n - 1 and t <= cut then drop = n end
            start = drop
            if start < n then
              local fs = f1
              if start == 1 then fs = f2 end
              if fs <= cut then start = start + 1 end
            end
            if start < n then sum = (n - 1 - start) * m + c end
          end
          local reset = 0
          if start < n then reset = fl + W - T end
          local bc = badcost(cost, limit)
          if bc then
            out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5], out[o + 6] = 0, nonneg(limit - sum), reset, 0, 0, bc
          elseif sum + cost > limit then
            local e, fe = min(start + idiv(sum + cost - limit + m - 1, m) - 1, n - 1), f1
            if e == 1 then fe = f2 end
            out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5], out[o + 6] = 0, nonneg(limit - sum), reset, fe + W - T, 0, OVER
          else
            local first = T
            if drop < n and fl > T - W and c + cost <= m then first = fl end
            -- append: drop, fill the open entry, then open new ones.
            local add, open = cost, c
            if drop > 0 then
              n = n - drop
              f1 = f2
              if n == 0 then open = 0 end
            end
            fl = f1
            if n == 2 then fl = f2 end
            if n > 0 and fl > T - W and open < m then
              local k = min(add, m - open)
              open, add = open + k, add - k
            end
            while add > 0 and n < 2 do
              local k = min(add, m)
              if n == 0 then f1 = T else f2 = T end
              n, open, add = n + 1, k, add - k
            end
            if add > 0 then
              n = nil -- a third entry
            else
              open = min(open, MAXLIMIT)
              local h = MARK + open * CUNIT + n
              fl = f1
              if n == 2 then fl = f2 end
              local used = 2 + n
              if used == 4 and f2 == 0 then used = 3 end
              if used == 3 and f1 == 0 then used = 2 end
              if used == 2 and T == 0 then used = 1 end
              local st = lightform(W, m, n, open, T, f1, fl, used, ttl, at)
              if st then
              elseif n == 2 then
                st = struct.pack('<dddd', h, T, f1, f2) .. struct.pack('<dd', -BLTRAIL - m, -BLTRAIL - size)
              elseif used == 3 then
                st = struct.pack('<ddd', h, T, f1)
              elseif used == 2 then
                st = struct.pack('<dd', h, T)
              else
                st = struct.pack('<d', h)
              end
              setkey(key, st, ttl)
              fetched[key] = st
              out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5], out[o + 6] = 1, limit - sum - cost, first + W - T, 0, 0, OK
            end
          end
        end
        if not n then
          if alg == true then alg = build(code) end
          decide(key, cost, code, ttl, words, P, alg)
        end
      end
      count = 0
    end
    if alg == true and count > 0 then alg = build(code) end
    for _ = 1, count do
      i = i + 1
      decide(KEYS[i], keycost(), code, ttl, words, P, alg)
    end
  end
  if i ~= #KEYS then return redis.error_reply('floodgate: op i got ' .. #KEYS .. ' keys and ' .. i .. ' costs') end
  return out
end

