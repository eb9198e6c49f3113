-- 8: bounded-log. P: limit, window, m (units per entry), size (capacity in
-- entries). State, as in Go (see algorithm/boundedlog.go), 0-based entry i:
-- [1] header 2^52 + open count * 2^18 + merged * 2^17 + n (0: no entries),
-- [2] newest timestamp, [3+i] first timestamp of entry i, and only when
-- merged: [3+size+i] m - count and [3+2*size+i] next first - last of
-- closed entry i. Decide touches the first 2+n words only; Record expands
-- the state into the ring form bounded-log had before (entries, oldest
-- index, then first, last, count per entry), merges there and packs it
-- back. A key stored in the ring form is converted when first loaded.
-- Light and merged states are stored in shorter forms (tostored and
-- fromstored below); Sync always gets this layout back.
if code == 8 then
  -- bl_hdr returns n, the open entry's count and the merged flag, or nil
  -- for a header no bounded-log writes.
  local function bl_hdr(P, s)
    local h = s[1]
    if h == 0 then return 0, 0, false end
    local rest = h - MARK
    local n = rest % MERGED
    if rest < 0 or h >= 2 * MARK or n < 1 or n > P[4] then return nil end
    return n, floor(rest / CUNIT), floor(rest / MERGED) % 2 == 1
  end
  local function bl_sethdr(s, n, open, merged)
    if n == 0 then
      s[1], s[2] = 0, 0
      return
    end
    local h = MARK + min(open, MAXLIMIT) * CUNIT + n
    if merged then h = h + MERGED end
    s[1] = h
  end
  -- The ring form's functions are made only when a call needs them:
  -- Record, or a key stored in the ring form.
  local ring
  local function ringfns()
    if ring then return ring end
    local function bl_at(P, s, i) return 3 + 3 * ((s[2] + i) % P[4]) end
    local function bl_view(P, s, now)
      local n = s[1]
      now = clamp(now)
      if n > 0 then now = max(now, s[bl_at(P, s, n - 1) + 1]) end
      local cut = now - P[2]
      local drop = 0
      while drop < n and s[bl_at(P, s, drop) + 1] <= cut do drop = drop + 1 end
      local start = drop
      if start < n and s[bl_at(P, s, start)] <= cut then start = start + 1 end
      local sum = 0
      for i = start, n - 1 do sum = sum + s[bl_at(P, s, i) + 2] end
      return now, drop, start, sum
    end
    local function bl_openfirst(P, s, now, cost)
      local n = s[1]
      if n == 0 then return now end
      local o = bl_at(P, s, n - 1)
      if s[o] > now - P[2] and s[o + 2] + cost <= P[3] then return s[o] end
      return now
    end
    -- bl_insert puts an empty entry at time t at index i, moving the entries
    -- from i on one place newer, and returns its offset.
    local function bl_insert(P, s, i, t)
      local n, size = s[1], P[4]
      if i == 0 then
        s[2] = (s[2] + size - 1) % size
      else
        for j = n, i + 1, -1 do
          local d, o = bl_at(P, s, j), bl_at(P, s, j - 1)
          s[d], s[d + 1], s[d + 2] = s[o], s[o + 1], s[o + 2]
        end
      end
      s[1] = n + 1
      local o = bl_at(P, s, i)
      s[o], s[o + 1], s[o + 2] = t, t, 0
      return o
    end
    -- bl_add appends in time order as Go's logRing.add does: the open
    -- entry fills while its first time is after cut and, with entries
    -- before it, it spans less than span; a straddler is dropped.
    local function bl_add(P, s, now, cost, cut, span)
      local m, size = P[3], P[4]
      local n = s[1]
      if n > 0 then
        local o = bl_at(P, s, n - 1)
        if s[o] <= cut then
          n, s[2] = 0, 0
        elseif s[o + 2] < m and (n == 1 or now - s[o] < span) then
          local k = min(cost, m - s[o + 2])
          s[o + 1], s[o + 2] = now, s[o + 2] + k
          cost = cost - k
        end
      end
      while cost > 0 and n < size do
        local k = min(cost, m)
        local o = bl_at(P, s, n)
        s[o], s[o + 1], s[o + 2] = now, now, k
        n = n + 1
        cost = cost - k
      end
      s[1] = n
      if cost > 0 then
        local o = bl_at(P, s, n - 1)
        s[o + 1], s[o + 2] = now, addsat(s[o + 2], cost)
      end
    end
    local function ring_record(P, s, now, cost)
      local limit, window, m, size = P[1], P[2], P[3], P[4]
      if cost < 1 then return end
      cost = min(cost, MAXLIMIT)
      -- Late events (and, past the first entry, in-order ones) do not make
      -- an entry span ceil(W*m/L) or more (see Go's logRing.record).
      local span = muldivup(window, m, limit)
      local function room(count, first, last) return count < m and last - first < span end
      local latest, drop = bl_view(P, s, now)
      s[2] = (s[2] + drop) % size
      s[1] = s[1] - drop
      now = clamp(now)
      local n = s[1]
      if n == 0 or now >= s[bl_at(P, s, n - 1) + 1] then
        bl_add(P, s, now, cost, latest - window, span)
        return
      end
      if now <= latest - window then return end
      while cost > 0 do
        n = s[1]
        local i = n - 1
        while i >= 0 and s[bl_at(P, s, i)] > now do i = i - 1 end
        local o
        if i < 0 then
          -- Before every entry.
          o = bl_at(P, s, 0)
          if room(s[o + 2], now, s[o + 1]) then
            s[o] = now
          elseif n < size then
            o = bl_insert(P, s, 0, now)
          else
            s[o], s[o + 2] = now, addsat(s[o + 2], cost)
            return
          end
        else
          local oi = bl_at(P, s, i)
          if s[oi + 2] < m and (now <= s[oi + 1] or room(0, s[oi], now)) then
            o = oi
            s[o + 1] = max(s[o + 1], now)
          elseif now > s[oi + 1] then
            -- In the gap after a full entry.
            o = bl_at(P, s, i + 1)
            if room(s[o + 2], now, s[o + 1]) then
              s[o] = now
            elseif n < size then
              o = bl_insert(P, s, i + 1, now)
            else
              s[oi + 1], s[oi + 2] = now, addsat(s[oi + 2], cost)
              return
            end
          else
            -- Inside a full entry.
            local j = i + 1
            while j < n and s[bl_at(P, s, j) + 2] >= m do j = j + 1 end
            if j < n then
              o = bl_at(P, s, j)
              local t = max(now, s[bl_at(P, s, j - 1) + 1])
              if s[o + 1] - t < span then s[o] = min(s[o], t) end
            elseif n < size then
              o = bl_insert(P, s, i + 1, s[oi + 1])
            else
              s[oi + 2] = addsat(s[oi + 2], cost)
              return
            end
          end
        end
        local k = min(cost, m - s[o + 2])
        s[o + 2] = s[o + 2] + k
        cost = cost - k
      end
    end
    local function bl_last(P, s, i, n, merged)
      if i == n - 1 then return s[2] end
      if merged then return s[4 + i] - s[3 + 2 * P[4] + i] end
      return s[4 + i]
    end
    local function bl_count(P, s, i, n, open, merged)
      if i == n - 1 then return open end
      if merged then return P[3] - s[3 + P[4] + i] end
      return P[3]
    end
    -- bl_expand returns the ring form of s; bl_pack writes ring r into s.
    local function bl_expand(P, s, words)
      local r = {}
      for j = 1, words do r[j] = 0 end
      local n, open, merged = bl_hdr(P, s)
      r[1] = n
      for i = 0, n - 1 do
        local o = 3 + 3 * i
        r[o], r[o + 1], r[o + 2] = s[3 + i], bl_last(P, s, i, n, merged), bl_count(P, s, i, n, open, merged)
      end
      return r
    end
    local function bl_pack(P, r, s, words)
      for j = 1, words do s[j] = 0 end
      local n, size = r[1], P[4]
      if n < 0 or n > size or r[2] < 0 or r[2] >= size then return end
      local merged = false
      for i = 0, n - 1 do
        local o = bl_at(P, r, i)
        s[3 + i] = r[o]
        local c = min(r[o + 2], MAXLIMIT)
        if i == n - 1 then
          s[2] = r[o + 1]
          bl_sethdr(s, n, c, merged)
        else
          local d, g = P[3] - c, r[bl_at(P, r, i + 1)] - r[o + 1]
          s[3 + size + i], s[3 + 2 * size + i] = d, g
          merged = merged or d ~= 0 or g ~= 0
        end
      end
    end
    -- bl_convert is Go's boundedLog.convert: it returns the state s that
    -- a bounded-log of params Pf wrote (padded to Pf's words) as a state
    -- of P (words long) at now, keeping every entry and its count: what
    -- no decision counts any more is dropped, an open entry holding more
    -- than P's m is split, and when more entries are left than P has room
    -- for beside the ones Decide opens, the closed entries whose first
    -- times are closest are combined, each combination counted from its
    -- newer part's first time (an overcount until it leaves the window,
    -- never an undercount).
    local function bl_convert(Pf, s, P, words, now)
      local out = {}
      for j = 1, words do out[j] = 0 end
      if not bl_hdr(Pf, s) then return out end
      local wide = bl_expand(Pf, s, 2 + 3 * Pf[4])
      local n = wide[1]
      if n == 0 then return out end
      local limit, W, m, size = P[1], P[2], P[3], P[4]
      local es = {}
      local cut = max(clamp(now), wide[3 + 3 * (n - 1) + 1]) - W
      for i = 0, n - 1 do
        local o = 3 + 3 * i
        -- Drop the entries that ended at or before the cut, and the
        -- straddler (it is never counted again).
        if #es > 0 or wide[o] > cut then es[#es + 1] = { wide[o], wide[o + 1], wide[o + 2] } end
      end
      if #es == 0 then return out end
      local nw = es[#es]
      if nw[3] > m then
        nw[3] = nw[3] - m
        es[#es + 1] = { nw[2], nw[2], m }
      end
      local keep = size - idiv(limit - 1, m) - 2
      while #es > keep do
        local best = 1
        for i = 2, #es - 2 do
          if es[i + 1][1] - es[i][1] < es[best + 1][1] - es[best][1] then best = i end
        end
        es[best + 1][3] = addsat(es[best][3], es[best + 1][3])
        table.remove(es, best)
      end
      local r = { #es, 0 }
      for i = 1, #es do
        local o = 3 * i
        r[o], r[o + 1], r[o + 2] = es[i][1], es[i][2], es[i][3]
      end
      for j = #r + 1, words do r[j] = 0 end
      bl_pack(P, r, out, words)
      return out
    end
    ring = { record = ring_record, expand = bl_expand, pack = bl_pack, convert = bl_convert }
    return ring
  end
  local lightform, lightread = lightfns()
  -- The short merged form: the header and the newest time as doubles, then
  -- as 4-byte unsigned integers each entry's first time below the newest,
  -- and for each closed entry (its gap to the next entry's first) * (2m +
  -- 1) + its count, then the byte 'c': 8n + 13 bytes for n entries (5 mod
  -- 8, so neither doubles nor the 'm' form) where the 'm' form takes 24n +
  -- 1. It is written only when every value fits in 32 bits and every count
  -- is at most 2m: with times in microseconds, entries within 71 minutes of
  -- the newest and gaps below 2^32 / (2m + 1) microseconds (70 s at m =
  -- 30). Other merged states keep the 'm' form.
  local U32, UCHUNK = 4294967296, 200 -- UCHUNK: values per struct call
  local function mergedc(P, s, n)
    local size, m, t = P[4], P[3], s[2]
    local w = { s[1], t }
    for i = 1, n do
      local d = t - s[2 + i]
      if d < 0 or d >= U32 then return nil end
      w[2 + i] = d
    end
    for i = 0, n - 2 do
      local c, gap = m - s[3 + size + i], s[3 + 2 * size + i]
      local x = gap * (2 * m + 1) + c
      if c < 0 or c > 2 * m or gap < 0 or x >= U32 then return nil end
      w[3 + n + i] = x
    end
    local k, parts = 2 * n - 1, { struct.pack('<dd', w[1], w[2]) }
    for i = 0, k - 1, UCHUNK do
      local j = min(UCHUNK, k - i)
      parts[#parts + 1] = struct.pack('<' .. string.rep('I4', j), unpack(w, 3 + i, 2 + i + j))
    end
    parts[#parts + 1] = struct.pack('<dd', m, size) .. 'C'
    return table.concat(parts)
  end
  -- frommergedc returns the state words of a value mergedc wrote, or nil.
  local function frommergedc(P, v, words)
    local n = (#v - 13) / 8
    local size, m = P[4], P[3]
    if n < 2 or n > size or n ~= floor(n) then return nil end
    local h, t, pos = struct.unpack('<dd', v)
    local rest = h - MARK
    if rest < 0 or rest % MERGED ~= n or floor(rest / MERGED) % 2 ~= 1 or t > MAXT or t < 0 then return nil end
    local w, k = {}, 2 * n - 1
    while #w < k do
      local vals = { struct.unpack('<' .. string.rep('I4', min(UCHUNK, k - #w)), v, pos) }
      pos = table.remove(vals)
      for j = 1, #vals do w[#w + 1] = vals[j] end
    end
    local s = {}
    for j = 1, words do s[j] = 0 end
    s[1], s[2] = h, t
    for i = 1, n do s[2 + i] = t - w[i] end
    for i = 0, n - 2 do
      local x = w[n + 1 + i]
      local gap = floor(x / (2 * m + 1))
      s[3 + size + i], s[3 + 2 * size + i] = m - (x - gap * (2 * m + 1)), gap
    end
    return s
  end
  -- A state whose meaning depends on the entry size m it was written with
  -- (closed entries of the doubles form hold m units each, the merged
  -- forms keep m - count) is stored with that m and the capacity in
  -- entries: the merged forms put them as two doubles before their last
  -- byte, now 'M' and 'C' ('m' and 'c' are read as the reader's own), and
  -- the doubles of two or more entries end with -(TRAIL + m) and -(TRAIL +
  -- size), which no state word is (a deficit is above -2^32). A limit of
  -- the same counter with another m or size converts such a state when it
  -- reads it (see fromstored); one-entry and light states mean the same
  -- under any m, and are split when their entry holds more than the
  -- reader's m.
  local TRAIL = 281474976710656 -- 2^48
  -- packed returns words 1..used of s as doubles.
  local function packed(s, used)
    local parts, i = {}, 0
    while i < used do
      local k = min(255, used - i)
      parts[#parts + 1] = struct.pack('<' .. string.rep('d', k), unpack(s, i + 1, i + k))
      i = i + k
    end
    return table.concat(parts)
  end
  -- heavy returns words 1..used of s as doubles followed by the writer's
  -- m and size.
  local function heavy(P, s, used)
    return packed(s, used) .. struct.pack('<dd', -TRAIL - P[3], -TRAIL - P[4])
  end
  -- tostored returns the stored form of s (used words) when it has a
  -- shorter one than its doubles: merged, short8 or blint; else nil.
  local function tostored(P, s, used, ttl, at)
    local h = s[1] - MARK
    if h < 0 then return nil end
    local n, c = h % MERGED, floor(h / CUNIT)
    if floor(h / MERGED) % 2 == 1 then
      -- Merged: the header, the newest time, n firsts, then the n - 1
      -- deficits and n - 1 gaps without the zeros between the regions.
      local size = P[4]
      if n < 1 or n > size or 3 * n >= used or 3 * n > 255 then return heavy(P, s, used) end
      -- Anything nonzero outside those (no script writes it) keeps the
      -- full form.
      local dlo, glo = 3 + size, 3 + 2 * size
      for j = 3 + n, used do
        if s[j] ~= 0 and (j < dlo or j > dlo + n - 2) and (j < glo or j > glo + n - 2) then return heavy(P, s, used) end
      end
      -- The short merged form 'c' (see mergedc) when every field fits.
      local c = mergedc(P, s, n)
      if c then return c end
      local w = { s[1], s[2] }
      for i = 1, n do w[2 + i] = s[2 + i] end
      for i = 0, n - 2 do w[3 + n + i], w[2 + 2 * n + i] = s[dlo + i], s[glo + i] end
      return struct.pack('<' .. string.rep('d', 3 * n), unpack(w, 1, 3 * n)) .. struct.pack('<dd', P[3], P[4]) .. 'M'
    end
    local light = lightform(P[2], P[3], n, c, s[2], s[3], s[2 + n], used, ttl, at)
    if light or n < 2 then return light end
    -- Doubles of two or more entries, whose closed entries hold m units
    -- each: followed by the writer's m and size (see withparams).
    return heavy(P, s, used)
  end
  -- withparams returns the params of a writer whose m and size a value
  -- carries (P's limit and window, which the forms do not depend on), or
  -- nil when they are not those of any bounded-log.
  local function withparams(P, m, size)
    if m < 1 or m > MAXLIMIT or m ~= floor(m) or size < 4 or size > 33554432 or size ~= floor(size) then return nil end
    return { P[1], P[2], m, size }
  end
  -- readstored returns the state words of a value tostored wrote, in the
  -- layout of the params that wrote it, and those params when the value
  -- carries them (else it is in P's); or nil.
  local function readstored(P, v, at, words)
    local len, last = #v, string.byte(v, #v)
    if (len % 8 == 5 and last == 67) or (len % 8 == 1 and last == 77) then -- 'C', 'M': with params
      local m, size = struct.unpack('<dd', v, len - 16)
      local Pf = withparams(P, m, size)
      if not Pf then return nil end
      local s = readstored(Pf, string.sub(v, 1, len - 17) .. string.char(last + 32), at, 2 + 3 * size)
      if not s then return nil end
      return s, Pf
    end
    if len % 8 == 0 and len >= 32 then -- doubles with params, or nil
      local a, b = struct.unpack('<dd', v, len - 15)
      if a > -TRAIL or b > -TRAIL then return nil end
      local Pf = withparams(P, -TRAIL - a, -TRAIL - b)
      local k = len / 8 - 2
      if not Pf or k > 2 + 3 * Pf[4] then return nil end
      local s, pos = {}, 1
      while #s < k do
        local vals = { struct.unpack('<' .. string.rep('d', min(255, k - #s)), v, pos) }
        pos = table.remove(vals)
        for j = 1, #vals do s[#s + 1] = vals[j] end
      end
      for j = k + 1, 2 + 3 * Pf[4] do s[j] = 0 end
      return s, Pf
    end
    if len % 8 == 5 and last == 99 then -- 'c': short merged
      return frommergedc(P, v, words)
    end
    if len % 8 == 1 and last == 109 then -- 'm': merged
      local k = (#v - 1) / 8
      local n = k / 3
      if n < 1 or n > P[4] or n ~= floor(n) then return nil end
      local w, pos = {}, 1
      while #w < k do -- at most 255 values per struct.unpack
        local vals = { struct.unpack('<' .. string.rep('d', min(255, k - #w)), v, pos) }
        pos = table.remove(vals)
        for j = 1, #vals do w[#w + 1] = vals[j] end
      end
      local size, h = P[4], w[1] - MARK
      if h < 0 or h % MERGED ~= n or floor(h / MERGED) % 2 ~= 1 then return nil end
      local s = {}
      for j = 1, words do s[j] = 0 end
      for j = 1, 2 + n do s[j] = w[j] end
      for i = 0, n - 2 do s[3 + size + i], s[3 + 2 * size + i] = w[3 + n + i], w[2 + 2 * n + i] end
      return s
    end
    if #v > 20 then return nil end
    local n, c, t, f1, f2 = lightread(P[2], P[3], v, at)
    if not n then return nil end
    return { MARK + c * CUNIT + n, t, f1, f2 }
  end
  -- fromstored returns the state words of a value tostored wrote in P's
  -- layout and true when it converted them (the caller stores them): a
  -- state written under another m or size, or one whose only counted
  -- entry holds more than m units; or nil. now is the time to convert at
  -- (0: the state's newest).
  local function fromstored(P, v, at, words, now)
    local s, Pf = readstored(P, v, at, words)
    if not s then return nil end
    if Pf then
      if Pf[3] == P[3] and Pf[4] == P[4] then return s end
      return ringfns().convert(Pf, s, P, words, now), true
    end
    local n, open, merged = bl_hdr(P, s)
    if n and n >= 1 and n <= 2 and not merged and open > P[3] and (#s < words or n == 1) then
      return ringfns().convert(P, s, P, words, now), true
    end
    return s
  end
  return {
    -- decide is Go's view, decide and append in one function (one closure
    -- per call instead of four).
    decide = function(P, s, now, cost, commit)
      local limit, window, m, size = P[1], P[2], P[3], P[4]
      local n, open, merged = bl_hdr(P, s)
      now = clamp(now)
      local drop, start, sum = 0, 0, 0
      if n > 0 then
        now = max(now, s[2])
        local cut = now - window
        -- Drop the entries whose last timestamp is at or before cut: entry
        -- i ends where entry i+1 starts (less its gap when merged), the
        -- newest at s[2].
        if not merged then
          while drop < n - 1 and s[4 + drop] <= cut do drop = drop + 1 end
          if drop == n - 1 and s[2] <= cut then drop = n end
        else
          while drop < n do
            local last = s[2]
            if drop < n - 1 then last = s[4 + drop] - s[3 + 2 * size + drop] end
            if last > cut then break end
            drop = drop + 1
          end
        end
        start = drop
        if start < n and s[3 + start] <= cut then start = start + 1 end
        if start < n then
          sum = (n - 1 - start) * m + open
          if merged then
            for i = start, n - 2 do sum = sum - s[3 + size + i] end
          end
        end
      end
      local reset = 0
      if start < n then reset = s[2 + n] + window - now end
      local bc = badcost(cost, limit)
      if bc then return 0, nonneg(limit - sum), reset, 0, 0, bc end
      if sum + cost > limit then
        local need, i = sum + cost - limit, start
        if not merged then
          i = min(start + idiv(need + m - 1, m) - 1, n - 1)
        else
          while i < n - 1 do
            need = need - (m - s[3 + size + i])
            if need <= 0 then break end
            i = i + 1
          end
        end
        return 0, nonneg(limit - sum), reset, s[3 + i] + window - now, 0, OVER
      end
      local first = now
      if drop < n and s[2 + n] > now - window and open + cost <= m then first = s[2 + n] end
      if commit then
        local add = cost
        if drop > 0 then
          local left = n - drop
          local regions = { 3 }
          if merged then regions = { 3, 3 + size, 3 + 2 * size } end
          for _, r in ipairs(regions) do
            for i = 0, left - 1 do s[r + i] = s[r + drop + i] end
            for i = left, n - 1 do s[r + i] = 0 end
          end
          n = left
          if n == 0 then open, merged = 0, false end
        end
        if n > 0 and s[2 + n] > now - window and open < m then
          local k = min(add, m - open)
          open, add = open + k, add - k
        end
        -- Closing the open entry leaves its deficit and gap at 0 (see Go).
        while add > 0 and n < size do
          local k = min(add, m)
          s[3 + n] = now
          n, open, add = n + 1, k, add - k
        end
        bl_sethdr(s, n, open + add, merged)
        s[2] = now
      end
      return 1, limit - sum - cost, first + window - now, 0, 0, OK
    end,
    tostored = tostored,
    fromstored = fromstored,
    -- convert is the ring form's convert, for the states with holds
    -- (code 24), whose inner log load converts (see state.lua).
    convert = function(Pf, s, P, words, now) return ringfns().convert(Pf, s, P, words, now) end,
    -- recordall merges a key's ne events (times ts, costs cs) as Record
    -- one after another would. An event in time order that leaves a state
    -- of at most one entry, not merged, with at most m units is merged in
    -- place, as the ring form would merge it: a key with a few events
    -- never builds the ring. The first other event expands the state into
    -- the ring form once; the rest merge there and it is packed back once.
    recordall = function(P, s, ts, cs, ne)
      local W, m = P[2], P[3]
      local R, r, words
      for k = 1, ne do
        local cost = cs[k]
        if cost >= 1 and not r then
          local now = clamp(ts[k])
          local n, open, merged = bl_hdr(P, s)
          if n and not merged and n <= 1 and (n == 0 or now >= s[2]) then
            local first = now
            if n == 1 and s[3] > now - W then
              first = s[3]
            else
              open = 0
            end
            if open + cost <= m then
              for j = 4, min(#s, 2 + 3 * P[4]) do s[j] = 0 end -- its own words only (holds may follow)
              s[1], s[2], s[3] = MARK + (open + cost) * CUNIT + 1, now, first
              cost = 0
            end
          end
          if cost >= 1 then
            R, words = ringfns(), 2 + 3 * P[4]
            r = R.expand(P, s, words)
          end
        end
        if r and cost >= 1 then R.record(P, r, ts[k], cost) end
      end
      if r then R.pack(P, r, s, words) end
    end,
    -- fix runs on a freshly loaded state, which load did not pad: it pads
    -- the words Decide reads (all of them for a merged key), clears a
    -- state no bounded-log wrote, and converts the ring form and a single
    -- entry of more than m units (at now, see fromstored), returning true
    -- so the caller stores the converted state.
    fix = function(P, s, words, now)
      for j = #s + 1, 2 do s[j] = 0 end
      local h = s[1]
      if h ~= 0 and h < MARK then
        for j = #s + 1, words do s[j] = 0 end
        local r = {}
        for j = 1, words do r[j] = s[j] end
        ringfns().pack(P, r, s, words)
        return true
      end
      local n, open, merged = bl_hdr(P, s)
      if not n then
        for j = 1, #s do s[j] = 0 end
        return false
      end
      if n == 1 and open > P[3] then
        -- One entry of more than m units: written under a larger m.
        for j = #s + 1, words do s[j] = 0 end
        local c = ringfns().convert(P, s, P, words, now)
        for j = 1, words do s[j] = c[j] end
        return true
      end
      local upto = 2 + n
      if merged then upto = words end
      for j = #s + 1, upto do s[j] = 0 end
      return false
    end,
  }
end
