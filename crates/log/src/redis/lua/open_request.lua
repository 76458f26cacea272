-- Numbers a new request stream, stores its record with its state and
-- lists it in the session's index of request streams that hold something.
-- With `owner` (a carrier of a message forwarded to the lease holder), only
-- while that instance holds the session's lease (field `o`).
-- A session that opened `max` streams already is refused, writing nothing.
-- Returns the stream's number, or -1 no live session, -2 not the owner,
-- -3 the maximum reached.
local session = KEYS[1]
local prefix = ARGV[1]
local meta = ARGV[2]
local owner = ARGV[3] or ''
local max = tonumber(ARGV[4])
local state = redis.call('HMGET', session, 'e', 'o', 'r', 'v')
if state[1] ~= '0' then return -1 end
if owner ~= '' and state[2] ~= owner then return -2 end
if tonumber(state[3] or '1') > max then return -3 end
local r = redis.call('HINCRBY', session, 'r', 1) - 1
if state[4] == '2' then
  -- Seq ids (`seq_ids.lua`): the stream holds its own head, so one left
  -- by a session of the same id before (emptied by retention, kept a
  -- day, past the end) must not number this one's events.
  redis.call('DEL', prefix .. ':ev:' .. r, prefix .. ':st:' .. r)
  redis.call('HSET', prefix .. ':st:' .. r, 'm', meta)
else
  redis.call('HSET', prefix .. ':st:' .. r, 'h', 0, 'f', 1, 'c', 0, 'm', meta)
end
redis.call('SADD', prefix .. ':rs', r)
return r
