//! `mcastd`'s core: one engine (the NIC queue and every group's streams),
//! the group service (registry, group agents, this node's operating agent),
//! the daemons' unicast links, and the local clients served over shared
//! memory. Single-threaded: [`Daemon::run_once`] does one round of
//! everything and sleeps on the transport and the clients' descriptors at once.
//!
//! Data paths and their copies (docs/mcastd.md):
//! - publish: the client copies its message into its publication ring (1);
//!   the daemon copies it from the ring into UMEM frames (2), which the
//!   protocol then sends and resends in place.
//! - receive: the engine hands each fragment in place in its UMEM frame; the
//!   daemon copies it straight into each local subscriber's ring (1 per
//!   subscriber); the client library copies it out of the ring into the
//!   message it returns (2), or lends it in place.
//! - local subscribers of a local publisher get the message from the
//!   publication ring directly (one copy into each ring).

use std::collections::{HashMap, HashSet, VecDeque};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mcast_engine::{
    Deliver, Engine, EngineError, Fragment, GroupOptions, ProtocolConfig, PublishError,
    StreamStart, Transport,
};
use mcast_groups::detector::{DetectorConfig, PeerState};
use mcast_groups::flush::{FlushFrame, FlushKey, FlushMsg, Flushes, Outcome, Retained};
use mcast_groups::liveness::{LiveEvent, Liveness};
use mcast_groups::{GroupEvent, GroupService, Limits, View};
use mcast_ipc::ring::{FIRST as FLAG_FIRST, LAST as FLAG_LAST};
use mcast_ipc::{
    ClientId, ErrorCode, Notice, RecordHeader, Request, Response, Server, ServerEvent,
};
use mcast_proto::frag::Reassembler;
use mcast_wire::{GroupId, NodeId, Seq};
use serde_json::json;

use crate::config::{Config, SlowSubscriber};
use crate::links::{inbox, is_link, LinkMessage};
use crate::log::Logger;
use crate::stopped::{Room, StoppedPositions};

/// Control messages waiting for a full link at most, per peer.
const MAX_LINK_BACKLOG: usize = 65_536;
/// Publication records taken from one client per round (fairness).
const PUBLISH_BURST: usize = 64;
/// Stream starts held for groups not joined yet, per group.
const MAX_PENDING_STARTS: usize = 1024;
/// Groups whose final counters `mcast stat` keeps after the node leaves them.
const MAX_RETIRED: usize = 32;
/// How long a leave waits for the group's send stream to deliver what was
/// published before it (then it goes ahead anyway).
const LINGER_NS: u64 = 5_000_000_000;
/// How long the flush of a departed sender's stream waits for the other
/// survivors (docs/mcastd.md, "When a sender leaves"). A survivor that dies
/// meanwhile leaves the view within the detection bound and is no longer
/// waited for; this is the bound for what remains (a survivor that does not
/// answer while its beats still arrive).
const FLUSH_TIMEOUT_NS: u64 = 1_000_000_000;
/// A member that leaves this many of a MAK sender's acknowledgment requests
/// in a row unanswered is reported to the failure detector, which probes it
/// at once if it is also overdue for a beat (protocol.md §6.0).
const UNANSWERED_REQUESTS: u32 = 2;
/// How often the send streams are asked for such members (ns).
const UNRESPONSIVE_CHECK_NS: u64 = 10_000_000;
/// Groups whose send position is remembered after this node stops carrying them.
const MAX_SEND_RESUME: usize = 4096;
/// Closed receive streams whose last position is remembered (`stopped`), at
/// the least: the bound is twice the (group, sender) pairs this node can
/// carry or rejoin (`max_groups` each, times the cluster's nodes) when that
/// is more.
const MIN_STOPPED: usize = 4096;

/// A leave held back until what the member published has been delivered:
/// the other daemons close their receive streams from this node as soon as
/// the view without it arrives, so the leave must not overtake the data.
#[derive(Debug)]
struct Linger {
    client: ClientId,
    /// A Leave request (the pending id); None: the client is gone, leave all.
    leave: Option<(GroupId, u64)>,
    groups: Vec<GroupId>,
    deadline: u64,
}

/// The daemon's own counters.
#[derive(Debug, Clone, Copy, Default)]
pub struct DaemonCounters {
    pub clients_connected: u64,
    pub clients_disconnected: u64,
    pub clients_cut_off: u64,
    pub requests: u64,
    pub messages_published: u64,
    pub publish_errors: u64,
    pub fragments_delivered: u64,
    pub fragments_overflowed: u64,
    pub local_loopback: u64,
    pub link_messages_sent: u64,
    pub link_messages_received: u64,
    pub link_errors: u64,
    pub link_backlog_drops: u64,
    pub group_pauses: u64,
    pub suspicions: u64,
    pub probes_sent: u64,
    pub probes_answered: u64,
    pub nodes_failed: u64,
    pub nodes_recovered: u64,
    /// Receive streams of a peer's older incarnation closed when its beats
    /// showed a newer one (it restarted unnoticed).
    pub dead_streams_closed: u64,
    pub evictions: u64,
    pub link_resets: u64,
    pub role_moves: u64,
    pub rejoins: u64,
    /// Membership events held back until a flush ended.
    pub events_held: u64,
    /// Peers made suspect because they stopped acknowledging a stream.
    pub data_path_suspicions: u64,
    /// Stream starts asked of senders (a view added them, no stream yet).
    pub start_requests_sent: u64,
    /// Starts sent to members that asked for one.
    pub start_requests_answered: u64,
    /// Starts moved forward to where a closed stream had stopped, so nothing
    /// is delivered twice.
    pub starts_moved_forward: u64,
    /// Starts held until the flush of the same stream ended.
    pub starts_deferred: u64,
}

#[derive(Debug)]
struct LocalGroup {
    name: String,
    view: Option<View>,
    /// Local clients joined, in join order.
    members: Vec<ClientId>,
    sender_open: bool,
    paused: bool,
    slow: SlowSubscriber,
    /// Final counters of receive streams closed (senders that left), oldest first.
    closed: Vec<(NodeId, mcast_proto::Counters)>,
    /// Every stream's window (frames): how much of a sender's stream is
    /// kept for a flush.
    window_frames: u32,
    /// Membership events waiting for the group's flushes to end, in order.
    held_events: VecDeque<Vec<u8>>,
}

/// What this node delivered of one sender's stream, kept for a flush: the
/// stream's epoch and its last window of frames.
#[derive(Debug)]
struct Kept {
    epoch: u32,
    frames: Retained,
}

#[derive(Debug, Default)]
struct ClientState {
    name: String,
    pid: u32,
    uid: u32,
    groups: HashSet<GroupId>,
    /// Fragments that did not fit the subscription ring, oldest first.
    overflow: VecDeque<(RecordHeader, Vec<u8>)>,
    overflow_bytes: usize,
    published: u64,
    delivered: u64,
}

/// What a pending group-service request answers.
#[derive(Debug, Clone, Copy)]
enum Pending {
    Join { client: ClientId, req: u64 },
    Leave { client: ClientId, req: u64 },
    Query { client: ClientId, req: u64 },
    List { client: ClientId, req: u64 },
}

#[derive(Debug, Default)]
struct Links {
    reassembly: HashMap<NodeId, Reassembler>,
    inbound: Vec<(NodeId, Vec<u8>)>,
    backlog: HashMap<NodeId, VecDeque<Vec<u8>>>,
}

/// The daemon over transport `T`.
#[derive(Debug)]
pub struct Daemon<T: Transport> {
    cfg: Config,
    node: NodeId,
    incarnation: u32,
    engine: Engine<T>,
    server: Server,
    groups: GroupService,
    local: HashMap<GroupId, LocalGroup>,
    clients: HashMap<ClientId, ClientState>,
    pending: HashMap<u64, Pending>,
    next_req: u64,
    links: Links,
    pending_starts: HashMap<GroupId, Vec<(NodeId, StreamStart)>>,
    /// The last window delivered from each open receive stream.
    kept: HashMap<(GroupId, NodeId), Kept>,
    /// Where each closed receive stream stopped (its deliveries and its
    /// flush's): (epoch, next frame). A start of that stream behind it opens
    /// there instead, so a client never gets a message twice.
    stopped: StoppedPositions,
    /// Groups this node stopped carrying to rejoin them (after it was
    /// declared failed): their clients still want their stopped positions.
    rejoin_groups: HashSet<GroupId>,
    /// Starts of a stream whose flush runs here, applied when it ends (the
    /// flush and the reopened stream would deliver the same frames).
    deferred_starts: HashMap<FlushKey, StreamStart>,
    flushes: Flushes,
    /// When the send streams are next asked for unresponsive members (ns).
    next_unresponsive_check: u64,
    /// Where each group's send stream stopped when this node stopped
    /// carrying the group: a send stream opened again continues there, so
    /// within one incarnation (the streams' epoch) no sequence number names
    /// two frames.
    send_resume: HashMap<GroupId, Seq>,
    lingering: Vec<Linger>,
    /// Final counters of groups no longer carried, newest last.
    retired: VecDeque<serde_json::Value>,
    live: Liveness,
    /// The epoch of each link's send stream (bumped when the link is reset).
    link_epochs: HashMap<NodeId, u32>,
    live_events: Vec<LiveEvent>,
    /// Joins made again after a rejoin, by request id, until answered.
    rejoining: HashMap<u64, (ClientId, String)>,
    /// Joins of a rejoin waiting until `rejoin_at` (ns).
    rejoin_queue: Vec<(ClientId, String)>,
    rejoin_at: u64,
    counters: DaemonCounters,
    log: Logger,
    shutdown: Arc<AtomicBool>,
    fds: Vec<RawFd>,
    events: Vec<ServerEvent>,
    scratch: Vec<u8>,
}

