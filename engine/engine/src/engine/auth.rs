//! Frame authentication in the engine: every frame it writes is sealed
//! (`mcast_auth::seal`) just before it joins a TX batch, and every frame it
//! receives is opened (tag, then the sender's replay window) before the
//! receive path parses anything (docs/protocol.md §1.9).
//!
//! Owns: this run's session and transmit counter, the replay windows of the
//! senders heard, the refusal counters, and replacing the keys while the
//! engine runs ([`Engine::set_keys`], for a key rotation). May not touch: anything in the
//! frame but its trailer; the TX and RX paths call [`Auth::seal`] and
//! [`Auth::open`] where they write and read frames.

use mcast_auth::{AuthError, Keys, Replay, ReplayWindow};
use mcast_proto::NodeId;
use mcast_wire::field;

use super::{Engine, EngineCounters, NodeMap};
use crate::transport::Transport;
use crate::EngineError;

/// What [`EngineConfig::auth`](super::EngineConfig::auth) sets.
#[derive(Debug, Clone)]
pub struct AuthConfig {
    /// The key frames are sealed with, and at most one more accepted.
    pub keys: Keys,
    /// This run's session: larger than every earlier run's of this node
    /// (mcastd uses its start time in microseconds), so that receivers can
    /// refuse frames replayed from an earlier run.
    pub session: u64,
}

/// Senders whose replay windows are kept at most. Only frames with a valid
/// tag create one, so only key holders can add entries; past this many the
/// frame of a new sender is refused and counted as a replay.
pub const MAX_SENDERS: usize = 65_536;

/// The engine's authentication state.
#[derive(Debug)]
pub(super) struct Auth {
    /// This node: its own frames are never taken (see `open`).
    node: NodeId,
    keys: Keys,
    session: u64,
    counter: u64,
    /// Keyed by the sender's node: looked up for every frame received.
    windows: NodeMap<ReplayWindow>,
}

impl Auth {
    pub(super) fn new(cfg: &AuthConfig, node: NodeId) -> Auth {
        Auth {
            node,
            keys: cfg.keys.clone(),
            session: cfg.session,
            counter: 0,
            windows: NodeMap::default(),
        }
    }

    /// Appends the trailer to the frame of `len` bytes at the start of
    /// `buf`; returns the length to send.
    #[inline]
    pub(super) fn seal(&mut self, buf: &mut [u8], len: u32) -> Result<u32, EngineError> {
        self.counter += 1;
        mcast_auth::seal(
            buf,
            len as usize,
            self.keys.send(),
            self.session,
            self.counter,
        )
        .map(|n| n as u32)
        .ok_or_else(|| {
            EngineError::Accounting(format!("no room for the trailer after {len} bytes"))
        })
    }

    /// [`Auth::seal`] of a frame whose payload's digest was kept when it was
    /// written (the frame table's `digest`).
    #[inline]
    pub(super) fn seal_with_digest(
        &mut self,
        buf: &mut [u8],
        len: u32,
        digest: &mcast_auth::Digest,
    ) -> Result<u32, EngineError> {
        self.counter += 1;
        mcast_auth::seal_with_digest(
            buf,
            len as usize,
            self.keys.send(),
            self.session,
            self.counter,
            digest,
        )
        .map(|n| n as u32)
        .ok_or_else(|| {
            EngineError::Accounting(format!("no room for the trailer after {len} bytes"))
        })
    }

    /// Checks a received frame: the length of the frame without its
    /// trailer, or `None` when it is refused (and counted).
    #[inline]
    pub(super) fn open(&mut self, bytes: &[u8], counters: &mut EngineCounters) -> Option<usize> {
        let opened = match mcast_auth::open(bytes, &self.keys) {
            Ok(o) => o,
            Err(AuthError::UnknownKey { .. }) => {
                counters.rx_auth_unknown_key += 1;
                return None;
            }
            Err(AuthError::BadTag | AuthError::NoTrailer { .. }) => {
                counters.rx_auth_failed += 1;
                return None;
            }
        };
        // Authentic from here on: the sender's id can be trusted.
        let s = &bytes[field::SRC];
        let src = u32::from_be_bytes([s[0], s[1], s[2], s[3]]);
        if src == self.node {
            // A node never receives a frame it sent itself (a bridge never
            // sends a frame back out of the port it came in by; the packet
            // transport ignores its own outgoing frames), and keeps no
            // window for its own counter: a copy of one of its frames sent
            // back to it by another host is a replay (found by
            // cli/tests/hostile_peers.rs).
            counters.rx_replayed += 1;
            return None;
        }
        let full = self.windows.len() >= MAX_SENDERS;
        let verdict = match self.windows.get_mut(&src) {
            Some(w) => w.accept(opened.session, opened.counter),
            None if full => Err(Replay::TooOld),
            None => {
                self.windows
                    .insert(src, ReplayWindow::new(opened.session, opened.counter));
                Ok(())
            }
        };
        match verdict {
            Ok(()) => Some(opened.len),
            Err(_) => {
                counters.rx_replayed += 1;
                None
            }
        }
    }
}

impl<T: Transport> Engine<T> {
    /// Replaces the keys (a rotation step: docs/mcastd.md "Rotating the
    /// key"); the session, the counter and the replay windows carry on.
    /// An engine started without authentication cannot start it here: its
    /// fragments were cut without room for the trailer.
    pub fn set_keys(&mut self, keys: Keys) -> Result<(), EngineError> {
        match self.auth.as_mut() {
            Some(a) => {
                a.keys = keys;
                Ok(())
            }
            None => Err(EngineError::Config(
                "this engine runs without authentication (insecure): restart it with keys".into(),
            )),
        }
    }

    /// The keys frames are sealed and checked with now (those of
    /// [`EngineConfig::auth`](super::EngineConfig::auth) until
    /// [`Engine::set_keys`] replaces them); `None` without authentication.
    pub fn keys(&self) -> Option<&Keys> {
        self.auth.as_ref().map(|a| &a.keys)
    }
}
