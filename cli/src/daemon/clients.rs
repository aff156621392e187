//! The client service: local applications' connections, their requests
//! and the replies, publication rings (taking what clients publish), the
//! leaves held back until their data is delivered, and the subscription
//! rings' overflow with the slow-subscriber policy.
//!
//! Owns: [`Clients`] (the IPC server, each client's state, requests waiting
//! for the group service, lingering leaves).
//! Does not touch: views and streams (it asks [`membership`](super::membership)
//! and the group's [`mode`](super::mode)), links, liveness.

use std::collections::{HashMap, HashSet, VecDeque};

use mcast_engine::{EngineError, Transport};
use mcast_groups::GroupService;
use mcast_ipc::ring::{FIRST as FLAG_FIRST, LAST as FLAG_LAST};
use mcast_ipc::{
    ClientId, ErrorCode, Notice, PushError, RecordHeader, Request, Response, Server, ServerEvent,
};
use mcast_wire::GroupId;

use super::deliver::{deliver_to, RECORD_COST};
use super::mode::{Published, To};
use super::Daemon;
use super::FastMap;
use crate::config::SlowSubscriber;

/// Publication records taken from one client per round (fairness).
const PUBLISH_BURST: usize = 256;

/// What a client may do with a publication for one group (see
/// `take_publications`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Gate {
    /// Leave it in the ring for a later round.
    Wait,
    /// Drop it and tell the client: it has not joined the group.
    NotJoined,
    /// Drop it and tell the client: it had joined the group, but its
    /// membership of that number ended here without a leave (the name
    /// moved to another number, or its join after this node's rejoin
    /// failed). Waiting, as for a rejoin, would hold every later record of
    /// the client's ring behind this one for good.
    Gone,
    /// Publish it; give it to the other local members too when the group's
    /// mode has the daemon loop publications back.
    Open { loops_back: bool },
}

/// How long a leave waits for the group's send stream to deliver what was
/// published before it (then it goes ahead anyway).
const LINGER_NS: u64 = 5_000_000_000;

/// A leave held back until what the member published has been delivered:
/// the other daemons close their receive streams from this node as soon as
/// the view without it arrives, so the leave must not overtake the data.
#[derive(Debug)]
pub(super) struct Linger {
    client: ClientId,
    /// A Leave request (the pending id); None: the client is gone, leave all.
    leave: Option<(GroupId, u64)>,
    groups: Vec<GroupId>,
    deadline: u64,
}

impl Linger {
    /// Hands the leave to the group service.
    pub(super) fn carry_out(self, groups: &mut GroupService) {
        match self.leave {
            Some((group, id)) => groups.leave(id, self.client.0, group),
            None => groups.member_gone(self.client.0),
        }
    }
}

/// The local clients and what is waiting for or on them.
#[derive(Debug)]
pub(super) struct Clients {
    pub(super) server: Server,
    /// Looked up several times per message taken or delivered: hashed fast.
    pub(super) by_id: FastMap<ClientId, ClientState>,
    /// Requests waiting for the group service, by its request id.
    pub(super) pending: HashMap<u64, Pending>,
    pub(super) next_req: u64,
    pub(super) lingering: Vec<Linger>,
    events: Vec<ServerEvent>,
    /// The publication record being taken.
    pub(super) scratch: Vec<u8>,
}

impl Clients {
    pub(super) fn new(server: Server) -> Clients {
        Clients {
            server,
            by_id: FastMap::default(),
            pending: HashMap::new(),
            next_req: 1,
            lingering: Vec::new(),
            events: Vec::new(),
            scratch: Vec::new(),
        }
    }

    /// A new request id for the group service.
    pub(super) fn next_id(&mut self) -> u64 {
        let id = self.next_req;
        self.next_req += 1;
        id
    }
}

/// One connected client.
#[derive(Debug, Default)]
pub(super) struct ClientState {
    pub(super) name: String,
    pub(super) pid: u32,
    pub(super) uid: u32,
    pub(super) groups: HashSet<GroupId>,
    /// Fragments that did not fit the subscription ring, oldest first.
    pub(super) overflow: VecDeque<(RecordHeader, Vec<u8>)>,
    pub(super) overflow_bytes: usize,
    /// The client made its subscription ring corrupt (scribbled on the
    /// daemon's side of it): cut off at the next [`Daemon::flush_overflow`].
    pub(super) ring_corrupt: Option<String>,
    pub(super) published: u64,
    pub(super) delivered: u64,
}

/// What a pending group-service request answers.
#[derive(Debug, Clone, Copy)]
pub(super) enum Pending {
    Join { client: ClientId, req: u64 },
    Leave { client: ClientId, req: u64 },
    Query { client: ClientId, req: u64 },
    List { client: ClientId, req: u64 },
}

