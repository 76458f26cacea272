//! The Lua scripts of the Redis backend: each is one atomic step in Redis
//! (a seq assigned, appended and trimmed together; a session ended with its
//! streams), so no other instance can see half of it.

use redis::Script;

/// Assigns seqs, appends, trims by count (or to `ARGV[4]`, for age) short of
/// pins, and moves the heads, in one step. With a key (`ARGV[6]`, kept ten
/// minutes in `KEYS[5]`), a batch already appended under it is not appended
/// again: its head is returned (a retry after an unknown outcome). With an
/// owner (`ARGV[7]`), nothing is appended unless that instance holds the
/// session's lease (field `o`): `{-4}`, the fence of a stalled owner.
/// Messages are `ARGV[8..]`.
pub(super) const APPEND: &str = r#"
if redis.call('HGET', KEYS[1], 'e') ~= '0' then return {-1} end
local once = ARGV[6] or ''
if once ~= '' then
  local done = redis.call('HGET', KEYS[5], once)
  if done then return {tonumber(done), -3} end
end
local owner = ARGV[7] or ''
if owner ~= '' and redis.call('HGET', KEYS[1], 'o') ~= owner then return {-4} end
local h = tonumber(redis.call('HGET', KEYS[2], 'h'))
if not h then return {-2} end
local f = tonumber(redis.call('HGET', KEYS[2], 'f'))
for i = 8, #ARGV do
  h = h + 1
  redis.call('XADD', KEYS[3], h .. '-0', 't', ARGV[2], 'm', ARGV[i])
end
local want = h + 1 - tonumber(ARGV[3])
if tonumber(ARGV[4]) > want then want = tonumber(ARGV[4]) end
if want > h + 1 then want = h + 1 end
if want > f then
  local pins = redis.call('HGETALL', KEYS[4])
  for j = 1, #pins, 2 do
    local n, seq, exp = string.match(pins[j + 1], '(%d+):(%d+):(%d+)')
    if tonumber(exp) > tonumber(ARGV[2]) then
      if n == ARGV[1] and tonumber(seq) < want then want = math.max(tonumber(seq), f) end
    else
      redis.call('HDEL', KEYS[4], pins[j])
    end
  end
  if want > f then
    redis.call('XTRIM', KEYS[3], 'MINID', want .. '-0')
    f = want
    if ARGV[1] ~= '0' and h > 0 and f > h then
      -- A request stream retention emptied: its record and its (empty)
      -- stream go; the state hash keeps head and floor for loud reads.
      redis.call('HDEL', KEYS[2], 'm')
      redis.call('DEL', KEYS[3])
    end
  end
end
if ARGV[5] == '1' then
  redis.call('HSET', KEYS[2], 'h', h, 'f', f, 'c', h)
else
  redis.call('HSET', KEYS[2], 'h', h, 'f', f)
end
if once ~= '' then
  redis.call('HSET', KEYS[5], once, h)
  redis.call('PEXPIRE', KEYS[5], 600000)
end
return {h, f}
"#;

/// Creates a session unless its id exists (live or a tombstone).
pub(super) const CREATE: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 1 then return -1 end
redis.call('HSET', KEYS[1], 'c', ARGV[1], 'r', 1, 'e', 0, 'm', ARGV[2], 'a', ARGV[1])
redis.call('HSET', KEYS[2], 'h', 0, 'f', 1, 'c', 0)
if KEYS[3] then redis.call('SADD', KEYS[3], ARGV[3]) end
return 0
"#;

/// Ends a session: its streams and pins go, a tombstone stays and is listed
/// in `mcpr:ended` by end time for its expiry.
pub(super) const END: &str = r#"
if redis.call('HGET', KEYS[1], 'e') ~= '0' then return -1 end
local r = tonumber(redis.call('HGET', KEYS[1], 'r'))
for n = 0, r - 1 do
  redis.call('DEL', ARGV[1] .. ':st:' .. n, ARGV[1] .. ':ev:' .. n)
end
redis.call('DEL', ARGV[1] .. ':pin', ARGV[1] .. ':f', ARGV[1] .. ':once')
redis.call('HSET', KEYS[1], 'e', 1)
redis.call('HDEL', KEYS[1], 'm', 'a', 'r', 'o')
if KEYS[2] then
  redis.call('SREM', KEYS[2], ARGV[2])
  redis.call('ZADD', KEYS[3], ARGV[3], ARGV[2])
end
return 0
"#;

/// Forgets one tombstone, unless it ended after the cutoff `ARGV[2]` (ended
/// again since it was listed) or is live. Without `KEYS[2]` (a cluster,
/// where the ended index is in another slot) the caller checks the index first
/// and unlists the id after.
pub(super) const FORGET: &str = r#"
if KEYS[2] then
  local at = redis.call('ZSCORE', KEYS[2], ARGV[1])
  if not at or tonumber(at) > tonumber(ARGV[2]) then return 0 end
