//! Opening fjall's database for the disk log, sized: how much of it stays
//! in memory (its memtables and block cache) is bounded by what a server
//! needs, not fjall's defaults (benches/results/churn.md).

use std::path::Path;

use fjall::{Database, KeyspaceCreateOptions};

use super::store::{storage, Store};
use crate::LogError;

/// fjall's error as the log's: a directory another process holds, an I/O
/// error, or (anything else the engine says) corrupt, naming the log.
fn fjall_error(path: &Path, e: fjall::Error) -> LogError {
    let locked = match &e {
        fjall::Error::Locked => true,
        fjall::Error::Io(io) => io.kind() == std::io::ErrorKind::WouldBlock,
        _ => false,
    };
    if locked {
        return storage(format!(
            "{} is already open in another process",
            path.display()
        ));
    }
    match e {
        fjall::Error::Io(io) => storage(format!("{}: {io}", path.display())),
        other => LogError::Corrupt(format!("{}: {other:?}", path.display())),
    }
}

/// The most bytes one keyspace's memtable holds before fjall writes it out
/// as a table (fjall's default is 64 MiB for each of six keyspaces): what
/// a memtable holds, session churn's records and deletions too, is resident
/// memory until then (benches/results/churn.md). The records' keyspaces
/// take little; the events' takes more, so a busy stream's appends are not
/// flushed (and compacted) every few hundred milliseconds.
const MEMTABLE_BYTES: u64 = 1024 * 1024;
/// [`MEMTABLE_BYTES`] for the events' keyspace.
const EVENTS_MEMTABLE_BYTES: u64 = 8 * 1024 * 1024;

/// fjall's cache of table blocks read back (ending and forgetting a session
/// reads its keys by prefix): bounded, it fills as tables are read, so it
/// is kept small; the page cache keeps the files' bytes.
const BLOCK_CACHE_BYTES: u64 = 1024 * 1024;

/// Opens fjall's database and keyspaces in `path`; a panic of the engine
/// on damaged files is an error that names the log.
pub(super) fn open_store(path: &Path) -> Result<Store, LogError> {
    std::panic::catch_unwind(|| -> Result<Store, fjall::Error> {
        let db = Database::builder(path)
            .cache_size(BLOCK_CACHE_BYTES)
            .open()?;
        let sized = |bytes| move || KeyspaceCreateOptions::default().max_memtable_size(bytes);
        let opts = sized(MEMTABLE_BYTES);
        Ok(Store {
            sessions: db.keyspace("sessions", opts)?,
            streams: db.keyspace("streams", opts)?,
            events: db.keyspace("events", sized(EVENTS_MEMTABLE_BYTES))?,
            requests: db.keyspace("requests", opts)?,
            meta: db.keyspace("meta", opts)?,
            pins: db.keyspace("pins", opts)?,
            db,
        })
    })
    .map_err(|_| {
        LogError::Corrupt(format!(
            "{}: the storage engine could not read it",
            path.display()
        ))
    })?
    .map_err(|e| fjall_error(path, e))
}
