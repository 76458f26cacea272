-- Ends a session: its streams and pins go, a tombstone stays and is listed
-- in `mcpr:ended` by end time for its expiry.
local session = KEYS[1]
local live_set = KEYS[2]
local ended_index = KEYS[3]
local prefix = ARGV[1]
local id = ARGV[2]
local ended_ms = ARGV[3]
if redis.call('HGET', session, 'e') ~= '0' then return -1 end
local r = tonumber(redis.call('HGET', session, 'r'))
for n = 0, r - 1 do
  redis.call('DEL', prefix .. ':st:' .. n, prefix .. ':ev:' .. n)
end
redis.call('DEL', prefix .. ':pin', prefix .. ':f', prefix .. ':once')
redis.call('HSET', session, 'e', 1)
redis.call('HDEL', session, 'm', 'a', 'r', 'o')
if live_set then
  redis.call('SREM', live_set, id)
  redis.call('ZADD', ended_index, ended_ms, id)
end
return 0
