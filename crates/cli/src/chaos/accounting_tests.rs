//! The accounting must see every kind of silent failure, count every
//! iteration, and fail the run: each test feeds it one defect.

use super::*;

use Expect::{Complete, Prefix};

/// Event `k` of call `count`, delivered with `seq`.
fn ev(seq: u64, k: u64, count: u64) -> (u64, String) {
    (seq, emit_message(k, count).to_string())
}

fn calls(c: &[(u64, Expect)]) -> Vec<Emitted> {
    c.iter()
        .map(|&(count, expect)| Emitted { count, expect })
        .collect()
}

/// `seqs` numbered in order, carrying the `(k, count)` given.
fn stream(events: &[(u64, u64)]) -> Vec<(u64, String)> {
    (1..)
        .zip(events)
        .map(|(seq, &(k, count))| ev(seq, k, count))
        .collect()
}

#[test]
fn the_server_wire_format_is_an_emitted_event() {
    let text = r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","logger":"emit","data":{"i":3,"count":7}}}"#;
    assert_eq!(as_emit(text), Some((3, 7)));
    let altered = text.replace("info", "warning");
    assert_eq!(as_emit(&altered), None);
}

#[test]
fn interleaved_complete_calls_delivered_once_are_clean() {
    let d = stream(&[(1, 3), (2, 3), (1, 2), (3, 3), (2, 2)]);
    let v = judge(&calls(&[(3, Complete), (2, Complete)]), &d, false);
    assert_eq!(
        v,
        Verdict {
            delivered: 5,
            ..Default::default()
        }
    );
    assert!(v.clean());
}

#[test]
fn a_skipped_event_is_a_silent_gap() {
    let d = vec![ev(1, 1, 5), ev(2, 2, 5), ev(4, 4, 5), ev(5, 5, 5)];
    let v = judge(&calls(&[(5, Complete)]), &d, false);
    assert_eq!((v.seq_holes, v.missing, v.silent_gaps()), (1, 1, 1));
    assert!(!v.clean());
}

#[test]
fn an_event_never_committed_is_a_gap_even_with_contiguous_seqs() {
    // The server renumbered: seqs look fine, the content shows k = 3 missing.
    let d = stream(&[(1, 4), (2, 4), (4, 4)]);
    let v = judge(&calls(&[(4, Complete)]), &d, false);
    assert_eq!((v.seq_holes, v.missing), (0, 1));
    assert!(!v.clean());
}

#[test]
fn a_tail_never_delivered_without_an_error_is_silent() {
    let d = stream(&[(1, 5), (2, 5), (3, 5)]);
    let v = judge(&calls(&[(5, Complete)]), &d, false);
    assert_eq!((v.missing, v.loud_undelivered), (2, 0));
    assert!(!v.clean());
}

#[test]
fn a_tail_lost_to_a_final_refusal_is_loud_but_a_hole_before_it_is_not() {
    let d = stream(&[(1, 5), (2, 5), (3, 5)]);
    let v = judge(&calls(&[(5, Complete)]), &d, true);
    assert_eq!((v.missing, v.loud_undelivered), (0, 2));
    assert!(v.clean());
    let d = vec![ev(1, 1, 5), ev(2, 2, 5), ev(4, 4, 5)];
    let v = judge(&calls(&[(5, Complete)]), &d, true);
    assert_eq!((v.silent_gaps(), v.loud_undelivered), (1, 1));
    assert!(!v.clean());
}

#[test]
fn a_repeated_seq_is_a_duplicate() {
    let d = vec![ev(1, 1, 3), ev(2, 2, 3), ev(2, 2, 3), ev(3, 3, 3)];
    let v = judge(&calls(&[(3, Complete)]), &d, false);
    assert_eq!((v.duplicates, v.mismatches, v.silent_gaps()), (1, 0, 0));
    assert!(!v.clean());
}

#[test]
fn a_repeated_event_under_a_new_seq_is_a_duplicate() {
    let d = stream(&[(1, 2), (1, 2), (2, 2)]);
    let v = judge(&calls(&[(2, Complete)]), &d, false);
    assert_eq!(v.duplicates, 1);
    assert!(!v.clean());
}

#[test]
fn one_seq_with_two_contents_is_a_mismatch() {
    let d = vec![ev(1, 1, 2), ev(1, 2, 2), ev(2, 2, 2)];
    let v = judge(&calls(&[(2, Complete)]), &d, false);
    assert_eq!((v.duplicates, v.mismatches), (1, 1));
}

#[test]
fn out_of_order_seqs_or_positions_are_reorders() {
    let d = vec![ev(1, 1, 3), ev(3, 3, 3), ev(2, 2, 3)];
    let v = judge(&calls(&[(3, Complete)]), &d, false);
    assert_eq!((v.reorders, v.seq_holes, v.missing), (1, 0, 0));
    let d = stream(&[(2, 2), (1, 2)]);
    let v = judge(&calls(&[(2, Complete)]), &d, false);
    assert_eq!(v.reorders, 1);
    assert!(!v.clean());
}