impl<T: Transport> Daemon<T> {
    /// A daemon over `engine` (which carries no group yet) serving `server`.
    /// `incarnation` is this run's session epoch (e.g. the start time in
    /// seconds): peers restart their link receive streams when it grows.
    pub fn new(
        cfg: Config,
        mut engine: Engine<T>,
        server: Server,
        incarnation: u32,
        log: Logger,
        shutdown: Arc<AtomicBool>,
    ) -> Result<Daemon<T>, EngineError> {
        let node = cfg.node;
        let link = link_options();
        engine.add_group(
            inbox(node),
            GroupOptions {
                accept_any_sender: true,
                ..link.clone()
            },
        )?;
        for p in &cfg.peers {
            engine.add_group(inbox(p.node), link.clone())?;
            engine.open_sender_in(
                inbox(p.node),
                &[p.node],
                StreamStart {
                    epoch: incarnation,
                    seq: Seq(0),
                },
            )?;
        }
        let mut groups = GroupService::new(node, cfg.registry, Limits::default());
        let cluster: Vec<NodeId> = std::iter::once(node)
            .chain(cfg.peers.iter().map(|p| p.node))
            .collect();
        groups.set_cluster(&cluster);
        groups.tick(mcast_engine::sys::monotonic_ns());
        let ms = 1_000_000;
        let dcfg = DetectorConfig {
            interval: cfg.heartbeat_ms * ms,
            suspect_after: cfg.suspect_after,
            probe_interval: cfg.probe_ms * ms,
            probes: cfg.probes,
        };
        let peers: Vec<NodeId> = cfg.peers.iter().map(|p| p.node).collect();
        let live = Liveness::new(incarnation, &peers, dcfg, mcast_engine::sys::monotonic_ns());
        let link_epochs = peers.iter().map(|&p| (p, incarnation)).collect();
        Ok(Daemon {
            node,
            incarnation,
            engine,
            server,
            groups,
            local: HashMap::new(),
            clients: HashMap::new(),
            pending: HashMap::new(),
            next_req: 1,
            links: Links::default(),
            pending_starts: HashMap::new(),
            kept: HashMap::new(),
            stopped: StoppedPositions::new(
                MIN_STOPPED.max(2 * Limits::default().max_groups * (cfg.peers.len() + 1)),
            ),
            rejoin_groups: HashSet::new(),
            deferred_starts: HashMap::new(),
            flushes: Flushes::new(),
            next_unresponsive_check: 0,
            send_resume: HashMap::new(),
            lingering: Vec::new(),
            retired: VecDeque::new(),
            live,
            link_epochs,
            live_events: Vec::new(),
            rejoining: HashMap::new(),
            rejoin_queue: Vec::new(),
            rejoin_at: 0,
            counters: DaemonCounters::default(),
            log,
            shutdown,
            fds: Vec::new(),
            events: Vec::new(),
            scratch: Vec::new(),
            cfg,
        })
    }

    /// Runs until the shutdown flag is set, then shuts down cleanly.
    pub fn run(mut self) -> Result<(), EngineError> {
        self.log.info(
            "ready",
            &[
                ("node", &self.node),
                ("socket", &self.cfg.socket.display()),
                ("transport", &self.engine.stats().transport.kind),
            ],
        );
        while !self.shutdown.load(Ordering::Relaxed) {
            self.run_once()?;
        }
        self.stop()
    }

    /// One round: clients' requests, publications, the engine (with sleep),
    /// link messages, group events, overflowing subscribers.
    pub fn run_once(&mut self) -> Result<bool, EngineError> {
        // The group service's clock (request deadlines) before any request.
        self.groups.tick(mcast_engine::sys::monotonic_ns());
        let mut work = self.serve_clients();
        work |= self.take_publications()?;
        self.fds.clear();
        self.server.poll_fds(&mut self.fds);
        let mut sink = Sink {
            server: &mut self.server,
            clients: &mut self.clients,
            local: &self.local,
            kept: &mut self.kept,
            links: &mut self.links,
            counters: &mut self.counters,
            max_message: self.cfg.max_message as usize,
        };
        // Sleep only if no client has published meanwhile (the marks make
        // the next publish ring the doorbell, one of `fds`).
        let may_sleep = !work && sink.server.prepare_sleep();
        let max_sleep = if may_sleep {
            None
        } else {
            Some(Duration::ZERO)
        };
        work |= self
            .engine
            .run_once_deliver(&mut sink, &self.fds, max_sleep)?;
        if may_sleep {
            self.server.finish_sleep();
        }
        work |= self.handle_links()?;
        work |= self.finish_flushes()?;
        work |= self.liveness()?;
        work |= self.handle_group_events()?;
        work |= self.flush_links()?;
        work |= self.flush_overflow()?;
        work |= self.finish_lingering();
        Ok(work)
    }

    /// Carries out the leaves whose data has been delivered (or waited long enough).
    fn finish_lingering(&mut self) -> bool {
        if self.lingering.is_empty() {
            return false;
        }
        let now = mcast_engine::sys::monotonic_ns();
        let mut work = false;
        let mut i = 0;
        while i < self.lingering.len() {
            let l = &self.lingering[i];
            let ring_empty = l.leave.is_none()
                || self
                    .server
                    .publications(l.client)
                    .is_none_or(|p| p.pending().is_ok_and(|n| n == 0));
            let sent = l.groups.iter().all(|&g| self.engine.group_send_idle(g));
            if !(now >= l.deadline || ring_empty && sent) {
                i += 1;
                continue;
            }
            let l = self.lingering.swap_remove(i);
            work = true;
            match l.leave {
                Some((group, id)) => self.groups.leave(id, l.client.0, group),
                None => self.groups.member_gone(l.client.0),
            }
        }
        work
    }

    /// Tells clients, leaves the groups on their behalf (briefly running the
    /// links so the agents hear it), and stops the engine.
    pub fn stop(mut self) -> Result<(), EngineError> {
        self.log
            .info("shutting down", &[("clients", &self.clients.len())]);
        let ids: Vec<ClientId> = self.clients.keys().copied().collect();
        for c in ids {
            self.server.notify(
                c,
                Notice::Shutdown {
                    reason: "mcastd is shutting down".into(),
                },
            );
            self.groups.member_gone(c.0);
        }
        for l in std::mem::take(&mut self.lingering) {
            match l.leave {
                Some((group, id)) => self.groups.leave(id, l.client.0, group),
                None => self.groups.member_gone(l.client.0),
            }
        }
        let deadline = mcast_engine::sys::monotonic_ns() + 500_000_000;
        while mcast_engine::sys::monotonic_ns() < deadline {
            self.flush_group_sends();
            self.flush_links()?;
            let mut sink = |_: Fragment<'_>| {};
            self.engine.poll_deliver(&mut sink)?;
            if self.links.backlog.values().all(|q| q.is_empty())
                && self
                    .cfg
                    .peers
                    .iter()
                    .all(|p| self.engine.group_send_idle(inbox(p.node)))
            {
                break;
            }
        }
        let (report, _transport) = self.engine.shutdown()?;
        self.log.info(
            "stopped",
            &[
                ("frames_free", &report.ledger.transport.free),
                ("messages_published", &self.counters.messages_published),
            ],
        );
        Ok(())
    }

    /// The daemon's counters.
    pub fn counters(&self) -> DaemonCounters {
        self.counters
    }

    // ---- clients --------------------------------------------------------

    fn serve_clients(&mut self) -> bool {
        let mut events = std::mem::take(&mut self.events);
        events.clear();
        self.server.poll(&mut events);
        let work = !events.is_empty();
        for ev in events.drain(..) {
            match ev {
                ServerEvent::Connected {
                    client,
                    uid,
                    pid,
                    name,
                    ..
                } => {
                    self.counters.clients_connected += 1;
                    self.log.info(
                        "client connected",
                        &[
                            ("client", &client.0),
                            ("pid", &pid),
                            ("uid", &uid),
                            ("name", &name),
                        ],
                    );
                    self.clients.insert(
                        client,
                        ClientState {
                            name,
                            pid,
                            uid,
                            ..ClientState::default()
                        },
                    );
                }
                ServerEvent::Request {
                    client,
                    req,
                    request,
                } => {
                    self.counters.requests += 1;
                    self.handle_request(client, req, request);
                }
                ServerEvent::Disconnected { client, reason } => {
                    self.client_gone(client, &reason);
                }
            }
        }
        self.events = events;
        work
    }

    fn client_gone(&mut self, client: ClientId, reason: &str) {
        let Some(state) = self.clients.remove(&client) else {
            return;
        };
        self.counters.clients_disconnected += 1;
        self.log.info(
            "client gone",
            &[
                ("client", &client.0),
                ("name", &state.name),
                ("reason", &reason),
            ],
        );
        for g in &state.groups {
            if let Some(lg) = self.local.get_mut(g) {
                lg.members.retain(|&c| c != client);
            }
        }
        self.pending.retain(|_, p| p.client() != client);
        // Its leave waits until what it published is delivered.
        self.lingering.retain(|l| l.client != client);
        self.lingering.push(Linger {
            client,
            leave: None,
            groups: state.groups.iter().copied().collect(),
            deadline: mcast_engine::sys::monotonic_ns() + LINGER_NS,
        });
    }

