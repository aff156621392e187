//! The daemon's side of the control socket.
//!
//! [`Server`] never blocks and keeps no thread: the daemon's poll loop adds
//! [`Server::poll_fds`] to its own descriptors, `ppoll()`s, and calls
//! [`Server::poll`], which accepts connections, checks credentials, answers
//! Hello itself (creating the client's rings and eventfds) and hands every
//! other request to the daemon as a [`ServerEvent::Request`].
//!
//! Everything is bounded: `max_clients` connections, [`MAX_PENDING`] queued
//! outgoing messages per client, fixed ring memory per client, at most
//! [`MAX_READS_PER_POLL`] requests read from one client per `poll`.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::proto::{
    decode_request, ErrorCode, Notice, Request, Response, RingLayout, ServerMessage,
    MAX_CONTROL_MESSAGE, MAX_MALFORMED, MAX_REPLY, PROTOCOL_VERSION,
};
use crate::ring::{self, Consumer, Producer};
use crate::shm::Mapping;
use crate::sys::{self, EventFd, PeerCred};

/// Outgoing control messages queued for one client before it is cut off
/// for not reading its socket.
pub const MAX_PENDING: usize = 256;
/// Requests read from one client in one [`Server::poll`] (fairness).
pub const MAX_READS_PER_POLL: usize = 32;
/// Connections accepted in one [`Server::poll`].
pub const MAX_ACCEPTS_PER_POLL: usize = 64;
/// Longest client name kept (longer ones are cut).
pub const MAX_NAME: usize = 128;

/// One connection. Ids count up from 1 and are never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClientId(pub u64);

impl fmt::Display for ClientId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "client {}", self.0)
    }
}

/// Who may connect: a peer is accepted if its uid is in `uids` or its gid
/// is in `gids`; with both lists empty, only the daemon's own uid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Access {
    /// Allowed user ids (`allow_uids` in the config).
    pub uids: Vec<u32>,
    /// Allowed group ids (`allow_gids` in the config).
    pub gids: Vec<u32>,
    /// Where these lists came from, quoted in the refusal.
    pub config: String,
    /// Mode of the socket file (0o660 by default).
    pub socket_mode: u32,
}

impl Access {
    /// Only the daemon's own uid; socket mode 0660.
    pub fn own_uid(config: impl Into<String>) -> Access {
        Access {
            uids: Vec::new(),
            gids: Vec::new(),
            config: config.into(),
            socket_mode: 0o660,
        }
    }

    /// `Ok` if `cred` may connect, else the message the peer is sent.
    pub fn check(&self, cred: &PeerCred) -> Result<(), String> {
        let ok = if self.uids.is_empty() && self.gids.is_empty() {
            cred.uid == sys::geteuid()
        } else {
            self.uids.contains(&cred.uid) || self.gids.contains(&cred.gid)
        };
        if ok {
            return Ok(());
        }
        if self.uids.is_empty() && self.gids.is_empty() {
            Err(format!(
                "permission denied: uid {} is not the daemon's uid {} and allow_uids/allow_gids are empty (config: {})",
                cred.uid,
                sys::geteuid(),
                self.config
            ))
        } else {
            Err(format!(
                "permission denied: uid {} is not in allow_uids and gid {} is not in allow_gids (config: {})",
                cred.uid, cred.gid, self.config
            ))
        }
    }
}

/// Ring capacities given to every client, and the message limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingSizes {
    /// Publication ring data bytes (client → daemon); power of two.
    pub publication: usize,
    /// Subscription ring data bytes (daemon → client); power of two.
    pub subscription: usize,
    /// Largest message a client may publish (at most the publication
    /// ring's [`ring::max_payload`]).
    pub max_message: usize,
}

impl Default for RingSizes {
    fn default() -> RingSizes {
        RingSizes {
            publication: 1 << 20,
            subscription: 4 << 20,
            max_message: 256 << 10,
        }
    }
}

