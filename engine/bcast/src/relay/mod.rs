//! The relay: one member's side of broadcast over unicast links, sans I/O.
//!
//! A [`Relay`] runs the schedules of [`mod@crate::plan`] for real: the root
//! sends its own transfers at once, and every other member forwards its
//! transfers of a message as soon as it holds their pieces, in the order
//! of the schedule's steps (a lockstep schedule never makes a member wait
//! for a piece that needs a later transfer of its own). Each root numbers
//! its messages; every member delivers each root's messages once, in that
//! order, from where the root started it. Faults are handled here too:
//! when the view changes, what a member lacks of a live root's messages
//! sent under earlier views reaches it straight from its nearest live
//! ancestor in the message's tree (or the root), and the
//! survivors of a departed root agree on its messages in a round of their
//! own (docs/protocol.md §8.6 specifies all of it).
//!
//! This module owns the member's sequence as a root (window, stability,
//! starts), assembly, forwarding in step order through its one port, and
//! delivery; [`wire`] the messages, `round` the survivors' round for a
//! departed root, `refeed` who re-feeds a member after a view change,
//! [`link`] the measurement of α and β.
//!
//! The caller gives it views ([`Relay::install`]), messages to publish,
//! the messages that arrive on its links, and ticks; it takes
//! [`Output`]s: messages to send on a link, and deliveries. Links must be
//! reliable and in order between live members (mcastd's Go-Back-N links);
//! a crashed member's link may lose any suffix of what it sent.

pub mod link;
mod refeed;
mod round;
pub mod wire;

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::ops::Range;

use crate::cost::{choose, Link, Model};
use crate::plan::{piece_range, plan, Algorithm, Shape, Transfer};
use round::Round;
use wire::{pieces, Data, Has, Msg, MAX_SKIPS};

/// Which algorithm a root uses for a message.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Pick {
    /// Always this one (the chain's segment count included).
    Fixed(Algorithm),
    /// The model's choice for each message's size (`auto`).
    Auto(Model),
}

/// A relay's settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Config {
    /// The algorithm of this member's broadcasts.
    pub pick: Pick,
    /// The most messages of this root that may be unstable (not yet
    /// delivered by every member): [`Relay::publish`] refuses beyond.
    pub window: u64,
    /// Transfers of at least this many bytes go out one at a time: the
    /// next once the receiver said the last arrived (seed 003's one-port
    /// model: sent all at once, a member's transfers would share its link
    /// and its first child would wait for all of them). Smaller ones go at
    /// once. `u64::MAX`: never wait.
    pub one_port_bytes: u64,
    /// The root hands its own messages back as deliveries too. A caller
    /// that gives its own publications to its local application itself
    /// (mcastd loops them back) sets false and is spared a copy of each.
    pub deliver_own: bool,
}

/// A view of the group: its epoch and its members' node ids.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct View {
    /// Larger for every later view.
    pub epoch: u64,
    /// The members, ascending and distinct: the schedules' linear array.
    pub members: Vec<u32>,
}

/// What the relay asks of its caller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    /// Send `msg` on the link to member `to`.
    Send {
        /// The receiving member.
        to: u32,
        /// The encoded message ([`wire::Msg`]).
        msg: Vec<u8>,
    },
    /// Deliver root `root`'s message `seq` (this member's own included).
    Deliver {
        /// The member whose message it is.
        root: u32,
        /// Its sequence number.
        seq: u64,
        /// The message.
        data: Vec<u8>,
    },
}

/// Why a publish was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PublishError {
    /// No view holds this member (before the first, or after it left).
    NotMember,
    /// The window is full: try again once members have reported.
    WouldBlock,
    /// Longer than [`wire::MAX_LEN`].
    TooLong,
}

/// Counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Messages this member published.
    pub published: u64,
    /// Messages delivered (its own included).
    pub delivered: u64,
    /// Transfers sent by a schedule (as root or forwarding).
    pub transfers_sent: u64,
    /// Whole messages sent straight to a member after a view change (as
    /// its root, or as the nearest live ancestor the root asked).
    pub refed: u64,
    /// As a root: re-feeds it asked a member's nearest live ancestor to
    /// send instead of sending them itself.
    pub delegated: u64,
    /// As a root: such requests handed back (the ancestor did not hold
    /// the message), which it then sent itself.
    pub delegations_returned: u64,
    /// Pieces or messages that arrived twice or were no longer wanted.
    pub duplicates: u64,
    /// Messages of a departed root skipped because no survivor held them.
    pub skipped: u64,
    /// Rounds for departed roots this member finished.
    pub rounds: u64,
    /// Messages that could not be decoded or made no sense.
    pub refused: u64,
}