    fn handle_request(&mut self, client: ClientId, req: u64, request: Request) {
        let id = self.next_req;
        self.next_req += 1;
        match request {
            Request::Hello { .. } => self.server.reply(
                client,
                req,
                Response::error(
                    ErrorCode::BadState,
                    "hello was already exchanged on this connection",
                ),
            ),
            Request::Join { group } => {
                self.pending.insert(id, Pending::Join { client, req });
                self.groups.join(id, client.0, &group);
            }
            Request::Leave { group } => {
                if !self
                    .clients
                    .get(&client)
                    .is_some_and(|c| c.groups.contains(&group))
                {
                    self.server.reply(
                        client,
                        req,
                        Response::error(
                            ErrorCode::UnknownGroup,
                            format!("this client has not joined group {group}"),
                        ),
                    );
                    return;
                }
                self.pending.insert(id, Pending::Leave { client, req });
                self.lingering.push(Linger {
                    client,
                    leave: Some((group, id)),
                    groups: vec![group],
                    deadline: mcast_engine::sys::monotonic_ns() + LINGER_NS,
                });
            }
            Request::Query { group } | Request::Members { group } => {
                self.pending.insert(id, Pending::Query { client, req });
                self.groups.query(id, &group);
            }
            Request::Groups => {
                self.pending.insert(id, Pending::List { client, req });
                self.groups.list(id);
            }
            Request::Stats => {
                let stats = self.stats_json();
                self.server.reply(client, req, Response::Json(stats));
            }
        }
    }

    /// Takes publication records from every client, feeding the engine and
    /// local subscribers; a record whose group window is full stays in the
    /// ring (the client sees WouldBlock once its ring fills).
    fn take_publications(&mut self) -> Result<bool, EngineError> {
        let mut work = false;
        let ids: Vec<ClientId> = self.clients.keys().copied().collect();
        for c in ids {
            let mut taken = 0;
            while taken < PUBLISH_BURST {
                let Some(cons) = self.server.publications(c) else {
                    break;
                };
                let rec = match cons.peek() {
                    Ok(Some(r)) => r,
                    Ok(None) => break,
                    Err(e) => {
                        let reason = format!("publication ring is corrupt: {e}");
                        self.cut_off(c, &reason);
                        break;
                    }
                };
                let group = rec.header.group;
                self.scratch.clear();
                self.scratch.extend_from_slice(rec.payload);
                let joined = self
                    .clients
                    .get(&c)
                    .is_some_and(|s| s.groups.contains(&group));
                if !joined {
                    self.server.publications(c).map(|p| p.pop());
                    self.counters.publish_errors += 1;
                    self.server.notify(
                        c,
                        Notice::Error {
                            message: format!(
                                "a message for group {group}, which this client has not joined, was dropped"
                            ),
                        },
                    );
                    continue;
                }
                if !self.publish_remote(group, c)? {
                    break; // window full: try again next round
                }
                self.loopback(group, c);
                self.server.publications(c).map(|p| p.pop());
                self.server.wake_publishers(c);
                if let Some(s) = self.clients.get_mut(&c) {
                    s.published += 1;
                }
                self.counters.messages_published += 1;
                taken += 1;
                work = true;
            }
        }
        Ok(work)
    }

    /// Queues `self.scratch` on `group`'s send stream (opening it on first
    /// use). False when the window is full.
    fn publish_remote(&mut self, group: GroupId, client: ClientId) -> Result<bool, EngineError> {
        let remote = self.remote_nodes(group);
        if remote.is_empty() {
            return Ok(true); // nobody else in the group: local delivery only
        }
        let lg = self.local.get_mut(&group).expect("a joined group is local");
        if !lg.sender_open {
            let start = StreamStart {
                epoch: self.incarnation,
                seq: self.send_resume.get(&group).copied().unwrap_or(Seq(0)),
            };
            self.engine.open_sender_in(group, &remote, start)?;
            lg.sender_open = true;
            for n in remote {
                self.send_link(n, LinkMessage::Start { group, start });
            }
        }
        match self.engine.publish_in(group, &self.scratch) {
            Ok(()) => Ok(true),
            Err(PublishError::WouldBlock) => Ok(false),
            Err(e) => {
                self.counters.publish_errors += 1;
                self.server.notify(
                    client,
                    Notice::Error {
                        message: format!("a message for group {group} was dropped: {e}"),
                    },
                );
                Ok(true)
            }
        }
    }

    /// Gives `self.scratch`, published by `from`, to the group's other local clients.
    fn loopback(&mut self, group: GroupId, from: ClientId) {
        let Some(lg) = self.local.get(&group) else {
            return;
        };
        let hdr = RecordHeader {
            group,
            source: self.node,
            flags: FLAG_FIRST | FLAG_LAST,
        };
        for &c in &lg.members {
            if c == from {
                continue;
            }
            if let Some(state) = self.clients.get_mut(&c) {
                deliver_to(
                    &mut self.server,
                    c,
                    state,
                    hdr,
                    &self.scratch,
                    &mut self.counters,
                );
                self.counters.local_loopback += 1;
            }
        }
    }

    /// Moves overflowed fragments into rings that have room again; applies
    /// the slow-subscriber policy to clients still too far behind.
    fn flush_overflow(&mut self) -> Result<bool, EngineError> {
        let mut work = false;
        let limit = self.cfg.subscriber_buffer as usize;
        let mut behind: Vec<ClientId> = Vec::new();
        for (&c, state) in self.clients.iter_mut() {
            while let Some((hdr, data)) = state.overflow.front() {
                let Some(p) = self.server.subscription(c) else {
                    break;
                };
                if p.try_push(*hdr, &[data]).is_err() {
                    break;
                }
                let (_, data) = state.overflow.pop_front().expect("peeked");
                state.overflow_bytes -= data.len() + RECORD_COST;
                state.delivered += 1;
                work = true;
            }
            if state.overflow_bytes > limit {
                behind.push(c);
            }
        }
        // Pause or cut off, group by group.
        let mut to_pause = Vec::new();
        for c in behind {
            let groups: Vec<GroupId> = self
                .clients
                .get(&c)
                .map(|s| s.groups.iter().copied().collect())
                .unwrap_or_default();
            let hold = groups.iter().any(|g| {
                self.local
                    .get(g)
                    .is_some_and(|lg| lg.slow == SlowSubscriber::Hold)
            });
            if hold {
                to_pause.extend(groups.into_iter().filter(|g| {
                    self.local
                        .get(g)
                        .is_some_and(|lg| lg.slow == SlowSubscriber::Hold && !lg.paused)
                }));
            } else {
                let bytes = self.clients.get(&c).map_or(0, |s| s.overflow_bytes);
                let reason = format!(
                    "slow subscriber: {bytes} bytes waiting beyond the {limit}-byte subscription ring \
                     (slow_subscriber = \"cutoff\"); read faster or ask for slow_subscriber = \"hold\""
                );
                self.cut_off(c, &reason);
            }
        }
        for g in to_pause {
            self.engine.set_paused(g, true)?;
            if let Some(lg) = self.local.get_mut(&g) {
                lg.paused = true;
            }
            self.counters.group_pauses += 1;
            self.log
                .warn("group held back for a slow subscriber", &[("group", &g)]);
        }
        // Resume groups whose subscribers have drained to half.
        let resume: Vec<GroupId> = self
            .local
            .iter()
            .filter(|(_, lg)| lg.paused)
            .filter(|(_, lg)| {
                lg.members.iter().all(|c| {
                    self.clients
                        .get(c)
                        .is_none_or(|s| s.overflow_bytes <= limit / 2)
                })
            })
            .map(|(&g, _)| g)
            .collect();
        for g in resume {
            self.engine.set_paused(g, false)?;
            if let Some(lg) = self.local.get_mut(&g) {
                lg.paused = false;
            }
            self.log.info("group resumed", &[("group", &g)]);
            work = true;
        }
        Ok(work)
    }

    fn cut_off(&mut self, c: ClientId, reason: &str) {
        self.counters.clients_cut_off += 1;
        self.log
            .warn("client cut off", &[("client", &c.0), ("reason", &reason)]);
        self.server.notify(
            c,
            Notice::CutOff {
                reason: reason.to_owned(),
            },
        );
        self.server.disconnect(c, reason);
        self.client_gone(c, reason);
    }

    // ---- failure detection (seed 004 §3.4) ---------------------------------

    /// Beats, probes and their answers; the detector's verdicts.
    fn liveness(&mut self) -> Result<bool, EngineError> {
        let now = mcast_engine::sys::monotonic_ns();
        self.groups.tick(now);
        let mut events = std::mem::take(&mut self.live_events);
        while let Some((from, payload)) = self.engine.poll_beat() {
            self.live.on_beat(
                from,
                &payload,
                now,
                self.groups.registry_epoch(),
                &mut events,
            );
        }
        if now >= self.next_unresponsive_check {
            self.next_unresponsive_check = now + UNRESPONSIVE_CHECK_NS;
            let mut silent = Vec::new();
            self.engine.unresponsive(UNANSWERED_REQUESTS, &mut silent);
            for (group, n) in silent {
                if self
                    .live
                    .unreachable(n, now, self.groups.registry_epoch(), &mut events)
                {
                    self.counters.data_path_suspicions += 1;
                    self.log.warn(
                        "peer stopped acknowledging a stream and missed a beat: probing it",
                        &[("node", &n), ("group", &group)],
                    );
                }
            }
        }
        self.live
            .poll(now, self.groups.registry_epoch(), &mut events);
        let mut work = false;
        for ev in events.drain(..) {
            match ev {
                LiveEvent::Send { to, payload } => {
                    self.engine.send_beat(to, &payload)?;
                }
                LiveEvent::Suspect(n) => {
                    self.counters.suspicions += 1;
                    self.log.warn("peer suspect: probing it", &[("node", &n)]);
                }
                LiveEvent::Failed(n) => {
                    work = true;
                    self.node_failed(n)?;
                }
                LiveEvent::Restarted(n) => {
                    work = true;
                    self.log
                        .warn("peer restarted: its old state is gone", &[("node", &n)]);
                    self.node_failed(n)?;
                    self.groups.node_recovered(n);
                    self.peer_restarted(n)?;
                }
                LiveEvent::Recovered(n) => {
                    work = true;
                    self.counters.nodes_recovered += 1;
                    self.groups.node_recovered(n);
                    self.log
                        .info("peer heard again after failing", &[("node", &n)]);
                    self.peer_recovered(n)?;
                }
                LiveEvent::Rejoin { by } => {
                    work = true;
                    self.rejoin(by)?;
                }
                LiveEvent::Registry { node, epoch } => self.groups.adopt_registry(node, epoch),
                LiveEvent::Majority => {
                    let (r, e) = self.groups.registry_epoch();
                    self.log.info(
                        "registry known: a majority of the cluster heard",
                        &[("registry", &r), ("moves", &e)],
                    );
                    self.groups.confirm_registry();
                }
            }
        }
        self.live_events = events;
        work |= self.close_dead_streams()?;
        self.rejoin_joins();
        let d = self.live.detector();
        self.counters.probes_sent = d.probes_sent;
        self.counters.probes_answered = self.live.counters.probes_answered;
        Ok(work)
    }

