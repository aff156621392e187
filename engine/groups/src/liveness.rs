//! What a daemon's beats say and what it makes of its peers' (sans-IO): the
//! [`Detector`] plus incarnations (restarts), the registry's whereabouts,
//! and telling an evicted node that it must rejoin. The daemon turns each
//! [`LiveEvent`] into effects on its group service, engine and clients;
//! the failure simulation in this crate's tests does the same.
//!
//! A beat's payload (18 bytes, big-endian): type u8 (1 beat, 2 probe, 3
//! probe answer), the sender's incarnation u32, the registry's node u32 and
//! how many times the role has moved u32 as the sender knows them, a flag u8
//! (1: "I declared you failed") and the destination's incarnation that was
//! declared failed u32.
//!
//! Owns the peers' incarnations, the beats' encoding and the [`Detector`].
//! Changes no group service state itself: it says what happened
//! ([`LiveEvent`]) and the caller acts on it.

use std::collections::BTreeMap;

use crate::detector::{Detector, DetectorConfig, DetectorOutput, PeerState};
use crate::NodeId;

/// Bytes of a beat payload.
pub const BEAT_LEN: usize = 18;
const BEAT: u8 = 1;
const PROBE: u8 = 2;
const PROBE_REPLY: u8 = 3;

/// What the caller must do.
/// Why the data path reports a peer ([`Liveness::reported`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Report {
    /// It left a MAK sender's acknowledgment requests unanswered.
    Unacknowledged,
    /// A total-order group waited on it and it sent nothing.
    Silent,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LiveEvent {
    /// Send this beat payload to `to` (unreliably).
    Send { to: NodeId, payload: [u8; BEAT_LEN] },
    /// `node` is suspect and being probed.
    Suspect(NodeId),
    /// `node` is declared failed: `GroupService::node_failed`, reset its link.
    Failed(NodeId),
    /// `node` restarted (new incarnation): its old state is gone; handle it
    /// as failed and at once alive (`node_failed`, `node_recovered`).
    Restarted(NodeId),
    /// A failed `node` is heard again: `GroupService::node_recovered`.
    Recovered(NodeId),
    /// Node `by` declared *this* node failed in its current incarnation:
    /// rejoin as a new member (then call [`Liveness::rejoined`]).
    Rejoin { by: NodeId },
    /// A peer knows of more registry moves: `GroupService::adopt_registry`.
    Registry { node: NodeId, epoch: u32 },
    /// A majority of the cluster has been heard (once): `confirm_registry`.
    Majority,
}

/// Counts for `mcast stat`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LiveCounters {
    pub beats_received: u64,
    pub probes_answered: u64,
    pub restarts_seen: u64,
    pub malformed: u64,
}

/// One daemon's liveness state.
#[derive(Debug, Clone)]
pub struct Liveness {
    incarnation: u32,
    cluster_size: usize,
    detector: Detector,
    peer_incarnations: BTreeMap<NodeId, u32>,
    /// Peers declared failed, with the incarnation they failed in: told so
    /// in every beat until they come back as a new one.
    evicted: BTreeMap<NodeId, u32>,
    majority: bool,
    /// A Rejoin was emitted and [`Liveness::rejoined`] not called yet: the
    /// other peers' flags in the same batch say the same thing.
    rejoining: bool,
    out: Vec<DetectorOutput>,
    pub counters: LiveCounters,
}

impl Liveness {
    /// `peers`: every other node of the cluster.
    pub fn new(incarnation: u32, peers: &[NodeId], cfg: DetectorConfig, now: u64) -> Liveness {
        Liveness {
            incarnation,
            cluster_size: peers.len() + 1,
            detector: Detector::new(cfg, peers, now),
            peer_incarnations: BTreeMap::new(),
            evicted: BTreeMap::new(),
            majority: peers.is_empty(),
            rejoining: false,
            out: Vec::new(),
            counters: LiveCounters::default(),
        }
    }

    pub fn incarnation(&self) -> u32 {
        self.incarnation
    }

    /// The incarnation `node`'s beats carry, once heard.
    pub fn peer_incarnation(&self, node: NodeId) -> Option<u32> {
        self.peer_incarnations.get(&node).copied()
    }

