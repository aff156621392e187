//! Failure detection between daemons (seed 004 §3.4), sans-IO: time is an
//! argument (nanoseconds of a monotonic clock), frames are the caller's.
//!
//! Every node beats to every peer each `interval`. A peer not heard from
//! for `suspect_after` intervals becomes *suspect*; it is then probed
//! directly (the seed's query message) every `probe_interval`, up to
//! `probes` times; any frame from it (a beat, a probe, a probe's answer)
//! makes it alive again. Still silent after the last probe's wait: *failed*.
//! So a node is declared failed at most `suspect_after × interval + probes ×
//! probe_interval` after it went silent (defaults: 3 × 50 ms + 3 × 50 ms =
//! 300 ms), and a pause shorter than `suspect_after × interval` (150 ms)
//! never even makes it suspect. A failed peer that is heard again is
//! reported as recovered (it rejoins as a new member: the caller decides).
//! A peer never heard from (not started yet) is beaten to but not suspected.
//!
//! The data path may report a peer as unreachable (seed 004 §3.4's first
//! mechanism, the failure events that reach the TIC from the network side:
//! here, a member that stops answering a MAK sender's ACK requests). A
//! reported peer that is also overdue, silent for 1.5 `interval`s (its
//! beat is half an interval late), becomes suspect at once and is probed,
//! instead of after `suspect_after` intervals; the probes decide as
//! always, so a report never evicts a peer that answers. A dead receiver of
//! a stream is then declared failed about `1.5 × interval + probes ×
//! probe_interval` after its death (225 ms with the defaults) instead of
//! 300 ms. A total-order group's report that a member owes a beacon and has
//! sent nothing for ten beacon intervals ([`Detector::silent`]) makes it
//! suspect once it has been silent one `interval`: failed `interval +
//! probes × probe_interval` after its death (200 ms with the defaults).
//!
//! Owns each peer's liveness (heard, suspect, probed, failed) and its
//! timers. Never touches a group, a view or the registry: its verdicts go
//! to the caller, who hands them to the group service.

use crate::NodeId;

/// Timing of the detector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DetectorConfig {
    /// Beat period, ns.
    pub interval: u64,
    /// Missed intervals before a peer is suspect.
    pub suspect_after: u32,
    /// Time between probes of a suspect, ns.
    pub probe_interval: u64,
    /// Probes before a suspect is declared failed.
    pub probes: u32,
}

impl Default for DetectorConfig {
    fn default() -> Self {
        DetectorConfig {
            interval: 50_000_000,
            suspect_after: 3,
            probe_interval: 50_000_000,
            probes: 3,
        }
    }
}

impl DetectorConfig {
    /// The longest a silent node stays undetected, ns.
    pub fn detection_bound(&self) -> u64 {
        self.silence() + u64::from(self.probes) * self.probe_interval
    }

    /// The silence after which an alive peer becomes suspect, ns.
    pub fn silence(&self) -> u64 {
        u64::from(self.suspect_after) * self.interval
    }

    /// Checks the values make sense; the error says which.
    pub fn validate(&self) -> Result<(), String> {
        if self.interval == 0 || self.probe_interval == 0 {
            return Err("heartbeat and probe intervals must be above 0".into());
        }
        if self.suspect_after == 0 || self.probes == 0 {
            return Err("suspect_after and probes must be at least 1".into());
        }
        Ok(())
    }
}

/// What the detector thinks of a peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerState {
    Alive,
    /// Silent too long; `probes` sent so far.
    Suspect {
        probes: u32,
    },
    Failed,
}

/// What the caller must do or know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DetectorOutput {
    /// Send a beat to this peer.
    Beat(NodeId),
    /// Send a probe to this peer (it answers at once).
    Probe(NodeId),
    /// The peer became suspect (logged and counted; nothing changes yet).
    Suspect(NodeId),
    /// The peer is declared failed: it leaves every view.
    Failed(NodeId),
    /// A failed peer was heard again.
    Recovered(NodeId),
}

