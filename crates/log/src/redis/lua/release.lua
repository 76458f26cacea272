-- Gives up `instance`'s owner lease (field `o`) of a session, so that the
-- next claim takes it at once (an owner's graceful stop): only if no request
-- stream was opened after the first `seen` (nothing was forwarded to the
-- owner that it has not read), unless `seen` is ''. Carriers are opened only
-- while their owner holds the lease (`open_request.lua`), so none is opened
-- for it after this. Returns 1 given up (or not held), 0 when streams were
-- opened after `seen`: the caller reads them, then tries again.
local session = KEYS[1]
local instance = ARGV[1]
local seen = ARGV[2]
if redis.call('HGET', session, 'o') ~= instance then return 1 end
if seen ~= '' then
  local r = tonumber(redis.call('HGET', session, 'r') or '1')
  if r - 1 > tonumber(seen) then return 0 end
end
redis.call('HDEL', session, 'o')
return 1
