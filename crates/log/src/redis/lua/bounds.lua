-- A stream's committed head and floor, or why there are none.
local session = KEYS[1]
local state = KEYS[2]
if redis.call('HGET', session, 'e') ~= '0' then return {-1} end
local b = redis.call('HMGET', state, 'c', 'f')
if not b[1] then return {-2} end
local c, f = tonumber(b[1]), tonumber(b[2])
if f > c + 1 then f = c + 1 end
return {c, f}