/// A message kept for re-sending.
#[derive(Clone, Debug)]
struct Kept {
    epoch: u64,
    algorithm: Algorithm,
    pieces: u32,
    data: Vec<u8>,
}

/// A message being assembled (or complete, waiting for its turn).
#[derive(Debug)]
struct Partial {
    epoch: u64,
    algorithm: Algorithm,
    pieces: u32,
    data: Vec<u8>,
    have: Vec<bool>,
    missing: u32,
    /// This member's transfers of the message (node ids), once known.
    sends: Option<Vec<Transfer>>,
    cursor: usize,
}

/// What a member knows of one root's sequence.
#[derive(Debug, Default)]
struct Inbound {
    /// The first sequence this member is owed, once the root said so.
    start: Option<u64>,
    /// The epoch of that start.
    start_epoch: u64,
    /// The latest epoch of a start or data from the root: a root missing
    /// from a view of a later epoch has departed (one missing from an
    /// earlier view is a member of a later one, not yet installed here).
    epoch_seen: u64,
    /// The next sequence to deliver.
    next: u64,
    /// The root's stability as last heard.
    stable: u64,
    /// The position last reported to the root.
    reported: u64,
    partial: BTreeMap<u64, Partial>,
    /// Delivered messages at or above `stable`, for re-feeding.
    kept: BTreeMap<u64, Kept>,
    /// Sequences to skip (a departed root's messages no survivor holds).
    holes: Vec<Range<u64>>,
    /// The holes skipped so far, merged, ascending: this member holds none
    /// of them, and its SYNCs say so, so that a later round never counts
    /// on it for them.
    skipped: Vec<Range<u64>>,
}

impl Inbound {
    /// What this member holds of the root's sequence, for a SYNC: from its
    /// start (or the root's stability, below which nothing is kept) to its
    /// next, but the ranges it skipped.
    fn has(&self) -> Option<Has> {
        let start = self.start?.max(self.stable).min(self.next);
        let skipped = self
            .skipped
            .iter()
            .filter(|r| r.end > start)
            .map(|r| (r.start.max(start), r.end))
            .collect();
        Some(Has {
            start,
            next: self.next,
            skipped,
        })
    }

    /// Skips `range` (a hole), merging it with the last skipped range.
    fn skip(&mut self, range: Range<u64>) {
        match self.skipped.last_mut() {
            Some(last) if last.end == range.start => last.end = range.end,
            _ => self.skipped.push(range),
        }
        // Bounded: the oldest ranges go first; a SYNC then claims them, and
        // the round's re-sender finds them missing and counts a refusal.
        if self.skipped.len() > MAX_SKIPS {
            self.skipped.remove(0);
        }
    }
}

/// One member's relay.
#[derive(Debug)]
pub struct Relay {
    me: u32,
    cfg: Config,
    view: Option<View>,
    /// As a root: the next sequence, each member's position, stability,
    /// and the messages not yet stable.
    next_seq: u64,
    granted: BTreeMap<u32, u64>,
    /// The first sequence each member is owed (its START): it holds what
    /// it delivered from there.
    starts: BTreeMap<u32, u64>,
    /// The members of the views this root's unstable messages were sent
    /// in, by epoch (`refeed`).
    past_views: BTreeMap<u64, refeed::PastView>,
    stable: u64,
    sent: BTreeMap<u64, Kept>,
    roots: BTreeMap<u32, Inbound>,
    rounds: BTreeMap<u32, Round>,
    /// Messages this root sent with each algorithm, and `auto`'s last
    /// reasoning.
    chosen: BTreeMap<&'static str, u64>,
    last_choice: Option<String>,
    /// Departed roots whose round is over, with the round's epoch: their
    /// messages of that epoch or before are no longer wanted (the last
    /// [`GONE`]).
    gone: BTreeMap<u32, u64>,
    /// DATA and SYNC of views this member has not installed yet.
    future: Vec<(u32, Msg)>,
    /// Large transfers waiting for this member's port (one at a time), and
    /// the one in flight: (to, root, seq, first).
    port: VecDeque<(Port, Vec<u8>)>,
    in_flight: Option<Port>,
    /// Transfers whose answer is awaited for a measurement: (to, root,
    /// seq, first) → (bytes, sent at).
    timing: HashMap<(u32, u32, u64, u32), (u64, u64)>,
    /// The caller's clock (ns), as last set.
    now_ns: u64,
    /// Unpaced transfers sent since the last one asked to answer.
    since_probe: u32,
    /// The links as measured.
    links: link::LinkEstimate,
    /// Schedules of this view, by (root, algorithm, length): this member's
    /// transfers.
    cache: HashMap<(u32, Algorithm, u64), Vec<Transfer>>,
    out: VecDeque<Output>,
    stats: Stats,
}

