-- Op 'x' is a region's exchange with another (see the outbox in
-- op_sync.lua and exchange.go). ARGV[3] names what it does:
--   'seal'  KEYS outbox, sealed, state; ARGV[4] an epoch to keep if the
--           state has none. Unless a sealed batch waits, the outbox becomes
--           the sealed batch and the state's seq grows by one. Returns
--           {seq, 1 if a sealed batch waits, epoch, 1 if sealed just now}.
--   'ack'   KEYS sealed, state; ARGV[4] the seq sent. Drops the sealed
--           batch if it is still that seq's. Returns 1 if it did.
--   'lease' KEYS lease; ARGV[4] the holder, ARGV[5] its ttl in ms. Takes or
--           renews the lease. Returns 1 if the holder has it.
--   'link'  KEYS links; ARGV[4] a field. Sets it to now. Returns now.
--   'links' KEYS links. Returns now, then the fields and their times.
if op == 'x' then
  local what = ARGV[3]
  if what == 'seal' then
    local outbox, sealedkey, state = KEYS[1], KEYS[2], KEYS[3]
    redis.call('HSETNX', state, 'epoch', ARGV[4])
    local epoch = redis.call('HGET', state, 'epoch')
    local seq = tonumber(redis.call('HGET', state, 'seq')) or 0
    if redis.call('EXISTS', sealedkey) == 1 then return { seq, 1, epoch, 0 } end
    if redis.call('EXISTS', outbox) == 0 then return { seq, 0, epoch, 0 } end
    redis.call('RENAME', outbox, sealedkey)
    seq = redis.call('HINCRBY', state, 'seq', 1)
    return { seq, 1, epoch, 1 }
  elseif what == 'ack' then
    local sealedkey, state = KEYS[1], KEYS[2]
    if tonumber(redis.call('HGET', state, 'seq')) ~= tonumber(ARGV[4]) then return 0 end
    return redis.call('DEL', sealedkey)
  elseif what == 'lease' then
    local holder = redis.call('GET', KEYS[1])
    if holder and holder ~= ARGV[4] then return 0 end
    redis.call('SET', KEYS[1], ARGV[4], 'PX', ARGV[5])
    return 1
  elseif what == 'link' then
    redis.call('HSET', KEYS[1], ARGV[4], now)
    return now
  elseif what == 'links' then
    local out = { now }
    local all = redis.call('HGETALL', KEYS[1])
    for i = 1, #all, 2 do
      out[#out + 1] = all[i]
      out[#out + 1] = tonumber(all[i + 1])
    end
    return out
  end
  return redis.error_reply('floodgate: unknown exchange step ' .. tostring(what))
end

