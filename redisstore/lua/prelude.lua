-- Floodgate's decision script: every algorithm of package algorithm, run
-- atomically inside Redis. Each function mirrors its Go counterpart line for
-- line, with time in microseconds instead of nanoseconds, so that every
-- integer stays below 2^53 and Lua's doubles hold it exactly (see
-- docs/design.md for the bounds).
--
-- KEYS: one per request (or per batch for op 's').
-- ARGV[1]: op. 'd' decides every request on a copy of its state and writes
--          the copies back only if every non-shadow request is allowed;
--          'p' is 'd' without writing; 'a' is 'd' holding concurrency
--          units under a lease; 'r' releases; 'l' releases a lease; 's'
--          records events and returns the states; 'S' is 's' at most once
--          (see once); 'i' decides each key on its own (see below).
-- For 'a' and 'l', ARGV[3] and ARGV[4] are the lease id's two halves.
-- ARGV[2]: now in microseconds, or '' to read the Redis server's TIME.
-- Then (after the lease id for 'a' and 'l') per key: code, ttl_ms (0: no expiry), words, nparams, params...,
-- followed by cost and shadow (0/1). Ops 'i' and 's' send a limit's header
-- once per run of its keys instead (see each).
--
-- 'l' returns 1 per key that held the lease, else 0.
-- 'd', 'p' and 'a' return six integers per request: allowed (0/1), remaining,
-- reset_after_us, retry_after_us, delay_us, reason code. 's' returns, per key,
-- its state packed as stored: little-endian doubles, trailing zero words left
-- out.

-- Op 'i' sent to one Redis Cluster primary for keys of several hash slots
-- declares no keys (a script's declared keys must share a slot) and names
-- them among its arguments: ARGV[2] is 'K' (or 'T', for 't'), then the
-- number of keys, the keys, the number of slots and each slot's number of
-- keys (a slot's keys adjacent), then the arguments of op 'i' after ARGV[2]. The
-- keys become KEYS and the rest ARGV, as op 'i' reads them (new tables
-- in locals of those names: the call's own tables are left as they are);
-- SLOTS tells fetch to read each slot's keys with its own MGET. Every key
-- is read before any is written, so a primary that does not serve one of
-- them refuses the call before it changes anything.
local KEYS, ARGV, SLOTS = KEYS, ARGV, nil
if ARGV[1] == 'i' and (ARGV[2] == 'K' or ARGV[2] == 'T') then
  local nk = tonumber(ARGV[3])
  local ns = tonumber(ARGV[4 + nk])
  local keys, args = {}, { 'i', '' }
  for i = 1, nk do keys[i] = ARGV[3 + i] end
  SLOTS = {}
  for i = 1, ns do SLOTS[i] = tonumber(ARGV[4 + nk + i]) end
  if ARGV[2] == 'T' then args[2] = 't' end
  for i = 5 + nk + ns, #ARGV do args[#args + 1] = ARGV[i] end
  KEYS, ARGV = keys, args
end

local floor = math.floor

local MAXT = 4611686018427387 -- the algorithms' latest time (2^62 ns) in whole microseconds
local MAXLIMIT = 4294967295   -- algorithm.MaxLimit
local MAXCOUNT = 9007199254740992 -- counts saturate at 2^53 here (2^62 in Go)
local MAXU32 = 4294967295

-- A bounded-log header's fields (see code 8): every nonempty header holds
-- MARK, the merged flag is MERGED, the open entry's count counts in CUNIT.
local MARK, MERGED, CUNIT = 4503599627370496, 131072, 262144

-- Reason codes, decoded by the Go side.
local OK, OVER, COSTOVER, QUEUEFULL, BADCOST, BADPERIOD, NEVERFITS, SCHEDULED = 0, 1, 2, 3, 4, 5, 6, 7

local function max(a, b) if a > b then return a end return b end
local function min(a, b) if a < b then return a end return b end
local function nonneg(x) if x < 0 then return 0 end return x end

local function clamp(t)
  if t < 0 then return 0 end
  if t > MAXT then return MAXT end
  return t
end

-- idiv returns floor(a/b) exactly for integers 0 <= a, 0 < b below 2^53:
-- the double quotient can round to the next integer, so correct it.
local function idiv(a, b)
  local q = floor(a / b)
  local r = a - q * b
  if r < 0 then
    q = q - 1
  elseif r >= b then
    q = q + 1
  end
  return q
end

local function imod(a, b) return a - idiv(a, b) * b end

local function addsat(a, b)
  if a > MAXCOUNT - b then return MAXCOUNT end
  return a + b
end

local function badcost(cost, mx)
  if cost < 1 then return BADCOST end
  if cost > mx then return COSTOVER end
  return nil
end

-- muldiv returns floor(a*b/c) and whether it was inexact, for integers
-- 0 <= a, b < 2^53 and 0 < c < 2^52, with the quotient below 2^53, without
-- ever forming the product: shift-and-add over the bits of b, keeping
-- a*prefix(b) = q*c + r with 0 <= r < c.
local function muldiv(a, b, c)
  local qa = idiv(a, c)
  local ra = a - qa * c
  local pw = 1
  while pw * 2 <= b do pw = pw * 2 end
  local q, r = 0, 0
  while pw >= 1 do
    q, r = q * 2, r * 2
    if r >= c then r = r - c; q = q + 1 end
    if b >= pw then
      b = b - pw
      q, r = q + qa, r + ra
      if r >= c then r = r - c; q = q + 1 end
    end
    pw = pw / 2
  end
  return q, r ~= 0
end

local function muldivup(a, b, c)
  local q, inexact = muldiv(a, b, c)
  if inexact then q = q + 1 end
  return q
end