/// Schedules kept per view before the cache is cleared.
const CACHE: usize = 256;

/// One in this many transfers too small to be paced asks for an answer,
/// to measure the links.
const PROBE_EVERY: u32 = 16;

/// Transfers awaiting an answer for a measurement, at most (beyond, none
/// is measured until answers come).
const MAX_TIMING: usize = 1024;

/// Departed roots remembered after their round.
const GONE: usize = 1024;

impl Relay {
    /// A relay for member `me`.
    pub fn new(me: u32, cfg: Config) -> Relay {
        Relay::starting_at(me, cfg, 0)
    }

    /// A relay for member `me` whose messages are numbered from `first`
    /// (mcastd: its incarnation in the high 32 bits, so a restarted member's
    /// messages are never taken for its earlier run's).
    pub fn starting_at(me: u32, cfg: Config, first: u64) -> Relay {
        Relay {
            me,
            cfg,
            view: None,
            next_seq: first,
            stable: first,
            chosen: BTreeMap::new(),
            last_choice: None,
            granted: BTreeMap::new(),
            starts: BTreeMap::new(),
            past_views: BTreeMap::new(),
            sent: BTreeMap::new(),
            roots: BTreeMap::new(),
            rounds: BTreeMap::new(),
            gone: BTreeMap::new(),
            port: VecDeque::new(),
            in_flight: None,
            timing: HashMap::new(),
            now_ns: 0,
            since_probe: 0,
            links: link::LinkEstimate::default(),
            future: Vec::new(),
            cache: HashMap::new(),
            out: VecDeque::new(),
            stats: Stats::default(),
        }
    }

    /// The counters.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// The next output, if any.
    pub fn poll(&mut self) -> Option<Output> {
        self.out.pop_front()
    }

    /// Messages held: this root's unstable ones, and per other root those
    /// kept, being assembled, or of views not installed yet.
    pub fn held(&self) -> usize {
        self.sent.len()
            + self.future.len()
            + self
                .roots
                .values()
                .map(|r| r.kept.len() + r.partial.len())
                .sum::<usize>()
    }

    /// Departed roots whose round is not over here.
    pub fn open_rounds(&self) -> usize {
        self.rounds.len()
    }

    /// The caller's clock, in nanoseconds (any monotonic origin): the
    /// round trips of answered transfers are measured with it.
    pub fn set_now(&mut self, now_ns: u64) {
        self.now_ns = now_ns;
    }

    /// The links as measured so far: the fitted α and β (None until the
    /// samples allow a fit) and the samples taken.
    pub fn measured_link(&self) -> (Option<Link>, u64) {
        (self.links.fitted(), self.links.samples())
    }

    /// The measurements behind [`Relay::measured_link`].
    pub fn link_estimate(&self) -> &link::LinkEstimate {
        &self.links
    }

    /// True when every message this member published is stable.
    pub fn idle(&self) -> bool {
        self.stable == self.next_seq
    }

    /// The next sequence number this member will publish.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// The current view's epoch (0 before the first).
    pub fn epoch(&self) -> u64 {
        self.view.as_ref().map_or(0, |v| v.epoch)
    }

    /// True when a [`tick`](Relay::tick) would report a position.
    pub fn wants_tick(&self) -> bool {
        let Some(view) = self.view.as_ref() else {
            return false;
        };
        self.roots.iter().any(|(root, r)| {
            view.members.contains(root) && r.start.is_some() && r.next > r.reported
        })
    }

    /// Messages this member sent with each algorithm, and `auto`'s last
    /// reasoning (None with a fixed algorithm).
    pub fn choices(&self) -> (&BTreeMap<&'static str, u64>, Option<&str>) {
        (&self.chosen, self.last_choice.as_deref())
    }

    /// Member `m`'s sequence from this root begins at the next message: it
    /// counts there for stability, and a START tells it so.
    fn grant(&mut self, m: u32, epoch: u64) {
        let seq = self.next_seq;
        self.granted.insert(m, seq);
        self.starts.insert(m, seq);
        let root = self.me;
        self.send(m, &Msg::Start { root, epoch, seq });
    }

    fn member(&self) -> bool {
        self.view
            .as_ref()
            .is_some_and(|v| v.members.contains(&self.me))
    }

    fn send(&mut self, to: u32, msg: &Msg) {
        self.out.push_back(Output::Send {
            to,
            msg: msg.encode(),
        });
    }