impl RingSizes {
    fn validate(&self) -> io::Result<()> {
        for (what, cap) in [
            ("publication", self.publication),
            ("subscription", self.subscription),
        ] {
            if !cap.is_power_of_two() || !(ring::MIN_CAPACITY..=ring::MAX_CAPACITY).contains(&cap) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "{what} ring size {cap} must be a power of two in {}..={}",
                        ring::MIN_CAPACITY,
                        ring::MAX_CAPACITY
                    ),
                ));
            }
        }
        let max = ring::max_payload(self.publication);
        if self.max_message == 0 || self.max_message > max {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "max_message {} must be in 1..={max} for a {}-byte publication ring",
                    self.max_message, self.publication
                ),
            ));
        }
        Ok(())
    }

    fn layout(&self) -> RingLayout {
        RingLayout {
            publication: self.publication,
            subscription: self.subscription,
        }
    }
}

/// What [`Server::poll`] reports.
#[derive(Debug, Clone, PartialEq)]
pub enum ServerEvent {
    /// A client completed Hello; its rings exist.
    Connected {
        /// The new id.
        client: ClientId,
        /// Peer uid (SO_PEERCRED).
        uid: u32,
        /// Peer gid.
        gid: u32,
        /// Peer pid.
        pid: u32,
        /// The name it gave in Hello.
        name: String,
    },
    /// A request for the daemon; answer with [`Server::reply`].
    Request {
        /// From whom.
        client: ClientId,
        /// Echo this in the reply.
        req: u64,
        /// The request (never Hello).
        request: Request,
    },
    /// A client that had completed Hello is gone (closed, died); its rings
    /// are unmapped and its fds closed.
    Disconnected {
        /// Who.
        client: ClientId,
        /// Why, for logs.
        reason: String,
    },
    /// The server cut off a client that had completed Hello for
    /// misbehaving: more than [`MAX_MALFORMED`] malformed or oversized
    /// requests, [`MAX_PENDING`] replies left unread, or a corrupt
    /// publication ring found by [`Server::prepare_sleep`]. It was sent a
    /// `CutOff` notice with `reason` (best effort), its rings are unmapped
    /// and its fds closed.
    CutOff {
        /// Who.
        client: ClientId,
        /// Why: the notice's reason.
        reason: String,
    },
}

/// A connected client's rings and eventfds (daemon side).
#[derive(Debug)]
struct Rings {
    doorbell: Arc<EventFd>,
    _wake: Arc<EventFd>,
    publications: Consumer,
    subscription: Producer,
    bytes: usize,
}

#[derive(Debug)]
struct Conn {
    sock: OwnedFd,
    cred: PeerCred,
    rings: Option<Rings>,
    outbox: VecDeque<Vec<u8>>,
    malformed: u32,
}

/// Why a doomed connection goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    /// Closed, died, or its socket failed.
    Gone,
    /// Misbehaved: told why (`CutOff`) and reported as [`ServerEvent::CutOff`].
    CutOff,
}

/// The daemon's listening socket and its clients.
#[derive(Debug)]
pub struct Server {
    path: PathBuf,
    listen: OwnedFd,
    access: Access,
    sizes: RingSizes,
    max_clients: usize,
    next_id: u64,
    conns: BTreeMap<ClientId, Conn>,
    /// Clients to drop at the next poll, with the reason and whether they
    /// misbehaved (then they are cut off) or are merely gone.
    doomed: Vec<(ClientId, String, Fate)>,
    buf: Vec<u8>,
    pollfds: Vec<libc::pollfd>,
    /// Told to clients in Welcome: stamp and time messages.
    trace: bool,
}

impl Server {
    /// Tells every client connecting from now on that the daemon traces
    /// (their Welcome's `trace`): they stamp what they publish and time
    /// what they read.
    pub fn set_trace(&mut self, on: bool) {
        self.trace = on;
    }