    /// A peer declared this node failed (it was paused, or cut off by a
    /// partition, longer than the detection bound): every view it was in
    /// has moved on without it. It starts afresh as a new member: a new
    /// incarnation (so every peer drops its old state), its groups and
    /// streams closed, its clients told (a membership event saying
    /// `evicted`) and joined again by name: they continue from their new
    /// join point, so nothing is delivered twice or out of order.
    fn rejoin(&mut self, by: NodeId) -> Result<(), EngineError> {
        self.counters.rejoins += 1;
        self.live.rejoined();
        self.incarnation = self.live.incarnation();
        self.log.warn(
            "this node was declared failed: rejoining as a new member",
            &[("by", &by), ("incarnation", &self.incarnation)],
        );
        // Joins of an earlier rejoin still on their way are made again too.
        let mut again: Vec<(ClientId, String)> =
            std::mem::take(&mut self.rejoining).into_values().collect();
        let groups: Vec<GroupId> = self.local.keys().copied().collect();
        for g in groups {
            let lg = &self.local[&g];
            let event = json!({"evicted": true, "by": by, "rejoining": true}).to_string();
            let hdr = event_record(g);
            let members = lg.members.clone();
            again.extend(members.iter().map(|&c| (c, lg.name.clone())));
            for &c in &members {
                if let Some(state) = self.clients.get_mut(&c) {
                    state.groups.remove(&g);
                }
            }
            self.event_to(&members, hdr, event.as_bytes());
            if !members.is_empty() {
                self.rejoin_groups.insert(g);
            }
            self.retire(g)?;
        }
        for (_, p) in std::mem::take(&mut self.pending) {
            self.server.reply(
                p.client(),
                p.req(),
                Response::error(
                    ErrorCode::Unavailable,
                    format!("node {by} declared this node failed; it is rejoining: retry"),
                ),
            );
        }
        self.lingering.clear();
        self.pending_starts.clear();
        let (registry, epoch) = self.groups.registry_epoch();
        let mut groups = GroupService::new(self.node, self.cfg.registry, Limits::default());
        let cluster: Vec<NodeId> = std::iter::once(self.node)
            .chain(self.cfg.peers.iter().map(|p| p.node))
            .collect();
        groups.set_cluster(&cluster);
        groups.tick(mcast_engine::sys::monotonic_ns());
        groups.adopt_registry(registry, epoch);
        groups.confirm_registry();
        self.groups = groups;
        let peers: Vec<NodeId> = self.cfg.peers.iter().map(|p| p.node).collect();
        for p in peers {
            let e = self.link_epochs.entry(p).or_insert(0);
            *e = (*e).max(self.incarnation);
            self.reset_link(p)?;
        }
        // The joins wait a few beats, until every peer has seen the new
        // incarnation: a peer that sees it only later drops this node's
        // members as a restart's leftovers, new ones included.
        let interval = self.live.detector().config().interval;
        self.rejoin_at = mcast_engine::sys::monotonic_ns() + 3 * interval;
        self.rejoin_queue = again;
        Ok(())
    }

    /// Peer `n` restarted: its old incarnation has left every group here,
    /// whatever the views say yet (a view that drops it may never arrive:
    /// views are skipped when the agent moves). Its streams are closed and
    /// flushed, it leaves the send streams' ACK sets, and it leaves this
    /// node's copy of each view, so the view that lists its new incarnation
    /// is a join and gets a stream start.
    fn peer_restarted(&mut self, n: NodeId) -> Result<(), EngineError> {
        let groups = self.groups_with(n);
        for group in groups {
            let lg = self.local.get_mut(&group).expect("listed");
            let view = lg.view.as_mut().expect("listed");
            view.members.retain(|m| m.node != n);
            let sender_open = lg.sender_open;
            let remote = self.remote_nodes(group);
            if sender_open {
                self.engine.set_members_in(group, &remote)?;
            }
            let mut out = Vec::new();
            self.flushes.peer_gone(group, n, &mut out);
            self.send_flush(out);
            if self.engine.receivers_in(group).contains(&n) {
                self.close_receiver(group, n)?;
                self.start_flush(group, n, &remote);
            }
        }
        Ok(())
    }

    /// Closes (and flushes) every receive stream whose sender's beats carry
    /// a newer incarnation: the sender restarted, and no `Restarted` came
    /// because this daemon never heard its old incarnation (this daemon
    /// started after the peer's last beat before it died, yet got a start
    /// from it). Without this, the old stream stays open and holds the
    /// flush states of its departure for ever, so the other survivors wait
    /// for this node until their deadline.
    fn close_dead_streams(&mut self) -> Result<bool, EngineError> {
        let dead = |d: &Self| -> Vec<(GroupId, NodeId)> {
            d.kept
                .iter()
                .filter(|(&(_, s), k)| d.live.peer_incarnation(s).is_some_and(|i| k.epoch < i))
                .map(|(&gs, _)| gs)
                .collect()
        };
        let mut nodes: Vec<NodeId> = dead(self).into_iter().map(|(_, s)| s).collect();
        nodes.sort_unstable();
        nodes.dedup();
        for &n in &nodes {
            self.counters.dead_streams_closed += 1;
            self.log.warn(
                "peer restarted unnoticed: the streams of its old incarnation are closed",
                &[("node", &n)],
            );
            self.peer_restarted(n)?;
        }
        // Streams of groups whose view here lacks the sender have no
        // departure to flush.
        for (group, n) in dead(self) {
            self.close_receiver(group, n)?;
            // Or it would be found dead again at every poll.
            self.kept.remove(&(group, n));
        }
        Ok(!nodes.is_empty())
    }

    /// A membership event record into each of `members`' rings, in order with their data.
    fn event_to(&mut self, members: &[ClientId], hdr: RecordHeader, event: &[u8]) {
        for &c in members {
            if let Some(state) = self.clients.get_mut(&c) {
                deliver_to(&mut self.server, c, state, hdr, event, &mut self.counters);
            }
        }
    }

    /// Issues the joins of a rejoin once their wait is over.
    fn rejoin_joins(&mut self) {
        if self.rejoin_queue.is_empty() || mcast_engine::sys::monotonic_ns() < self.rejoin_at {
            return;
        }
        for (c, name) in std::mem::take(&mut self.rejoin_queue) {
            if !self.clients.contains_key(&c) {
                continue;
            }
            let id = self.next_req;
            self.next_req += 1;
            self.rejoining.insert(id, (c, name.clone()));
            self.groups.join(id, c.0, &name);
        }
    }

    /// Node `n` is declared failed: it leaves every view this node is the
    /// agent of, and the link to it starts afresh (what was queued for it
    /// is dropped; if it comes back it gets a new link epoch).
    fn node_failed(&mut self, n: NodeId) -> Result<(), EngineError> {
        self.counters.nodes_failed += 1;
        let bound_ms = self.live.detector().config().detection_bound() / 1_000_000;
        self.log.warn(
            "peer failed: no beat or probe answer",
            &[("node", &n), ("detection_bound_ms", &bound_ms)],
        );
        let (takeovers, registry) = (self.groups.takeovers(), self.groups.registry());
        let changed = self.groups.node_failed(n);
        for g in &changed {
            self.counters.evictions += 1;
            self.log
                .warn("evicted from group", &[("node", &n), ("group", g)]);
        }
        if self.groups.takeovers() > takeovers {
            self.counters.role_moves += self.groups.takeovers() - takeovers;
            self.log.warn(
                "took over the agent role of the failed node's groups",
                &[
                    ("failed", &n),
                    ("groups", &(self.groups.takeovers() - takeovers)),
                ],
            );
        }
        if self.groups.registry() != registry {
            self.counters.role_moves += 1;
            self.log.warn(
                "registry role moved",
                &[("failed", &n), ("registry", &self.groups.registry())],
            );
        }
        let mut out = Vec::new();
        self.flushes.node_failed(n, &mut out);
        self.send_flush(out);
        self.flush_group_sends();
        self.reset_link(n)
    }

    fn reset_link(&mut self, n: NodeId) -> Result<(), EngineError> {
        if let Some(q) = self.links.backlog.get_mut(&n) {
            q.clear();
        }
        let epoch = self.link_epochs.entry(n).or_insert(self.incarnation);
        *epoch += 1;
        let start = StreamStart {
            epoch: *epoch,
            seq: Seq(0),
        };
        self.engine.close_sender_in(inbox(n))?;
        self.engine.open_sender_in(inbox(n), &[n], start)?;
        self.counters.link_resets += 1;
        Ok(())
    }

