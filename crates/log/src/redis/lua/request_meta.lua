-- A request stream's record: `{0, meta}`, or `{-1}` no session, `{-2}` no
-- stream, `{-3, c, f}` retention took it with the events.
local session = KEYS[1]
local state = KEYS[2]
if redis.call('HGET', session, 'e') ~= '0' then return {-1} end
local b = redis.call('HMGET', state, 'c', 'f', 'm')
if not b[1] then return {-2} end
if not b[3] then return {-3, tonumber(b[1]), tonumber(b[2])} end
return {0, b[3]}
