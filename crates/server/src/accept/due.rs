//! What the connection watch ([`super::conn`]) knows, and when it is due:
//! the instants a connection's next request header is due and it idles
//! out, and whether a change makes it due before the watch would look
//! again (only then is the watch rung: a keep-alive connection's requests
//! would otherwise wake it, and re-poll the connection, three times each).

use tokio::time::Instant;

use super::ConnLimits;

/// What the watch knows about a connection.
pub(super) struct State {
    /// Requests whose responses have not ended.
    pub(super) active: usize,
    /// When `active` last dropped to zero (or the connection began).
    pub(super) idle_since: Instant,
    /// When the first byte of the next request arrived, if it has: a byte
    /// read with no request in flight, or after the request in flight had
    /// read its whole body.
    pub(super) read_since_request: Option<Instant>,
    /// The request in flight has not read its whole body yet: a read now
    /// is its body, not the next request's header.
    pub(super) body_pending: bool,
    /// Whether any request has begun.
    pub(super) served: bool,
    /// Whether the connection speaks HTTP/2, whose control frames (PING,
    /// WINDOW_UPDATE) arrive between requests and are no request header.
    pub(super) h2: bool,
    /// When the watch will look again (`None`: only when rung): a change
    /// rings it only if it makes the connection due sooner than that, so a
    /// keep-alive connection's requests do not wake it (and re-poll the
    /// connection) three times each.
    pub(super) armed: Option<Instant>,
}

impl State {
    /// When the next request's header is due and when the connection idles
    /// out, as things stand (neither while a request is in flight).
    pub(super) fn deadlines(&self, limits: &ConnLimits) -> (Option<Instant>, Option<Instant>) {
        if self.active > 0 {
            return (None, None);
        }
        // The first request's header is due from the start; a later one from
        // its first byte (HTTP/1 only: HTTP/2 control frames are no header).
        let header_from = if !self.served {
            Some(self.idle_since)
        } else if self.h2 {
            None
        } else {
            self.read_since_request.map(|t| t.max(self.idle_since))
        };
        let header_due = header_from.map(|t| t + limits.header_read_timeout);
        // HTTP/1 bytes after the last request are the next request's header,
        // timed above; HTTP/2 is idle whatever control frames arrive.
        let idle_at = (self.h2 || self.read_since_request.is_none())
            .then_some(self.idle_since + limits.keep_alive_idle);
        (header_due, idle_at)
    }

    /// Whether the watch must be rung: the connection is due before the
    /// watch would look again.
    pub(super) fn due_sooner(&self, limits: &ConnLimits) -> bool {
        let (header_due, idle_at) = self.deadlines(limits);
        let due = match (header_due, idle_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        due.is_some_and(|due| self.armed.is_none_or(|armed| due < armed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn limits() -> ConnLimits {
        ConnLimits {
            header_read_timeout: Duration::from_secs(30),
            keep_alive_idle: Duration::from_secs(60),
            ..ConnLimits::default()
        }
    }

    fn fresh(t0: Instant) -> State {
        State {
            active: 0,
            idle_since: t0,
            read_since_request: None,
            body_pending: false,
            served: false,
            h2: false,
            armed: None,
        }
    }

    #[test]
    fn nothing_is_due_while_a_request_is_in_flight() {
        let mut s = fresh(Instant::now());
        s.active = 1;
        assert_eq!(s.deadlines(&limits()), (None, None));
        assert!(!s.due_sooner(&limits()));
    }

    #[test]
    fn the_watch_is_rung_only_for_a_deadline_before_the_one_it_waits_for() {
        let t0 = Instant::now();
        let l = limits();
        let mut s = fresh(t0);
        // Waiting for nothing: any deadline rings it.
        assert!(s.due_sooner(&l));
        s.armed = Some(t0 + Duration::from_secs(30));
        // The first header is due at t0 + 30 s, what it waits for.
        assert!(!s.due_sooner(&l));
        // A response ended at t0 + 1 s: idle at t0 + 61 s, later: not rung.
        s.served = true;
        s.idle_since = t0 + Duration::from_secs(1);
        assert_eq!(s.deadlines(&l), (None, Some(t0 + Duration::from_secs(61))));
        assert!(!s.due_sooner(&l));
        // A shorter keep-alive than the header timeout: idle before the
        // armed instant, rung.
        let mut short = l;
        short.keep_alive_idle = Duration::from_secs(5);
        assert!(s.due_sooner(&short));
        // The next request's first byte at t0 + 2 s: its header is due at
        // t0 + 32 s, after the armed t0 + 30 s: not rung.
        s.read_since_request = Some(t0 + Duration::from_secs(2));
        assert_eq!(s.deadlines(&l), (Some(t0 + Duration::from_secs(32)), None));
        assert!(!s.due_sooner(&l));
        // Armed for the idle instant the response's end made (t0 + 61 s):
        // the header, due sooner, rings it.
        s.armed = Some(t0 + Duration::from_secs(61));
        assert!(s.due_sooner(&l));
    }
}