#[derive(Debug, Clone, Copy)]
struct Peer {
    node: NodeId,
    state: PeerState,
    /// False until the first frame from it: a peer that never came up (yet)
    /// is beaten to but never suspected.
    seen: bool,
    last_heard: u64,
    /// When the next probe (or the failure verdict) is due, while suspect.
    next_probe: u64,
}

/// The detector of one node.
#[derive(Debug, Clone)]
pub struct Detector {
    cfg: DetectorConfig,
    peers: Vec<Peer>,
    next_beat: u64,
    /// Counters: suspicions, probes sent, failures declared, recoveries.
    pub suspicions: u64,
    pub probes_sent: u64,
    pub failures: u64,
    pub recoveries: u64,
    /// Suspicions raised by the data path's reports.
    pub reported: u64,
}

impl Detector {
    /// A detector for `peers`, all taken as heard at `now`.
    pub fn new(cfg: DetectorConfig, peers: &[NodeId], now: u64) -> Detector {
        Detector {
            cfg,
            peers: peers
                .iter()
                .map(|&node| Peer {
                    node,
                    state: PeerState::Alive,
                    seen: false,
                    last_heard: now,
                    next_probe: 0,
                })
                .collect(),
            next_beat: now,
            suspicions: 0,
            probes_sent: 0,
            failures: 0,
            recoveries: 0,
            reported: 0,
        }
    }

    /// A frame from `node` arrived at `now`.
    pub fn heard(&mut self, node: NodeId, now: u64, out: &mut Vec<DetectorOutput>) {
        let Some(p) = self.peers.iter_mut().find(|p| p.node == node) else {
            return;
        };
        p.last_heard = p.last_heard.max(now);
        p.seen = true;
        if p.state == PeerState::Failed {
            self.recoveries += 1;
            out.push(DetectorOutput::Recovered(node));
        }
        p.state = PeerState::Alive;
    }

    /// Any frame from `node` other than a beat (a link message): an alive
    /// or suspect peer is alive. A failed one stays failed until its beat
    /// ([`Detector::heard`]): only a beat says whether it restarted
    /// meanwhile, and recovering it on a link message would resume it as
    /// the node it was.
    pub fn heard_other(&mut self, node: NodeId, now: u64) {
        let Some(p) = self.peers.iter_mut().find(|p| p.node == node) else {
            return;
        };
        if p.state == PeerState::Failed {
            return;
        }
        p.last_heard = p.last_heard.max(now);
        p.seen = true;
        p.state = PeerState::Alive;
    }

    /// The data path reports `node` unreachable at `now`: if it is alive but
    /// silent for 1.5 beat intervals (a beat is overdue: one interval of
    /// silence is normal just before a beat), it becomes suspect and is
    /// probed now. True when it did.
    pub fn unreachable(&mut self, node: NodeId, now: u64, out: &mut Vec<DetectorOutput>) -> bool {
        let overdue = self.cfg.interval + self.cfg.interval / 2;
        self.suspect_now(node, now, overdue, out)
    }

    /// The data path reports `node` silent where it owes a frame (a
    /// total-order group waiting on its beacon for ten beacon intervals,
    /// seed 002 §1.2): unlike a missing ACK, this says the peer sends
    /// nothing at all, so an alive peer silent for one beat interval
    /// becomes suspect and is probed now, without waiting for its beat to
    /// be half an interval late. (Not sooner: a daemon descheduled for a
    /// few milliseconds is common on shared CPUs, and a suspect has only
    /// the probes' time to answer.) True when it did.
    pub fn silent(&mut self, node: NodeId, now: u64, out: &mut Vec<DetectorOutput>) -> bool {
        let overdue = self.cfg.interval;
        self.suspect_now(node, now, overdue, out)
    }

    /// An alive peer heard of, silent for at least `overdue`: suspect, and
    /// probed now. True when it did.
    fn suspect_now(
        &mut self,
        node: NodeId,
        now: u64,
        overdue: u64,
        out: &mut Vec<DetectorOutput>,
    ) -> bool {
        let Some(p) = self.peers.iter_mut().find(|p| p.node == node) else {
            return false;
        };
        if p.state != PeerState::Alive || !p.seen || now.saturating_sub(p.last_heard) < overdue {
            return false;
        }
        p.state = PeerState::Suspect { probes: 1 };
        p.next_probe = now + self.cfg.probe_interval;
        self.suspicions += 1;
        self.probes_sent += 1;
        self.reported += 1;
        out.push(DetectorOutput::Suspect(node));
        out.push(DetectorOutput::Probe(node));
        true
    }

