//! The upgrade decision (docs/protocol.md 4 and 5.2 step 4, 5.6): where may a
//! reader start, given what it has seen and what the log has committed?

use crate::{CursorDiscontinuity, Seq};

/// Decides the cursor a reader starts from, or why it cannot start.
///
/// One function for both sides, so they cannot disagree:
/// - the server calls it at the commit point with `committed = Some(C)` and the
///   log's `floor`;
/// - the client calls it on a `101` with `committed` = the echoed
///   `X-MCP-Resume-Cursor` (`None` when absent) and `floor = None` (unknown).
///
/// On success the reader's stream starts after `prior`: events
/// `prior+1 ..= C` are replayed, and `C` is what the client must ack.
pub fn decide_start(
    prior: Seq,
    committed: Option<Seq>,
    floor: Option<Seq>,
) -> Result<Seq, CursorDiscontinuity> {
    let Some(head) = committed else {
        return Err(CursorDiscontinuity::MissingEcho { prior });
    };
    let floor_known = floor.unwrap_or(0);
    if prior > head {
        return Err(match floor {
            // The server knows the floor: this is the 409 `ahead` of docs/protocol.md 4.
            Some(floor) => CursorDiscontinuity::Ahead { prior, head, floor },
            // The client only knows the echo went backwards.
            None => CursorDiscontinuity::EchoBelowPrior { prior, echo: head },
        });
    }
    if prior < floor_known.saturating_sub(1) {
        return Err(CursorDiscontinuity::Truncated {
            prior,
            head,
            floor: floor_known,
        });
    }
    Ok(prior)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_branch() {
        // echo missing
        assert_eq!(
            decide_start(5, None, None),
            Err(CursorDiscontinuity::MissingEcho { prior: 5 })
        );
        // ahead, server side
        assert_eq!(
            decide_start(9, Some(7), Some(1)),
            Err(CursorDiscontinuity::Ahead {
                prior: 9,
                head: 7,
                floor: 1
            })
        );
        // echo below prior, client side
        assert_eq!(
            decide_start(9, Some(7), None),
            Err(CursorDiscontinuity::EchoBelowPrior { prior: 9, echo: 7 })
        );
        // truncated: floor 10 means 1..=9 are gone, so prior 8 misses 9
        assert_eq!(
            decide_start(8, Some(20), Some(10)),
            Err(CursorDiscontinuity::Truncated {
                prior: 8,
                head: 20,
                floor: 10
            })
        );
        // exactly at the floor edge: prior 9 needs 10.., which is retained
        assert_eq!(decide_start(9, Some(20), Some(10)), Ok(9));
        // prior == head: nothing to replay
        assert_eq!(decide_start(20, Some(20), Some(10)), Ok(20));
        // empty log: head 0, floor 1
        assert_eq!(decide_start(0, Some(0), Some(1)), Ok(0));
        // everything trimmed: head 5, floor 6, a reader at 5 is fine, at 4 is not
        assert_eq!(decide_start(5, Some(5), Some(6)), Ok(5));
        assert!(decide_start(4, Some(5), Some(6)).is_err());
        // client side, echo fine
        assert_eq!(decide_start(3, Some(3), None), Ok(3));
        assert_eq!(decide_start(3, Some(8), None), Ok(3));
    }

    #[test]
    fn discontinuity_bodies_follow_section_4() {
        let body = CursorDiscontinuity::Ahead {
            prior: 9,
            head: 7,
            floor: 1,
        }
        .to_body();
        let json = serde_json::to_value(&body).unwrap();
        assert_eq!(json["error"], "cursor-discontinuity");
        assert_eq!(json["reason"], "ahead");
        assert_eq!(json["resume-cursor"], 7);
        assert_eq!(json["head"], 7);
        assert_eq!(json["floor"], 1);
    }
}
