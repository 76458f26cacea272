-- Retires request stream `n` of a live session: its state, record and
-- events go and it leaves the index; its number is not handed out again.
-- Returns 0, or -1 for no live session.
local session = KEYS[1]
local stream_state = KEYS[2]
local events = KEYS[3]
local index = KEYS[4]
local n = ARGV[1]
if redis.call('HGET', session, 'e') ~= '0' then return -1 end
redis.call('DEL', stream_state, events)
redis.call('SREM', index, n)
return 0