    // ---- links and group events ------------------------------------------

    fn send_link(&mut self, peer: NodeId, msg: LinkMessage) {
        if self.live.detector().state(peer) == Some(PeerState::Failed) {
            self.counters.link_backlog_drops += 1;
            return;
        }
        let q = self.links.backlog.entry(peer).or_default();
        if q.len() >= MAX_LINK_BACKLOG {
            self.counters.link_backlog_drops += 1;
            self.log.error(
                "link backlog full: dropping a control message",
                &[("peer", &peer), ("backlog", &q.len())],
            );
            return;
        }
        q.push_back(msg.encode());
    }

    fn flush_links(&mut self) -> Result<bool, EngineError> {
        let mut work = false;
        for (&peer, q) in self.links.backlog.iter_mut() {
            while let Some(m) = q.front() {
                match self.engine.publish_in(inbox(peer), m) {
                    Ok(()) => {
                        q.pop_front();
                        self.counters.link_messages_sent += 1;
                        work = true;
                    }
                    Err(PublishError::WouldBlock) => break,
                    Err(e) => {
                        self.counters.link_errors += 1;
                        self.log
                            .error("cannot send to peer", &[("peer", &peer), ("error", &e)]);
                        q.pop_front();
                    }
                }
            }
        }
        Ok(work)
    }

    fn flush_group_sends(&mut self) {
        while let Some((peer, bytes)) = self.groups.poll_send() {
            if peer == self.node {
                // The service answers itself internally; never expected.
                continue;
            }
            if !self.cfg.peers.iter().any(|p| p.node == peer) {
                self.counters.link_errors += 1;
                self.log.error(
                    "group message for a node that is not a [[peer]]",
                    &[("node", &peer)],
                );
                continue;
            }
            self.send_link(peer, LinkMessage::Groups(bytes));
        }
    }

    fn handle_links(&mut self) -> Result<bool, EngineError> {
        let inbound = std::mem::take(&mut self.links.inbound);
        let work = !inbound.is_empty();
        let now = mcast_engine::sys::monotonic_ns();
        let mut out = std::mem::take(&mut self.live_events);
        for (from, bytes) in inbound {
            self.live.heard(from, now, &mut out);
            self.counters.link_messages_received += 1;
            match LinkMessage::decode(&bytes) {
                Ok(LinkMessage::Groups(b)) => {
                    if let Err(e) = self.groups.handle_message(from, &b) {
                        self.counters.link_errors += 1;
                        self.log
                            .warn("bad group message", &[("from", &from), ("error", &e)]);
                    }
                }
                Ok(LinkMessage::Start { group, start }) => self.stream_start(from, group, start)?,
                Ok(LinkMessage::StartRequest { group }) => self.start_request(from, group)?,
                Ok(LinkMessage::Flush(m)) => self.flush_message(from, m),
                Err(e) => {
                    self.counters.link_errors += 1;
                    self.log
                        .warn("bad link message", &[("from", &from), ("error", &e)]);
                }
            }
        }
        Ok(work)
    }

    /// Node `from` says where its stream in `group` starts for us.
    fn stream_start(
        &mut self,
        from: NodeId,
        group: GroupId,
        start: StreamStart,
    ) -> Result<(), EngineError> {
        if !self.local.contains_key(&group) {
            // The view that makes us a member may still be on its way.
            let q = self.pending_starts.entry(group).or_default();
            q.retain(|(n, _)| *n != from);
            if q.len() < MAX_PENDING_STARTS {
                q.push((from, start));
            }
            return Ok(());
        }
        let key = FlushKey {
            group,
            sender: from,
            epoch: start.epoch,
        };
        if self.flushes.running(key) {
            // The flush still delivers this stream's last frames: opening it
            // now would deliver them twice. It opens when the flush ends.
            self.deferred_starts.insert(key, start);
            self.counters.starts_deferred += 1;
            return Ok(());
        }
        let mut start = start;
        match self.kept.get(&(group, from)) {
            Some(k) => {
                if k.epoch == start.epoch && k.frames.next().is_some_and(|n| !start.seq.after(n)) {
                    // The open stream already holds everything from there on
                    // (a repeated start, or a view change this node never
                    // saw): opening it again would deliver those frames twice.
                    return Ok(());
                }
            }
            None => {
                if let Some(next) = self.stopped.get(group, from, start.epoch) {
                    if start.seq.before(next) {
                        // Delivered up to there before the stream closed.
                        start.seq = next;
                        self.counters.starts_moved_forward += 1;
                    }
                }
            }
        }
        let first = !self.kept.contains_key(&(group, from));
        self.close_receiver(group, from)?;
        let mut out = Vec::new();
        self.flushes
            .forget_held(group, from, first.then_some(start.epoch), &mut out);
        self.send_flush(out);
        // A start of an older stream of this sender, waiting for that
        // stream's flush, must not replace this one when it ends.
        self.deferred_starts
            .retain(|k, _| !(k.group == group && k.sender == from));
        self.engine.open_receiver_in(group, from, start)?;
        let window = self.local[&group].window_frames;
        self.kept.insert(
            (group, from),
            Kept {
                epoch: start.epoch,
                frames: Retained::starting_at(window, start.seq),
            },
        );
        self.log.debug(
            "receive stream opened",
            &[("group", &group), ("from", &from), ("seq", &start.seq.0)],
        );
        Ok(())
    }

    /// `from` carries `group` and holds no stream from this node: if this
    /// node's send stream counts it a member, it is told where to open one
    /// (it lost the stream while this node's views never showed it leave).
    fn start_request(&mut self, from: NodeId, group: GroupId) -> Result<(), EngineError> {
        if self.resend_start(from, group)? {
            self.counters.start_requests_answered += 1;
        }
        Ok(())
    }

    /// Sends `to` a stream start at its resume point in `group`, if this
    /// node's send stream there counts it a member. True when sent.
    fn resend_start(&mut self, to: NodeId, group: GroupId) -> Result<bool, EngineError> {
        let Some(lg) = self.local.get(&group) else {
            return Ok(false);
        };
        let remote = self.remote_nodes(group);
        if !lg.sender_open || !remote.contains(&to) {
            return Ok(false); // the view that adds it sends the start
        }
        let start = self.engine.resume_member_in(group, to, &remote)?;
        self.send_link(to, LinkMessage::Start { group, start });
        Ok(true)
    }

    /// The local groups whose view holds node `n`.
    fn groups_with(&self, n: NodeId) -> Vec<GroupId> {
        self.local
            .iter()
            .filter(|(_, lg)| lg.view.as_ref().is_some_and(|v| v.has_node(n)))
            .map(|(&g, _)| g)
            .collect()
    }

    /// Node `n`, declared failed here, is heard again. The link to it was
    /// reset, so a start or a start request to it may have been dropped:
    /// ask it again for the streams this node lacks, and tell it again
    /// where this node's own streams go on.
    fn peer_recovered(&mut self, n: NodeId) -> Result<(), EngineError> {
        let groups = self.groups_with(n);
        for group in groups {
            if !self.engine.receivers_in(group).contains(&n) {
                self.counters.start_requests_sent += 1;
                self.send_link(n, LinkMessage::StartRequest { group });
            }
            self.resend_start(n, group)?;
        }
        Ok(())
    }

    /// Notes where a receive stream stopped (see `stopped`).
    fn note_stopped(&mut self, group: GroupId, sender: NodeId, epoch: u32, next: Option<Seq>) {
        let Some(next) = next else {
            return;
        };
        // A position matters only while clients of this node may receive
        // the stream again: in a group it carries, or rejoins for them.
        if self.rejoining.is_empty() && self.rejoin_queue.is_empty() {
            self.rejoin_groups.clear();
        }
        let (local, rejoin) = (&self.local, &self.rejoin_groups);
        let wanted = |g| local.contains_key(&g) || rejoin.contains(&g);
        if let Room::Cleared(n) = self.stopped.note(group, sender, epoch, next, wanted) {
            self.log.warn(
                "too many stopped stream positions: forgot them all, a stream started behind one may repeat messages",
                &[("positions", &n)],
            );
        }
    }