    /// Listens on `path` (mode `access.socket_mode`). A stale socket file
    /// nobody listens on is replaced; a live one is an `AddrInUse` error; any
    /// other file there is left alone and is an error.
    pub fn bind(
        path: &Path,
        access: Access,
        sizes: RingSizes,
        max_clients: usize,
    ) -> io::Result<Server> {
        sizes.validate()?;
        if let Ok(meta) = std::fs::symlink_metadata(path) {
            if !meta.file_type().is_socket() {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("{} exists and is not a socket", path.display()),
                ));
            }
            if sys::seqpacket_connect(path).is_ok() {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!("another daemon is listening at {}", path.display()),
                ));
            }
            std::fs::remove_file(path)?;
        }
        let listen = sys::seqpacket_listen(path, access.socket_mode, 128)?;
        Ok(Server {
            path: path.to_path_buf(),
            listen,
            access,
            sizes,
            max_clients,
            next_id: 1,
            conns: BTreeMap::new(),
            doomed: Vec::new(),
            buf: vec![0; MAX_CONTROL_MESSAGE + 1],
            pollfds: Vec::new(),
            trace: false,
        })
    }

    /// The socket path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Descriptors to poll for POLLIN: the listening socket, every client
    /// socket and every client's doorbell eventfd.
    pub fn poll_fds(&self, out: &mut Vec<RawFd>) {
        out.push(self.listen.as_raw_fd());
        for c in self.conns.values() {
            out.push(c.sock.as_raw_fd());
            if let Some(r) = &c.rings {
                out.push(r.doorbell.raw());
            }
        }
    }

    /// Connected clients (Hello done), in id order.
    pub fn clients(&self) -> Vec<ClientId> {
        self.conns
            .iter()
            .filter(|(_, c)| c.rings.is_some())
            .map(|(id, _)| *id)
            .collect()
    }

    /// The ring the client publishes into; the daemon peeks and pops it.
    pub fn publications(&mut self, client: ClientId) -> Option<&mut Consumer> {
        self.conns
            .get_mut(&client)?
            .rings
            .as_mut()
            .map(|r| &mut r.publications)
    }

    /// The ring the daemon delivers into; pushing wakes a sleeping client.
    pub fn subscription(&mut self, client: ClientId) -> Option<&mut Producer> {
        self.conns
            .get_mut(&client)?
            .rings
            .as_mut()
            .map(|r| &mut r.subscription)
    }

    /// After popping a client's publications: wakes it if it waits for space.
    pub fn wake_publishers(&mut self, client: ClientId) {
        if let Some(r) = self.conns.get(&client).and_then(|c| c.rings.as_ref()) {
            r.publications.wake_producer();
        }
    }

    /// Before the daemon blocks: marks every publication ring's consumer as
    /// sleeping so that the next publish rings the doorbell. Returns false if
    /// some ring already holds records (then do not block).
    pub fn prepare_sleep(&mut self) -> bool {
        let mut idle = true;
        for (id, c) in self.conns.iter_mut() {
            if let Some(r) = &mut c.rings {
                match r.publications.prepare_sleep() {
                    Ok(true) => {}
                    Ok(false) => idle = false,
                    Err(e) => self.doomed.push((
                        *id,
                        format!("publication ring is corrupt: {e}"),
                        Fate::CutOff,
                    )),
                }
            }
        }
        idle && self.doomed.is_empty()
    }

    /// After the daemon wakes: clears the sleeping marks [`Server::prepare_sleep`]
    /// set, so busy clients stop ringing the doorbell.
    pub fn finish_sleep(&mut self) {
        for c in self.conns.values_mut() {
            if let Some(r) = &mut c.rings {
                r.publications.finish_sleep();
            }
        }
    }

    /// Bytes of memory held for clients: ring mappings plus queued control
    /// messages. Fixed per client except the (bounded) queue.
    pub fn memory_bytes(&self) -> usize {
        self.conns
            .values()
            .map(|c| {
                c.rings.as_ref().map_or(0, |r| r.bytes)
                    + c.outbox.iter().map(|m| m.len()).sum::<usize>()
            })
            .sum()
    }

    /// Answers request `req` of `client`. Unknown clients are ignored.
    pub fn reply(&mut self, client: ClientId, req: u64, resp: Response) {
        let msg = ServerMessage::Response {
            id: req,
            body: resp,
        };
        self.send(client, &msg);
    }

    /// Sends an unsolicited notice.
    pub fn notify(&mut self, client: ClientId, n: Notice) {
        self.send(client, &ServerMessage::Notice(n));
    }

    /// Cuts a client off: sends `CutOff { reason }` (best effort), closes the
    /// socket and unmaps its rings. No Disconnected event follows (the daemon
    /// asked for it). The id is never reused.
    pub fn disconnect(&mut self, client: ClientId, reason: &str) {
        if let Some(c) = self.conns.remove(&client) {
            let msg = encode(&ServerMessage::Notice(Notice::CutOff {
                reason: reason.to_string(),
            }));
            let _ = sys::send_msg(c.sock.as_raw_fd(), &msg, &[], true);
        }
    }

    fn send(&mut self, client: ClientId, msg: &ServerMessage) {
        let Some(c) = self.conns.get_mut(&client) else {
            return;
        };
        let sent = match push_out(c, encode(msg)) {
            // Too long for the limit or for the socket: an answer becomes an
            // error that says so (a few hundred bytes: it fits), a notice is
            // dropped.
            Ok(Sent::TooLong(len)) => match msg {
                ServerMessage::Response { id, .. } => push_out(
                    c,
                    encode(&ServerMessage::Response {
                        id: *id,
                        body: Response::error(
                            ErrorCode::Unavailable,
                            format!(
                                "the answer is {len} bytes, more than the control socket carries \
                                 (at most {MAX_REPLY}; the kernel's net.core.wmem_max may allow less)"
                            ),
                        ),
                    }),
                ),
                ServerMessage::Notice(_) => return,
            },
            other => other,
        };
        if let Err(doom) = sent {
            self.doomed.push((client, doom.0, doom.1));
        }
    }

    /// Does all pending work without blocking: accepts connections, reads
    /// requests (answering Hello and malformed ones itself), notices
    /// hang-ups, drains doorbells, flushes queued replies.
    pub fn poll(&mut self, events: &mut Vec<ServerEvent>) {
        self.reap(events);
        self.pollfds.clear();
        self.pollfds.push(sys::pollin(self.listen.as_raw_fd()));
        let ids: Vec<ClientId> = self.conns.keys().copied().collect();
        for c in self.conns.values() {
            let mut p = sys::pollin(c.sock.as_raw_fd());
            if !c.outbox.is_empty() {
                p.events |= libc::POLLOUT;
            }
            self.pollfds.push(p);
            self.pollfds.push(sys::pollin(
                c.rings.as_ref().map_or(-1, |r| r.doorbell.raw()),
            ));
        }
        if sys::poll(&mut self.pollfds, Some(std::time::Duration::ZERO)).is_err() {
            return;
        }
        for (i, id) in ids.iter().enumerate() {
            let sock = self.pollfds[1 + 2 * i].revents;
            let bell = self.pollfds[2 + 2 * i].revents;
            if bell != 0 {
                if let Some(r) = self.conns.get(id).and_then(|c| c.rings.as_ref()) {
                    r.doorbell.drain();
                }
            }
            if sock & libc::POLLOUT != 0 {
                self.flush(*id);
            }
            if sock & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0 {
                self.read_client(*id, events);
            }
        }
        // Hang-ups first, accepts second: a client that closed before a new
        // one connected has freed its slot by the time the new one counts.
        self.reap(events);
        if self.pollfds[0].revents != 0 {
            self.accept_all(events);
        }
    }

    /// Reaps clients that hung up since this poll's snapshot (called when
    /// full, so that a slot freed just before a new connection counts).
    fn reap_hung_up(&mut self, events: &mut Vec<ServerEvent>) {
        let ids: Vec<ClientId> = self.conns.keys().copied().collect();
        let mut p: Vec<libc::pollfd> = self
            .conns
            .values()
            .map(|c| sys::pollin(c.sock.as_raw_fd()))
            .collect();
        if sys::poll(&mut p, Some(std::time::Duration::ZERO)).is_err() {
            return;
        }
        for (id, p) in ids.iter().zip(&p) {
            if p.revents & (libc::POLLHUP | libc::POLLERR) != 0 {
                self.read_client(*id, events);
            }
        }
        self.reap(events);
    }

    fn reap(&mut self, events: &mut Vec<ServerEvent>) {
        for (id, reason, fate) in std::mem::take(&mut self.doomed) {
            let Some(mut c) = self.conns.remove(&id) else {
                continue;
            };
            if fate == Fate::CutOff {
                // Best effort, never blocking: the replies still queued,
                // then why it is cut off.
                while let Some(m) = c.outbox.pop_front() {
                    if sys::send_msg(c.sock.as_raw_fd(), &m, &[], true).is_err() {
                        break;
                    }
                }
                let msg = encode(&ServerMessage::Notice(Notice::CutOff {
                    reason: reason.clone(),
                }));
                let _ = sys::send_msg(c.sock.as_raw_fd(), &msg, &[], true);
            }
            if c.rings.is_some() {
                events.push(match fate {
                    Fate::Gone => ServerEvent::Disconnected { client: id, reason },
                    Fate::CutOff => ServerEvent::CutOff { client: id, reason },
                });
            }
        }
    }

    fn flush(&mut self, id: ClientId) {
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        while let Some(m) = c.outbox.front() {
            match sys::send_msg(c.sock.as_raw_fd(), m, &[], true) {
                Ok(_) => {
                    c.outbox.pop_front();
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                // A queued answer longer than the socket takes (a daemon
                // without CAP_NET_ADMIN on a kernel whose wmem_max is below
                // MAX_REPLY): dropped, the client's request times out; the
                // connection goes on.
                Err(e) if e.raw_os_error() == Some(libc::EMSGSIZE) => {
                    c.outbox.pop_front();
                }
                Err(e) => {
                    self.doomed
                        .push((id, format!("control socket: {e}"), Fate::Gone));
                    return;
                }
            }
        }
    }

    fn accept_all(&mut self, events: &mut Vec<ServerEvent>) {
        for _ in 0..MAX_ACCEPTS_PER_POLL {
            let sock = match sys::accept(self.listen.as_raw_fd()) {
                Ok(Some(s)) => s,
                Ok(None) | Err(_) => return,
            };
            let cred = match sys::peer_cred(sock.as_raw_fd()) {
                Ok(c) => c,
                Err(_) => continue,
            };
            if let Err(message) = self.access.check(&cred) {
                refuse(&sock, &mut self.buf, ErrorCode::PermissionDenied, &message);
                continue;
            }
            if self.conns.len() >= self.max_clients {
                self.reap_hung_up(events);
            }
            if self.conns.len() >= self.max_clients {
                let message = format!(
                    "too many clients: the daemon serves at most {} (config: {})",
                    self.max_clients, self.access.config
                );
                refuse(&sock, &mut self.buf, ErrorCode::TooManyClients, &message);
                continue;
            }
            // Room for the largest answer in one message (past the kernel's
            // wmem_max when the daemon may; else capped by it, and a larger
            // answer becomes an error, `send`).
            let _ = sys::set_send_buffer(sock.as_raw_fd(), 2 * MAX_REPLY);
            let id = ClientId(self.next_id);
            self.next_id += 1;
            self.conns.insert(
                id,
                Conn {
                    sock,
                    cred,
                    rings: None,
                    outbox: VecDeque::new(),
                    malformed: 0,
                },
            );
        }
    }

    fn read_client(&mut self, id: ClientId, events: &mut Vec<ServerEvent>) {
        for _ in 0..MAX_READS_PER_POLL {
            let Some(c) = self.conns.get_mut(&id) else {
                return;
            };
            let r = match sys::recv_msg(c.sock.as_raw_fd(), &mut self.buf, true) {
                Ok(None) => return,
                Ok(Some(r)) => r,
                Err(e) => {
                    self.doomed
                        .push((id, format!("control socket: {e}"), Fate::Gone));
                    return;
                }
            };
            // Descriptors a client sends us are dropped (closed) with `r`.
            if r.full_len == 0 && !r.truncated {
                self.doomed
                    .push((id, "client closed the connection".into(), Fate::Gone));
                return;
            }
            // The buffer holds one byte more than the limit, so a request of
            // exactly that size arrives whole: it is over the limit all the
            // same (issue 23's hostile-client test sent 65,537 bytes).
            let answer = if r.truncated || r.full_len > MAX_CONTROL_MESSAGE {
                Err((
                    0,
                    ErrorCode::TooLarge,
                    format!(
                        "request of {} bytes exceeds the {MAX_CONTROL_MESSAGE}-byte limit",
                        r.full_len
                    ),
                ))
            } else {
                decode_request(&self.buf[..r.len]).map_err(|(i, m)| (i, ErrorCode::Malformed, m))
            };
            match answer {
                Err((req, code, message)) => {
                    c.malformed += 1;
                    let n = c.malformed;
                    self.reply(id, req, Response::error(code, message));
                    if n > MAX_MALFORMED {
                        self.doomed.push((
                            id,
                            format!("{n} malformed requests (limit {MAX_MALFORMED})"),
                            Fate::CutOff,
                        ));
                        return;
                    }
                }
                Ok(m) => self.handle(id, m.id, m.request, events),
            }
        }
    }

    fn handle(&mut self, id: ClientId, req: u64, request: Request, events: &mut Vec<ServerEvent>) {
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        match (request, c.rings.is_some()) {
            (Request::Hello { version, name }, false) => {
                if version != PROTOCOL_VERSION {
                    let m = format!(
                        "protocol version {version} not supported; this daemon speaks {PROTOCOL_VERSION}"
                    );
                    self.reply(id, req, Response::error(ErrorCode::VersionMismatch, m));
                    return;
                }
                let name: String = name.chars().take(MAX_NAME).collect();
                match self.welcome(id, req) {
                    Ok(()) => {
                        let cred = self.conns[&id].cred;
                        events.push(ServerEvent::Connected {
                            client: id,
                            uid: cred.uid,
                            gid: cred.gid,
                            pid: cred.pid,
                            name,
                        });
                    }
                    Err(e) => {
                        let m = format!("cannot set up shared memory: {e}");
                        self.reply(id, req, Response::error(ErrorCode::Unavailable, m));
                    }
                }
            }
            (Request::Hello { .. }, true) => {
                let m = "Hello was already received on this connection";
                self.reply(id, req, Response::error(ErrorCode::BadState, m));
            }
            (_, false) => {
                let m = "send Hello first";
                self.reply(id, req, Response::error(ErrorCode::BadState, m));
            }
            (request, true) => events.push(ServerEvent::Request {
                client: id,
                req,
                request,
            }),
        }
    }

    /// Creates the client's rings (one memfd) and eventfds and sends them.
    fn welcome(&mut self, id: ClientId, req: u64) -> io::Result<()> {
        let layout = self.sizes.layout();
        let (memfd, map) = Mapping::create_memfd(&format!("mcast-ipc-{}", id.0), layout.total())?;
        let map = Arc::new(map);
        let bad = |e: ring::Corrupt| io::Error::other(e);
        ring::init(&map, layout.publication_offset(), layout.publication).map_err(bad)?;
        ring::init(&map, layout.subscription_offset(), layout.subscription).map_err(bad)?;
        let doorbell = Arc::new(EventFd::new()?);
        let wake = Arc::new(EventFd::new()?);
        let mut publications =
            Consumer::attach(map.clone(), layout.publication_offset(), layout.publication)
                .map_err(bad)?;
        publications.set_notify(wake.clone());
        let mut subscription = Producer::attach(
            map.clone(),
            layout.subscription_offset(),
            layout.subscription,
        )
        .map_err(bad)?;
        subscription.set_notify(wake.clone());
        let msg = encode(&ServerMessage::Response {
            id: req,
            body: Response::Welcome {
                client_id: id.0,
                max_message: self.sizes.max_message as u64,
                pub_ring_bytes: layout.publication as u64,
                sub_ring_bytes: layout.subscription as u64,
                trace: self.trace,
            },
        });
        let c = self.conns.get_mut(&id).expect("caller checked");
        if !c.outbox.is_empty() {
            // Replies to earlier malformed requests are still queued; the
            // Welcome must not overtake them, and fds cannot wait in the queue.
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                "control socket busy",
            ));
        }
        let fds = [memfd.as_raw_fd(), doorbell.raw(), wake.raw()];
        sys::send_msg(c.sock.as_raw_fd(), &msg, &fds, true)?;
        // The memfd itself is no longer needed: the mapping keeps the memory.
        drop(memfd);
        c.rings = Some(Rings {
            doorbell,
            _wake: wake,
            publications,
            subscription,
            bytes: map.len(),
        });
        Ok(())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let msg = encode(&ServerMessage::Notice(Notice::Shutdown {
            reason: "mcastd is stopping".into(),
        }));
        for c in self.conns.values() {
            let _ = sys::send_msg(c.sock.as_raw_fd(), &msg, &[], true);
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

fn encode(msg: &ServerMessage) -> Vec<u8> {
    serde_json::to_vec(msg).expect("server messages always serialize")
}

/// What [`push_out`] did with a message.
enum Sent {
    /// Sent or queued.
    Yes,
    /// Not sent: longer (this many bytes) than [`MAX_REPLY`] or than the
    /// socket takes in one message.
    TooLong(usize),
}

/// Sends or queues `bytes`; `Err` when the client must be dropped.
fn push_out(c: &mut Conn, bytes: Vec<u8>) -> Result<Sent, (String, Fate)> {
    if bytes.len() > MAX_REPLY {
        return Ok(Sent::TooLong(bytes.len()));
    }
    if c.outbox.is_empty() {
        match sys::send_msg(c.sock.as_raw_fd(), &bytes, &[], true) {
            Ok(_) => return Ok(Sent::Yes),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) if e.raw_os_error() == Some(libc::EMSGSIZE) => {
                return Ok(Sent::TooLong(bytes.len()))
            }
            Err(e) => return Err((format!("control socket: {e}"), Fate::Gone)),
        }
    }
    if c.outbox.len() >= MAX_PENDING {
        return Err((
            format!("client does not read its control socket ({MAX_PENDING} messages queued)"),
            Fate::CutOff,
        ));
    }
    c.outbox.push_back(bytes);
    Ok(Sent::Yes)
}

/// Answers a refused connection and closes it. Reads what the peer already
/// sent first: closing a Unix socket with unread data makes the peer's next
/// read fail with ECONNRESET instead of returning our answer.
fn refuse(sock: &OwnedFd, buf: &mut [u8], code: ErrorCode, message: &str) {
    while let Ok(Some(r)) = sys::recv_msg(sock.as_raw_fd(), buf, true) {
        if r.full_len == 0 {
            break;
        }
    }
    let msg = encode(&ServerMessage::Response {
        id: 0,
        body: Response::error(code, message),
    });
    let _ = sys::send_msg(sock.as_raw_fd(), &msg, &[], true);
}
