-- Numbers a new request stream, stores its record with its state and
-- lists it in the session's index of request streams that hold something.
local session = KEYS[1]
local prefix = ARGV[1]
local meta = ARGV[2]
if redis.call('HGET', session, 'e') ~= '0' then return -1 end
local r = redis.call('HINCRBY', session, 'r', 1) - 1
redis.call('HSET', prefix .. ':st:' .. r, 'h', 0, 'f', 1, 'c', 0, 'm', meta)
redis.call('SADD', prefix .. ':rs', r)
return r
