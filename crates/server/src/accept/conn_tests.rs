//! The connection watch: when a change rings it.

use super::*;
use futures_util::FutureExt;

/// Whether the watch was rung (a permit is waiting), taking the ring.
fn rung(a: &Activity) -> bool {
    a.changed.notified().now_or_never().is_some()
}

#[test]
fn a_keep_alive_connections_requests_do_not_ring_its_watch() {
    let a = Activity::new(Instant::now(), ConnLimits::default());
    for _ in 0..3 {
        // The watch looks while the connection is idle (armed for idle
        // time) and while a request is in flight (nothing due): neither
        // the next request's first byte nor a response's end is due
        // before it looks again.
        assert!(matches!(a.check(), Ok(Some(_))), "not expired, armed");
        a.on_read();
        a.on_request(false, false);
        assert!(matches!(a.check(), Ok(Some(_))), "armed while in flight");
        a.on_response_end();
        assert!(!rung(&a));
    }
}

#[test]
fn a_change_before_the_watch_first_looked_rings_it() {
    let a = Activity::new(Instant::now(), ConnLimits::default());
    a.on_request(false, false);
    assert!(!rung(&a), "nothing is due while a request is in flight");
    a.on_response_end();
    assert!(rung(&a));
}

#[test]
fn a_body_read_after_its_request_began_is_no_next_header() {
    let limits = ConnLimits::default();
    let a = Activity::new(Instant::now(), limits);
    a.on_read();
    a.on_request(false, true);
    // The POST's body arrives in a read of its own.
    a.on_read();
    a.on_response_end();
    let s = a.lock();
    let (header_due, idle_at) = s.deadlines(&limits);
    assert_eq!(header_due, None, "no next header has begun");
    assert_eq!(idle_at, Some(s.idle_since + limits.keep_alive_idle));
}

#[test]
fn a_pipelined_header_after_the_body_is_timed_from_the_response_end() {
    let limits = ConnLimits::default();
    let a = Activity::new(Instant::now(), limits);
    a.on_read();
    a.on_request(false, true);
    a.on_read();
    a.on_body_end();
    // The next request's first bytes, before this one's response ends.
    a.on_read();
    a.on_response_end();
    let s = a.lock();
    let (header_due, idle_at) = s.deadlines(&limits);
    assert_eq!(
        header_due,
        Some(s.idle_since + limits.header_read_timeout),
        "the header limit, from the response's end"
    );
    assert_eq!(idle_at, None, "a header has begun: not idle");
}