impl<T: Transport> Daemon<T> {
    /// Carries out the leaves whose data has been delivered (or waited long enough).
    pub(super) fn finish_lingering(&mut self) -> bool {
        if self.clients.lingering.is_empty() {
            return false;
        }
        let now = mcast_engine::sys::monotonic_ns();
        let mut work = false;
        let mut i = 0;
        while i < self.clients.lingering.len() {
            let l = &self.clients.lingering[i];
            let ring_empty = l.leave.is_none()
                || self
                    .clients
                    .server
                    .publications(l.client)
                    .is_none_or(|p| p.pending().is_ok_and(|n| n == 0));
            let sent = l.groups.iter().all(|&g| self.send_idle(g));
            if !(now >= l.deadline || ring_empty && sent) {
                i += 1;
                continue;
            }
            let l = self.clients.lingering.swap_remove(i);
            work = true;
            l.carry_out(&mut self.groups);
        }
        work
    }

    pub(super) fn serve_clients(&mut self) -> bool {
        let mut events = std::mem::take(&mut self.clients.events);
        events.clear();
        self.clients.server.poll(&mut events);
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
                    self.clients.by_id.insert(
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
                ServerEvent::CutOff { client, reason } => {
                    // The server hung up on it already (garbage requests,
                    // an unread control socket, a corrupt publication ring).
                    self.counters.clients_cut_off += 1;
                    self.log.warn(
                        "client cut off",
                        &[("client", &client.0), ("reason", &reason)],
                    );
                    self.client_gone(client, &reason);
                }
            }
        }
        self.clients.events = events;
        work
    }

    pub(super) fn client_gone(&mut self, client: ClientId, reason: &str) {
        let Some(state) = self.clients.by_id.remove(&client) else {
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
                lg.gate.left(client);
            }
            self.barrier_member_gone(*g, client);
        }
        self.clients.pending.retain(|_, p| p.client() != client);
        // Its leave waits until what it published is delivered.
        self.clients.lingering.retain(|l| l.client != client);
        self.clients.lingering.push(Linger {
            client,
            leave: None,
            groups: state.groups.iter().copied().collect(),
            deadline: mcast_engine::sys::monotonic_ns() + LINGER_NS,
        });
    }

    /// A join that names the mode it relies on (`mode`) is refused when
    /// this node's configuration runs `group` in another: the answer, or
    /// None when it may go on.
    fn mode_refused(&self, group: &str, mode: &str) -> Option<Response> {
        let asked = match mode.parse::<crate::config::GroupMode>() {
            Ok(m) => m,
            Err(e) => return Some(Response::error(ErrorCode::Malformed, e)),
        };
        let here = self.cfg.group_settings(group).mode;
        (asked != here).then(|| {
            Response::error(
                ErrorCode::Other,
                format!(
                    "group {group:?} runs in mode = {:?} here, and this client relies on mode = {:?}: set mode = {:?} in its [[group]] section on every node",
                    here.name(),
                    asked.name(),
                    asked.name()
                ),
            )
        })
    }

    pub(super) fn handle_request(&mut self, client: ClientId, req: u64, request: Request) {
        let id = self.clients.next_id();
        match request {
            Request::Hello { .. } => self.clients.server.reply(
                client,
                req,
                Response::error(
                    ErrorCode::BadState,
                    "hello was already exchanged on this connection",
                ),
            ),
            Request::Join { group, mode } => {
                if let Some(refused) = mode.and_then(|m| self.mode_refused(&group, &m)) {
                    return self.clients.server.reply(client, req, refused);
                }
                self.clients
                    .pending
                    .insert(id, Pending::Join { client, req });
                self.groups.join(id, client.0, &group);
            }
            Request::Leave { group } => {
                if !self
                    .clients
                    .by_id
                    .get(&client)
                    .is_some_and(|c| c.groups.contains(&group))
                {
                    self.clients.server.reply(
                        client,
                        req,
                        Response::error(
                            ErrorCode::UnknownGroup,
                            format!("this client has not joined group {group}"),
                        ),
                    );
                    return;
                }
                self.clients
                    .pending
                    .insert(id, Pending::Leave { client, req });
                self.clients.lingering.push(Linger {
                    client,
                    leave: Some((group, id)),
                    groups: vec![group],
                    deadline: mcast_engine::sys::monotonic_ns() + LINGER_NS,
                });
            }
            Request::Query { group } | Request::Members { group } => {
                self.clients
                    .pending
                    .insert(id, Pending::Query { client, req });
                self.groups.query(id, &group);
            }
            Request::Groups => {
                self.clients
                    .pending
                    .insert(id, Pending::List { client, req });
                self.groups.list(id);
            }
            Request::Barrier { group } => self.barrier_wait(client, req, group),
            Request::Stats => {
                let stats = self.stats_json();
                self.clients
                    .server
                    .reply(client, req, Response::Json(stats));
            }
        }
    }

    /// Takes publication records from every client, feeding the engine and
    /// local subscribers; a record whose group window is full, or whose
    /// group is held back for a slow subscriber here (`hold`), stays in the
    /// ring (the client sees WouldBlock once its ring fills).
    pub(super) fn take_publications(&mut self) -> Result<bool, EngineError> {
        let mut work = false;
        let ids: Vec<ClientId> = self.clients.by_id.keys().copied().collect();
        for c in ids {
            let mut taken = 0;
            // What the client's last record's group allowed: nothing it
            // depends on changes while the burst is taken (a group pauses
            // in `flush_overflow`, joins and evictions are other phases),
            // so a run of records to one group looks it up once.
            let mut gate: Option<(GroupId, Gate)> = None;
            while taken < PUBLISH_BURST {
                let Some(cons) = self.clients.server.publications(c) else {
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
                let (group, stamp) = (rec.header.group, rec.header.stamp);
                let scatter = rec.header.flags & mcast_ipc::ring::SCATTER != 0;
                self.clients.scratch.clear();
                self.clients.scratch.extend_from_slice(rec.payload);
                let g = match gate {
                    Some((last, g)) if last == group => g,
                    _ => {
                        let g = self.gate(c, group);
                        gate = Some((group, g));
                        g
                    }
                };
                let loops_back = match g {
                    // Held back, or not carried here at this moment: the
                    // record waits in the ring.
                    Gate::Wait => break,
                    Gate::NotJoined => false,
                    Gate::Gone => {
                        // From now on as any group it has not joined.
                        if let Some(s) = self.clients.by_id.get_mut(&c) {
                            s.groups.remove(&group);
                        }
                        self.counters.memberships_ended += 1;
                        self.log.warn(
                            "a client publishes to a group number its membership of ended without a leave: dropped",
                            &[("client", &c.0), ("group", &group)],
                        );
                        gate = Some((group, Gate::NotJoined));
                        false
                    }
                    Gate::Open { loops_back } => loops_back,
                };
                if matches!(g, Gate::NotJoined | Gate::Gone) {
                    self.clients
                        .server
                        .publications(c)
                        .map(|p| p.pop_deferred());
                    self.counters.publish_errors += 1;
                    self.clients.server.notify(
                        c,
                        Notice::Error {
                            message: format!(
                                "a message for group {group}, which this client has not joined, was dropped"
                            ),
                        },
                    );
                    continue;
                }
                match self.publish_in_mode(group, c, scatter)? {
                    // Timed once it is taken: a record left for a full
                    // window is taken again later.
                    Published::Sent => {
                        if let Some(t) = self.trace.as_deref_mut() {
                            t.taken(stamp);
                        }
                    }
                    Published::WouldBlock => break, // window full: try again next round
                    Published::Dropped(message) => {
                        self.counters.publish_errors += 1;
                        self.clients.server.notify(c, Notice::Error { message });
                    }
                }
                if loops_back && !scatter {
                    self.loopback(group, c);
                }
                self.clients
                    .server
                    .publications(c)
                    .map(|p| p.pop_deferred());
                taken += 1;
                work = true;
            }
            if let Some(s) = self.clients.by_id.get_mut(&c) {
                s.published += taken as u64;
            }
            self.counters.messages_published += taken as u64;
            // The burst's space goes back to the client at once: one tail
            // store, and a wake-up only if it waits for room.
            if let Some(p) = self.clients.server.publications(c) {
                p.release();
            }
            self.clients.server.wake_publishers(c);
        }
        Ok(work)
    }

    /// What client `c` may do with a record for `group` now.
    fn gate(&self, c: ClientId, group: GroupId) -> Gate {
        let lg = self.local.get(&group);
        if lg.is_some_and(|lg| lg.paused) {
            // Held back: a publisher on the slow subscriber's node waits
            // like the remote ones, instead of filling that subscriber's
            // overflow queue without bound.
            return Gate::Wait;
        }
        let joined = self
            .clients
            .by_id
            .get(&c)
            .is_some_and(|s| s.groups.contains(&group));
        match lg {
            _ if !joined => Gate::NotJoined,
            // Joined, but the group is not carried here at this moment
            // (this node is between an eviction and its rejoin, or was
            // taken out of the view while its member stays): the record
            // waits for the rejoin or the view, as it would for a full
            // window.
            None if self.live.rejoins.under_way() || self.groups.is_member(group, c.0) => {
                Gate::Wait
            }
            None => Gate::Gone,
            Some(lg) => Gate::Open {
                loops_back: lg.mode.loops_back(),
            },
        }
    }

    /// Gives the record being taken, published by `from`, to the group's other local clients.
    pub(super) fn loopback(&mut self, group: GroupId, from: ClientId) {
        let Some(lg) = self.local.get(&group) else {
            return;
        };
        let hdr = RecordHeader {
            group,
            source: self.node,
            flags: FLAG_FIRST | FLAG_LAST,
            stamp: 0,
        };
        for &c in &lg.members {
            if c == from {
                continue;
            }
            if let Some(state) = self.clients.by_id.get_mut(&c) {
                deliver_to(
                    &mut self.clients.server,
                    c,
                    state,
                    hdr,
                    [&self.clients.scratch[..]],
                    &mut self.counters,
                );
                self.counters.local_loopback += 1;
            }
        }
    }

    /// Moves overflowed fragments into rings that have room again; applies
    /// the slow-subscriber policy to clients still too far behind.
    pub(super) fn flush_overflow(&mut self) -> Result<bool, EngineError> {
        let mut work = false;
        let limit = self.cfg.subscriber_buffer as usize;
        let mut behind: Vec<ClientId> = Vec::new();
        let mut corrupt: Vec<(ClientId, String)> = Vec::new();
        for (&c, state) in self.clients.by_id.iter_mut() {
            while let Some((hdr, data)) = state.overflow.front() {
                if state.ring_corrupt.is_some() {
                    break;
                }
                let Some(p) = self.clients.server.subscription(c) else {
                    break;
                };
                match p.try_push(*hdr, &[data]) {
                    Ok(()) => {}
                    Err(PushError::Corrupt(e)) => {
                        state.ring_corrupt = Some(e.to_string());
                        break;
                    }
                    Err(PushError::Full | PushError::TooLarge { .. }) => break,
                }
                let (_, data) = state.overflow.pop_front().expect("peeked");
                state.overflow_bytes -= data.len() + RECORD_COST;
                state.delivered += 1;
                work = true;
            }
            if let Some(e) = &state.ring_corrupt {
                corrupt.push((c, format!("subscription ring is corrupt: {e}")));
            } else if state.overflow_bytes > limit {
                behind.push(c);
            }
        }
        // Before the slow-subscriber policy: a ring the client broke is no
        // reason to hold a group back (issue 23).
        for (c, reason) in corrupt {
            self.cut_off(c, &reason);
            work = true;
        }
        // Pause or cut off, group by group.
        let mut to_pause = Vec::new();
        for c in behind {
            let groups: Vec<GroupId> = self
                .clients
                .by_id
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
                let bytes = self.clients.by_id.get(&c).map_or(0, |s| s.overflow_bytes);
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
                        .by_id
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

    pub(super) fn cut_off(&mut self, c: ClientId, reason: &str) {
        self.counters.clients_cut_off += 1;
        self.log
            .warn("client cut off", &[("client", &c.0), ("reason", &reason)]);
        self.clients.server.notify(
            c,
            Notice::CutOff {
                reason: reason.to_owned(),
            },
        );
        self.clients.server.disconnect(c, reason);
        self.client_gone(c, reason);
    }

    /// A membership event record into each of `members`' rings, in order with their data.
    pub(super) fn event_to(&mut self, members: &[ClientId], hdr: RecordHeader, event: &[u8]) {
        self.records_to(members, hdr, event, To::AllBut(None));
    }

    /// One record to those of `members` it goes `to` (all but its
    /// publisher, when a mode delivers a local publication in its place in
    /// the group's order; one, a scattering's part).
    pub(super) fn records_to(
        &mut self,
        members: &[ClientId],
        hdr: RecordHeader,
        event: &[u8],
        to: To,
    ) {
        for &c in members {
            if !to.reaches(c) {
                continue;
            }
            if let Some(state) = self.clients.by_id.get_mut(&c) {
                deliver_to(
                    &mut self.clients.server,
                    c,
                    state,
                    hdr,
                    [event],
                    &mut self.counters,
                );
            }
        }
    }
}

impl Pending {
    pub(super) fn client(self) -> ClientId {
        match self {
            Pending::Join { client, .. }
            | Pending::Leave { client, .. }
            | Pending::Query { client, .. }
            | Pending::List { client, .. } => client,
        }
    }

    pub(super) fn req(self) -> u64 {
        match self {
            Pending::Join { req, .. }
            | Pending::Leave { req, .. }
            | Pending::Query { req, .. }
            | Pending::List { req, .. } => req,
        }
    }
}