end
if redis.call('HGET', KEYS[1], 'e') == '1' then redis.call('DEL', KEYS[1]) end
if KEYS[2] then redis.call('ZREM', KEYS[2], ARGV[1]) end
return 1
"#;

/// Lists as ended at `ARGV[1]`, in the ended index `KEYS[1]`, each tombstone
/// `KEYS[i]` (id `ARGV[i]`) not listed yet: one an older version left
/// without an end time. An end time already listed is kept (`NX`), and a
/// live session or a key that is no session hash is left alone.
pub(super) const ADOPT: &str = r#"
local n = 0
for i = 2, #KEYS do
  local e = redis.pcall('HGET', KEYS[i], 'e')
  if e == '1' then
    n = n + redis.call('ZADD', KEYS[1], 'NX', ARGV[1], ARGV[i])
  end
end
return n
"#;

/// Numbers a new request stream and stores its record with its state.
pub(super) const OPEN_REQUEST: &str = r#"
if redis.call('HGET', KEYS[1], 'e') ~= '0' then return -1 end
local r = redis.call('HINCRBY', KEYS[1], 'r', 1) - 1
redis.call('HSET', ARGV[1] .. ':st:' .. r, 'h', 0, 'f', 1, 'c', 0, 'm', ARGV[2])
return r
"#;

/// Sets one field of a live session's hash.
pub(super) const IF_LIVE_HSET: &str = r#"
if redis.call('HGET', KEYS[1], 'e') ~= '0' then return -1 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 0
"#;

/// Compare-and-set of a live session's record: `1` replaced, `0` the
/// record is not `ARGV[1]`, `-1` no live session.
pub(super) const SWAP_META: &str = r#"
local session = KEYS[1]
local expect, meta = ARGV[1], ARGV[2]
if redis.call('HGET', session, 'e') ~= '0' then return -1 end
if (redis.call('HGET', session, 'm') or '') ~= expect then return 0 end
redis.call('HSET', session, 'm', meta)
return 1
"#;

/// After `WAIT`: the committed head `c` moves up to `ARGV[1]`. Replication
/// is one ordered stream, so replicas holding seq N hold everything before it.
pub(super) const COMMIT: &str = r#"
local c = tonumber(redis.call('HGET', KEYS[1], 'c'))
if c and tonumber(ARGV[1]) > c then redis.call('HSET', KEYS[1], 'c', ARGV[1]) end
return 0
"#;

/// A request stream's record: `{0, meta}`, or `{-1}` no session, `{-2}` no
/// stream, `{-3, c, f}` retention took it with the events.
pub(super) const REQUEST_META: &str = r#"
if redis.call('HGET', KEYS[1], 'e') ~= '0' then return {-1} end
local b = redis.call('HMGET', KEYS[2], 'c', 'f', 'm')
if not b[1] then return {-2} end
if not b[3] then return {-3, tonumber(b[1]), tonumber(b[2])} end
return {0, b[3]}
"#;

/// A stream's committed head and floor, or why there are none.
pub(super) const BOUNDS: &str = r#"
if redis.call('HGET', KEYS[1], 'e') ~= '0' then return {-1} end
local b = redis.call('HMGET', KEYS[2], 'c', 'f')
if not b[1] then return {-2} end
local c, f = tonumber(b[1]), tonumber(b[2])
if f > c + 1 then f = c + 1 end
return {c, f}
"#;

/// Takes a live session's owner lease (field `o`) for `ARGV[1]` if it has no
/// owner or still names `ARGV[2]` (the owner the caller saw dead); returns the
/// owner after, or `-` for a session that is not live.
pub(super) const CLAIM: &str = r#"
if redis.call('HGET', KEYS[1], 'e') ~= '0' then return '-' end
local cur = redis.call('HGET', KEYS[1], 'o')
if (not cur) or cur == ARGV[2] then
  redis.call('HSET', KEYS[1], 'o', ARGV[1])
  return ARGV[1]
end
return cur
"#;

/// Every script, loaded once per log (the library sends `EVALSHA` and falls back to `EVAL`).
pub(super) struct Scripts {
    pub append: Script,
    pub create: Script,
    pub end: Script,
    pub open_request: Script,
    pub if_live_hset: Script,
    pub swap_meta: Script,
    pub bounds: Script,
    pub commit: Script,
    pub request_meta: Script,
    pub forget: Script,
    pub adopt: Script,
    pub claim: Script,
}

impl Scripts {
    /// Every script, not loaded yet (the first call loads each).
    pub fn new() -> Self {
        Self {
            append: Script::new(APPEND),
            create: Script::new(CREATE),
            end: Script::new(END),
            open_request: Script::new(OPEN_REQUEST),
            if_live_hset: Script::new(IF_LIVE_HSET),
            swap_meta: Script::new(SWAP_META),
            bounds: Script::new(BOUNDS),
            commit: Script::new(COMMIT),
            request_meta: Script::new(REQUEST_META),
            forget: Script::new(FORGET),
            adopt: Script::new(ADOPT),
            claim: Script::new(CLAIM),
        }
    }
}
