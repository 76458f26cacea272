//! Drives the gate and the reader's gap check through random interleavings of
//! appends, sends, deliveries and acks, as quinn's `random_interaction` does
//! for QUIC: no sockets, just the state machines and two FIFO queues.

use std::collections::VecDeque;

use mcp_resume_proto::{decide_start, Gate, GateVerdict, SeqChecker};
use proptest::prelude::*;

#[derive(Debug, Clone, Copy)]
enum Step {
    Append,
    ServerSend,
    Deliver,
    DeliverAck,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        Just(Step::Append),
        Just(Step::ServerSend),
        Just(Step::Deliver),
        Just(Step::DeliverAck),
    ]
}

/// Runs the safe upgrade; returns the seqs the client accepted.
fn run_safe(initial_head: u64, prior: u64, steps: &[Step]) -> (Vec<u64>, u64) {
    let mut head = initial_head;
    // The commit point: C is the head at this instant.
    let committed = head;
    let start = decide_start(prior, Some(committed), Some(1)).expect("prior <= head");
    assert_eq!(start, prior, "a resume never starts later than asked");
    let mut gate = Gate::new(prior, head);
    let mut to_client: VecDeque<u64> = VecDeque::new();
    let mut to_server: VecDeque<u64> = VecDeque::new();
    let mut client = SeqChecker::new(prior);
    // The client checks the echo with the same decision function.
    decide_start(prior, Some(committed), None).unwrap();
    client.expect_replay_until(committed);
    let mut seen = Vec::new();
    let mut acked = false;
    let ack_now = |client: &mut SeqChecker, to_server: &mut VecDeque<u64>, acked: &mut bool| {
        if !*acked {
            if let Some(c) = client.ack_due() {
                to_server.push_back(c);
                client.acked();
                *acked = true;
            }
        }
    };
    ack_now(&mut client, &mut to_server, &mut acked);
    let run = |s: Step,
               head: &mut u64,
               gate: &mut Gate,
               to_client: &mut VecDeque<u64>,
               to_server: &mut VecDeque<u64>,
               client: &mut SeqChecker,
               seen: &mut Vec<u64>,
               acked: &mut bool| {
        match s {
            Step::Append => *head += 1,
            Step::ServerSend => {
                let next = gate.last_sent() + 1;
                if next <= *head && gate.offer(next).unwrap() == GateVerdict::Send {
                    to_client.push_back(next);
                }
            }
            Step::Deliver => {
                if let Some(seq) = to_client.pop_front() {
                    client
                        .on_event(seq)
                        .expect("safe upgrade never shows a gap");
                    seen.push(seq);
                    ack_now(client, to_server, acked);
                }
            }
            Step::DeliverAck => {
                if let Some(c) = to_server.pop_front() {
                    gate.ack(c).unwrap();
                }
            }
        }
    };
    for &s in steps {
        run(
            s,
            &mut head,
            &mut gate,
            &mut to_client,
            &mut to_server,
            &mut client,
            &mut seen,
            &mut acked,
        );
    }
    // Quiesce: no more appends, everything flows.
    for _ in 0..(4 * (head + 4)) {
        for s in [Step::ServerSend, Step::Deliver, Step::DeliverAck] {
            run(
                s,
                &mut head,
                &mut gate,
                &mut to_client,
                &mut to_server,
                &mut client,
                &mut seen,
                &mut acked,
            );
        }
    }
    (seen, head)
}

/// The legacy upgrade of docs/protocol.md 9: live from the head at the 101, no echo, no replay.
fn run_legacy(initial_head: u64, prior: u64, appends_after: u64) -> Vec<u64> {
    let start = initial_head; // the head at the moment of the 101
    let _ = prior;
    (start + 1..=initial_head + appends_after).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn safe_upgrade_is_contiguous_and_complete(
        initial_head in 0u64..30,
        prior_frac in 0.0f64..=1.0,
        steps in proptest::collection::vec(step(), 0..200),
    ) {
        let prior = (initial_head as f64 * prior_frac) as u64;
        let (seen, head) = run_safe(initial_head, prior, &steps);
        let expected: Vec<u64> = (prior + 1..=head).collect();
        prop_assert_eq!(seen, expected);
    }

    #[test]
    fn client_refuses_a_legacy_101(prior in 0u64..100) {
        prop_assert!(decide_start(prior, None, None).is_err());
    }
}

#[test]
fn legacy_upgrade_loses_the_handshake_window() {
    // The seed's failure: reader at 47, events 48..=51 committed during the handshake.
    let seen = run_legacy(51, 47, 3);
    let checker_result = {
        let mut c = SeqChecker::new(47);
        seen.iter().try_for_each(|&s| c.on_event(s))
    };
    assert_eq!(seen.first(), Some(&52));
    assert!(
        checker_result.is_err(),
        "the gap check must see 48..=51 missing"
    );
}

#[test]
fn gate_refuses_wrong_and_second_acks() {
    let mut g = Gate::new(3, 5);
    assert!(g.ack(4).is_err());
    g.ack(5).unwrap();
    assert!(g.ack(5).is_err());
    let g = Gate::new(3, 5);
    assert!(g.on_timeout().is_err());
    assert!(!g.heartbeat_allowed(3));
}