    pub fn detector(&self) -> &Detector {
        &self.detector
    }

    /// The peers in doubt at `now`, for [`crate::GroupService::set_doubted`]:
    /// suspect (being probed), failed (its verdict perhaps not yet handed
    /// to the group service: one poll declares several), or silent past
    /// the suspicion bound though no poll has said so yet (a daemon that
    /// was itself stopped hears beats before its next poll).
    pub fn doubted(&self, now: u64) -> impl Iterator<Item = NodeId> + '_ {
        let silence = self.detector.config().silence();
        self.detector
            .peers()
            .filter(move |&(_, s, heard)| {
                s != PeerState::Alive || now.saturating_sub(heard) >= silence
            })
            .map(|(n, _, _)| n)
    }

    /// When [`Liveness::poll`] must next run.
    pub fn next_deadline(&self) -> u64 {
        self.detector.next_deadline()
    }

    /// True when this node declared `node` failed in the incarnation it
    /// still has: it has not come back as a new one yet (its beats are
    /// telling it to). What it says about groups meanwhile comes from a
    /// state every view has moved on from: a paused node wakes with work
    /// its old incarnation then sends. (Set only while this node sees a
    /// majority, as the telling is.)
    pub fn declared_failed(&self, node: NodeId) -> bool {
        self.evicted.contains_key(&node)
    }

    /// After a rejoin: a new incarnation, so every peer drops the old state.
    pub fn rejoined(&mut self) {
        self.incarnation += 1;
        self.rejoining = false;
    }

    /// Beats and probes due, suspicions and verdicts. `registry`: the
    /// group service's `registry_epoch()`, carried in the beats.
    pub fn poll(&mut self, now: u64, registry: (NodeId, u32), out: &mut Vec<LiveEvent>) {
        self.detector.poll(now, &mut self.out);
        self.translate(registry, out);
    }

    /// Any frame from `from` other than a beat (a link message): it is
    /// alive, unless it was declared failed, which only its beat undoes
    /// ([`Detector::heard_other`]). It produces no event: a link message
    /// used to recover a failed peer here, and the event was dropped.
    pub fn heard(&mut self, from: NodeId, now: u64) {
        self.detector.heard_other(from, now);
    }

    /// The data path reports `node`: a MAK sender that it stopped
    /// acknowledging ([`Detector::unreachable`]), or a total-order group
    /// that it sends nothing where it owes a beacon ([`Detector::silent`]).
    /// True when the detector acted on it.
    pub fn reported(
        &mut self,
        node: NodeId,
        why: Report,
        now: u64,
        registry: (NodeId, u32),
        out: &mut Vec<LiveEvent>,
    ) -> bool {
        let acted = match why {
            Report::Unacknowledged => self.detector.unreachable(node, now, &mut self.out),
            Report::Silent => self.detector.silent(node, now, &mut self.out),
        };
        self.translate(registry, out);
        acted
    }

    /// A beat payload from `from`.
    pub fn on_beat(
        &mut self,
        from: NodeId,
        payload: &[u8],
        now: u64,
        registry: (NodeId, u32),
        out: &mut Vec<LiveEvent>,
    ) {
        if payload.len() < BEAT_LEN {
            self.counters.malformed += 1;
            return;
        }
        self.counters.beats_received += 1;
        let word = |i: usize| u32::from_be_bytes(payload[i..i + 4].try_into().expect("4 bytes"));
        let (incarnation, reg, epoch) = (word(1), word(5), word(9));
        self.detector.heard(from, now, &mut self.out);
        self.translate(registry, out);
        // Declared failed in this very incarnation (not an earlier one).
        if payload[13] == 1 && word(14) == self.incarnation {
            if !self.rejoining {
                self.rejoining = true;
                out.push(LiveEvent::Rejoin { by: from });
            }
            return;
        }
        if let Some(old) = self.peer_incarnations.insert(from, incarnation) {
            if old != incarnation {
                self.evicted.remove(&from);
                self.counters.restarts_seen += 1;
                out.push(LiveEvent::Restarted(from));
            }
        }
        if epoch > registry.1 || (epoch == registry.1 && reg < registry.0) {
            out.push(LiveEvent::Registry { node: reg, epoch });
        }
        if !self.majority && (self.peer_incarnations.len() + 1) * 2 > self.cluster_size {
            self.majority = true;
            out.push(LiveEvent::Majority);
        }
        if payload[0] == PROBE {
            self.counters.probes_answered += 1;
            out.push(LiveEvent::Send {
                to: from,
                payload: self.payload(PROBE_REPLY, from, registry),
            });
        }
    }

    fn translate(&mut self, registry: (NodeId, u32), out: &mut Vec<LiveEvent>) {
        for o in std::mem::take(&mut self.out) {
            out.push(match o {
                DetectorOutput::Beat(n) => LiveEvent::Send {
                    to: n,
                    payload: self.payload(BEAT, n, registry),
                },
                DetectorOutput::Probe(n) => LiveEvent::Send {
                    to: n,
                    payload: self.payload(PROBE, n, registry),
                },
                DetectorOutput::Suspect(n) => LiveEvent::Suspect(n),
                DetectorOutput::Failed(n) => {
                    // Only a node that still sees a majority tells the other
                    // it was evicted: the minority side of a partition,
                    // which declares everybody else failed, must not make
                    // the majority rejoin.
                    let failed = self
                        .detector
                        .peers()
                        .filter(|(_, st, _)| *st == PeerState::Failed)
                        .count();
                    let live = self.cluster_size - failed;
                    if live * 2 > self.cluster_size {
                        if let Some(&inc) = self.peer_incarnations.get(&n) {
                            self.evicted.insert(n, inc);
                        }
                    }
                    LiveEvent::Failed(n)
                }
                DetectorOutput::Recovered(n) => LiveEvent::Recovered(n),
            });
        }
    }

    fn payload(&self, kind: u8, to: NodeId, registry: (NodeId, u32)) -> [u8; BEAT_LEN] {
        let mut b = [0u8; BEAT_LEN];
        b[0] = kind;
        b[1..5].copy_from_slice(&self.incarnation.to_be_bytes());
        b[5..9].copy_from_slice(&registry.0.to_be_bytes());
        b[9..13].copy_from_slice(&registry.1.to_be_bytes());
        if let Some(inc) = self.evicted.get(&to) {
            b[13] = 1;
            b[14..18].copy_from_slice(&inc.to_be_bytes());
        }
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A beat payload of incarnation `inc`, as node `from` sends it.
    fn beat(inc: u32) -> [u8; BEAT_LEN] {
        let mut b = [0u8; BEAT_LEN];
        b[0] = BEAT;
        b[1..5].copy_from_slice(&inc.to_be_bytes());
        b
    }

    #[test]
    fn a_peer_is_declared_failed_until_its_beats_carry_a_new_incarnation() {
        let mut live = Liveness::new(1, &[2, 3], DetectorConfig::default(), 0);
        let reg = (1, 0);
        let mut out = Vec::new();
        live.on_beat(2, &beat(5), 0, reg, &mut out);
        live.on_beat(3, &beat(9), 0, reg, &mut out);
        // Node 3 beats on, node 2 falls silent past the detection bound.
        let step = live.detector.config().interval;
        let mut now = 0;
        while !out.contains(&LiveEvent::Failed(2)) {
            assert!(now < 100 * step, "node 2 never failed: {out:?}");
            now += step / 2;
            live.on_beat(3, &beat(9), now, reg, &mut out);
            live.poll(now, reg, &mut out);
        }
        assert!(live.declared_failed(2) && !live.declared_failed(3));
        // Heard again in the same incarnation (a pause): still failed here,
        // and told so; its new incarnation ends it.
        out.clear();
        live.on_beat(2, &beat(5), now, reg, &mut out);
        assert!(live.declared_failed(2));
        live.on_beat(2, &beat(6), now + 1, reg, &mut out);
        assert!(out.contains(&LiveEvent::Restarted(2)), "{out:?}");
        assert!(!live.declared_failed(2));
    }
}
