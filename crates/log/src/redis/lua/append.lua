-- Assigns seqs, appends, trims by count (or to `floor`, for age) short of
-- pins, and moves the heads, in one step. With a key (`once`), a batch
-- already appended under it is not appended again: its head is returned (a
-- retry after an unknown outcome). `once_keys` remembers the last 64 keys of
-- the session, for ten minutes after its last keyed append: field `#` counts
-- them, field `#N` (N = count mod 64) names the key in that slot of the
-- ring, and the key's own field holds its head; the key a slot held before
-- is forgotten, so the hash never holds more than 129 fields. With an
-- `owner`, nothing is appended unless that instance holds the session's
-- lease (field `o`): `{-4}`, the fence of a stalled owner; `owner` `-`
-- appends only while no instance holds it.
-- With `ring` (one server, no replicas: the commit is this script), each
-- instance other than `me` (the committing one's wake stream) that follows
-- the stream (the follower set: `WAKE|STREAM`
-- members, or compact ones, the wake stream's 12-digit nonce then the
-- stream's number) gets the stream's key on its wake stream, in the
-- commit's own step; a wake stream gone with its instance drops the registration. A
-- batch of at most 1 KiB (and 16 messages) rides along (`s` its first seq, `t` its
-- time, one `m` per message), so the follower hands it on without reading
-- the stream (`tail/bell.rs`).
-- A session of the seq-id layout (field `v` 2, `seq_ids.lua`) takes its
-- head from the stream and its followers from its own hash: on one server
-- without replicas an event on its stream 0 costs this script's `HMGET`
-- and `XADD`, and the ring's `XADD` per other instance following it.
-- Returns `{head, floor}` (floor 0, not read, for a seq-id append trimmed
-- by count), or `{-1}` no live session, `{-2}` no stream, `{head, -3}`
-- already appended under `once`, `{-4}` not the owner, `{-5}` a seq-id
-- session met by a cluster or with replicas, which commit after the script,
-- `{-6}` a request stream an older release opened in a seq-id session.
local session = KEYS[1]
local stream_state = KEYS[2]
local events = KEYS[3]
local pins_key = KEYS[4]
local once_keys = KEYS[5]
local index = KEYS[6]
local followers = KEYS[7]
local stream = ARGV[1]
local now_ms = ARGV[2]
local max_events = ARGV[3]
local floor = ARGV[4]
local commit_at_ack = ARGV[5]
local once = ARGV[6] or ''
local owner = ARGV[7] or ''
local ring = ARGV[8] or ''
local me = ARGV[9] or ''
-- ARGV[10..]: the messages, in order
-- The session's state (and its followers, in the seq-id layout): one read.
local s = redis.call('HMGET', session, 'e', 'o', 'v', 'w', 'p')
if s[1] ~= '0' then return {-1} end
if once ~= '' then
  local done = redis.call('HGET', once_keys, once)
  if done then return {tonumber(done), -3} end
end
if owner == '-' then
  if s[2] then return {-4} end
elseif owner ~= '' and s[2] ~= owner then
  return {-4}
end
local seq_ids = s[3] == '2'
local h, f, first
-- Where the floor must move for head `h`: past the events beyond
-- `max_events`, and to `floor` (age), never past the head.
local function trim_target(h)
  local want = h + 1 - tonumber(max_events)
  if tonumber(floor) > want then want = tonumber(floor) end
  if want > h + 1 then want = h + 1 end
  return want
end
-- The trim target past `f`, short of live pins (expired ones go); the
-- number of live pins seen.
local function short_of_pins(want)
  local live = 0
  local pins = redis.call('HGETALL', pins_key)
  for j = 1, #pins, 2 do
    local n, seq, exp = string.match(pins[j + 1], '(%d+):(%d+):(%d+)')
    if tonumber(exp) > tonumber(now_ms) then
      live = live + 1
      if n == stream and tonumber(seq) < want then want = math.max(tonumber(seq), f) end
    else
      redis.call('HDEL', pins_key, pins[j])
    end
  end
  return want, live
end
if seq_ids then
  -- The head is the stream's own (Redis numbers `0-*`), trimmed by count
  -- in the `XADD` itself unless a pin or an age floor holds it back:
  -- on stream 0 this read of the session's hash is the only one.
  if commit_at_ack ~= '1' or ring ~= '1' then return {-5} end
  if stream ~= '0' then
    local st, why = seq_request_state(stream_state)
    if not st then return {why} end
    if st[2] == '1' and #ARGV >= 10 then
      -- Events again on a stream retention emptied (below).
      redis.call('HSET', stream_state, 'x', '0')
      redis.call('PERSIST', stream_state)
      redis.call('PERSIST', events)
      redis.call('SADD', index, stream)
    end
  end
  local by_count = s[5] ~= '1' and tonumber(floor) == 0
  for i = 10, #ARGV do
    local id
    if by_count then
      id = redis.call('XADD', events, 'MAXLEN', max_events, '0-*', 't', now_ms, 'm', ARGV[i])
    else
      id = redis.call('XADD', events, '0-*', 't', now_ms, 'm', ARGV[i])
    end
    h = tonumber(string.sub(id, 3))
    if not first then first = h end
  end
  if by_count and h then
    -- Not read: the caller of an append with events uses only the head.
    f = 0
  else
    h, f = seq_bounds(events)
    local want = trim_target(h)
    if want > f then
      local live
      want, live = short_of_pins(want)
      if live == 0 then redis.call('HDEL', session, 'p') end
      if want > f then
        redis.call('XTRIM', events, 'MINID', '0-' .. want)
        f = want
        if stream ~= '0' and h > 0 and f > h then
          -- A request stream retention emptied: its record goes and it
          -- leaves the index; the empty stream keeps its head, and the
          -- state hash (`x`) says it was opened, for loud reads for a day.
          redis.call('HDEL', stream_state, 'm')
          redis.call('HSET', stream_state, 'x', '1')
          redis.call('PEXPIRE', stream_state, 86400000)
          redis.call('PEXPIRE', events, 86400000)
          redis.call('SREM', index, stream)
        end
      end
    end
  end
else
  local st = redis.call('HMGET', stream_state, 'h', 'f')
  h = tonumber(st[1])
  if not h then return {-2} end
  f = tonumber(st[2])
  local emptied = false
  if stream ~= '0' and #ARGV >= 10 and h > 0 and f > h then
    -- Events again on a stream retention emptied: it holds something again.
    redis.call('PERSIST', stream_state)
    redis.call('SADD', index, stream)
  end
  first = h + 1
  for i = 10, #ARGV do
    h = h + 1
    redis.call('XADD', events, h .. '-0', 't', now_ms, 'm', ARGV[i])
  end
  local want = trim_target(h)
  if want > f then
    want = short_of_pins(want)
    if want > f then
      redis.call('XTRIM', events, 'MINID', want .. '-0')
      f = want
      if stream ~= '0' and h > 0 and f > h then
        -- A request stream retention emptied: its record and its (empty)
        -- stream go and it leaves the index; the state hash keeps head and
        -- floor for loud reads for a day, then goes by itself (ending the
        -- session does not visit it).
        redis.call('HDEL', stream_state, 'm')
        redis.call('DEL', events)
        redis.call('SREM', index, stream)
        emptied = true
      end
    end
  end
  if commit_at_ack == '1' then
    redis.call('HSET', stream_state, 'h', h, 'f', f, 'c', h)
  else
    redis.call('HSET', stream_state, 'h', h, 'f', f)
  end
  if emptied then redis.call('PEXPIRE', stream_state, 86400000) end
end
if once ~= '' then
  local slot = '#' .. (redis.call('HINCRBY', once_keys, '#', 1) % 64)
  local old = redis.call('HGET', once_keys, slot)
  if old then redis.call('HDEL', once_keys, old) end
  redis.call('HSET', once_keys, slot, once, once, h)
  redis.call('PEXPIRE', once_keys, 600000)
end
if ring == '1' and #ARGV >= 10 then
  -- The wake streams are not declared keys: one server only (`ring` is
  -- never set on a cluster, whose instances ring after the commit).
  local members = {}
  if seq_ids then
    for m in string.gmatch(s[4] or '', '%S+') do table.insert(members, m) end
  else
    members = redis.call('SMEMBERS', followers)
  end
  local wake
  local gone = {}
  for _, m in ipairs(members) do
    local target
    local bar = string.find(m, '|', 1, true)
    if bar then
      if string.sub(m, bar + 1) == events then target = string.sub(m, 1, bar - 1) end
    else
      local nonce, n = string.match(m, '^(%d%d%d%d%d%d%d%d%d%d%d%d)(%d+)$')
      if n == stream then target = 'mcpr:wake:{' .. nonce .. '}' end
    end
    if target and target ~= me then
      if not wake then
        wake = {'NOMKSTREAM', 'MAXLEN', '~', 16384, '*', 'k', events}
        local bytes = 0
        for i = 10, #ARGV do bytes = bytes + #ARGV[i] end
        if bytes <= 1024 and #ARGV - 9 <= 16 then
          table.insert(wake, 's'); table.insert(wake, first)
          table.insert(wake, 't'); table.insert(wake, now_ms)
          for i = 10, #ARGV do
            table.insert(wake, 'm'); table.insert(wake, ARGV[i])
          end
        end
      end
      local added = redis.call('XADD', target, unpack(wake))
      if not added then
        if seq_ids then gone[m] = true else redis.call('SREM', followers, m) end
      end
    end
  end
  if next(gone) then
    w_set(session, w_keep(s[4], function(m) return gone[m] end))
  end
end
return {h, f}
