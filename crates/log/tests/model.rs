//! Property test: random interleavings of append, read, subscribe, pin,
//! unpin, restart and session end, against every backend, checked against a
//! plain model of what the log must hold.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::{backends, msg};
use mcp_resume_log::{LogError, PinId, Retention, StreamKey, Subscription};
use proptest::prelude::*;

const S: StreamKey = StreamKey::Session;
const MAX_EVENTS: u64 = 6;

#[derive(Debug, Clone)]
enum Op {
    Append { s: usize, n: u64 },
    Read { s: usize, back: u64 },
    Subscribe { s: usize },
    Pin { s: usize, back: u64 },
    Unpin { s: usize },
    End { s: usize },
    Restart,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..2usize, 1..4u64).prop_map(|(s, n)| Op::Append { s, n }),
        3 => (0..2usize, 0..9u64).prop_map(|(s, back)| Op::Read { s, back }),
        1 => (0..2usize).prop_map(|s| Op::Subscribe { s }),
        1 => (0..2usize, 0..5u64).prop_map(|(s, back)| Op::Pin { s, back }),
        1 => (0..2usize).prop_map(|s| Op::Unpin { s }),
        1 => (0..2usize).prop_map(|s| Op::End { s }),
        1 => Just(Op::Restart),
    ]
}

#[derive(Default)]
struct Model {
    head: u64,
    floor: u64,
    ended: bool,
    pins: Vec<(PinId, u64)>,
    subs: Vec<(u64, Subscription)>,
}

impl Model {
    fn count_floor(&self) -> u64 {
        let wanted = (self.head + 1).saturating_sub(MAX_EVENTS).max(self.floor);
        match self.pins.iter().map(|p| p.1).min() {
            Some(pin) => wanted.min(pin.max(self.floor)),
            None => wanted,
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn log_matches_model(ops in proptest::collection::vec(op(), 1..40)) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let mut retention = Retention::default();
            retention.max_events = MAX_EVENTS;
            retention.max_age = Duration::from_secs(3600);
            for mut b in backends(retention, 1024).await {
                let ids = ["p", "q"];
                let mut model: Vec<Model> = ids.iter().map(|_| Model { floor: 1, ..Default::default() }).collect();
                for id in ids {
                    b.log().create_session(id, Bytes::new()).await.unwrap();
                }
                for op in &ops {
                    let log = b.log().clone();
                    match *op {
                        Op::Append { s, n } => {
                            let m = &mut model[s];
                            let r = log.append(ids[s], S, (m.head + 1..=m.head + n).map(msg).collect()).await;
                            if m.ended {
                                assert!(matches!(r, Err(LogError::NoSession(_))));
                                continue;
                            }
                            m.head += n;
                            assert_eq!(r.unwrap(), m.head);
                            m.floor = m.count_floor();
                            let head = m.head;
                            for (last, sub) in &mut m.subs {
                                while *last < head {
                                    // In-process backends deliver before `append` returns; Redis's
                                    // tail delivers shortly after. Either way: every event, in order.
                                    let e = tokio::time::timeout(Duration::from_secs(5), sub.next())
                                        .await
                                        .expect("the tail delivers every committed event")
                                        .expect("the tail does not end");
                                    assert_eq!(e.seq, *last + 1);
                                    assert_eq!(e.message, msg(e.seq));
                                    *last = e.seq;
                                }
                                assert!(sub.try_next().is_none(), "nothing uncommitted is readable");
                            }
                        }
                        Op::Read { s, back } => {
                            let m = &model[s];
                            let after = (m.head + 1).saturating_sub(back);
                            let r = log.read(ids[s], S, after, 100).await;
                            if m.ended {
                                assert!(matches!(r, Err(LogError::NoSession(_))), "{} {r:?}", b.name);
                            } else if after > m.head {
                                assert_eq!(r, Err(LogError::Ahead { cursor: after, head: m.head, floor: m.floor }));
                            } else if after + 1 < m.floor {
                                assert_eq!(r, Err(LogError::Truncated { cursor: after, head: m.head, floor: m.floor }), "{}", b.name);
                            } else {
                                let seqs: Vec<u64> = r.unwrap().iter().map(|e| e.seq).collect();
                                assert_eq!(seqs, (after + 1..=m.head).collect::<Vec<_>>(), "{}", b.name);
                            }
                            if !m.ended {
                                let bounds = log.bounds(ids[s], S).await.unwrap();
                                assert_eq!((bounds.head, bounds.floor), (m.head, m.floor), "{}", b.name);
                            }
                        }
                        Op::Subscribe { s } => {
                            let m = &mut model[s];
                            match log.subscribe(ids[s], S).await {
                                Ok((bounds, sub)) => {
                                    assert!(!m.ended);
                                    assert_eq!(bounds.head, m.head);
                                    m.subs.push((m.head, sub));
                                }
                                Err(e) => assert!(m.ended && matches!(e, LogError::NoSession(_))),
                            }
                        }
                        Op::Pin { s, back } => {
                            let m = &mut model[s];
                            let seq = (m.head + 1).saturating_sub(back).max(m.floor);
                            if let Ok(pin) = log.pin(ids[s], S, seq, Duration::from_secs(600)).await {
                                m.pins.push((pin, seq));
                            }
                        }
                        Op::Unpin { s } => {
                            if let Some((pin, _)) = model[s].pins.pop() {
                                log.unpin(ids[s], pin).await.unwrap();
                            }
                        }
                        Op::End { s } => {
                            let m = &mut model[s];
                            let r = log.end_session(ids[s]).await;
                            assert_eq!(r.is_ok(), !m.ended);
                            m.ended = true;
                            m.pins.clear();
                            for (_, mut sub) in m.subs.drain(..) {
                                assert_eq!(sub.next().await.map(|e| e.seq), Err(LogError::SessionEnded));
                            }
                        }
                        Op::Restart => {
                            if b.durable() {
                                drop(log);
                                let keep_pins = b.pins_survive_restart();
                                for m in &mut model {
                                    // Subscriptions belong to the process that died; pins too,
                                    // unless they live in the shared store.
                                    if !keep_pins {
                                        m.pins.clear();
                                    }
                                    m.subs.clear();
                                }
                                b.restart().await;
                            }
                        }
                    }
                }
            }
        });
    }
}
