//! Key rotation while running: on SIGHUP mcastd reads its configuration file
//! again, takes only `key_file` and `accept_key_file` from it, reads those
//! key files (with the same checks as at start) and seals and accepts with
//! what they now hold (docs/mcastd.md "Rotating the key"). A file that fails
//! its checks leaves the keys as they were, and the log says why.
//!
//! Owns: the reload flag and the reload. May not touch: the configuration's
//! other keys (they need a restart) or the engine's replay state.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use mcast_engine::Transport;

use super::Daemon;
use crate::config::{Config, Overrides};

/// What a reload needs: the flag SIGHUP sets, and where the configuration
/// came from.
#[derive(Debug)]
pub(super) struct Rekey {
    flag: Arc<AtomicBool>,
    path: PathBuf,
    overrides: Overrides,
}

impl<T: Transport> Daemon<T> {
    /// Reloads the keys whenever `flag` is set (mcastd sets it on SIGHUP),
    /// from the configuration at `path` with the command line's `overrides`.
    pub fn reload_keys_on(&mut self, flag: Arc<AtomicBool>, path: PathBuf, overrides: Overrides) {
        self.rekey = Some(Rekey {
            flag,
            path,
            overrides,
        });
    }

    /// One check of the flag, from the main loop.
    pub(super) fn maybe_reload_keys(&mut self) {
        let Some(r) = &self.rekey else {
            return;
        };
        if !r.flag.swap(false, Ordering::Relaxed) {
            return;
        }
        let fresh = match Config::resolve(&r.path, &r.overrides) {
            Ok(c) => c,
            Err(e) => {
                self.log.error(
                    "keys not reloaded: the configuration does not load; the old keys stay in use",
                    &[("why", &e)],
                );
                return;
            }
        };
        if fresh.insecure != self.engine.keys().is_none() {
            self.log.error(
                "keys not reloaded: insecure cannot change while mcastd runs (fragments are cut to fit the trailer or not); restart it",
                &[],
            );
            return;
        }
        match crate::keys::load(&fresh) {
            Ok(Some(keys)) => {
                let line = crate::keys::describe(Some(&keys));
                match self.engine.set_keys(keys) {
                    Ok(()) => {
                        self.cfg.key_file = fresh.key_file;
                        self.cfg.accept_key_file = fresh.accept_key_file;
                        self.log.info("keys reloaded", &[("now", &line)]);
                    }
                    Err(e) => self.log.error("keys not reloaded", &[("why", &e)]),
                }
            }
            Ok(None) => self
                .log
                .warn("SIGHUP: insecure = true, no keys to reload", &[]),
            Err(why) => self.log.error(
                "keys not reloaded: the old keys stay in use",
                &[("why", &why)],
            ),
        }
    }
}