    fn handle_group_events(&mut self) -> Result<bool, EngineError> {
        self.flush_group_sends();
        let mut work = false;
        while let Some(ev) = self.groups.poll_event() {
            work = true;
            match ev {
                GroupEvent::Joined {
                    req,
                    member,
                    group,
                    name,
                    rank,
                    view,
                } => {
                    let client = ClientId(member);
                    self.ensure_local(group, &name)?;
                    if let Some(s) = self.clients.get_mut(&client) {
                        s.groups.insert(group);
                        let lg = self.local.get_mut(&group).expect("ensured");
                        if !lg.members.contains(&client) {
                            lg.members.push(client);
                        }
                    }
                    self.log.info(
                        "client joined",
                        &[
                            ("client", &member),
                            ("group", &name),
                            ("number", &group),
                            ("rank", &rank),
                        ],
                    );
                    self.rejoining.remove(&req);
                    if let Some(Pending::Join { client, req }) = self.pending.remove(&req) {
                        self.server.reply(
                            client,
                            req,
                            Response::Joined {
                                group,
                                name,
                                rank,
                                view: ipc_view(&view),
                            },
                        );
                    }
                }
                GroupEvent::Left { req, member, group } => {
                    let client = ClientId(member);
                    if let Some(s) = self.clients.get_mut(&client) {
                        s.groups.remove(&group);
                    }
                    if let Some(lg) = self.local.get_mut(&group) {
                        lg.members.retain(|&c| c != client);
                    }
                    if let Some(Pending::Leave { client, req }) = self.pending.remove(&req) {
                        self.server.reply(client, req, Response::Left);
                    }
                }
                GroupEvent::Failed { req, error } => {
                    if let Some((c, name)) = self.rejoining.remove(&req) {
                        self.log.warn(
                            "a client's join after the rejoin failed",
                            &[("client", &c.0), ("group", &name), ("error", &error)],
                        );
                        self.server.notify(
                            c,
                            Notice::Error {
                                message: format!(
                                    "this node was declared failed and could not join {name} again: {error}"
                                ),
                            },
                        );
                    }
                    if let Some(p) = self.pending.remove(&req) {
                        self.server.reply(
                            p.client(),
                            p.req(),
                            Response::error(error_code(&error), error.to_string()),
                        );
                    }
                }
                GroupEvent::QueryResult { req, info } => {
                    if let Some(p) = self.pending.remove(&req) {
                        let v = info.as_ref().map_or(json!(null), info_json);
                        self.server.reply(p.client(), p.req(), Response::Json(v));
                    }
                }
                GroupEvent::List { req, groups } => {
                    if let Some(p) = self.pending.remove(&req) {
                        let v = json!(groups
                            .iter()
                            .map(|g| json!({
                                "name": g.name,
                                "group": g.group,
                                "agent": g.agent,
                                "members": g.members,
                            }))
                            .collect::<Vec<_>>());
                        self.server.reply(p.client(), p.req(), Response::Json(v));
                    }
                }
                GroupEvent::ViewChanged { group, view } => self.view_changed(group, view)?,
            }
        }
        self.flush_group_sends();
        Ok(work)
    }

    /// Starts carrying `group` if this node does not yet.
    fn ensure_local(&mut self, group: GroupId, name: &str) -> Result<(), EngineError> {
        if self.local.contains_key(&group) {
            return Ok(());
        }
        let s = self.cfg.group_settings(name);
        self.engine.add_group(
            group,
            GroupOptions {
                algorithm: s.algorithm.to_engine(),
                protocol: ProtocolConfig::default(),
                window_frames: s.window_frames,
                subscribe: true,
                accept_any_sender: false,
                max_queued_frames: (s.window_frames as usize).max(256),
            },
        )?;
        self.local.insert(
            group,
            LocalGroup {
                name: name.to_owned(),
                view: None,
                members: Vec::new(),
                sender_open: false,
                paused: false,
                slow: s.slow_subscriber,
                closed: Vec::new(),
                window_frames: s.window_frames,
                held_events: VecDeque::new(),
            },
        );
        for (from, start) in self.pending_starts.remove(&group).unwrap_or_default() {
            self.stream_start(from, group, start)?;
        }
        Ok(())
    }

    fn view_changed(&mut self, group: GroupId, view: View) -> Result<(), EngineError> {
        let nodes = view.nodes();
        self.log.info(
            "view",
            &[
                ("group", &view.name),
                ("number", &group),
                ("epoch", &view.epoch),
                ("nodes", &format!("{nodes:?}")),
            ],
        );
        if !nodes.contains(&self.node) {
            // Our last local member left: stop carrying the group.
            if self.local.contains_key(&group) {
                self.retire(group)?;
            }
            return Ok(());
        }
        self.ensure_local(group, &view.name)?;
        let remote: Vec<NodeId> = nodes.iter().copied().filter(|&n| n != self.node).collect();
        let lg = self.local.get_mut(&group).expect("ensured");
        let before: Vec<NodeId> = lg
            .view
            .as_ref()
            .map(|v| v.nodes())
            .unwrap_or_default()
            .into_iter()
            .filter(|&n| n != self.node)
            .collect();
        if lg.sender_open {
            // The MAK sender's ACK set is the view; new members start now.
            let start = self.engine.set_members_in(group, &remote)?;
            for &n in remote.iter().filter(|n| !before.contains(n)) {
                self.send_link(n, LinkMessage::Start { group, start });
            }
        }
        let receivers = self.engine.receivers_in(group);
        let now = mcast_engine::sys::monotonic_ns();
        for &n in remote.iter().filter(|n| !before.contains(n)) {
            // Back in the view, alive, with the stream flushed here: the
            // flush stops waiting for survivors that never saw it leave.
            let inc = self.live.peer_incarnation(n);
            self.flushes.sender_back(group, n, |e| Some(e) == inc, now);
            if !receivers.contains(&n) {
                // Its send stream may count this node a member all along
                // (its views never showed this node leave): ask for a start.
                self.counters.start_requests_sent += 1;
                self.send_link(n, LinkMessage::StartRequest { group });
            }
        }
        // The survivors of this change: no flush waits for a node gone too,
        // and each sender gone starts one with the nodes of both views.
        let survivors: Vec<NodeId> = remote
            .iter()
            .copied()
            .filter(|n| before.contains(n))
            .collect();
        let mut out = Vec::new();
        for &n in before.iter().filter(|n| !remote.contains(n)) {
            self.flushes.peer_gone(group, n, &mut out);
        }
        self.send_flush(out);
        for n in self.engine.receivers_in(group) {
            // A stream whose start overtook the view that adds its sender is
            // kept: only a sender that was in the view and is not now left.
            if !remote.contains(&n) && before.contains(&n) {
                self.close_receiver(group, n)?;
                self.start_flush(group, n, &survivors);
            }
        }
        let notice = Notice::ViewChanged {
            group,
            epoch: view.epoch,
            members: ipc_view(&view).members,
        };
        // The same change, in stream order, in every local member's ring.
        let now_nodes = view.nodes();
        let gone: Vec<NodeId> = before
            .iter()
            .copied()
            .filter(|n| !now_nodes.contains(n))
            .collect();
        let failed: Vec<NodeId> = gone
            .iter()
            .copied()
            .filter(|&n| self.live.detector().state(n) != Some(PeerState::Alive))
            .collect();
        let event = json!({
            "epoch": view.epoch,
            "agent": view.agent,
            "members": view.members.iter().map(|m| json!({"rank": m.rank, "node": m.node, "member": m.member})).collect::<Vec<_>>(),
            "joined": remote.iter().filter(|n| !before.contains(n)).collect::<Vec<_>>(),
            "gone": gone,
            "failed": failed,
        })
        .to_string();
        let hdr = event_record(group);
        let members = self.local[&group].members.clone();
        for &c in &members {
            self.server.notify(c, notice.clone());
        }
        let lg = self.local.get_mut(&group).expect("ensured");
        if self.flushes.pending_in(group) || !lg.held_events.is_empty() {
            // After the departed senders' last messages, which the flush
            // may still bring.
            lg.held_events.push_back(event.into_bytes());
            self.counters.events_held += 1;
        } else {
            self.event_to(&members, hdr, event.as_bytes());
        }
        self.local.get_mut(&group).expect("ensured").view = Some(view);
        Ok(())
    }

    // ---- flush: the survivors of a departed sender agree on its stream ----

    /// `sender` left the view of `group`, its receive stream is closed:
    /// tell the survivors how far it was delivered here.
    fn start_flush(&mut self, group: GroupId, sender: NodeId, survivors: &[NodeId]) {
        let Some(kept) = self.kept.remove(&(group, sender)) else {
            return;
        };
        let key = FlushKey {
            group,
            sender,
            epoch: kept.epoch,
        };
        let deadline = mcast_engine::sys::monotonic_ns() + FLUSH_TIMEOUT_NS;
        // A survivor already declared failed is not waited for (a view may
        // still hold it when its group's agent cannot change the view).
        let survivors: Vec<NodeId> = survivors
            .iter()
            .copied()
            .filter(|&n| self.live.detector().state(n) != Some(PeerState::Failed))
            .collect();
        let mut out = Vec::new();
        self.flushes
            .start(key, Some(kept.frames), &survivors, deadline, &mut out);
        self.send_flush(out);
    }

    /// True when a peer's flush state for `key` is held for a flush of this
    /// node's to come. Only while this node's view still holds the sender
    /// (its own view change is on its way): a stream whose start overtook
    /// the view adding its sender has no departure to flush, and holding
    /// would keep the peer waiting. Before this node's first view (it
    /// restarted, and starts came first, kept for that view) it is held:
    /// that view opens the stream and shows the departure, and answering
    /// "nothing" would let the peers end without sending this node the
    /// frames it was counted for (seed 1168).
    fn may_flush_later(&self, key: FlushKey) -> bool {
        let streaming = self
            .kept
            .get(&(key.group, key.sender))
            .is_some_and(|k| k.epoch == key.epoch)
            && self
                .local
                .get(&key.group)
                .and_then(|lg| lg.view.as_ref())
                .is_none_or(|v| v.nodes().contains(&key.sender));
        let pending = self.pending_starts.get(&key.group).is_some_and(|q| {
            q.iter()
                .any(|(n, s)| *n == key.sender && s.epoch == key.epoch)
        });
        streaming || pending
    }

    fn flush_message(&mut self, from: NodeId, m: FlushMsg) {
        let mut out = Vec::new();
        match m {
            FlushMsg::State {
                key,
                next,
                from: serves,
            } => {
                let has_stream = self.may_flush_later(key);
                self.flushes
                    .on_state(from, key, (next, serves), has_stream, &mut out);
            }
            FlushMsg::Data { key, frame } => {
                if let Some(skipped) = self.flushes.on_data(key, &frame, &mut out) {
                    self.deliver_flushed(key, &frame, skipped);
                }
            }
        }
        self.send_flush(out);
    }

