-- Op 'h' is a node's heartbeat (store.Roster): KEYS[1] is the group's
-- sorted set of members scored by the time (µs) their count expires.
-- ARGV[3] is the member, ARGV[4] its expiry in ms, ARGV[5] '1' to leave.
-- Members whose expiry has passed are removed first. It returns the live
-- members, 1 if this beat added the member, and now.
if op == 'h' then
  local live, member = KEYS[1], ARGV[3]
  local expiry = tonumber(ARGV[4])
  redis.call('ZREMRANGEBYSCORE', live, '-inf', now)
  if ARGV[5] == '1' then
    redis.call('ZREM', live, member)
    return { redis.call('ZCARD', live), 0, now }
  end
  local added = redis.call('ZADD', live, now + expiry * 1000, member)
  -- The set outlives every member's expiry; a group whose members all
  -- stopped goes away.
  local keep = expiry * 4
  if redis.call('PTTL', live) < keep then redis.call('PEXPIRE', live, keep) end
  return { redis.call('ZCARD', live), added, now }
end

