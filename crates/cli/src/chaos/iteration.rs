//! One iteration: a fresh session, `emit` racing with the upgrade, faults,
//! resumes, and a final `emit` that closes the books; then the judgement.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

// The client's seedable generator, so `--seed` reproduces the choices.
use mcp_resume_client::{ClientError, McpClient, Xorshift64};
use serde_json::json;
use tokio::sync::Mutex;

use super::accounting::{emit_message, judge, positions, Emitted, Expect, HarnessError, Outcome};
use super::reader::{End, Reader, Stop};
use super::target::{undisturbed, Kills, Target};

/// What every iteration of a run shares.
pub struct Shared {
    /// Every instance's MCP endpoint.
    pub urls: Vec<String>,
    /// The servers, for the kill fault.
    pub target: Arc<Mutex<Target>>,
    /// Kill generations per instance.
    pub kills: Arc<Kills>,
    /// How many instances may be killed (0 for a remote server).
    pub killable: usize,
    /// The server is rmcp's: event ids `SESSION/0/SEQ`.
    pub rmcp: bool,
    /// Readers never upgrade: every read, drop and resume is over SSE.
    pub sse_only: bool,
    /// Each iteration reads a resumable listen stream (MCP 2026-07-28
    /// extension) instead of a session stream; `emit` writes to it.
    pub listen: bool,
}

/// One `emit` call: where it went, the kill generation of that instance
/// before it was sent, and whether the server acknowledged it.
struct Call {
    count: u64,
    instance: usize,
    gen: u64,
    acked: bool,
}

/// The harness's own record of what it asked `emit` for: the truth.
#[derive(Default)]
struct Ledger {
    calls: Vec<Call>,
    used: HashSet<u64>,
}

impl Ledger {
    /// A count in `lo..=hi` (or above, when those are taken) no call has used.
    fn fresh(&mut self, rng: &mut Xorshift64, lo: u64, hi: u64) -> u64 {
        let mut c = rng.range(lo, hi);
        while !self.used.insert(c) {
            c += 1;
        }
        c
    }

    fn begin(&mut self, count: u64, instance: usize, kills: &Kills) -> usize {
        self.calls.push(Call {
            count,
            instance,
            gen: kills.of(instance),
            acked: false,
        });
        self.calls.len() - 1
    }

    /// Complete where acknowledged and no kill of its instance began or
    /// ended between the call and `gens` (the generations at the final call).
    fn expectations(&self, gens: &[u64]) -> Vec<Emitted> {
        self.calls
            .iter()
            .map(|c| Emitted {
                count: c.count,
                expect: if c.acked && undisturbed(c.gen, gens.get(c.instance).copied().unwrap_or(0))
                {
                    Expect::Complete
                } else {
                    Expect::Prefix
                },
            })
            .collect()
    }

    /// Whether a call that must be complete, judged by the generations now, still misses events.
    fn outstanding(&self, reader: &Reader, kills: &Kills) -> bool {
        let ks = positions(&reader.delivered);
        self.expectations(&kills.snapshot())
            .iter()
            .filter(|e| e.expect == Expect::Complete)
            .any(|e| ks.get(&e.count).map_or(0, |s| s.len() as u64) < e.count)
    }
}