    /// A frame the flush of `key` took: to the local members, as from the
    /// departed sender, after the event of a jump.
    fn deliver_flushed(&mut self, key: FlushKey, frame: &FlushFrame, skipped: u64) {
        self.note_stopped(key.group, key.sender, key.epoch, Some(frame.seq.next()));
        let members = self
            .local
            .get(&key.group)
            .map(|lg| lg.members.clone())
            .unwrap_or_default();
        if skipped > 0 {
            self.jumped(key, skipped, &members);
        }
        let hdr = data_record(key.group, key.sender, frame.first, frame.last);
        self.event_to(&members, hdr, &frame.data);
    }

    /// The flush of `key` jumped over `skipped` frames no survivor kept: the
    /// sender sent them while it did not count this node a member (it was
    /// taken out by a view this node never installed, or the start that
    /// would have moved its stream on was lost with the sender). The
    /// clients are told before the messages after the jump.
    fn jumped(&mut self, key: FlushKey, skipped: u64, members: &[ClientId]) {
        self.log.warn(
            "flush jumped: frames the departed sender sent while it did not count this node a member were passed over",
            &[
                ("group", &key.group),
                ("sender", &key.sender),
                ("skipped_frames", &skipped),
            ],
        );
        let event = json!({"skipped": {"sender": key.sender, "frames": skipped}}).to_string();
        let hdr = event_record(key.group);
        self.event_to(members, hdr, event.as_bytes());
    }

    /// Delivers what the flushes took of the frames that came early, then
    /// sends `out`: every call into the flushes ends here.
    fn send_flush(&mut self, out: Vec<(NodeId, FlushMsg)>) {
        for r in self.flushes.take_ready() {
            self.deliver_flushed(r.key, &r.frame, r.skipped);
        }
        for (to, m) in out {
            self.send_link(to, LinkMessage::Flush(m));
        }
    }

    /// Ends the flushes that are over and lets out the membership events
    /// they held.
    fn finish_flushes(&mut self) -> Result<bool, EngineError> {
        let now = mcast_engine::sys::monotonic_ns();
        let mut work = false;
        while let Some(ended) = self.flushes.poll_ended(now) {
            work = true;
            let (key, outcome) = (ended.key, ended.outcome);
            self.note_stopped(key.group, key.sender, key.epoch, ended.next);
            if let Some(start) = self.deferred_starts.remove(&key) {
                self.stream_start(key.sender, key.group, start)?;
            }
            match outcome {
                Outcome::Agreed { recovered } => self.log.info(
                    "flush agreed: the survivors hold the same messages of the departed sender",
                    &[
                        ("group", &key.group),
                        ("sender", &key.sender),
                        ("recovered_frames", &recovered),
                    ],
                ),
                Outcome::TimedOut { waiting, recovered } => self.log.warn(
                    "flush timed out: survivors may differ on the departed sender's last messages",
                    &[
                        ("group", &key.group),
                        ("sender", &key.sender),
                        ("waiting_for", &waiting),
                        ("recovered_frames", &recovered),
                    ],
                ),
            }
            if self.flushes.pending_in(key.group) {
                continue;
            }
            let Some(lg) = self.local.get_mut(&key.group) else {
                continue;
            };
            let held = std::mem::take(&mut lg.held_events);
            let members = lg.members.clone();
            let hdr = event_record(key.group);
            for e in held {
                self.event_to(&members, hdr, &e);
            }
        }
        Ok(work)
    }

    fn remote_nodes(&self, group: GroupId) -> Vec<NodeId> {
        self.local
            .get(&group)
            .and_then(|lg| lg.view.as_ref())
            .map(|v| v.nodes().into_iter().filter(|&n| n != self.node).collect())
            .unwrap_or_default()
    }

    fn group_json(&self, g: &mcast_engine::GroupStats, active: bool) -> serde_json::Value {
        let lg = self.local.get(&g.group);
        json!({
            "group": g.group,
            "name": lg.map(|l| l.name.clone()),
            "active": active,
            "algorithm": g.algorithm.name(),
            "local_members": lg.map_or(0, |l| l.members.len()),
            "view_epoch": lg.and_then(|l| l.view.as_ref()).map(|v| v.epoch),
            "paused": g.paused,
            "queued_frames": g.queued,
            "sender": g.sender.map(|c| counters_json(&c)),
            "receivers": g
                .receivers
                .iter()
                .map(|(n, c)| json!({"from": n, "counters": counters_json(c)}))
                .chain(lg.into_iter().flat_map(|l| l.closed.iter()).map(
                    |(n, c)| json!({"from": n, "closed": true, "counters": counters_json(c)}),
                ))
                .collect::<Vec<_>>(),
        })
    }

    /// Closes the receive stream of `from` in `group`, keeping its final
    /// counters for `mcast stat`.
    fn close_receiver(&mut self, group: GroupId, from: NodeId) -> Result<(), EngineError> {
        if let Some(k) = self.kept.get(&(group, from)) {
            let (epoch, next) = (k.epoch, k.frames.next());
            self.note_stopped(group, from, epoch, next);
        }
        let stats = self.engine.stats();
        let closed = stats
            .groups
            .iter()
            .filter(|g| g.group == group)
            .flat_map(|g| g.receivers.iter())
            .find(|(n, _)| *n == from);
        if let (Some((_, c)), Some(lg)) = (closed, self.local.get_mut(&group)) {
            if lg.closed.len() >= MAX_RETIRED {
                lg.closed.remove(0);
            }
            lg.closed.push((from, *c));
        }
        self.engine.close_receiver_in(group, from)
    }

    /// Stops carrying `group`, keeping its final counters for `mcast stat`.
    fn retire(&mut self, group: GroupId) -> Result<(), EngineError> {
        if let Some(at) = self.engine.sender_position(group) {
            if self.send_resume.len() >= MAX_SEND_RESUME && !self.send_resume.contains_key(&group) {
                // Bounded: a group carried again after this starts at 0, which
                // is safe once every receiver has closed its old stream.
                self.send_resume.clear();
            }
            self.send_resume.insert(group, at.seq);
        }
        if let Some(g) = self.engine.stats().groups.iter().find(|g| g.group == group) {
            let v = self.group_json(g, false);
            if self.retired.len() >= MAX_RETIRED {
                self.retired.pop_front();
            }
            self.retired.push_back(v);
        }
        self.local.remove(&group);
        let closed: Vec<(NodeId, u32, Option<Seq>)> = self
            .kept
            .iter()
            .filter(|((g, _), _)| *g == group)
            .map(|(&(_, n), k)| (n, k.epoch, k.frames.next()))
            .collect();
        for (n, epoch, next) in closed {
            self.note_stopped(group, n, epoch, next);
        }
        self.kept.retain(|(g, _), _| *g != group);
        self.deferred_starts.retain(|k, _| k.group != group);
        self.flushes.forget_group(group);
        self.engine.remove_group(group)
    }

    /// Everything `mcast stat` shows.
    pub fn stats_json(&self) -> serde_json::Value {
        let s = self.engine.stats();
        let mut groups: Vec<_> = s
            .groups
            .iter()
            .filter(|g| !is_link(g.group))
            .map(|g| self.group_json(g, true))
            .collect();
        groups.extend(self.retired.iter().cloned());
        let links: Vec<_> = s
            .groups
            .iter()
            .filter(|g| is_link(g.group))
            .map(|g| {
                json!({
                    "inbox_of": g.group & !crate::links::LINK_BASE,
                    "sender": g.sender.map(|c| counters_json(&c)),
                    "receivers": g.receivers.iter().map(|(n, c)| json!({"from": n, "counters": counters_json(c)})).collect::<Vec<_>>(),
                })
            })
            .collect();
        let clients: Vec<_> = self
            .clients
            .iter()
            .map(|(c, st)| {
                json!({
                    "client": c.0, "name": st.name, "pid": st.pid, "uid": st.uid,
                    "groups": st.groups.iter().collect::<Vec<_>>(),
                    "published": st.published, "delivered": st.delivered,
                    "overflow_bytes": st.overflow_bytes,
                })
            })
            .collect();
        let e = &s.engine;
        let c = &self.counters;
        let fc = self.flushes.counters();
        let flush = json!({
            "started": fc.started, "agreed": fc.agreed, "timed_out": fc.timed_out,
            "frames_recovered": fc.frames_recovered, "frames_served": fc.frames_served,
            "states_held": fc.states_held, "events_held": c.events_held,
            "beyond_reach": fc.beyond_reach,
            "jumps": fc.jumps,
            "frames_skipped": fc.frames_skipped,
            "ended_sender_back": fc.ended_sender_back,
            "starts_deferred": c.starts_deferred,
            "kept_frames": self.kept.values().map(|k| k.frames.frames()).sum::<usize>(),
            "kept_bytes": self.kept.values().map(|k| k.frames.bytes()).sum::<usize>(),
        });
        json!({
            "node": self.node,
            "incarnation": self.incarnation,
            "transport": {
                "kind": s.transport.kind,
                "xdp_mode": s.transport.attach_mode.map(|m| format!("{m:?}")),
                "xdp_fallback": s.transport.attach_fallback,
                "bind_mode": s.transport.bind_mode.map(|m| format!("{m:?}")),
                "frames": {"total": s.frames.total, "free": s.frames.free, "fill": s.frames.fill, "held": s.frames.held, "tx": s.frames.tx},
            },
            "steering": s.steering.map(|st| format!("{st:?}")),
            "engine": {
                "rx_frames": e.rx_frames, "tx_frames": e.tx_frames, "tx_batches": e.tx_batches,
                "rx_checksum_failures": e.rx_checksum_failures, "rx_malformed": e.rx_malformed,
                "rx_other_group": e.rx_other_group, "rx_unrouted": e.rx_unrouted, "rx_paused": e.rx_paused,
                "tx_no_frame": e.tx_no_frame, "tx_no_route": e.tx_no_route, "tx_deferred": e.tx_deferred,
                "publish_would_block": e.publish_would_block, "polls": e.polls, "sleeps": e.sleeps,
            },
            "daemon": {
                "clients_connected": c.clients_connected, "clients_disconnected": c.clients_disconnected,
                "clients_cut_off": c.clients_cut_off, "requests": c.requests,
                "messages_published": c.messages_published, "publish_errors": c.publish_errors,
                "fragments_delivered": c.fragments_delivered, "fragments_overflowed": c.fragments_overflowed,
                "local_loopback": c.local_loopback, "link_messages_sent": c.link_messages_sent,
                "link_messages_received": c.link_messages_received, "link_errors": c.link_errors,
                "link_backlog_drops": c.link_backlog_drops, "group_pauses": c.group_pauses,
                "suspicions": c.suspicions, "probes_sent": c.probes_sent,
                "probes_answered": c.probes_answered, "nodes_failed": c.nodes_failed,
                "nodes_recovered": c.nodes_recovered, "evictions": c.evictions,
                "link_resets": c.link_resets, "role_moves": c.role_moves, "rejoins": c.rejoins,
                "data_path_suspicions": c.data_path_suspicions,
                "start_requests_sent": c.start_requests_sent,
                "start_requests_answered": c.start_requests_answered,
                "starts_moved_forward": c.starts_moved_forward,
                "dead_streams_closed": c.dead_streams_closed,
                "registry": self.groups.registry(),
                // Anti-entropy since this node last (re)joined the cluster.
                "membership_repairs": self.groups.repairs(),
                "agent_resignations": self.groups.resignations(),
                // Departed senders' streams agreed on by the survivors.
                "flush": flush,
            },
            "peers": self.live.detector().peers().map(|(n, st, last)| json!({
                "node": n,
                "state": match st {
                    PeerState::Alive => "alive".to_string(),
                    PeerState::Suspect { probes } => format!("suspect ({probes} probes)"),
                    PeerState::Failed => "failed".to_string(),
                },
                "last_heard_ms_ago": mcast_engine::sys::monotonic_ns().saturating_sub(last) / 1_000_000,
            })).collect::<Vec<_>>(),
            "groups": groups,
            "links": links,
            "clients": clients,
        })
    }
}