    /// Advances to `now`: beats due, suspicions, probes, verdicts.
    pub fn poll(&mut self, now: u64, out: &mut Vec<DetectorOutput>) {
        if now >= self.next_beat {
            for p in &self.peers {
                out.push(DetectorOutput::Beat(p.node));
            }
            // Skip missed beats rather than bursting them.
            self.next_beat = now + self.cfg.interval;
        }
        let silence = self.cfg.silence();
        for p in &mut self.peers {
            match p.state {
                PeerState::Alive if p.seen && now.saturating_sub(p.last_heard) >= silence => {
                    p.state = PeerState::Suspect { probes: 1 };
                    p.next_probe = now + self.cfg.probe_interval;
                    self.suspicions += 1;
                    self.probes_sent += 1;
                    out.push(DetectorOutput::Suspect(p.node));
                    out.push(DetectorOutput::Probe(p.node));
                }
                PeerState::Suspect { probes } if now >= p.next_probe => {
                    if probes >= self.cfg.probes {
                        p.state = PeerState::Failed;
                        self.failures += 1;
                        out.push(DetectorOutput::Failed(p.node));
                    } else {
                        p.state = PeerState::Suspect { probes: probes + 1 };
                        p.next_probe = now + self.cfg.probe_interval;
                        self.probes_sent += 1;
                        out.push(DetectorOutput::Probe(p.node));
                    }
                }
                _ => {}
            }
        }
    }

    /// When [`Detector::poll`] must next run.
    pub fn next_deadline(&self) -> u64 {
        let silence = self.cfg.silence();
        self.peers
            .iter()
            .map(|p| match p.state {
                PeerState::Alive if !p.seen => u64::MAX,
                PeerState::Alive => p.last_heard + silence,
                PeerState::Suspect { .. } => p.next_probe,
                PeerState::Failed => u64::MAX,
            })
            .chain(std::iter::once(self.next_beat))
            .min()
            .unwrap_or(u64::MAX)
    }

