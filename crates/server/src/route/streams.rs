//! Opening a request stream: the log's unit of a call. Its record names
//! the call and the instance that runs it (the orphan sweep's key), and it
//! is subscribed from its start, so whoever reads it sees every event.

use std::time::Instant;

use mcp_resume_log::{Seq, StreamKey, Subscription};

use crate::error::ApiError;
use crate::route::reply::retrying;
use crate::route::state::AppState;

/// Opens the request stream `R` of a call (its record names the call's id
/// and this instance, for the orphan sweep) and takes its commit point, so
/// the stream will see every event of the call. While the log is
/// unavailable each step is tried again until `deadline` (one attempt
/// when it has passed).
pub(crate) async fn open_call_stream(
    state: &AppState,
    session: &str,
    id: &serde_json::Value,
    deadline: Instant,
) -> Result<(StreamKey, Seq, Subscription), ApiError> {
    open_stream(
        state,
        session,
        crate::route::orphans::record(id, state.log.instance()),
        deadline,
    )
    .await
}

/// Opens a request stream with record `meta` (within the session's limit)
/// and subscribes to it from its start, each step tried again while the log
/// is unavailable until `deadline`. An open whose outcome was unknown and
/// is tried again may leave an empty stream behind; nothing reads it, and
/// the sweep ends it like any call's once this instance is gone.
pub(crate) async fn open_stream(
    state: &AppState,
    session: &str,
    meta: bytes::Bytes,
    deadline: Instant,
) -> Result<(StreamKey, Seq, Subscription), ApiError> {
    let opened = open_for(state, session, None, meta, deadline).await?;
    Ok(opened.expect("an open with no owner to check is never refused for one"))
}

/// [`open_stream`] for a carrier of a message forwarded to `owner`, the
/// session's lease holder: opened only while `owner` still holds the lease
/// ([`Leases::open_carrier`](mcp_resume_log::Leases::open_carrier)); `None`
/// when it gave it up or lost it, and the message must be located again.
pub(crate) async fn open_carrier(
    state: &AppState,
    session: &str,
    owner: &str,
    meta: bytes::Bytes,
    deadline: Instant,
) -> Result<Option<(StreamKey, Seq, Subscription)>, ApiError> {
    open_for(state, session, Some(owner), meta, deadline).await
}

/// [`open_stream`], fenced on `owner` when given.
async fn open_for(
    state: &AppState,
    session: &str,
    owner: Option<&str>,
    meta: bytes::Bytes,
    deadline: Instant,
) -> Result<Option<(StreamKey, Seq, Subscription)>, ApiError> {
    // Past it the log refuses the open and writes nothing (429).
    let max = state.config.max_request_streams;
    let opened = retrying(state, Some(deadline), || async {
        match owner {
            Some(owner) => {
                state
                    .log
                    .open_carrier(session, owner, meta.clone(), max)
                    .await
            }
            None => state
                .log
                .open_request_stream(session, meta.clone(), max)
                .await
                .map(Some),
        }
    })
    .await?;
    let Some(r) = opened else {
        return Ok(None);
    };
    let stream = StreamKey::Request(r);
    let (bounds, sub) = retrying(state, Some(deadline), || {
        state.log.subscribe(session, stream)
    })
    .await?;
    Ok(Some((stream, bounds.head, sub)))
}
