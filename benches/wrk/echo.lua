-- wrk script: tools/call echo answered as JSON, on one session or, given
-- several ids, on each in turn (request by request).
--   wrk -t2 -c64 -d10s -s benches/wrk/echo.lua http://127.0.0.1:PORT/mcp -- SESSION_ID [SESSION_ID...]
-- wrk reports any non-2xx answer; benches/wrk/ab refuses a run that had one.
local threads = 0
function setup(thread)
  -- Ids unique across threads: a session refuses a second call with the id of one in flight.
  threads = threads + 1
  thread:set("tid", threads)
end
local sids
function init(args)
  sids = args
  if not sids[1] then error("pass the session id after --") end
end
local n = 0
function request()
  n = n + 1
  local sid = sids[(n % #sids) + 1]
  return wrk.format("POST", nil, {
    ["content-type"] = "application/json",
    ["accept"] = "application/json, text/event-stream",
    ["mcp-session-id"] = sid,
    ["mcp-protocol-version"] = "2025-11-25",
  }, '{"jsonrpc":"2.0","id":' .. (tid * 1000000000 + n) .. ',"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello"}}}')
end