    /// Every peer's state and when it was last heard (ns).
    pub fn peers(&self) -> impl Iterator<Item = (NodeId, PeerState, u64)> + '_ {
        self.peers.iter().map(|p| (p.node, p.state, p.last_heard))
    }

    /// The state of `node`, if it is a peer.
    pub fn state(&self, node: NodeId) -> Option<PeerState> {
        self.peers.iter().find(|p| p.node == node).map(|p| p.state)
    }

    pub fn config(&self) -> DetectorConfig {
        self.cfg
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn run(
        d: &mut Detector,
        from: u64,
        to: u64,
        hear: &[(NodeId, u64, u64)],
    ) -> Vec<(u64, DetectorOutput)> {
        // Steps of 1 ms; `hear`: (node, from, to) windows in which the node beats every 50 ms.
        let mut got = Vec::new();
        let mut out = Vec::new();
        let mut t = from;
        while t <= to {
            for &(n, a, b) in hear {
                if t >= a && t < b && (t - a) % (50 * MS) == 0 {
                    d.heard(n, t, &mut out);
                }
            }
            d.poll(t, &mut out);
            got.extend(out.drain(..).map(|o| (t, o)));
            t += MS;
        }
        got
    }

    fn verdicts(got: &[(u64, DetectorOutput)]) -> Vec<(u64, DetectorOutput)> {
        got.iter()
            .filter(|(_, o)| !matches!(o, DetectorOutput::Beat(_)))
            .copied()
            .collect()
    }

    #[test]
    fn a_silent_node_is_suspected_probed_and_failed_within_the_bound() {
        let cfg = DetectorConfig::default();
        let mut d = Detector::new(cfg, &[2, 3], 0);
        // Node 2 beats throughout; node 3 stops at 100 ms.
        let got = run(&mut d, 0, 1000 * MS, &[(2, 0, u64::MAX), (3, 0, 101 * MS)]);
        let v = verdicts(&got);
        assert_eq!(
            v,
            vec![
                (250 * MS, DetectorOutput::Suspect(3)),
                (250 * MS, DetectorOutput::Probe(3)),
                (300 * MS, DetectorOutput::Probe(3)),
                (350 * MS, DetectorOutput::Probe(3)),
                (400 * MS, DetectorOutput::Failed(3)),
            ]
        );
        assert!(400 * MS - 100 * MS <= cfg.detection_bound());
        assert_eq!((d.suspicions, d.probes_sent, d.failures), (1, 3, 1));
        assert_eq!(d.state(2), Some(PeerState::Alive));
        // Beats go to both peers every 50 ms.
        let beats = got
            .iter()
            .filter(|(_, o)| *o == DetectorOutput::Beat(3))
            .count();
        assert_eq!(beats, 21);
    }

    #[test]
    fn a_data_path_report_of_an_overdue_node_probes_it_at_once() {
        let cfg = DetectorConfig::default();
        let mut d = Detector::new(cfg, &[2, 3], 0);
        // Both beat until 100 ms (last beat heard at 100 ms); node 3 dies.
        run(&mut d, 0, 120 * MS, &[(2, 0, 101 * MS), (3, 0, 101 * MS)]);
        let mut out = Vec::new();
        // Reported 20 ms after its last frame, and just after its next beat
        // was due: not overdue, nothing happens.
        assert!(!d.unreachable(3, 120 * MS, &mut out));
        assert!(!d.unreachable(3, 170 * MS, &mut out));
        assert!(out.is_empty());
        // Not a peer: nothing.
        assert!(!d.unreachable(9, 175 * MS, &mut out));
        // Reported once a beat is half an interval late: suspect and probed
        // now, failed after the probes, at 325 ms instead of 400 ms.
        assert!(d.unreachable(3, 175 * MS, &mut out));
        assert_eq!(
            out,
            vec![DetectorOutput::Suspect(3), DetectorOutput::Probe(3)]
        );
        assert!(!d.unreachable(3, 176 * MS, &mut out), "already suspect");
        let got = run(&mut d, 121 * MS, 500 * MS, &[(2, 150 * MS, u64::MAX)]);
        let v = verdicts(&got);
        assert_eq!(
            v,
            vec![
                (225 * MS, DetectorOutput::Probe(3)),
                (275 * MS, DetectorOutput::Probe(3)),
                (325 * MS, DetectorOutput::Failed(3)),
            ]
        );
        assert_eq!((d.reported, d.suspicions, d.failures), (1, 1, 1));
        // A report of a node that answers its probe changes nothing for good.
        let mut d = Detector::new(cfg, &[2], 0);
        run(&mut d, 0, 100 * MS, &[(2, 0, 101 * MS)]);
        assert!(d.unreachable(2, 175 * MS, &mut out));
        d.heard(2, 176 * MS, &mut out);
        assert_eq!(d.state(2), Some(PeerState::Alive));
        let got = run(&mut d, 162 * MS, 600 * MS, &[(2, 200 * MS, u64::MAX)]);
        assert!(!verdicts(&got)
            .iter()
            .any(|(_, o)| matches!(o, DetectorOutput::Failed(_))));
    }

    #[test]
    fn a_silence_report_probes_a_peer_silent_for_a_beat_interval_without_waiting_for_more() {
        let cfg = DetectorConfig::default();
        let mut d = Detector::new(cfg, &[2, 3], 0);
        run(&mut d, 0, 100 * MS, &[(2, 0, 101 * MS), (3, 0, 101 * MS)]);
        let mut out = Vec::new();
        // Node 3 dies just after its beat at 100 ms; a total-order group
        // reports it silent from 101 ms on (ten beacon intervals of
        // 100 µs), every 10 ms: refused until it has been silent a beat
        // interval, then probed, where an ACK report would wait for 175 ms.
        assert!(!d.silent(3, 101 * MS, &mut out));
        assert!(!d.silent(3, 141 * MS, &mut out));
        assert!(out.is_empty());
        assert!(!d.unreachable(3, 151 * MS, &mut out));
        assert!(d.silent(3, 151 * MS, &mut out));
        assert_eq!(
            out,
            vec![DetectorOutput::Suspect(3), DetectorOutput::Probe(3)]
        );
        assert!(!d.silent(3, 161 * MS, &mut out), "already suspect");
        assert!(!d.silent(9, 161 * MS, &mut out), "not a peer");
        let got = run(&mut d, 151 * MS, 400 * MS, &[(2, 150 * MS, u64::MAX)]);
        assert_eq!(
            verdicts(&got),
            vec![
                (201 * MS, DetectorOutput::Probe(3)),
                (251 * MS, DetectorOutput::Probe(3)),
                (301 * MS, DetectorOutput::Failed(3)),
            ]
        );
        // A silent report of a node that answers its probe: alive again.
        let mut d = Detector::new(cfg, &[2], 0);
        run(&mut d, 0, 100 * MS, &[(2, 0, 101 * MS)]);
        assert!(d.silent(2, 150 * MS, &mut out));
        d.heard(2, 152 * MS, &mut out);
        assert_eq!(d.state(2), Some(PeerState::Alive));
    }

    #[test]
    fn a_short_pause_raises_no_suspicion_and_a_probe_answered_clears_it() {
        let mut d = Detector::new(DetectorConfig::default(), &[2], 0);
        // Silent from 100 to 220 ms: under 150 ms of silence.
        let got = run(
            &mut d,
            0,
            600 * MS,
            &[(2, 0, 101 * MS), (2, 220 * MS, u64::MAX)],
        );
        assert!(verdicts(&got).is_empty(), "{:?}", verdicts(&got));
        // Silent from 100 to 320 ms: suspected, but answers before failing.
        let mut d = Detector::new(DetectorConfig::default(), &[2], 0);
        let got = run(
            &mut d,
            0,
            800 * MS,
            &[(2, 0, 101 * MS), (2, 320 * MS, u64::MAX)],
        );
        let v = verdicts(&got);
        assert!(v.contains(&(250 * MS, DetectorOutput::Suspect(2))));
        assert!(!v
            .iter()
            .any(|(_, o)| matches!(o, DetectorOutput::Failed(_))));
        assert_eq!(d.state(2), Some(PeerState::Alive));
    }

    #[test]
    fn a_failed_node_heard_again_is_recovered() {
        let mut d = Detector::new(DetectorConfig::default(), &[2], 0);
        let mut out = Vec::new();
        d.poll(1000 * MS, &mut out);
        assert!(
            !out.iter().any(|o| matches!(o, DetectorOutput::Suspect(_))),
            "never heard: never suspected"
        );
        d.heard(2, 1000 * MS, &mut out);
        for t in [1150, 1200, 1250, 1300] {
            d.poll(t * MS, &mut out);
        }
        assert!(out.contains(&DetectorOutput::Failed(2)), "{out:?}");
        out.clear();
        d.heard(2, 1500 * MS, &mut out);
        assert_eq!(out, vec![DetectorOutput::Recovered(2)]);
        assert_eq!(d.state(2), Some(PeerState::Alive));
        assert!(d.next_deadline() <= 1500 * MS + 150 * MS);
        // A link message from a failed node does not recover it: its beat
        // does (it says whether the node restarted).
        for t in [1700, 1750, 1800, 1850, 1900] {
            d.poll(t * MS, &mut out);
        }
        assert_eq!(d.state(2), Some(PeerState::Failed), "{out:?}");
        out.clear();
        d.heard_other(2, 2000 * MS);
        assert_eq!(d.state(2), Some(PeerState::Failed));
        d.heard(2, 2010 * MS, &mut out);
        assert_eq!(out, vec![DetectorOutput::Recovered(2)]);
        // From a suspect one, it is as good as a beat, and says nothing.
        d.poll(2200 * MS, &mut out);
        out.clear();
        d.heard_other(2, 2210 * MS);
        assert_eq!(d.state(2), Some(PeerState::Alive));
        assert!(DetectorConfig {
            probes: 0,
            ..DetectorConfig::default()
        }
        .validate()
        .is_err());
    }
}
