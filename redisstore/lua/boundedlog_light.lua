-- lightfns returns bounded-log's light forms' writer and reader (code 8's
-- tostored and fromstored use them). They work on numbers, not a state
-- table, and are made apart from build so that op 'i' decides light keys
-- without building the whole algorithm (whose closures cost about 19,000
-- instructions a call, measured with callgrind).
local function lightfns()
  -- A light state is stored as a decimal integer, which Redis keeps in its
  -- integer encoding: 88 bytes of MEMORY USAGE with a 34-byte key name,
  -- where 24 or 32 bytes of doubles take 120 or 136 (and any string of 1 to
  -- 12 bytes 104). lightread tells the two integer forms from doubles by
  -- their first byte and digits: a state's doubles start with a header
  -- whose eighth byte is 0x43, or a ring form's count, never a digit.
  --
  -- short8: one entry whose units all came at one time (a key that sent
  -- one request): the count, then the time in 16 digits. It needs no clock
  -- to read.
  --
  -- blint: a state not merged whose open entry holds c <= M units, first
  -- taken d < W before the newest time t, alone (n = 1) or after a closed
  -- entry whose first time is at or before t - W (n = 2). Neither Decide
  -- nor Record reads more from that closed entry's first time than that it
  -- is at or before every later cut (newest - W), so it is stored as
  -- exactly t - W. The value is -(Z * 10^9 + lo) with
  --   X = 1 + ((n - 1) * M + c - 1) * W + d   (1 <= X <= 2 * M * W)
  --   Y = t mod R, R = r * 10^9, r = floor(9213372036 / (2 * M * W + 1))
  --   Z * 10^9 + lo = (10^7 + r * X) * 10^9 + Y
  -- M depends on the window alone (not on the limit), so that a limit of
  -- the same counter with another entry size m reads the value (and
  -- converts it, see code 8's fromstored): the largest M with r >= 2,
  -- at least 1 (blintsize). At W = 1 min, M = 38.
  -- (18 to 20 characters, never a multiple of 8, so a script from before
  -- this form reports it as foreign rather than reading doubles; below 2^63,
  -- Redis's integer range). Only t mod R is kept: it is read back as the one time congruent
  -- to it in (now - R/2, now + R/2], now being the reading call's (the
  -- server's TIME, or the caller's with ClientTime). The form is written
  -- only when the key's TTL is at most R/4 and t is within R/8 of the
  -- writing call's now, so a read is exact whenever the nows of two calls
  -- on a live key differ by less than 3R/8: the key expires a TTL after its
  -- last write, so that fails only if the clock steps back, or callers'
  -- clocks differ, by more than 3R/8 - TTL. For every window up to 38
  -- minutes r = 2: R = 2,000 s, 3R/8 = 12 min 30 s. Any other state, or one
  -- whose fields do not fit, stays doubles.
  local ZMAX, E9, ZOFF = 9223372035, 1000000000, 10000000
  -- blintsize returns M and r for window W (see blint).
  local function blintsize(W)
    local M = max(1, floor((floor((ZMAX + 1 - ZOFF) / 2) - 1) / (2 * W)))
    return M, floor((ZMAX + 1 - ZOFF) / (2 * M * W + 1))
  end
  -- lightform returns the short8 or blint form of a state not merged (W,
  -- m: window and units per entry) of n entries whose open entry holds c
  -- units, with newest time t, first times f1 (oldest) and fl (newest's,
  -- read only when n <= 2), used words up to the last nonzero, or nil when
  -- it has neither.
  local function lightform(W, m, n, c, t, f1, fl, used, ttl, at)
    if n == 1 and used == 3 and f1 == t and c >= 1 and c <= 999 and t <= 9999999999999999 then
      return string.format('%d%016d', c, t)
    end
    local M, r = blintsize(W)
    if used ~= 2 + n or n > 2 or c < 1 or c > m or c > M then return nil end
    local d = t - fl
    if d < 0 or d >= W or t < W then return nil end
    if n == 2 and f1 > t - W then return nil end
    local R = r * E9
    if r < 1 or 4 * ttl * 1000 > R or 8 * (t - at) > R or 8 * (at - t) > R then return nil end
    local X = 1 + ((n - 1) * M + c - 1) * W + d
    local Y = t - idiv(t, R) * R
    local yh = floor(Y / E9)
    return string.format('-%d%09d', ZOFF + r * X + yh, Y - yh * E9)
  end
  -- lightread reads a short8 or blint value v (at most 20 bytes) read at
  -- time at: n, the open count, the newest time and the first times of
  -- the n <= 2 entries (the second is nil for one), or nil.
  local function lightread(W, m, v, at)
    local b = string.byte(v, 1)
    if b >= 49 and b <= 57 then -- short8
      if #v < 17 or #v > 19 or not string.find(v, '^%d+$') then return nil end
      local c, t = tonumber(string.sub(v, 1, -17)), tonumber(string.sub(v, -16))
      if t > MAXT then return nil end
      return 1, c, t, t
    end
    -- A value Redis keeps as an integer reads back in canonical digits.
    -- tonumber(v) is v to within 2^10, so Z is exact once lo is taken off;
    -- one tonumber of the whole value and one of its last nine digits
    -- instead of a pattern match and two of its parts (less CPU per call).
    if b ~= 45 or #v < 11 then return nil end
    local x, lo = tonumber(v), tonumber(string.sub(v, -9))
    if not x or not lo or x ~= floor(x) or lo ~= floor(lo) or lo < 0 or lo >= E9 then return nil end
    local Z = floor((-x - lo) / E9 + 0.5) - ZOFF
    local M, r = blintsize(W)
    local R = r * E9
    if r < 1 or Z > ZMAX - ZOFF then return nil end
    local X = floor(Z / r)
    local Y = (Z - X * r) * E9 + lo
    local q = floor((X - 1) / W)
    local d = X - 1 - q * W
    local n = floor(q / M) + 1
    local c = q - (n - 1) * M + 1
    if X < 1 or n > 2 then return nil end
    -- The time congruent to Y mod R in (at - R/2, at + R/2]; at + R/2 - Y
    -- may be negative, and idiv takes only a >= 0.
    local a = at + floor(R / 2) - Y + R
    local t = at + floor(R / 2) - (a - idiv(a, R) * R)
    if t < W or t > MAXT then return nil end
    if n == 2 then return 2, c, t, t - W, t - d end
    return 1, c, t, t - d
  end
  return lightform, lightread
end