impl Pending {
    fn client(self) -> ClientId {
        match self {
            Pending::Join { client, .. }
            | Pending::Leave { client, .. }
            | Pending::Query { client, .. }
            | Pending::List { client, .. } => client,
        }
    }

    fn req(self) -> u64 {
        match self {
            Pending::Join { req, .. }
            | Pending::Leave { req, .. }
            | Pending::Query { req, .. }
            | Pending::List { req, .. } => req,
        }
    }
}

/// Bytes an overflowed fragment counts for beyond its payload.
const RECORD_COST: usize = 32;

/// Receives the engine's fragments: link messages are reassembled for the
/// daemon, group data goes straight into each local member's ring.
struct Sink<'a> {
    server: &'a mut Server,
    clients: &'a mut HashMap<ClientId, ClientState>,
    local: &'a HashMap<GroupId, LocalGroup>,
    kept: &'a mut HashMap<(GroupId, NodeId), Kept>,
    links: &'a mut Links,
    counters: &'a mut DaemonCounters,
    max_message: usize,
}

impl Deliver for Sink<'_> {
    fn deliver(&mut self, f: Fragment<'_>) {
        if is_link(f.group) {
            let r = self
                .links
                .reassembly
                .entry(f.stream)
                .or_insert_with(|| Reassembler::new(self.max_message));
            let mut flags = mcast_wire::Flags::NONE;
            if f.first {
                flags = flags.with(mcast_wire::Flags::FRAG_FIRST);
            }
            if f.last {
                flags = flags.with(mcast_wire::Flags::FRAG_LAST);
            }
            match r.push(flags, f.data) {
                Ok(Some(m)) => self.links.inbound.push((f.stream, m.to_vec())),
                Ok(None) => {}
                Err(_) => self.counters.link_errors += 1,
            }
            return;
        }
        let Some(lg) = self.local.get(&f.group) else {
            return;
        };
        if let Some(k) = self.kept.get_mut(&(f.group, f.stream)) {
            k.frames.push(f.seq, f.first, f.last, f.data);
        }
        let hdr = data_record(f.group, f.stream, f.first, f.last);
        for &c in &lg.members {
            if let Some(state) = self.clients.get_mut(&c) {
                deliver_to(self.server, c, state, hdr, f.data, self.counters);
            }
        }
    }
}

/// The record header of a data fragment from `source`.
/// The header of a membership event record (one whole record, from no
/// node) in `group`'s stream.
fn event_record(group: GroupId) -> RecordHeader {
    RecordHeader {
        group,
        source: 0,
        flags: FLAG_FIRST | FLAG_LAST | mcast_ipc::ring::EVENT,
    }
}

fn data_record(group: GroupId, source: NodeId, first: bool, last: bool) -> RecordHeader {
    let mut flags = 0;
    if first {
        flags |= FLAG_FIRST;
    }
    if last {
        flags |= FLAG_LAST;
    }
    RecordHeader {
        group,
        source,
        flags,
    }
}

/// Into the client's ring if it has room and nothing older waits, else
/// into its overflow queue (bounded by the slow-subscriber policy).
fn deliver_to(
    server: &mut Server,
    c: ClientId,
    state: &mut ClientState,
    hdr: RecordHeader,
    data: &[u8],
    counters: &mut DaemonCounters,
) {
    counters.fragments_delivered += 1;
    if state.overflow.is_empty() {
        if let Some(p) = server.subscription(c) {
            if p.try_push(hdr, &[data]).is_ok() {
                state.delivered += 1;
                return;
            }
        }
    }
    counters.fragments_overflowed += 1;
    state.overflow_bytes += data.len() + RECORD_COST;
    state.overflow.push_back((hdr, data.to_vec()));
}

/// The daemons' unicast links: Go-Back-N (the iterative sender to one
/// member), never subscribed. The retransmission timeout is measured (RFC
/// 6298, as for every Go-Back-N stream) once the peer answers: a LAN round
/// trip gives the 200 us floor, where the fixed 2 ms used before made every
/// lost link frame cost 2 ms. Until then it starts at 2 ms, and a peer that is
/// slow to start (or gone) is retried with the timeout doubling up to 20 ms,
/// not the 1 s ceiling of application streams: a link must come up within a
/// beat or two of its peer.
fn link_options() -> GroupOptions {
    let mut protocol = ProtocolConfig::default();
    protocol.gbn.rto = mcast_proto::RtoConfig {
        initial: Duration::from_millis(2),
        min: Duration::from_micros(200),
        max: Duration::from_millis(20),
    };
    GroupOptions {
        algorithm: mcast_engine::Algorithm::Iterative,
        protocol,
        window_frames: 64,
        subscribe: false,
        accept_any_sender: false,
        max_queued_frames: 4096,
    }
}

fn view_json(v: &View) -> serde_json::Value {
    json!({
        "group": v.group,
        "name": v.name,
        "epoch": v.epoch,
        "agent": v.agent,
        "members": v.members.iter().map(|m| json!({"rank": m.rank, "node": m.node, "member": m.member})).collect::<Vec<_>>(),
    })
}

fn ipc_view(v: &View) -> mcast_ipc::View {
    mcast_ipc::View {
        epoch: v.epoch,
        members: v
            .members
            .iter()
            .map(|m| mcast_ipc::Member {
                rank: m.rank,
                node: m.node,
                member: m.member,
            })
            .collect(),
    }
}

fn error_code(e: &mcast_groups::GroupError) -> ErrorCode {
    use mcast_groups::GroupError as G;
    match e {
        G::InvalidName { .. } => ErrorCode::Malformed,
        G::UnknownGroup { .. } | G::NotMember { .. } => ErrorCode::UnknownGroup,
        G::TooManyGroups { .. } | G::GroupFull { .. } | G::TooManyPending { .. } => {
            ErrorCode::Unavailable
        }
        _ => ErrorCode::Other,
    }
}

fn info_json(i: &mcast_groups::GroupInfo) -> serde_json::Value {
    json!({
        "group": i.group,
        "name": i.name,
        "agent": i.agent,
        "view": view_json(&i.view),
    })
}

fn counters_json(c: &mcast_proto::Counters) -> serde_json::Value {
    json!({
        "data_sent": c.data_sent, "data_retransmitted": c.data_retransmitted,
        "data_received": c.data_received, "delivered": c.delivered,
        "duplicates_dropped": c.duplicates_dropped, "out_of_window_dropped": c.out_of_window_dropped,
        "wrong_epoch_dropped": c.wrong_epoch_dropped, "repairs_deferred": c.repairs_deferred,
        "packs_sent": c.packs_sent, "packs_received": c.packs_received,
        "nacks_sent": c.nacks_sent, "nacks_received": c.nacks_received,
        "naks_sent": c.naks_sent, "naks_received": c.naks_received, "naks_suppressed": c.naks_suppressed,
        "repairs_suppressed": c.repairs_suppressed, "naks_unrepairable": c.naks_unrepairable,
        "acks_sent": c.acks_sent, "acks_received": c.acks_received,
        "ack_reqs_sent": c.ack_reqs_sent, "ack_reqs_received": c.ack_reqs_received,
        "stalls": c.stalls, "timeouts": c.timeouts, "window_full": c.window_full,
        "acks_stale": c.acks_stale,
    })
}
