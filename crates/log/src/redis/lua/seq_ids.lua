-- Shared by the scripts that meet sessions of the seq-id layout (session
-- field `v` 2; `README.md`), prepended to each of them (`scripts.rs`).
-- There a stream's entries have ids `0-SEQ`, which Redis numbers itself
-- (`XADD KEY 0-*`), so the head is the stream's own last id and no state
-- hash holds it; the followers are field `w` of the session's hash, each
-- member between spaces (` M1 M2 `), read with the fence in one `HMGET`.

-- The head and the floor of a seq-id stream: its last id (kept by an
-- emptied stream) and its first entry; 0 and 1 before its first event.
local function seq_bounds(events)
  if redis.call('EXISTS', events) == 0 then return 0, 1 end
  local info = redis.call('XINFO', 'STREAM', events)
  local last, first, len
  for i = 1, #info, 2 do
    if info[i] == 'last-generated-id' then last = info[i + 1]
    elseif info[i] == 'first-entry' then first = info[i + 1]
    elseif info[i] == 'length' then len = info[i + 1] end
  end
  local h = tonumber(string.match(last, '^0%-(%d+)$'))
  if not h then error('not a seq-id stream: ' .. events) end
  if len == 0 or not first then return h, h + 1 end
  return h, tonumber(string.match(first[1], '^0%-(%d+)$'))
end

-- The record and emptied flag (`m`, `x`) of the request stream whose state
-- hash is `state`, or why it has none: -2 no such stream, -6 opened by an
-- instance of an older release, in its layout (its heads in the hash).
local function seq_request_state(state)
  local st = redis.call('HMGET', state, 'm', 'x', 'h')
  if st[3] then return nil, -6 end
  if not st[1] and not st[2] then return nil, -2 end
  return st
end

-- Field `w` with member `m` (unchanged when it holds it already).
local function w_add(w, m)
  w = w or ' '
  if string.find(w, ' ' .. m .. ' ', 1, true) then return w end
  return w .. m .. ' '
end

-- Field `w` without the members for which `gone(member)` is true; `nil`
-- when none is left.
local function w_keep(w, gone)
  local out = ' '
  for m in string.gmatch(w or '', '%S+') do
    if not gone(m) then out = out .. m .. ' ' end
  end
  if out == ' ' then return nil end
  return out
end

-- Writes field `w` (deleting it when `nil`).
local function w_set(session, w)
  if w then redis.call('HSET', session, 'w', w) else redis.call('HDEL', session, 'w') end
end
