//! This run's incarnation and authentication session, kept growing across
//! restarts even when the wall clock steps back.
//!
//! Both come from the wall clock (the incarnation: the first whole second
//! after the start; the session: the start in microseconds), and peers
//! compare them with the last run's: a larger incarnation says the node
//! restarted, a larger session opens its authenticated frames. A clock set
//! back across a restart (an RTC wrong at boot, corrected by NTP later)
//! would give smaller ones: peers would take the new run for the old one and
//! refuse its frames. So every run stores what it took (and each rejoin its
//! new incarnation) in `state_dir/node-N.json`, and the next takes at least
//! one more than that.
//!
//! Owns: the state file's format, reading and writing it, and the choice of
//! the next values. May not touch: the clock (the caller reads it).

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// What a run took.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Epochs {
    /// Seconds (the node's session epoch, docs/mcastd.md).
    pub incarnation: u32,
    /// Microseconds (the authentication session, docs/protocol.md §1.9).
    pub session: u64,
}

/// The next run's values: the clock's (`clock`), unless the last run
/// (`last`) took those or larger; then one more than the last's.
pub fn next(clock: Epochs, last: Option<Epochs>) -> Epochs {
    let Some(last) = last else {
        return clock;
    };
    Epochs {
        incarnation: clock.incarnation.max(last.incarnation.saturating_add(1)),
        session: clock.session.max(last.session.saturating_add(1)),
    }
}

/// Node `node`'s state file in `dir`.
pub fn path(dir: &Path, node: u32) -> PathBuf {
    dir.join(format!("node-{node}.json"))
}

/// What the last run stored at `path` (None: no file).
pub fn load(path: &Path) -> Result<Option<Epochs>, String> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| format!("{}: not a state file: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// Stores `e` at `path` (its directory made if missing), whole or not at
/// all: written beside it, synced, then renamed over it.
pub fn store(path: &Path, e: Epochs) -> Result<(), String> {
    let fail = |what: &str, err: std::io::Error| format!("{}: {what}: {err}", path.display());
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|err| fail("creating its directory", err))?;
    }
    let tmp = path.with_extension("json.new");
    let body = serde_json::to_vec(&e).expect("plain numbers");
    let mut f = std::fs::File::create(&tmp).map_err(|err| fail("creating", err))?;
    f.write_all(&body)
        .and_then(|()| f.sync_all())
        .map_err(|err| fail("writing", err))?;
    std::fs::rename(&tmp, path).map_err(|err| fail("renaming", err))
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn e(incarnation: u32, session: u64) -> Epochs {
        Epochs {
            incarnation,
            session,
        }
    }

    #[test]
    fn a_clock_set_back_still_gives_larger_values_than_the_last_run() {
        // First run, or a clock ahead of the last run: the clock's.
        assert_eq!(next(e(100, 5_000), None), e(100, 5_000));
        assert_eq!(next(e(100, 5_000), Some(e(90, 4_000))), e(100, 5_000));
        // The clock went back an hour: one more than the last run's.
        assert_eq!(next(e(100, 5_000), Some(e(3_700, 9_000))), e(3_701, 9_001));
        // Each on its own.
        assert_eq!(next(e(100, 5_000), Some(e(100, 1))), e(101, 5_000));
        assert_eq!(next(e(u32::MAX, 1), Some(e(u32::MAX, 1))), e(u32::MAX, 2));
    }

    #[test]
    fn the_state_file_round_trips_and_a_bad_one_is_an_error() {
        let dir = std::env::temp_dir().join(format!("mcast-epochs-{}", std::process::id()));
        let p = path(&dir.join("deeper"), 7);
        assert_eq!(load(&p), Ok(None), "no file yet");
        store(&p, e(12, 34)).unwrap();
        assert_eq!(load(&p), Ok(Some(e(12, 34))));
        store(&p, e(13, 35)).unwrap();
        assert_eq!(load(&p), Ok(Some(e(13, 35))), "replaced whole");
        std::fs::write(&p, b"{\"incarnation\": 1").unwrap();
        assert!(load(&p).unwrap_err().contains("not a state file"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
