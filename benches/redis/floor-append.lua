-- Not used by the server: the append as the layout redis-path.md names as
-- the floor would make it, for benches/redis/append-cost.sh to weigh against
-- lua/append.lua. The fence and the follower members in one read of the
-- session's hash (field `w`, compact members joined by commas), entry ids
-- `0-*` (Redis numbers the entry one past the last, so the head is the
-- stream's own: no state hash to read or write), one wake-up a follower.
-- Four commands: the script, HMGET, XADD, the wake XADD. No trim, pins or
-- keyed appends (append.lua's cold paths).
local session = KEYS[1]
local events = KEYS[2]
local now_ms = ARGV[1]
local message = ARGV[2]
local s = redis.call('HMGET', session, 'e', 'o', 'w')
if s[1] ~= '0' then return {-1} end
local id = redis.call('XADD', events, '0-*', 't', now_ms, 'm', message)
if s[3] then
  for m in string.gmatch(s[3], '[^,]+') do
    redis.call('XADD', 'mcpr:wake:{' .. string.sub(m, 1, 12) .. '}', 'NOMKSTREAM',
      'MAXLEN', '~', 16384, '*', 'k', events, 's', id, 't', now_ms, 'm', message)
  end
end
return id
