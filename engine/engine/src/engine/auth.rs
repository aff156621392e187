//! Frame authentication in the engine: every frame it writes is sealed
//! with this run's session key just before it joins a TX batch, and every
//! frame it receives is opened (tag, then the sender's replay window) before
//! the receive path parses anything (docs/protocol.md §1.9).
//!
//! Owns: this run's session, session key and transmit counter, each heard
//! sender's session key and replay window, the refusal counters, and
//! replacing the keys while the engine runs ([`Engine::set_keys`], for a key
//! rotation). May not touch: anything in the frame but its trailer; the TX
//! and RX paths call [`Auth::seal`] and [`Auth::open`] where they write and
//! read frames.

use mcast_auth::{header_src, Keys, Replay, ReplayWindow, SessionKey, Trailer};
use mcast_proto::NodeId;

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
    /// refuse frames replayed from an earlier run. It names this run's
    /// session key too: two runs of a node with one session would seal
    /// different frames with the same key and counter.
    pub session: u64,
}

/// Senders whose replay windows and session keys are kept at most. Only
/// frames with a valid tag create one, so only key holders can add entries;
/// past this many the frame of a new sender is refused and counted as a
/// replay.
pub const MAX_SENDERS: usize = 65_536;

/// What the engine keeps of a sender it has heard.
#[derive(Debug)]
struct Sender {
    window: ReplayWindow,
    /// The key of the sender's session last accepted: its frames open
    /// without a derivation.
    key: SessionKey,
}

/// The engine's authentication state.
#[derive(Debug)]
pub(super) struct Auth {
    /// This node: its own frames are never taken (see `open`).
    node: NodeId,
    keys: Keys,
    session: u64,
    counter: u64,
    /// This run's key under `keys.send()`.
    sealing: SessionKey,
    /// Keyed by the sender's node: looked up for every frame received.
    senders: NodeMap<Sender>,
}

impl Auth {
    pub(super) fn new(cfg: &AuthConfig, node: NodeId) -> Auth {
        Auth {
            node,
            keys: cfg.keys.clone(),
            session: cfg.session,
            counter: 0,
            sealing: SessionKey::derive(cfg.keys.send(), node, cfg.session),
            senders: NodeMap::default(),
        }
    }

    /// Appends the trailer to the frame of `len` bytes at the start of
    /// `buf`; returns the length to send. Every call takes a new counter:
    /// each transmission of a frame has its own nonce.
    #[inline]
    pub(super) fn seal(&mut self, buf: &mut [u8], len: u32) -> Result<u32, EngineError> {
        self.counter += 1;
        self.sealing
            .seal(buf, len as usize, self.counter)
            .map(|n| n as u32)
            .ok_or_else(|| {
                EngineError::Accounting(format!("no room for the trailer after {len} bytes"))
            })
    }

    /// Checks a received frame: the length of the frame without its
    /// trailer, or `None` when it is refused (and counted).
    #[inline]
    pub(super) fn open(&mut self, bytes: &[u8], counters: &mut EngineCounters) -> Option<usize> {
        let t = match Trailer::read(bytes) {
            Ok(t) => t,
            Err(_) => {
                counters.rx_auth_failed += 1;
                return None;
            }
        };
        let Some(key) = self.keys.find(t.key_id) else {
            counters.rx_auth_unknown_key += 1;
            return None;
        };
        // Not authentic yet: only picks the key the tag is checked with.
        let src = header_src(bytes);
        let full = self.senders.len() >= MAX_SENDERS;
        let sender = self.senders.get_mut(&src);
        // The sender's kept key when it is the frame's, else one derived
        // for it (kept below only if the frame passes the window too).
        let derived = match &sender {
            Some(s) if s.key.is_for(t.key_id, src, t.session) => None,
            _ => Some(SessionKey::derive(key, src, t.session)),
        };
        let with = derived.as_ref().or(sender.as_deref().map(|s| &s.key));
        if !with.is_some_and(|k| k.verify(bytes, &t)) {
            counters.rx_auth_failed += 1;
            return None;
        }
        // Authentic from here on: the sender's id can be trusted.
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
        let verdict = match sender {
            Some(s) => {
                let v = s.window.accept(t.session, t.counter);
                // A new session, or the sender's next key in a rotation:
                // keep its key from now on.
                if let (Ok(()), Some(k)) = (v, derived) {
                    s.key = k;
                }
                v
            }
            None if full => Err(Replay::TooOld),
            None => {
                let key = derived.expect("a sender not kept had its key derived");
                self.senders.insert(
                    src,
                    Sender {
                        window: ReplayWindow::new(t.session, t.counter),
                        key,
                    },
                );
                Ok(())
            }
        };
        match verdict {
            Ok(()) => Some(t.len),
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
                a.sealing = SessionKey::derive(keys.send(), a.node, a.session);
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