#[test]
fn messages_no_emit_numbered_are_mismatches() {
    let mut d = stream(&[(1, 2), (2, 2)]);
    d.push((3, r#"{"jsonrpc":"2.0","method":"x"}"#.into()));
    d.push(ev(4, 1, 9)); // a count the harness never asked for
    d.push(ev(5, 3, 2)); // k beyond its call's count
    let v = judge(&calls(&[(2, Complete)]), &d, false);
    assert_eq!(v.mismatches, 3);
    assert!(!v.clean());
}

#[test]
fn a_call_cut_short_is_clean_when_a_later_call_proves_the_tail_never_existed() {
    let d = stream(&[(1, 10), (2, 10), (3, 10), (4, 10), (1, 3), (2, 3), (3, 3)]);
    let v = judge(&calls(&[(10, Prefix), (3, Complete)]), &d, false);
    assert!(v.clean(), "{v:?}");
}

#[test]
fn a_cut_short_call_whose_committed_tail_was_skipped_is_a_gap() {
    let mut d = stream(&[(1, 10), (2, 10), (3, 10), (4, 10)]);
    d.extend([ev(8, 1, 3), ev(9, 2, 3), ev(10, 3, 3)]);
    let v = judge(&calls(&[(10, Prefix), (3, Complete)]), &d, false);
    assert_eq!(v.silent_gaps(), 3);
    assert!(!v.clean());
}

#[test]
fn a_resume_after_a_loud_close_must_still_deliver_everything_once() {
    // What was delivered before the close and after the resume, judged as one.
    let d = stream(&[(1, 4), (2, 4), (3, 4), (4, 4)]);
    let v = judge(&calls(&[(4, Complete)]), &d, false);
    assert!(v.clean());
    let mut r = Results::new("safe");
    r.record(Ok(Outcome {
        verdict: v,
        loud: vec!["close-4409".into()],
        fault: "dropws",
        ..Default::default()
    }));
    assert_eq!((r.judged_iterations, r.loud_iterations), (1, 0));
    assert_eq!(r.loud_failures, 1);
    assert!(r.failures().is_empty(), "{:?}", r.failures());
    // The same resume replaying an event twice fails the run.
    let mut d = d;
    d.insert(2, ev(2, 2, 4));
    let v = judge(&calls(&[(4, Complete)]), &d, false);
    let mut r = Results::new("safe");
    assert!(r
        .record(Ok(Outcome {
            verdict: v,
            detail: Some("dup".into()),
            ..Default::default()
        }))
        .is_some());
    assert_eq!(r.duplicates, 1);
    assert!(!r.failures().is_empty());
}

fn clean() -> Result<Outcome, HarnessError> {
    Ok(Outcome {
        fault: "none",
        ..Default::default()
    })
}

#[test]
fn an_iteration_never_judged_is_counted_and_fails_the_run() {
    let mut r = Results::new("safe");
    r.record(clean());
    assert!(r.failures().is_empty());
    let line = r.record(Err(HarnessError::FinalEmit("kills went on".into())));
    assert!(line.is_some_and(|l| l.contains("not judged")));
    assert_eq!((r.iterations, r.judged_iterations, r.errors), (2, 1, 1));
    assert_eq!(r.error_kinds.get("final emit"), Some(&1));
    assert_eq!(
        r.failures(),
        vec!["1 harness errors (iterations not judged)"]
    );
}

#[test]
fn a_gap_in_any_iteration_fails_the_run() {
    let mut r = Results::new("safe");
    r.record(clean());
    let d = vec![ev(1, 1, 3), ev(3, 3, 3)];
    let verdict = judge(&calls(&[(3, Complete)]), &d, false);
    r.record(Ok(Outcome {
        verdict,
        ..Default::default()
    }));
    assert_eq!((r.silent_gaps, r.gap_iterations, r.iterations), (1, 1, 2));
    assert_eq!(r.failures(), vec!["1 events lost silently"]);
}

#[test]
fn loud_iterations_are_counted_and_a_run_of_nothing_but_them_fails() {
    let mut r = Results::new("safe");
    let d = stream(&[(1, 5)]);
    let verdict = judge(&calls(&[(5, Complete)]), &d, true);
    r.record(Ok(Outcome {
        verdict,
        loud_end: true,
        loud: vec!["http-409".into()],
        ..Default::default()
    }));
    assert_eq!(
        (r.iterations, r.loud_iterations, r.judged_iterations),
        (1, 1, 0)
    );
    assert_eq!(r.loud_undelivered, 4);
    assert_eq!(r.failures(), vec!["no iteration was judged in full"]);
    r.record(clean());
    assert!(r.failures().is_empty());
}

#[test]
fn rmcp_empty_200s_are_counted_not_loud_and_what_they_withheld_is_a_silent_gap() {
    // rmcp refused the resume with an empty 200 and the reader never got the
    // tail: the iteration is judged in full (not loud), and the tail is lost.
    let mut r = Results::new("rmcp");
    let d = stream(&[(1, 3), (2, 3)]);
    let verdict = judge(&calls(&[(3, Complete)]), &d, false);
    r.record(Ok(Outcome {
        verdict,
        empty_200s: 2,
        fault: "dropsse",
        ..Default::default()
    }));
    assert_eq!((r.judged_iterations, r.loud_iterations), (1, 0));
    assert_eq!((r.empty_200s, r.loud_failures), (2, 0));
    assert_eq!(r.failures(), vec!["1 events lost silently"]);
}

#[test]
fn a_work_lost_report_is_the_servers_word_not_a_mismatch() {
    let lost = r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"error","logger":"mcp-resume","data":{"reason":"work-lost"}}}"#;
    let delivered = vec![ev(1, 1, 3), (2, lost.to_owned()), ev(3, 2, 3), ev(4, 3, 3)];
    let v = judge(&calls(&[(3, Complete)]), &delivered, false);
    assert_eq!((v.mismatches, v.duplicates, v.reorders), (0, 0, 0));
}
