//! Maintenance divided among the instances that share one Redis: each of
//! the [`BUCKETS`] (a session's bucket is its hash slot modulo 64, as in
//! [`super::live`]) is leased to one live instance, which alone trims,
//! expires and sweeps the sessions in it, so a pass costs an instance its
//! share of the sessions, not all of them.
//!
//! The leases are fields of one hash, `mcpr:maint` (bucket -> instance),
//! fenced like the session owner leases: a lease is its holder's while the
//! holder's heartbeat ([`super::instance`]) lives, taken over (compare and
//! set on the holder seen dead) once it has expired, and not trusted by its
//! holder once its own heartbeat is in doubt ([`super::instance::Liveness`]):
//! a pass begins only with fresh leases, notes the lease epoch, and stops
//! as soon as the epoch moves or the leases are no longer fresh.
//!
//! Who should hold a bucket is decided by rendezvous hashing with bounded
//! loads over the live instances (the registry `mcpr:instances`, each instance's heartbeat
//! checked): every instance computes the same answer, so each claims its
//! own share (64/n rounded up at most) and releases what belongs to
//! another; when an instance joins about 1/n of the buckets move to it, and
//! when one dies mostly its buckets move. A bucket changes hands by release then claim (never two holders;
//! at most one pass in between without a holder).
//!
//! Cost per pass and instance: `SMEMBERS` of the registry, one `EXISTS`
//! per other instance, `HGETALL` of the leases, and one script when a
//! lease changes hands; nothing per session.

use std::collections::HashMap;
use std::sync::Mutex;

use super::{instance, unavailable, RedisLog};
use crate::{LogError, BUCKETS};

/// The bucket leases: field `N` (bucket) -> the instance that maintains it.
pub(super) const LEASES: &str = "mcpr:maint";
/// Every instance that registered and has not stopped (some may be dead).
pub(super) const INSTANCES: &str = "mcpr:instances";

/// A set of buckets, bit `b` for bucket `b`.
pub(super) type Mask = u64;

/// What this handle held at its last pass.
#[derive(Default)]
pub(super) struct Held(Mutex<Last>);

#[derive(Default)]
struct Last {
    held: Mask,
    epoch: u64,
    peers: Vec<String>,
    /// Buckets a pass was to sweep whose sessions it never handed over (it
    /// failed after [`RedisLog::share`]): swept by the next pass that
    /// still holds them, so a peer's death noticed once is never forgotten.
    owed: Mask,
}

/// The buckets one pass maintains, and those whose sessions it must sweep
/// for orphaned calls.
pub(super) struct Share {
    pub held: Mask,
    pub sweep: Mask,
    epoch: u64,
}

impl Share {
    /// Whether `bucket` is in `mask`.
    pub fn has(mask: Mask, bucket: u16) -> bool {
        mask & (1 << bucket) != 0
    }
}

/// Which of `live` (non-empty) should maintain each bucket, the same on
/// every instance: rendezvous hashing (the highest weight of (instance,
/// bucket)) with bounded loads, so that no instance takes more than its
/// share rounded up; when one instance goes, mostly its buckets move.
pub(super) fn assign(live: &[String]) -> Vec<&str> {
    let cap = (BUCKETS as usize).div_ceil(live.len().max(1));
    let mut load = vec![0usize; live.len()];
    (0..BUCKETS)
        .map(|b| {
            let mut ranked: Vec<usize> = (0..live.len()).collect();
            ranked.sort_by_key(|i| std::cmp::Reverse((weight(&live[*i], b), live[*i].as_str())));
            let pick = ranked.into_iter().find(|i| load[*i] < cap).unwrap_or(0);
            load[pick] += 1;
            live.get(pick).map(|s| s.as_str()).unwrap_or_default()
        })
        .collect()
}