/// Reads on from the reader's cursor, over SSE or WebSocket at random (SSE
/// only with `sse_only`) and on a random instance, until `done`, or
/// `quiet_rounds` segments went quiet, or four refusals in a row. A loud
/// refusal is not the end: the reader resumes from its cursor like any client
/// would. Returns `End::Loud` only when the reader stopped on a refusal
/// without being done.
async fn catch_up(
    reader: &mut Reader,
    rng: &mut Xorshift64,
    urls: &[String],
    sse_only: bool,
    stop: &Stop,
    quiet_rounds: usize,
    done: impl Fn(&Reader) -> bool,
) -> End {
    let (mut quiet, mut louds) = (0, 0);
    let mut end = End::Dropped;
    for _ in 0..50 {
        if done(reader) {
            return End::Quiet;
        }
        let from = reader.last();
        let before = reader.delivered.len();
        reader.url = urls[rng.range(0, urls.len() as u64 - 1) as usize].clone();
        end = if sse_only || rng.range(0, 1) == 0 {
            reader.sse(from, stop).await
        } else {
            reader.ws_until(from, None, false, stop).await
        };
        if reader.delivered.len() > before {
            louds = 0;
        }
        match end {
            End::Quiet => {
                quiet += 1;
                if quiet >= quiet_rounds {
                    break;
                }
            }
            End::Loud => {
                louds += 1;
                if louds > 3 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            End::Stopped | End::Dropped => {}
        }
    }
    if done(reader) {
        End::Quiet
    } else {
        end
    }
}

/// The kill generations once no kill is under way (or after 30 s, whatever they are).
async fn settled(kills: &Kills) -> Vec<u64> {
    for _ in 0..600 {
        let g = kills.snapshot();
        if g.iter().all(|g| g.is_multiple_of(2)) {
            return g;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    kills.snapshot()
}

/// Runs one iteration and judges it.
pub async fn iteration(s: Arc<Shared>, mut rng: Xorshift64) -> Result<Outcome, HarnessError> {
    // With several instances every step goes to one of them at random: the
    // session must not care which.
    let n = s.urls.len() as u64;
    let pick = |rng: &mut Xorshift64| rng.range(0, n - 1) as usize;
    let http = reqwest::Client::new();
    let mut client = McpClient::new(&s.urls[pick(&mut rng)]);
    let mut tries = 0;
    loop {
        let opened = if s.listen {
            // The 2026-07-28 era: a resumable listen stream L, which `emit`
            // (called with L as the session) writes to.
            client
                .listen(json!({"toolsListChanged": true}))
                .await
                .map(|l| client = l)
        } else {
            client.initialize().await.map(|_| ())
        };
        let Err(e) = opened else { break };
        tries += 1;
        if tries > 100 {
            return Err(HarnessError::Initialize(e.to_string()));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let sid = client.session_id().unwrap_or_default().to_owned();
    let clients: Vec<McpClient> = s.urls.iter().map(|u| client.clone().with_url(u)).collect();
    // The sibling reader of the seed: reads the whole stream over SSE, concurrently.
    let sibling = {
        let mut r =
            Reader::new(http.clone(), s.urls[pick(&mut rng)].clone(), sid.clone()).rmcp_ids(s.rmcp);
        tokio::spawn(async move { r.sse(0, &Stop::Idle).await })
    };
    let mut ledger = Ledger::default();
    // Another iteration may be restarting the server: retry, each attempt
    // with a count of its own (one that failed may still have committed).
    let mut tries = 0;
    let e1 = loop {
        let (i, count) = (pick(&mut rng), ledger.fresh(&mut rng, 5, 30));
        let call = ledger.begin(count, i, &s.kills);
        match clients[i].call_tool("emit", json!({"count": count})).await {
            Ok(_) => {
                ledger.calls[call].acked = true;
                break count;
            }
            Err(e) => {
                tries += 1;
                if tries > 100 {
                    return Err(HarnessError::FirstEmit(e.to_string()));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    let mut reader =
        Reader::new(http.clone(), s.urls[pick(&mut rng)].clone(), sid.clone()).rmcp_ids(s.rmcp);
    let k = rng.range(1, e1) as usize;
    reader.sse(0, &Stop::After(k)).await;
    // `emit` races with the handshake.
    let (i, e2) = (pick(&mut rng), ledger.fresh(&mut rng, 10, 60));
    let interval = rng.range(0, 3);
    let racer_call = ledger.begin(e2, i, &s.kills);
    let racer = {
        let c = clients[i].clone();
        tokio::spawn(async move {
            c.call_tool("emit", json!({"count": e2, "interval_ms": interval}))
                .await
        })
    };
    let roll = rng.range(0, 9);
    let drop_after = (roll >= 4).then(|| rng.range(1, 8) as usize);
    let prior = reader.last();
    reader.url = s.urls[pick(&mut rng)].clone();
    // SSE only: the "upgrade" is a resume over SSE, dropped after as many events.
    let end = if s.sse_only {
        let stop = drop_after.map_or(Stop::Idle, Stop::After);
        reader.sse(prior, &stop).await
    } else {
        reader.ws(prior, drop_after, true).await
    };
    let (drop, not_reached) = if s.sse_only {
        ("dropsse", "dropsse-not-reached")
    } else {
        ("dropws", "dropws-not-reached")
    };
    let fault = match (roll, end == End::Stopped) {
        (0..=3, _) => "none",
        (4..=7, true) => drop,
        (4..=7, false) => not_reached,
        (_, true) if s.killable > 0 => "kill",
        (_, false) if s.killable > 0 => "kill-not-reached",
        (_, true) => drop,
        (_, false) => not_reached,
    };
    if fault == "kill" {
        // The instance the reader was on, when there is only one; any otherwise.
        let victim = rng.range(0, s.killable as u64 - 1) as usize;
        let t = s.target.clone();
        tokio::task::spawn_blocking(move || t.blocking_lock().kill_and_restart(victim))
            .await
            .map_err(|e| HarnessError::Restart(e.to_string()))?
            .map_err(HarnessError::Restart)?;
    }
    // Resume until caught up: a reader never stops at a drop, nor at a refusal.
    if end != End::Quiet {
        catch_up(
            &mut reader,
            &mut rng,
            &s.urls,
            s.sse_only,
            &Stop::Idle,
            1,
            |_| false,
        )
        .await;
    }
    if let Ok(Ok(_)) = racer.await {
        ledger.calls[racer_call].acked = true;
    }
    let _ = sibling.await;
    // The final call: made after every kill seen so far, it must arrive
    // whole, and seq contiguity up to it proves that what calls cut short by
    // a kill did not deliver was never committed. Retried while kills go on.
    let mut closed = None;
    let mut last_error = String::from("every attempt was disturbed by a kill");
    // A refused attempt (503 while a Redis failover runs: the cluster is
    // down for seconds) is retried with backoff, ~13 s in all, so that a
    // failover the server reports loudly is outlasted, not counted.
    let mut backoff = Duration::from_millis(100);
    for _ in 0..10 {
        // An attempt during a restart is disturbed by definition: wait it out.
        let before = settled(&s.kills).await;
        let (i, count) = (pick(&mut rng), ledger.fresh(&mut rng, 1, 4));
        let call = ledger.begin(count, i, &s.kills);
        match clients[i].call_tool("emit", json!({"count": count})).await {
            Ok(_) => ledger.calls[call].acked = true,
            Err(ClientError::SessionGone) => {
                // Loud: the server says the session is gone (a memory store
                // after a restart). Judge what was delivered.
                reader.loud.push("session-gone".into());
                closed = Some((s.kills.snapshot(), true));
                break;
            }
            Err(e) => {
                last_error = e.to_string();
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
                continue;
            }
        }
        let stop = Stop::At(emit_message(count, count));
        let end = catch_up(&mut reader, &mut rng, &s.urls, s.sse_only, &stop, 3, |r| {
            !ledger.outstanding(r, &s.kills)
        })
        .await;
        let after = s.kills.snapshot();
        if before.iter().zip(&after).all(|(b, a)| undisturbed(*b, *a)) {
            closed = Some((before, end == End::Loud));
            break;
        }
    }
    let _ = clients[pick(&mut rng)].end().await;
    let Some((gens, loud_end)) = closed else {
        return Err(HarnessError::FinalEmit(last_error));
    };
    let calls = ledger.expectations(&gens);
    let verdict = judge(&calls, &reader.delivered, loud_end);
    let detail = (!verdict.clean()).then(|| {
        format!(
            "session {sid}: fault {fault}, read over SSE to {prior}, {verdict:?}, calls {calls:?}, delivered seqs {:?}",
            reader.delivered.iter().map(|d| d.0).collect::<Vec<_>>()
        )
    });
    Ok(Outcome {
        verdict,
        loud_end,
        loud: reader.loud,
        empty_200s: reader.empty_200s,
        fault,
        t: (reader.t_101, reader.t_replay, reader.t_live),
        detail,
    })
}
