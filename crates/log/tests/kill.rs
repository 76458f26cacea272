//! `kill -9` a writer process at random moments, many times, and check after
//! each restart that every event any reader could have seen is in the log,
//! intact and in order, with no torn and no duplicated record.

use std::collections::HashMap;
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Duration;

use mcp_resume_log::EventLog;
use mcp_resume_log::{DiskLog, Retention, StreamKey};
use rand::{Rng, SeedableRng};

fn check(x: u64) -> u64 {
    x.to_le_bytes().iter().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ *b as u64).wrapping_mul(0x100000001b3)
    })
}

mod serde_like {
    // Tiny parser for `{"x":X,"h":H}`, so the test needs no JSON crate.
    pub fn parse(s: &str) -> Option<(u64, u64)> {
        let s = s.strip_prefix("{\"x\":")?.strip_suffix('}')?;
        let (x, h) = s.split_once(",\"h\":")?;
        Some((x.parse().ok()?, h.parse().ok()?))
    }
}

#[test]
fn kill_minus_nine_loses_nothing_a_reader_saw() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log");
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x5eed);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // What must be in the log: (session, seq) -> x.
    let mut promised: HashMap<(String, u64), u64> = HashMap::new();
    let mut total_kills = 0;
    for round in 0..12 {
        let mut child = Command::new(env!("CARGO_BIN_EXE_log-torture"))
            .arg(&path)
            .arg(rng.random::<u32>().to_string())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn writer");
        std::thread::sleep(Duration::from_millis(rng.random_range(80..500)));
        child.kill().expect("kill -9");
        let mut out = String::new();
        child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut out)
            .unwrap();
        child.wait().unwrap();
        total_kills += 1;
        let complete = match out.rfind('\n') {
            Some(i) => &out[..i],
            None => "",
        };
        let mut acks = 0;
        for line in complete.lines() {
            let mut parts = line.splitn(4, ' ');
            let (kind, sid, seq) = (
                parts.next().unwrap(),
                parts.next().unwrap(),
                parts.next().unwrap(),
            );
            let seq: u64 = seq.parse().unwrap();
            let rest = parts.next().unwrap();
            match kind {
                "ACK" => {
                    acks += 1;
                    let xs: Vec<u64> = rest.split(',').map(|x| x.parse().unwrap()).collect();
                    let first = seq + 1 - xs.len() as u64;
                    for (i, x) in xs.into_iter().enumerate() {
                        promised.insert((sid.to_owned(), first + i as u64), x);
                    }
                }
                "SEEN" => {
                    let (x, _) =
                        serde_like::parse(rest).expect("a reader saw a well-formed message");
                    promised.insert((sid.to_owned(), seq), x);
                }
                other => panic!("unexpected line {other}"),
            }
        }
        // Reopen as a fresh process would, and compare.
        let mut retention = Retention::default();
        retention.max_events = u64::MAX / 2;
        let log = DiskLog::open(&path, retention)
            .unwrap_or_else(|e| panic!("round {round}: reopen failed: {e}"));
        rt.block_on(async {
            for s in 0..4 {
                let sid = format!("s{s}");
                let Ok(b) = log.bounds(&sid, StreamKey::Session).await else {
                    continue;
                };
                let mut after = 0;
                let mut seen_x = std::collections::HashSet::new();
                while after < b.head {
                    let evs = log
                        .read(&sid, StreamKey::Session, after, 4096)
                        .await
                        .unwrap();
                    for e in evs {
                        assert_eq!(e.seq, after + 1, "contiguous");
                        after = e.seq;
                        let text = std::str::from_utf8(&e.message).unwrap();
                        let (x, h) = serde_like::parse(text)
                            .unwrap_or_else(|| panic!("torn record {text:?}"));
                        assert_eq!(h, check(x), "torn record at {sid}/{}", e.seq);
                        assert!(seen_x.insert(x), "duplicated record at {sid}/{}", e.seq);
                        if let Some(want) = promised.get(&(sid.clone(), e.seq)) {
                            assert_eq!(*want, x, "{sid}/{} changed after the kill", e.seq);
                        }
                    }
                }
                let lost: Vec<_> = promised
                    .keys()
                    .filter(|(s, seq)| *s == sid && *seq > b.head)
                    .collect();
                assert!(
                    lost.is_empty(),
                    "round {round}: committed events lost: {lost:?}"
                );
            }
        });
        drop(log);
        eprintln!(
            "round {round}: {acks} acks, {} promised events hold",
            promised.len()
        );
    }
    assert!(total_kills >= 12);
    assert!(
        promised.len() > 100,
        "the writer committed too little to prove anything"
    );
}