    fn others(&self) -> Vec<u32> {
        self.view
            .as_ref()
            .map(|v| {
                v.members
                    .iter()
                    .copied()
                    .filter(|&m| m != self.me)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Broadcasts `data`; returns its sequence number. With
    /// [`Config::deliver_own`] the root delivers its own message at once
    /// ([`Output::Deliver`]).
    pub fn publish(&mut self, data: &[u8]) -> Result<u64, PublishError> {
        if !self.member() {
            return Err(PublishError::NotMember);
        }
        if data.len() as u64 > wire::MAX_LEN {
            return Err(PublishError::TooLong);
        }
        if self.next_seq - self.stable >= self.cfg.window.max(1) {
            return Err(PublishError::WouldBlock);
        }
        let view = self.view.as_ref().expect("member");
        let (epoch, p) = (view.epoch, view.members.len() as u32);
        let len = data.len() as u64;
        let algorithm = match self.cfg.pick {
            Pick::Fixed(a) => a,
            Pick::Auto(model) => {
                let model = Model {
                    link: self.links.or(model.link),
                    ..model
                };
                let mut c = choose(&model, p, len);
                // Below the one-port size a member's transfers leave
                // together (none waits for an answer): the iterative
                // schedule then costs one start-up, not p − 1, and for
                // small messages it beats every tree.
                if len < self.cfg.one_port_bytes && p > 1 {
                    let Link { alpha, beta } = model.link;
                    let t = alpha + f64::from(p - 1) * len as f64 * beta;
                    c.considered.push((Algorithm::Iterative, t));
                    c.considered.sort_by(|a, b| a.1.total_cmp(&b.1));
                    (c.algorithm, c.time) = c.considered[0];
                }
                self.last_choice = Some(format!("{len} B to {p} members: {}", c.why()));
                c.algorithm
            }
        };
        let algorithm = usable(algorithm, p);
        *self.chosen.entry(algorithm.name()).or_default() += 1;
        let seq = self.next_seq;
        self.next_seq += 1;
        let pieces = pieces(algorithm, p);
        for t in self.transfers(self.me, algorithm, len) {
            self.send_pieces(t, self.me, seq, epoch, algorithm, pieces, data, false);
        }
        self.sent.insert(
            seq,
            Kept {
                epoch,
                algorithm,
                pieces,
                data: data.to_vec(),
            },
        );
        self.stats.published += 1;
        if self.cfg.deliver_own {
            self.stats.delivered += 1;
            self.out.push_back(Output::Deliver {
                root: self.me,
                seq,
                data: data.to_vec(),
            });
        }
        self.recompute_stable();
        Ok(seq)
    }

    /// This member's transfers of `root`'s message in the current view
    /// (node ids), in step order.
    fn transfers(&mut self, root: u32, algorithm: Algorithm, len: u64) -> Vec<Transfer> {
        if let Some(t) = self.cache.get(&(root, algorithm, len)) {
            return t.clone();
        }
        let Some(view) = self.view.as_ref() else {
            return Vec::new();
        };
        let index = |n: u32| view.members.iter().position(|&m| m == n);
        let (Some(r), Some(me)) = (index(root), index(self.me)) else {
            return Vec::new();
        };
        let p = view.members.len() as u32;
        let shape = Shape::near_square(p);
        let mine: Vec<Transfer> = match plan(algorithm, shape, r as u32, len) {
            Ok(s) => s
                .steps
                .iter()
                .flatten()
                .filter(|t| t.from == me as u32)
                .map(|t| Transfer {
                    from: self.me,
                    to: view.members[t.to as usize],
                    ..*t
                })
                .collect(),
            Err(_) => Vec::new(),
        };
        if self.cache.len() >= CACHE {
            self.cache.clear();
        }
        self.cache.insert((root, algorithm, len), mine.clone());
        mine
    }

    /// Sends transfer `t` of `root`'s message `seq`, whose whole bytes are
    /// `data`: only the transfer's pieces are copied, once, into the message.
    #[allow(clippy::too_many_arguments)]
    fn send_pieces(
        &mut self,
        t: Transfer,
        root: u32,
        seq: u64,
        epoch: u64,
        algorithm: Algorithm,
        pieces: u32,
        data: &[u8],
        direct: bool,
    ) {
        let len = data.len() as u64;
        let bytes = piece_range(len, pieces, t.first).start
            ..piece_range(len, pieces, t.first + t.count - 1).end;
        let stable = if root == self.me {
            self.stable
        } else {
            self.roots.get(&root).map_or(0, |r| r.stable)
        };
        let head = Data {
            root,
            seq,
            epoch,
            stable,
            direct,
            answer: false,
            algorithm,
            pieces,
            len,
            first: t.first,
            count: t.count,
            bytes: Vec::new(),
        };
        if direct {
            self.stats.refed += 1;
        } else {
            self.stats.transfers_sent += 1;
        }
        let size = bytes.end - bytes.start;
        let paced = !direct && size >= self.cfg.one_port_bytes;
        // Every paced transfer is answered; one in PROBE_EVERY of the others
        // too, to measure the links.
        let probe = !direct && !paced && {
            self.since_probe += 1;
            self.since_probe >= PROBE_EVERY
        };
        if probe {
            self.since_probe = 0;
        }
        if (paced || probe) && self.timing.len() < MAX_TIMING {
            self.timing
                .insert((t.to, root, seq, t.first), (size, self.now_ns));
        }
        let head = Data {
            answer: paced || probe,
            ..head
        };
        let msg = wire::encode_data(&head, &data[bytes.start as usize..bytes.end as usize]);
        if paced {
            self.port.push_back((
                Port {
                    to: t.to,
                    root,
                    seq,
                    first: t.first,
                    epoch,
                },
                msg,
            ));
            self.pump();
        } else {
            self.out.push_back(Output::Send { to: t.to, msg });
        }
    }

    /// Sends the next large transfer if none is in flight.
    fn pump(&mut self) {
        if self.in_flight.is_some() {
            return;
        }
        if let Some((p, msg)) = self.port.pop_front() {
            self.out.push_back(Output::Send { to: p.to, msg });
            self.in_flight = Some(p);
        }
    }

    /// Sends a kept message whole, straight to `to`.
    fn refeed(&mut self, to: u32, root: u32, seq: u64, k: &Kept) {
        let whole = Transfer {
            from: self.me,
            to,
            first: 0,
            count: k.pieces,
        };
        self.send_pieces(
            whole,
            root,
            seq,
            k.epoch,
            k.algorithm,
            k.pieces,
            &k.data,
            true,
        );
    }

    /// A message arrived on the link from `from`.
    pub fn receive(&mut self, from: u32, bytes: &[u8]) {
        match Msg::decode(bytes) {
            Ok(m) => self.on_msg(from, m),
            Err(_) => self.stats.refused += 1,
        }
    }

    fn on_msg(&mut self, from: u32, m: Msg) {
        // The sender's port waits for this, whatever becomes of the data.
        if let Msg::Data(d) = &m {
            if d.answer {
                let got = Msg::Got {
                    root: d.root,
                    seq: d.seq,
                    first: d.first,
                };
                self.send(from, &got);
            }
        }
        match m {
            // Its own message come back: nothing to do.
            Msg::Data(d) if d.root == self.me => self.stats.duplicates += 1,
            Msg::Data(d) if d.epoch > self.epoch() && !d.direct => {
                self.future.push((from, Msg::Data(d)))
            }
            Msg::Data(d) => self.on_data(from, d),
            Msg::Pos { root, next } if root == self.me => {
                if let Some(g) = self.granted.get_mut(&from) {
                    *g = (*g).max(next);
                    self.recompute_stable();
                }
            }
            Msg::Pos { .. } => self.stats.refused += 1,
            Msg::Start { root, epoch, seq } => self.on_start(root, epoch, seq),
            Msg::Sync { epoch, .. } if epoch > self.epoch() => self.future.push((from, m)),
            Msg::Sync { epoch, .. } if epoch < self.epoch() => {}
            Msg::Sync { epoch, root, has } if root == self.me => {
                // A member's view changed: re-send what it lacks of the
                // messages sent under earlier views (the current view's
                // go by its schedules).
                if let Some(Has { next, .. }) = has {
                    self.refeed_missed(from, next, epoch);
                    if let Some(g) = self.granted.get_mut(&from) {
                        *g = (*g).max(next);
                        self.recompute_stable();
                    }
                }
            }
            Msg::Sync { epoch, root, has } => self.on_sync(from, epoch, root, has),
            Msg::Refeed { root, seq, to } => self.on_refeed(from, root, seq, to),
            Msg::Done { epoch, root } => {
                if let Some(r) = self.rounds.get_mut(&root).filter(|r| r.epoch == epoch) {
                    r.done.insert(from);
                }
                self.close_round(root);
            }
            Msg::Got { root, seq, first } => {
                if let Some((bytes, at)) = self.timing.remove(&(from, root, seq, first)) {
                    if self.now_ns > at {
                        self.links.sample(bytes, (self.now_ns - at) as f64 * 1e-9);
                    }
                }
                if self
                    .in_flight
                    .is_some_and(|p| (p.to, p.root, p.seq, p.first) == (from, root, seq, first))
                {
                    self.in_flight = None;
                    self.pump();
                }
            }
        }
    }

    /// True when `root`, which sent under view `epoch`, is not in this
    /// member's view, whose epoch is at least that: it departed before this
    /// member heard from it (no round of its own here), so its messages are
    /// not this member's to take (a root cut off that still talks, or a
    /// link that delivers late).
    fn departed_unheard(&self, root: u32, epoch: u64) -> bool {
        !self.rounds.contains_key(&root)
            && self
                .view
                .as_ref()
                .is_some_and(|v| epoch <= v.epoch && !v.members.contains(&root))
    }

    fn on_start(&mut self, root: u32, epoch: u64, seq: u64) {
        // A departed root's start still in flight (a link that lost it and
        // sent it again, or a root cut off that still talks): as for its
        // data, only the survivors' round counts, whose SYNC said this
        // member had no stream from it.
        if self.rounds.contains_key(&root)
            || self.gone.get(&root).is_some_and(|&e| epoch <= e)
            || self.departed_unheard(root, epoch)
        {
            self.stats.duplicates += 1;
            return;
        }
        let r = self.roots.entry(root).or_default();
        r.epoch_seen = r.epoch_seen.max(epoch);
        // A member with a start takes only one of a later view (it was out
        // of the root's view and is back).
        if r.start.is_some() && epoch <= r.start_epoch {
            return;
        }
        r.start_epoch = epoch;
        // A first start, or a new one after this member was out of the
        // root's view: its sequence (and what it holds) begins again there.
        if r.start.is_none() || seq > r.next {
            r.start = Some(seq);
            r.next = seq;
            r.reported = seq;
            r.kept.clear();
            r.partial = r.partial.split_off(&seq);
        }
        // A start from before this member's view: the messages the root
        // sent under the older views were not forwarded to this member by
        // those who had moved on, so ask the root for them, as at a view
        // change.
        let now = self.epoch();
        if epoch < now
            && self
                .view
                .as_ref()
                .is_some_and(|v| v.members.contains(&root))
        {
            let has = Some(Has {
                start: seq,
                next: self.roots[&root].next,
                skipped: Vec::new(),
            });
            self.send(
                root,
                &Msg::Sync {
                    epoch: now,
                    root,
                    has,
                },
            );
        }
        self.advance(root);
    }

    fn on_data(&mut self, from: u32, d: Data) {
        let epoch = self.epoch();
        let root = d.root;
        // A departed root: only the survivors' re-sending of the round
        // counts. Anything else still in flight from the root, or from a
        // member gone since, would take this member past the position its
        // SYNC announced, beyond what the others will reach.
        let in_round = self.rounds.contains_key(&root);
        let from_survivor = from != root
            && self
                .view
                .as_ref()
                .is_some_and(|v| v.members.contains(&from));
        if (in_round && !(d.direct && from_survivor))
            || self.gone.get(&root).is_some_and(|&e| d.epoch <= e)
            || self.departed_unheard(root, d.epoch)
        {
            self.stats.duplicates += 1;
            return;
        }
        let r = self.roots.entry(root).or_default();
        r.epoch_seen = r.epoch_seen.max(d.epoch);
        if d.stable > r.stable {
            r.stable = d.stable;
            r.kept = r.kept.split_off(&d.stable);
        }
        if (r.start.is_some() && d.seq < r.next) || r.kept.contains_key(&d.seq) {
            self.stats.duplicates += 1;
            return;
        }
        let whole = d.first == 0 && d.count == d.pieces;
        let fits = |p: &Partial| {
            p.epoch == d.epoch && p.pieces == d.pieces && p.data.len() as u64 == d.len
        };
        if r.partial.get(&d.seq).is_some_and(|p| !fits(p)) {
            if !whole {
                self.stats.refused += 1;
                return;
            }
            r.partial.remove(&d.seq);
        }
        let p = r.partial.entry(d.seq).or_insert_with(|| Partial {
            epoch: d.epoch,
            algorithm: d.algorithm,
            pieces: d.pieces,
            data: vec![0; d.len as usize],
            have: vec![false; d.pieces as usize],
            missing: d.pieces,
            sends: None,
            cursor: 0,
        });
        let mut new = false;
        for i in d.first..d.first + d.count {
            if !p.have[i as usize] {
                p.have[i as usize] = true;
                p.missing -= 1;
                new = true;
            }
        }
        if !new {
            self.stats.duplicates += 1;
            return;
        }
        let base = piece_range(d.len, d.pieces, d.first).start as usize;
        p.data[base..base + d.bytes.len()].copy_from_slice(&d.bytes);
        if !d.direct && d.epoch == epoch {
            self.forward(root, d.seq);
        }
        self.advance(root);
    }

    /// Sends this member's transfers of `root`'s message `seq` whose pieces
    /// it now holds, in step order.
    fn forward(&mut self, root: u32, seq: u64) {
        let Some(p) = self.roots.get(&root).and_then(|r| r.partial.get(&seq)) else {
            return;
        };
        let (algorithm, len) = (p.algorithm, p.data.len() as u64);
        if p.sends.is_none() {
            let t = self.transfers(root, algorithm, len);
            let p = self
                .roots
                .get_mut(&root)
                .and_then(|r| r.partial.get_mut(&seq))
                .expect("present");
            p.sends = Some(t);
        }
        loop {
            // Taken out while its transfer is sent (the message's bytes are
            // read in place, not copied), then put back.
            let mut p = self
                .roots
                .get_mut(&root)
                .and_then(|r| r.partial.remove(&seq))
                .expect("present");
            let ready = p
                .sends
                .as_ref()
                .expect("set")
                .get(p.cursor)
                .copied()
                .filter(|t| (t.first..t.first + t.count).all(|i| p.have[i as usize]));
            if let Some(t) = ready {
                p.cursor += 1;
                self.send_pieces(t, root, seq, p.epoch, algorithm, p.pieces, &p.data, false);
            }
            self.roots
                .get_mut(&root)
                .expect("present")
                .partial
                .insert(seq, p);
            if ready.is_none() {
                return;
            }
        }
    }

    /// Delivers `root`'s messages that are complete and next in order,
    /// reports the position, and finishes a departed root's round.
    fn advance(&mut self, root: u32) {
        let report_every = (self.cfg.window / 4).max(1);
        let Some(r) = self.roots.get_mut(&root) else {
            self.finish_round(root);
            return;
        };
        if r.start.is_none() {
            self.finish_round(root);
            return;
        }
        loop {
            if let Some(h) = r.holes.iter().find(|h| h.contains(&r.next)) {
                let end = h.end;
                self.stats.skipped += end - r.next;
                let from = r.next;
                r.skip(from..end);
                r.next = end;
                continue;
            }
            match r.partial.first_key_value() {
                Some((&s, _)) if s < r.next => {
                    r.partial.pop_first();
                    self.stats.duplicates += 1;
                }
                Some((&s, p)) if s == r.next && p.missing == 0 => {
                    let p = r.partial.pop_first().expect("present").1;
                    self.out.push_back(Output::Deliver {
                        root,
                        seq: s,
                        data: p.data.clone(),
                    });
                    self.stats.delivered += 1;
                    if s >= r.stable {
                        r.kept.insert(
                            s,
                            Kept {
                                epoch: p.epoch,
                                algorithm: p.algorithm,
                                pieces: p.pieces,
                                data: p.data,
                            },
                        );
                    }
                    r.next += 1;
                }
                _ => break,
            }
        }
        let (next, reported) = (r.next, r.reported);
        let live = self
            .view
            .as_ref()
            .is_some_and(|v| v.members.contains(&root));
        if live && next >= reported + report_every {
            self.roots.get_mut(&root).expect("present").reported = next;
            self.send(root, &Msg::Pos { root, next });
        }
        self.finish_round(root);
    }

    /// Reports every live root's position that moved since the last report
    /// (the caller ticks now and then, so an idle root learns stability).
    pub fn tick(&mut self) {
        let Some(view) = self.view.clone() else {
            return;
        };
        let due: Vec<(u32, u64)> = self
            .roots
            .iter_mut()
            .filter(|(root, r)| {
                view.members.contains(root) && r.start.is_some() && r.next > r.reported
            })
            .map(|(root, r)| {
                r.reported = r.next;
                (*root, r.next)
            })
            .collect();
        for (root, next) in due {
            self.send(root, &Msg::Pos { root, next });
        }
    }

    fn recompute_stable(&mut self) {
        let others = self.others();
        self.stable = others
            .iter()
            .filter_map(|m| self.granted.get(m))
            .copied()
            .min()
            .unwrap_or(self.next_seq)
            .clamp(self.stable, self.next_seq);
        self.sent = self.sent.split_off(&self.stable);
    }

    /// Member `m` restarted (a new incarnation: its relay starts afresh),
    /// whatever the views say yet: as a root, this relay grants it a new
    /// start at the next view that holds it, though that view may hold it
    /// already (the view without it skipped here, while the agent moved).
    pub fn member_restarted(&mut self, m: u32) {
        self.granted.remove(&m);
        self.starts.remove(&m);
    }

    /// Installs a new view. Views must come in increasing epochs.
    pub fn install(&mut self, view: View) {
        if self.view.as_ref().is_some_and(|v| v.epoch >= view.epoch) {
            return;
        }
        let old = self.view.replace(view.clone());
        self.cache.clear();
        // The port: transfers of older views are not forwarded any more
        // (the members that lack them are re-sent them), and a transfer in
        // flight to a member gone gets no answer.
        self.port
            .retain(|(p, _)| p.epoch >= view.epoch && view.members.contains(&p.to));
        if self
            .in_flight
            .is_some_and(|p| !view.members.contains(&p.to))
        {
            self.in_flight = None;
        }
        self.timing.retain(|k, _| view.members.contains(&k.0));
        self.pump();
        if !view.members.contains(&self.me) {
            return;
        }
        let epoch = view.epoch;
        // As a root: a start for every member new to this root's view.
        let before: BTreeSet<u32> = old
            .map(|v| v.members.into_iter().collect())
            .unwrap_or_default();
        self.granted.retain(|m, _| view.members.contains(m));
        self.starts.retain(|m, _| view.members.contains(m));
        self.remember_view(epoch, &view.members);
        for &m in &view.members {
            if m != self.me && (!before.contains(&m) || !self.granted.contains_key(&m)) {
                self.grant(m, epoch);
            }
        }
        self.recompute_stable();
        // As a member: where this member stands with every root.
        let roots: Vec<(u32, Option<Has>)> = self
            .roots
            .iter()
            .filter(|(root, r)| view.members.contains(root) || r.epoch_seen < epoch)
            .map(|(root, r)| (*root, r.has()))
            .collect();
        for (root, has) in roots {
            if view.members.contains(&root) {
                if has.is_some() {
                    self.send(root, &Msg::Sync { epoch, root, has });
                }
            } else {
                self.open_round(root, epoch, has);
            }
        }
        // Rounds still open for roots this member never heard from: they
        // go on in this view too.
        let open: Vec<u32> = self
            .rounds
            .keys()
            .copied()
            .filter(|r| !self.roots.contains_key(r))
            .collect();
        for root in open {
            self.open_round(root, epoch, None);
        }
        // What waited for this view.
        let waiting = std::mem::take(&mut self.future);
        for (from, m) in waiting {
            self.on_msg(from, m);
        }
    }

    /// One line per root this member knows (for logs and failing tests):
    /// start, next, stability, what is assembling and what is kept.
    pub fn summary(&self) -> String {
        let mut s = format!(
            "member {} epoch {} as root: next {} stable {} granted {:?}",
            self.me,
            self.epoch(),
            self.next_seq,
            self.stable,
            self.granted
        );
        for (root, r) in &self.roots {
            let assembling: Vec<(u64, u64, u32)> = r
                .partial
                .iter()
                .map(|(s, p)| (*s, p.epoch, p.missing))
                .collect();
            s.push_str(&format!(
                "\n  root {root}: start {:?} (epoch {}, seen {}) next {} stable {} assembling (seq, epoch, missing) {:?} kept {:?} holes {:?}",
                r.start,
                r.start_epoch,
                r.epoch_seen,
                r.next,
                r.stable,
                assembling,
                r.kept.keys().collect::<Vec<_>>(),
                r.holes
            ));
        }
        for (root, r) in &self.rounds {
            s.push_str(&format!(
                "\n  round for {root}: epoch {} target {:?} finished {} syncs {:?} done {:?}",
                r.epoch, r.target, r.finished, r.syncs, r.done
            ));
        }
        s
    }

    /// What this member has delivered of `root`'s sequence: (start, next).
    pub fn position(&self, root: u32) -> Option<(u64, u64)> {
        if root == self.me {
            return Some((0, self.next_seq));
        }
        self.roots
            .get(&root)
            .and_then(|r| r.start.map(|s| (s, r.next)))
    }
}

/// A large transfer at this member's port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Port {
    to: u32,
    root: u32,
    seq: u64,
    first: u32,
    /// The message's epoch.
    epoch: u64,
}

/// The algorithm itself, or RSbcast where it needs a power of two the
/// group is not.
fn usable(a: Algorithm, p: u32) -> Algorithm {
    match a {
        Algorithm::HypercubeNaive | Algorithm::Hypercube if !p.is_power_of_two() => {
            Algorithm::RsBcast
        }
        a => a,
    }
}

#[cfg(test)]
mod tests;