/// FNV-1a of the instance id and the bucket, finished by splitmix64's mixer
/// so that nearby ids spread evenly.
fn weight(instance: &str, bucket: u16) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in instance.bytes().chain(bucket.to_le_bytes()) {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

impl RedisLog {
    /// Claims this instance's share of the buckets, releases the others'
    /// and says what this pass maintains. With leases in doubt: nothing.
    pub(super) async fn share(&self) -> Result<Share, LogError> {
        let liveness = &self.heartbeat.liveness;
        let epoch = liveness.epoch();
        if !liveness.fresh() {
            return Ok(Share {
                held: 0,
                sweep: 0,
                epoch,
            });
        }
        let me = self.heartbeat.id.clone();
        let (live, dead) = self.live_instances(&me).await?;
        let holders: HashMap<u16, String> = redis::cmd("HGETALL")
            .arg(LEASES)
            .query_async(&mut self.conn.clone())
            .await
            .map_err(unavailable)?;
        let (mut claims, mut releases) = (Vec::new(), Vec::new());
        let mut held: Mask = 0;
        let owners = assign(&live);
        for b in 0..BUCKETS {
            let mine = owners[b as usize] == me;
            match holders.get(&b) {
                Some(h) if *h == me && mine => held |= 1 << b,
                Some(h) if *h == me => releases.push(b),
                Some(h) if live.contains(h) => {} // its holder releases it
                seen if mine => claims.push((b, seen.cloned().unwrap_or_default())),
                _ => {} // the instance it belongs to claims it
            }
        }
        if !claims.is_empty() || !releases.is_empty() {
            let mut inv = self.scripts.buckets.key(LEASES);
            inv.arg(&me).arg(claims.len());
            for (b, seen) in &claims {
                inv.arg(b).arg(seen);
            }
            inv.arg(&releases);
            let now: Vec<u16> = inv
                .invoke_async(&mut self.conn.clone())
                .await
                .map_err(unavailable)?;
            held = now
                .into_iter()
                .filter(|b| *b < BUCKETS)
                .fold(0, |m, b| m | 1 << b);
        }
        let mut last = self.held.0.lock().unwrap_or_else(|e| e.into_inner());
        let before = if last.epoch == epoch { last.held } else { 0 };
        let gone = !dead.is_empty() || last.peers.iter().any(|p| !live.contains(p));
        let sweep = (if gone { held } else { held & !before }) | (last.owed & held);
        *last = Last {
            held,
            epoch,
            peers: live,
            owed: sweep,
        };
        Ok(Share { held, sweep, epoch })
    }

    /// The sessions of a pass's sweep were handed over: nothing is owed.
    pub(super) fn swept(&self) {
        self.held.0.lock().unwrap_or_else(|e| e.into_inner()).owed = 0;
    }

    /// Whether a pass begun under `share` may go on: its leases are still
    /// certainly this handle's.
    pub(super) fn still_holds(&self, share: &Share) -> bool {
        let liveness = &self.heartbeat.liveness;
        liveness.fresh() && liveness.epoch() == share.epoch
    }

    /// The registered instances whose heartbeat lives (`me` always among
    /// them, sorted), and those found dead, which are unregistered.
    async fn live_instances(&self, me: &str) -> Result<(Vec<String>, Vec<String>), LogError> {
        let registered: Vec<String> = redis::cmd("SMEMBERS")
            .arg(INSTANCES)
            .query_async(&mut self.conn.clone())
            .await
            .map_err(unavailable)?;
        let others: Vec<String> = registered.into_iter().filter(|i| i != me).collect();
        let cmds = others
            .iter()
            .map(|i| {
                let mut c = redis::Cmd::new();
                c.arg("EXISTS").arg(instance::key(i));
                c
            })
            .collect();
        let exists: Vec<i64> = self.conn.each(cmds).await.map_err(unavailable)?;
        let (mut live, mut dead) = (vec![me.to_owned()], Vec::new());
        for (i, n) in others.into_iter().zip(exists) {
            if n > 0 {
                live.push(i);
            } else {
                dead.push(i);
            }
        }
        if !dead.is_empty() {
            let _: i64 = redis::cmd("SREM")
                .arg(INSTANCES)
                .arg(&dead)
                .query_async(&mut self.conn.clone())
                .await
                .map_err(unavailable)?;
        }
        live.sort();
        Ok((live, dead))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Instance ids as [`crate::types::new_instance_id`] makes them (random hex).
    fn instances(n: usize, seed: u64) -> Vec<String> {
        (0..n as u64)
            .map(|i| {
                format!(
                    "{:016x}{:016x}",
                    weight("a", i as u16) ^ seed,
                    weight("b", (i + seed) as u16)
                )
            })
            .collect()
    }

    fn counts<'a>(owners: &[&'a str]) -> HashMap<&'a str, usize> {
        let mut count = HashMap::new();
        for o in owners {
            *count.entry(*o).or_default() += 1;
        }
        count
    }

    #[test]
    fn every_bucket_has_one_owner_and_instances_share_them_evenly() {
        for seed in 0..50 {
            for n in 1..=5 {
                let live = instances(n, seed);
                let owners = assign(&live);
                assert_eq!(owners.len(), BUCKETS as usize);
                let count = counts(&owners);
                assert_eq!(count.len(), n, "{count:?}");
                // At most the share rounded up; the last to fill may get a little less.
                let (fair, cap) = (BUCKETS as usize / n, (BUCKETS as usize).div_ceil(n));
                assert!(
                    count.values().all(|c| *c <= cap && *c + 2 >= fair),
                    "{count:?}"
                );
            }
        }
    }

    #[test]
    fn when_an_instance_dies_mostly_its_buckets_move() {
        for seed in 0..50 {
            let live = instances(3, seed);
            let before = assign(&live);
            let after_live: Vec<String> = live[1..].to_vec();
            let after = assign(&after_live);
            let survivors = (0..BUCKETS as usize).filter(|b| before[*b] != live[0]);
            let (kept, all) = survivors.fold((0, 0), |(k, a), b| {
                (k + (after[b] == before[b]) as usize, a + 1)
            });
            assert!(
                kept * 4 >= all * 3,
                "seed {seed}: {kept} of {all} survivors' buckets stayed"
            );
        }
    }
}
