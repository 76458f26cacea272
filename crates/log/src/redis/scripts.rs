//! The Lua scripts of the Redis backend (`lua/*.lua`): each is one atomic
//! step in Redis (a seq assigned, appended and trimmed together; a session
//! ended with its streams), so no other instance can see half of it.

use redis::Script;

// Each script's file says what it does and names its keys and arguments
// first (`local session = KEYS[1]`); the key layout is in `README.md`. The
// scripts that meet sessions of the seq-id layout begin with its helpers
// (`lua/seq_ids.lua`).
pub(super) const APPEND: &str = concat!(
    include_str!("lua/seq_ids.lua"),
    include_str!("lua/append.lua")
);
pub(super) const CREATE: &str = include_str!("lua/create.lua");
pub(super) const END: &str = include_str!("lua/end.lua");
pub(super) const FORGET: &str = include_str!("lua/forget.lua");
pub(super) const ADOPT: &str = include_str!("lua/adopt.lua");
pub(super) const OPEN_REQUEST: &str = include_str!("lua/open_request.lua");
pub(super) const IF_LIVE_HSET: &str = include_str!("lua/if_live_hset.lua");
pub(super) const SWAP_META: &str = include_str!("lua/swap_meta.lua");
pub(super) const COMMIT: &str = include_str!("lua/commit.lua");
pub(super) const REQUEST_META: &str = concat!(
    include_str!("lua/seq_ids.lua"),
    include_str!("lua/request_meta.lua")
);
pub(super) const BOUNDS: &str = concat!(
    include_str!("lua/seq_ids.lua"),
    include_str!("lua/bounds.lua")
);
pub(super) const CLAIM: &str = include_str!("lua/claim.lua");
pub(super) const RELEASE: &str = include_str!("lua/release.lua");
pub(super) const PIN: &str = include_str!("lua/pin.lua");
pub(super) const RETIRE: &str = concat!(
    include_str!("lua/seq_ids.lua"),
    include_str!("lua/retire.lua")
);
pub(super) const BUCKET_LEASES: &str = include_str!("lua/buckets.lua");
/// Sent as `EVAL` by `tail/bell.rs` on its rare paths, not loaded.
pub(in crate::redis) const SADD_IF_LIVE: &str = concat!(
    include_str!("lua/seq_ids.lua"),
    include_str!("lua/sadd_if_live.lua")
);
/// Run by `tail/bell.rs` when it drops followers.
pub(in crate::redis) const UNFOLLOW: &str = concat!(
    include_str!("lua/seq_ids.lua"),
    include_str!("lua/unfollow.lua")
);

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
    pub release: Script,
    pub pin: Script,
    pub retire: Script,
    pub buckets: Script,
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
            release: Script::new(RELEASE),
            pin: Script::new(PIN),
            retire: Script::new(RETIRE),
            buckets: Script::new(BUCKET_LEASES),
        }
    }
}
