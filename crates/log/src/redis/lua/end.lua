-- Ends a session: its streams and pins go, a tombstone stays and is listed
-- in `mcpr:ended` by end time for its expiry. Costs one step per stream
-- that holds something, not per stream the session ever opened.
local session = KEYS[1]
local live_set = KEYS[2]
local ended_index = KEYS[3]
-- One server only (on a cluster the caller adds the notice): the stream of
-- end notices every instance reads (`tail/endings.rs`).
local endings = KEYS[4]
local prefix = ARGV[1]
local id = ARGV[2]
local ended_ms = ARGV[3]
-- Idle expiry: only if the session was not used after this time (Unix ms),
-- else -2 (a client came back while the expiry decided).
local used_after = ARGV[4] or ''
if redis.call('HGET', session, 'e') ~= '0' then return -1 end
if used_after ~= '' and tonumber(redis.call('HGET', session, 'a') or '0') > tonumber(used_after) then
  return -2
end
-- The streams that hold something: the session stream and the index of
-- request streams (retention emptied the others, which expire by
-- themselves); a session of an older release has no index, and every
-- number it handed out is visited.
redis.call('DEL', prefix .. ':st:0', prefix .. ':ev:0')
if redis.call('HGET', session, 'x') == '1' then
  for _, n in ipairs(redis.call('SMEMBERS', prefix .. ':rs')) do
    redis.call('DEL', prefix .. ':st:' .. n, prefix .. ':ev:' .. n)
  end
else
  local r = tonumber(redis.call('HGET', session, 'r'))
  for n = 1, r - 1 do
    redis.call('DEL', prefix .. ':st:' .. n, prefix .. ':ev:' .. n)
  end
end
redis.call('DEL', prefix .. ':rs', prefix .. ':pin', prefix .. ':f', prefix .. ':once')
redis.call('HSET', session, 'e', 1)
redis.call('HDEL', session, 'm', 'a', 'r', 'o', 'x', 'v', 'w', 'p')
if live_set then
  redis.call('SREM', live_set, id)
  redis.call('ZADD', ended_index, ended_ms, id)
end
if endings then
  redis.call('XADD', endings, 'MAXLEN', '~', 10000, '*', 's', id)
end
return 0
