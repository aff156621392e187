//! The client library applications link: connect to `mcastd`, join groups,
//! publish into the publication ring, receive from the subscription ring.
//!
//! One `Client` is one connection, used from one thread (`&mut self`). The
//! control socket carries requests, responses and notices; notices that
//! arrive while a response is awaited are kept for [`Client::notices`].
//!
//! Copies: `publish` copies the message once, into the shared ring; the
//! daemon reads it in place. `try_recv` copies a delivered message once, out
//! of the shared ring into the returned `Vec`; [`Client::recv_batch`] copies
//! nothing: it lends each whole message in place.
//!
//! Batches: [`Client::publish_batch`] writes many records and publishes them
//! with one ring commit (one store of the ring's head, one fence, a system
//! call only if the daemon sleeps); [`Client::recv_batch`] reads many and
//! hands their space back with one store of the tail and one wake-up check.
//! Neither takes a lock or allocates per message. [`Client::publish`],
//! [`Client::try_recv`] and the blocking calls are batches of one over the
//! same code.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::proto::{
    ClientMessage, ErrorCode, Notice, Request, Response, RingLayout, ServerMessage, View,
    MAX_CONTROL_MESSAGE, MAX_REPLY, PROTOCOL_VERSION,
};
use crate::ring::{
    self, Consumer, Producer, PushError, RecordHeader, BATCH, EVENT, FIRST, LAST, SCATTER,
};
use crate::shm::Mapping;
use crate::sys::{self, EventFd};
use crate::trace::{monotonic_ns, Hop, HopSummary};
use crate::{batch, scatter};

mod reassembly;

use reassembly::{drop_broken_partials, reassemble, time_read};

/// How long a control request waits for its response.
pub const CONTROL_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest message reassembled from fragments; larger ones are dropped.
pub const MAX_REASSEMBLY: usize = 64 << 20;

/// What went wrong, in words a user can act on.
#[derive(Debug)]
pub enum Error {
    /// Nothing listens at the socket path.
    NotRunning {
        /// The socket path tried.
        path: PathBuf,
        /// The OS error (ENOENT, ECONNREFUSED).
        source: io::Error,
    },
    /// The daemon (or the socket's file mode) refused us.
    PermissionDenied(String),
    /// The publication ring is full now; retry, or use `publish_blocking`.
    WouldBlock,
    /// A blocking call's timeout passed.
    TimedOut,
    /// The message is larger than the daemon accepts.
    TooLarge {
        /// The largest message accepted.
        limit: usize,
    },
    /// The daemon cut this client off (e.g. too slow to read its messages).
    CutOff {
        /// The daemon's reason.
        reason: String,
    },
    /// The connection to the daemon is gone.
    Disconnected {
        /// Why, as far as we know.
        reason: String,
    },
    /// The daemon answered a request with an error.
    Daemon {
        /// Machine-readable reason.
        code: ErrorCode,
        /// The daemon's message.
        message: String,
    },
    /// The daemon sent something this library does not understand, or the
    /// shared memory is corrupt.
    Protocol(String),
    /// Any other OS error.
    Io(io::Error),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NotRunning { path, source } => write!(
                f,
                "daemon not running at {} ({source}): is mcastd started?",
                path.display()
            ),
            Error::PermissionDenied(m) => f.write_str(m),
            Error::WouldBlock => {
                f.write_str("publication ring full: the daemon has not caught up yet")
            }
            Error::TimedOut => f.write_str("timed out"),
            Error::TooLarge { limit } => {
                write!(f, "message too large: the limit is {limit} bytes")
            }
            Error::CutOff { reason } => write!(f, "cut off by mcastd: {reason}"),
            Error::Disconnected { reason } => write!(f, "disconnected from mcastd: {reason}"),
            Error::Daemon { code, message } => write!(f, "mcastd refused ({code:?}): {message}"),
            Error::Protocol(m) => write!(f, "protocol error talking to mcastd: {m}"),
            Error::Io(e) => write!(f, "I/O error talking to mcastd: {e}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::NotRunning { source, .. } => Some(source),
            Error::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<ring::Corrupt> for Error {
    fn from(c: ring::Corrupt) -> Error {
        Error::Protocol(c.to_string())
    }
}

/// A group joined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Membership {
    /// The number that tags this group's messages.
    pub group: u32,
    /// The group's name.
    pub name: String,
    /// Our rank in the view.
    pub rank: u32,
    /// The view at join time.
    pub view: View,
}

/// A delivered message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// Data, or a membership event.
    pub kind: MessageKind,
    /// Group number.
    pub group: u32,
    /// The node that sent it (mcastd tags every delivery with it).
    pub source: u32,
    /// The bytes.
    pub data: Vec<u8>,
}

/// A delivered message lent by [`Client::recv_batch`]: a whole record's
/// bytes still in the shared subscription ring (no copy, no allocation), or
/// a message reassembled from fragments in the client's own buffer. Valid
/// for the callback only: the ring's space goes back to the daemon after
/// the batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageRef<'a> {
    /// Data, or a membership event.
    pub kind: MessageKind,
    /// Group number.
    pub group: u32,
    /// The node that sent it (mcastd tags every delivery with it).
    pub source: u32,
    /// The bytes.
    pub data: &'a [u8],
}

impl MessageRef<'_> {
    /// An owned copy (what [`Client::try_recv`] returns).
    pub fn to_message(&self) -> Message {
        Message {
            kind: self.kind,
            group: self.group,
            source: self.source,
            data: self.data.to_vec(),
        }
    }
}

/// Why the connection can no longer be used (kept to answer later calls).
#[derive(Debug, Clone)]
enum Closed {
    CutOff(String),
    Gone(String),
}

impl Closed {
    fn error(&self) -> Error {
        match self {
            Closed::CutOff(reason) => Error::CutOff {
                reason: reason.clone(),
            },
            Closed::Gone(reason) => Error::Disconnected {
                reason: reason.clone(),
            },
        }
    }
}

/// A connection to `mcastd`.
#[derive(Debug)]
pub struct Client {
    sock: OwnedFd,
    client_id: u64,
    max_message: usize,
    next_id: u64,
    wake: Arc<EventFd>,
    _doorbell: Arc<EventFd>,
    publ: Producer,
    sub: Consumer,
    notices: VecDeque<Notice>,
    closed: Option<Closed>,
    partial: HashMap<(u32, u32), Vec<u8>>,
    /// Where the next message of the [`BATCH`] record at the ring's tail
    /// starts (0: at its first): a call whose `max` ends inside such a
    /// record leaves it in the ring and the next call goes on from here.
    batch_at: usize,
    buf: Vec<u8>,
    /// The shared memory both rings live in, and where each is in it.
    map: Arc<Mapping>,
    layout: RingLayout,
    /// With the daemon tracing: the last hop, from the daemon writing a
    /// message into the subscription ring to this client reading it.
    read_hop: Option<Box<Hop>>,
}

/// What a received [`Message`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageKind {
    /// Application data.
    Data,
    /// A membership event of the group, in stream order: `data` is the new
    /// view as JSON (`{"epoch":…,"members":[{"rank":…,"node":…,"member":…}],
    /// "reason":…}`), so a subscriber can tell "no messages" from "the
    /// sender left or died" at the exact point in the stream.
    Membership,
}

/// How long dropping a client waits for the daemon to take what it published.
pub const LINGER: Duration = Duration::from_secs(5);

impl Drop for Client {
    fn drop(&mut self) {
        if self.closed.is_none() {
            let _ = self.flush(LINGER);
        }
    }
}

/// The client's clock: blocking calls take timeouts, so this library (not a
/// protocol core) reads the monotonic clock, only here.
#[allow(clippy::disallowed_methods)]
fn now() -> Instant {
    Instant::now()
}

fn io_err(e: io::Error) -> Error {
    Error::Io(e)
}

impl Client {
    /// Connects to the daemon at `path` and says Hello as `name`.
    pub fn connect(path: impl AsRef<Path>, name: &str) -> Result<Client, Error> {
        let path = path.as_ref();
        let sock = sys::seqpacket_connect(path).map_err(|e| match e.raw_os_error() {
            Some(libc::ENOENT) | Some(libc::ECONNREFUSED) | Some(libc::ENOTDIR) => {
                Error::NotRunning {
                    path: path.to_path_buf(),
                    source: e,
                }
            }
            Some(libc::EACCES) | Some(libc::EPERM) => Error::PermissionDenied(format!(
                "permission denied opening {}: the socket's owner, group and mode decide who may connect ({e})",
                path.display()
            )),
            _ => Error::Io(e),
        })?;
        let hello = ClientMessage {
            id: 1,
            request: Request::Hello {
                version: PROTOCOL_VERSION,
                name: name.to_string(),
            },
        };
        let bytes = serde_json::to_vec(&hello).expect("requests serialize");
        // A refused peer may find the socket closed already; its answer is
        // still queued for us, so a failed send is not the end.
        let sent = sys::send_msg(sock.as_raw_fd(), &bytes, &[], false);
        let mut buf = vec![0; MAX_REPLY + 1];
        let deadline = now() + CONTROL_TIMEOUT;
        let mut resets = 0;
        let (msg, fds) = loop {
            let mut pfd = [sys::pollin(sock.as_raw_fd())];
            let left = deadline.saturating_duration_since(now());
            if left.is_zero() {
                return Err(Error::TimedOut);
            }
            sys::poll(&mut pfd, Some(left)).map_err(io_err)?;
            if pfd[0].revents == 0 {
                continue;
            }
            match sys::recv_msg(sock.as_raw_fd(), &mut buf, true) {
                Ok(None) => continue,
                Ok(Some(r)) if r.full_len == 0 => {
                    let why = match sent {
                        Err(e) => format!("the daemon closed the connection ({e})"),
                        Ok(_) => "the daemon closed the connection during Hello".into(),
                    };
                    return Err(Error::Disconnected { reason: why });
                }
                Ok(Some(r)) if r.truncated => {
                    return Err(Error::Protocol(format!(
                        "{}-byte control message",
                        r.full_len
                    )))
                }
                Ok(Some(r)) => {
                    let m: ServerMessage = serde_json::from_slice(&buf[..r.len])
                        .map_err(|e| Error::Protocol(format!("bad Hello answer: {e}")))?;
                    match m {
                        ServerMessage::Response { body, .. } => break (body, r.fds),
                        ServerMessage::Notice(_) => continue,
                    }
                }
                // The daemon closed with our Hello unread: the reset comes
                // before its answer, which is still in the queue.
                Err(e) if e.raw_os_error() == Some(libc::ECONNRESET) && resets == 0 => {
                    resets += 1;
                }
                Err(e) => return Err(io_err(e)),
            }
        };
        let (client_id, max_message, layout, trace) = match msg {
            Response::Welcome {
                client_id,
                max_message,
                pub_ring_bytes,
                sub_ring_bytes,
                trace,
            } => (
                client_id,
                max_message as usize,
                RingLayout {
                    publication: pub_ring_bytes as usize,
                    subscription: sub_ring_bytes as usize,
                },
                trace,
            ),
            Response::Error {
                code: ErrorCode::PermissionDenied,
                message,
            } => return Err(Error::PermissionDenied(message)),
            Response::Error { code, message } => return Err(Error::Daemon { code, message }),
            other => return Err(Error::Protocol(format!("expected Welcome, got {other:?}"))),
        };
        let [memfd, doorbell, wake]: [OwnedFd; 3] = fds.try_into().map_err(|v: Vec<OwnedFd>| {
            Error::Protocol(format!("Welcome carried {} fds, expected 3", v.len()))
        })?;
        let bad = |e: ring::Corrupt| Error::Protocol(format!("shared memory from the daemon: {e}"));
        for cap in [layout.publication, layout.subscription] {
            if !cap.is_power_of_two() || !(ring::MIN_CAPACITY..=ring::MAX_CAPACITY).contains(&cap) {
                return Err(Error::Protocol(format!("ring size {cap} in Welcome")));
            }
        }
        let map = Arc::new(
            Mapping::map_fd(&memfd, layout.total())
                .map_err(|e| Error::Protocol(format!("shared memory from the daemon: {e}")))?,
        );
        drop(memfd);
        let doorbell = Arc::new(EventFd::from_owned(doorbell).map_err(io_err)?);
        let wake = Arc::new(EventFd::from_owned(wake).map_err(io_err)?);
        let mut publ =
            Producer::attach(map.clone(), layout.publication_offset(), layout.publication)
                .map_err(bad)?;
        publ.set_notify(doorbell.clone());
        let mut sub = Consumer::attach(
            map.clone(),
            layout.subscription_offset(),
            layout.subscription,
        )
        .map_err(bad)?;
        sub.set_notify(doorbell.clone());
        // A stamped record spends 8 bytes of the ring on its stamp.
        let stamp = if trace { ring::STAMP_BYTES } else { 0 };
        let max_message = max_message.min(publ.max_record() - stamp);
        Ok(Client {
            sock,
            client_id,
            max_message,
            next_id: 2,
            wake,
            _doorbell: doorbell,
            publ,
            sub,
            notices: VecDeque::new(),
            closed: None,
            partial: HashMap::new(),
            batch_at: 0,
            buf,
            map,
            layout,
            read_hop: trace.then(Box::default),
        })
    }

    /// With the daemon tracing (`trace = true` in mcastd.toml): the last hop
    /// of every message this client read, from the daemon writing it into
    /// the subscription ring to the receive call that took it
    /// (docs/mcastd.md "Where the time goes"). `None` when the daemon does
    /// not trace.
    pub fn read_hop(&self) -> Option<HopSummary> {
        self.read_hop.as_ref().map(|h| h.summary())
    }

    /// The shared memory this client's rings live in (the same pages the
    /// daemon maps) and where each ring is in it: for tests that play a
    /// hostile client scribbling on its rings while the daemon runs
    /// (`cli/tests/hostile_clients.rs`). The mapping's accessors are
    /// bounds-checked, so no `unsafe` is needed to write anywhere in it.
    /// Not for applications: writing here breaks the rings' protocol.
    #[doc(hidden)]
    pub fn shared_rings(&self) -> (&Mapping, RingLayout) {
        (&self.map, self.layout)
    }

    /// The id the daemon gave this connection.
    pub fn id(&self) -> u64 {
        self.client_id
    }

    /// Largest message [`Client::publish`] accepts.
    pub fn max_message(&self) -> usize {
        self.max_message
    }

    /// Descriptors an application can add to its own poll loop (POLLIN):
    /// the wake-up eventfd and the control socket. Readable means "call
    /// `try_recv` / `notices`".
    pub fn poll_fds(&self) -> [RawFd; 2] {
        [self.wake.raw(), self.sock.as_raw_fd()]
    }

    /// Joins group `group`.
    pub fn join(&mut self, group: &str) -> Result<Membership, Error> {
        self.join_in_mode(group, None)
    }

    /// Joins group `group` if the daemon runs it in `mode` (`"fifo"`,
    /// `"sequenced"`, `"total"` or `"broadcast"`): an application that
    /// relies on one order for every member asks for `"total"` (or
    /// `"sequenced"`) and is refused, with the setting to change, where the
    /// group's configuration says otherwise.
    pub fn join_mode(&mut self, group: &str, mode: &str) -> Result<Membership, Error> {
        self.join_in_mode(group, Some(mode))
    }

    /// [`Client::join_mode`], or with `None` [`Client::join`].
    pub fn join_in_mode(&mut self, group: &str, mode: Option<&str>) -> Result<Membership, Error> {
        match self.request(Request::Join {
            group: group.to_string(),
            mode: mode.map(str::to_owned),
        })? {
            Response::Joined {
                group,
                name,
                rank,
                view,
            } => Ok(Membership {
                group,
                name,
                rank,
                view,
            }),
            other => Err(Error::Protocol(format!("expected Joined, got {other:?}"))),
        }
    }

    /// Leaves group `group`.
    pub fn leave(&mut self, group: u32) -> Result<(), Error> {
        match self.request(Request::Leave { group })? {
            Response::Left => Ok(()),
            other => Err(Error::Protocol(format!("expected Left, got {other:?}"))),
        }
    }

    /// Waits at `group`'s barrier until every member of the group has
    /// reached it (seed 004 §2.1; the daemons' tree collects the arrivals,
    /// its root releases everyone). Returns the nodes that left the group
    /// while this member waited (the barrier completed without them).
    /// `timeout` None waits as long as it takes; after a timeout
    /// ([`Error::TimedOut`]) this member still counts as arrived, and its
    /// next call waits for the barrier after that.
    pub fn barrier(&mut self, group: u32, timeout: Option<Duration>) -> Result<Vec<u32>, Error> {
        let deadline = timeout.map(|t| now() + t);
        match self.request_until(Request::Barrier { group }, deadline)? {
            Response::Released { dropped, .. } => Ok(dropped),
            other => Err(Error::Protocol(format!("expected Released, got {other:?}"))),
        }
    }

    /// A control request; an Error response becomes [`Error::Daemon`].
    pub fn request(&mut self, r: Request) -> Result<Response, Error> {
        self.request_until(r, Some(now() + CONTROL_TIMEOUT))
    }

    /// [`Client::request`] with its own deadline (None: none).
    fn request_until(&mut self, r: Request, deadline: Option<Instant>) -> Result<Response, Error> {
        self.check_open()?;
        let id = self.next_id;
        self.next_id += 1;
        let bytes =
            serde_json::to_vec(&ClientMessage { id, request: r }).expect("requests serialize");
        if bytes.len() > MAX_CONTROL_MESSAGE {
            return Err(Error::TooLarge {
                limit: MAX_CONTROL_MESSAGE,
            });
        }
        if let Err(e) = sys::send_msg(self.sock.as_raw_fd(), &bytes, &[], false) {
            self.drain_control();
            self.check_open()?;
            return Err(Error::Disconnected {
                reason: format!("sending to mcastd: {e}"),
            });
        }
        loop {
            match self.read_control(deadline)? {
                Some(ServerMessage::Response { id: rid, body }) if rid == id => {
                    return match body {
                        Response::Error { code, message } => Err(Error::Daemon { code, message }),
                        body => Ok(body),
                    };
                }
                // A late answer to an earlier request that timed out.
                Some(ServerMessage::Response { .. }) => {}
                Some(ServerMessage::Notice(n)) => self.note(n),
                None => return Err(Error::TimedOut),
            }
        }
    }

    /// Publishes `msg` to `group` without blocking: one record, one copy.
    pub fn publish(&mut self, group: u32, msg: &[u8]) -> Result<(), Error> {
        self.publish_batch(group, [msg]).map(|_| ())
    }

    /// Publishes as many of `msgs`, in order, as fit in the publication ring
    /// now, each whole, without blocking, and returns how many it took: one
    /// record and one copy per message, one ring commit for them all (one
    /// store of the ring's head and one fence; a system call only if the
    /// daemon sleeps). The rest are the caller's to offer again.
    ///
    /// - An empty `msgs` is `Ok(0)`.
    /// - When not even the first fits: [`Error::WouldBlock`] (so `Ok` from a
    ///   non-empty `msgs` took at least one).
    /// - A message longer than [`Client::max_message`]: [`Error::TooLarge`]
    ///   if it is the first; otherwise the batch stops before it (`Ok` with
    ///   the count before it) and the next call, which starts with it, says
    ///   `TooLarge`.
    /// - A failure found after some messages were taken (the ring found
    ///   corrupt) ends the batch: those are published and counted, and the
    ///   failure is sticky, so the next call reports it.
    ///
    /// `msgs` is anything that lists byte strings: `&[&[u8]]`,
    /// `&Vec<Vec<u8>>`, an iterator of slices (libmcast maps its C array).
    pub fn publish_batch<I>(&mut self, group: u32, msgs: I) -> Result<usize, Error>
    where
        I: IntoIterator,
        I::Item: AsRef<[u8]>,
    {
        self.publish_records(group, FIRST | LAST, msgs)
    }

    /// Publishes a *scattering* to a total-order group (`mode = "total"`),
    /// without blocking: each part goes to its member only, named by its
    /// node and member id as the group's view lists them (`Member::node`,
    /// `Member::member`; a client's own member id is [`Client::id`]), and all
    /// parts take one place in the group's order, the same against every
    /// other message at every member. If this node fails while the
    /// scattering is on its way, every surviving member gets its part or
    /// none does. The parts travel together, as one message: their bytes
    /// and [`scatter::overhead`] must fit [`Client::max_message`] (else
    /// [`Error::TooLarge`]); every member's node sees them all. The daemon
    /// refuses (an error notice) a scattering to another kind of group, or
    /// to a member not in the group's view. [`Error::WouldBlock`] when the
    /// ring is full.
    pub fn publish_scatter(
        &mut self,
        group: u32,
        parts: &[scatter::Part<'_>],
    ) -> Result<(), Error> {
        let mut buf = Vec::new();
        scatter::encode(parts, &mut buf);
        self.publish_records(group, FIRST | LAST | SCATTER, [&buf[..]])
            .map(|_| ())
    }

    /// [`Client::publish_scatter`], sleeping while the ring is full (until
    /// `timeout`, if any, then [`Error::TimedOut`]).
    pub fn publish_scatter_blocking(
        &mut self,
        group: u32,
        parts: &[scatter::Part<'_>],
        timeout: Option<Duration>,
    ) -> Result<(), Error> {
        let mut buf = Vec::new();
        scatter::encode(parts, &mut buf);
        self.blocking(group, FIRST | LAST | SCATTER, [&buf[..]], timeout)
            .map(|_| ())
    }

    /// Records of `msgs` with `flags`, as many as fit (see
    /// [`Client::publish_batch`]).
    fn publish_records<I>(&mut self, group: u32, flags: u32, msgs: I) -> Result<usize, Error>
    where
        I: IntoIterator,
        I::Item: AsRef<[u8]>,
    {
        self.check_open()?;
        let hdr = RecordHeader {
            group,
            source: 0,
            flags,
            // One clock read per call: the batch is published at once.
            stamp: if self.read_hop.is_some() {
                monotonic_ns()
            } else {
                0
            },
        };
        let mut taken = 0;
        let mut failure = None;
        for msg in msgs {
            let msg = msg.as_ref();
            if msg.len() > self.max_message {
                failure = Some(Error::TooLarge {
                    limit: self.max_message,
                });
                break;
            }
            match self.publ.try_push_deferred(hdr, &[msg]) {
                Ok(()) => taken += 1,
                Err(e) => {
                    failure = Some(match e {
                        PushError::Full => Error::WouldBlock,
                        PushError::TooLarge { max, .. } => Error::TooLarge { limit: max },
                        PushError::Corrupt(c) => c.into(),
                    });
                    break;
                }
            }
        }
        self.publ.commit();
        match failure {
            Some(e) if taken == 0 => Err(e),
            _ => Ok(taken),
        }
    }

    /// Publishes as [`Client::publish_batch`] does, sleeping while not even
    /// the first message fits (until `timeout`, if any, then
    /// [`Error::TimedOut`]), as [`Client::publish_blocking`] does. Returns
    /// how many were taken: at least one, unless `msgs` is empty; call again
    /// with the rest. `msgs` is listed again after each wait, hence `Clone`
    /// (slices and their iterators are).
    pub fn publish_batch_blocking<I>(
        &mut self,
        group: u32,
        msgs: I,
        timeout: Option<Duration>,
    ) -> Result<usize, Error>
    where
        I: IntoIterator + Clone,
        I::Item: AsRef<[u8]>,
    {
        self.blocking(group, FIRST | LAST, msgs, timeout)
    }

    /// Records of `msgs` with `flags`, sleeping while not even the first
    /// fits (see [`Client::publish_batch_blocking`]).
    fn blocking<I>(
        &mut self,
        group: u32,
        flags: u32,
        msgs: I,
        timeout: Option<Duration>,
    ) -> Result<usize, Error>
    where
        I: IntoIterator + Clone,
        I::Item: AsRef<[u8]>,
    {
        let deadline = timeout.map(|t| now() + t);
        loop {
            let first = match self.publish_records(group, flags, msgs.clone()) {
                Err(Error::WouldBlock) => msgs.clone().into_iter().next(),
                other => return other,
            };
            let len = first.map_or(0, |m| m.as_ref().len());
            if self.publ.prepare_wait(len)? {
                let r = self.wait(deadline);
                self.publ.finish_wait();
                if r? {
                    return Err(Error::TimedOut);
                }
            }
        }
    }

    /// Waits until the daemon has taken every message published so far out of
    /// the publication ring (or `timeout` passes); true when it has. Dropping
    /// a client does this for up to [`LINGER`], so a publisher that sends and
    /// exits loses nothing.
    pub fn flush(&mut self, timeout: Duration) -> Result<bool, Error> {
        let deadline = now() + timeout;
        loop {
            self.check_open()?;
            if self.publ.free_space()? == self.publ.capacity() {
                return Ok(true);
            }
            if now() >= deadline {
                return Ok(false);
            }
            // Sleep until the daemon pops (it wakes a waiting producer); with
            // room for a whole record already, no wake-up comes: look again
            // in a moment.
            if self.publ.prepare_wait(self.publ.max_record())? {
                let r = self.wait(Some(deadline));
                self.publ.finish_wait();
                r?;
            } else {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
    }

    /// Publishes, sleeping while the ring is full (until `timeout`, if any).
    pub fn publish_blocking(
        &mut self,
        group: u32,
        msg: &[u8],
        timeout: Option<Duration>,
    ) -> Result<(), Error> {
        self.publish_batch_blocking(group, [msg], timeout)
            .map(|_| ())
    }

    /// The next complete message, if one is there. Fragments (records
    /// without both FIRST and LAST) are reassembled per (group, source).
    /// One copy, into the returned `Vec`; [`Client::recv_batch`] lends
    /// messages without one.
    pub fn try_recv(&mut self) -> Result<Option<Message>, Error> {
        let mut got = None;
        self.recv_batch(1, |m| got = Some(m.to_message()))?;
        Ok(got)
    }

    /// Hands up to `max` complete messages waiting now to `f`, in stream
    /// order, without blocking, and returns how many. Membership events
    /// come as `try_recv` returns them (kind [`MessageKind::Membership`]).
    ///
    /// A whole message (one record) is lent in place, still in the shared
    /// ring: no copy and no allocation. Fragments are reassembled per
    /// (group, source), as `try_recv` does, and the message is lent from
    /// the client's buffer. The records' space goes back to the daemon once
    /// for the batch, after the last call to `f`: one store of the ring's
    /// tail and one check whether the daemon waits for room (a fence; a
    /// system call only when it does).
    ///
    /// When nothing is delivered the control socket is read (notices, a
    /// hang-up: `Ok(0)` or the connection's end, as `try_recv` answers
    /// `None` or an error); a batch that delivered does not read it. A ring
    /// found corrupt after some messages were delivered ends the batch with
    /// their count; the error is sticky, so the next call reports it.
    /// `max` 0 does nothing.
    pub fn recv_batch(
        &mut self,
        max: usize,
        mut f: impl FnMut(MessageRef<'_>),
    ) -> Result<usize, Error> {
        let mut delivered = 0;
        let mut failure = None;
        // Read once per call, at the first stamped message.
        let mut read_at = 0;
        while delivered < max {
            let rec = match self.sub.peek() {
                Ok(Some(rec)) => rec,
                Ok(None) => break,
                Err(c) => {
                    failure = Some(c);
                    break;
                }
            };
            let RecordHeader {
                group,
                source,
                flags,
                stamp,
            } = rec.header;
            let mut hop = self.read_hop.as_deref_mut();
            let mut lend = |kind, data| {
                f(MessageRef {
                    kind,
                    group,
                    source,
                    data,
                })
            };
            if flags & BATCH != 0 {
                // A batched frame's messages, lent one by one from the
                // record (each timed as read); it leaves the ring once the
                // last has been.
                while delivered < max {
                    match batch::next(rec.payload, self.batch_at) {
                        Ok(Some((data, next))) => {
                            time_read(hop.as_deref_mut(), stamp, &mut read_at);
                            lend(MessageKind::Data, data);
                            delivered += 1;
                            self.batch_at = next;
                        }
                        Ok(None) => break,
                        Err(c) => {
                            failure = Some(c);
                            break;
                        }
                    }
                }
                // `max` reached before its last message: the record stays
                // for the next call.
                if failure.is_some() || self.batch_at < rec.payload.len() {
                    break;
                }
                self.batch_at = 0;
            } else {
                time_read(hop, stamp, &mut read_at);
                if let Some(done) = reassemble(&mut self.partial, rec) {
                    let data = done.bytes();
                    let kind = if flags & EVENT != 0 {
                        drop_broken_partials(&mut self.partial, group, data);
                        MessageKind::Membership
                    } else {
                        MessageKind::Data
                    };
                    lend(kind, data);
                    delivered += 1;
                }
            }
            // Peeked just above, so this consumes that record.
            if let Err(c) = self.sub.pop_deferred() {
                failure = Some(c);
                break;
            }
        }
        if self.sub.pending_release() {
            self.sub.release();
            self.sub.wake_producer();
        }
        if delivered > 0 {
            return Ok(delivered);
        }
        if let Some(c) = failure {
            return Err(c.into());
        }
        // Nothing delivered: look at the control socket (notices, hang-up).
        if max > 0 {
            self.drain_control();
            self.check_open()?;
        }
        Ok(0)
    }

    /// As [`Client::recv_batch`], but when no message is there waits for
    /// one, up to `timeout` (`None`: for ever), sleeping on the wake-up
    /// eventfd; `Ok(0)` when the time ran out.
    pub fn recv_batch_timeout(
        &mut self,
        max: usize,
        timeout: Option<Duration>,
        f: impl FnMut(MessageRef<'_>),
    ) -> Result<usize, Error> {
        self.recv_batch_until(max, timeout.map(|t| now() + t), f)
    }

    /// Waits for the next message (sleeping on the wake-up eventfd).
    pub fn recv(&mut self) -> Result<Message, Error> {
        loop {
            if let Some(m) = self.recv_until(None)? {
                return Ok(m);
            }
        }
    }

    /// Waits up to `t` for the next message.
    pub fn recv_timeout(&mut self, t: Duration) -> Result<Option<Message>, Error> {
        self.recv_until(Some(now() + t))
    }

    fn recv_until(&mut self, deadline: Option<Instant>) -> Result<Option<Message>, Error> {
        let mut got = None;
        self.recv_batch_until(1, deadline, |m| got = Some(m.to_message()))?;
        Ok(got)
    }

    fn recv_batch_until(
        &mut self,
        max: usize,
        deadline: Option<Instant>,
        mut f: impl FnMut(MessageRef<'_>),
    ) -> Result<usize, Error> {
        if max == 0 {
            return Ok(0);
        }
        loop {
            let n = self.recv_batch(max, &mut f)?;
            if n > 0 {
                return Ok(n);
            }
            if self.sub.prepare_sleep()? {
                let r = self.wait(deadline);
                self.sub.finish_sleep();
                if r? {
                    return self.recv_batch(max, &mut f);
                }
            }
        }
    }

    /// Waits up to `t` for a control message (a notice, usually) to arrive;
    /// true if one did. Deliveries waiting in the ring are left there.
    pub fn wait_notice(&mut self, t: Duration) -> Result<bool, Error> {
        self.drain_control();
        if !self.notices.is_empty() {
            return Ok(true);
        }
        self.check_open()?;
        let mut pfd = [sys::pollin(self.sock.as_raw_fd())];
        sys::poll(&mut pfd, Some(t)).map_err(io_err)?;
        self.drain_control();
        self.check_open()?;
        Ok(!self.notices.is_empty())
    }

    /// Notices received so far (view changes, cut-off, shutdown).
    pub fn notices(&mut self) -> Vec<Notice> {
        self.drain_control();
        self.notices.drain(..).collect()
    }

    fn check_open(&self) -> Result<(), Error> {
        match &self.closed {
            Some(c) => Err(c.error()),
            None => Ok(()),
        }
    }

    fn note(&mut self, n: Notice) {
        match &n {
            Notice::CutOff { reason } => self.closed = Some(Closed::CutOff(reason.clone())),
            Notice::Shutdown { reason } => {
                self.closed = Some(Closed::Gone(format!("mcastd is shutting down: {reason}")))
            }
            Notice::ViewChanged { .. } | Notice::Error { .. } => {}
        }
        self.notices.push_back(n);
    }

    /// Reads every control message queued, without blocking.
    fn drain_control(&mut self) {
        while let Ok(Some(m)) = self.read_control(Some(now())) {
            match m {
                ServerMessage::Notice(n) => self.note(n),
                ServerMessage::Response { .. } => {}
            }
        }
    }

    /// One control message; `Ok(None)` if none came by `deadline`. A closed
    /// connection sets `closed` and is returned as an error.
    fn read_control(&mut self, deadline: Option<Instant>) -> Result<Option<ServerMessage>, Error> {
        if let Some(Closed::Gone(_)) = &self.closed {
            self.check_open()?;
        }
        loop {
            let nonblocking = deadline.is_some_and(|d| d <= now());
            if !nonblocking {
                let mut pfd = [sys::pollin(self.sock.as_raw_fd())];
                let left = deadline.map(|d| d.saturating_duration_since(now()));
                sys::poll(&mut pfd, left).map_err(io_err)?;
            }
            match sys::recv_msg(self.sock.as_raw_fd(), &mut self.buf, true) {
                Ok(None) if nonblocking => return Ok(None),
                Ok(None) => continue,
                Ok(Some(r)) if r.full_len == 0 => {
                    if !matches!(self.closed, Some(Closed::CutOff(_))) {
                        self.closed = Some(Closed::Gone("mcastd closed the connection".into()));
                    }
                    return Err(self.closed.as_ref().expect("just set").error());
                }
                Ok(Some(r)) if r.truncated => {
                    return Err(Error::Protocol(format!(
                        "{}-byte control message exceeds the {MAX_REPLY}-byte limit",
                        r.full_len
                    )))
                }
                Ok(Some(r)) => {
                    return serde_json::from_slice(&self.buf[..r.len])
                        .map(Some)
                        .map_err(|e| Error::Protocol(format!("bad control message: {e}")));
                }
                Err(e) => {
                    if self.closed.is_none() {
                        self.closed = Some(Closed::Gone(format!("control socket: {e}")));
                    }
                    return Err(self.closed.as_ref().expect("just set").error());
                }
            }
        }
    }

    /// Sleeps on the wake-up eventfd and the control socket until either is
    /// readable or `deadline` passes. `Ok(true)` when the deadline passed.
    fn wait(&mut self, deadline: Option<Instant>) -> Result<bool, Error> {
        let left = match deadline {
            Some(d) => {
                let left = d.saturating_duration_since(now());
                if left.is_zero() {
                    return Ok(true);
                }
                Some(left)
            }
            None => None,
        };
        let mut pfd = [
            sys::pollin(self.wake.raw()),
            sys::pollin(self.sock.as_raw_fd()),
        ];
        let n = sys::poll(&mut pfd, left).map_err(io_err)?;
        if pfd[0].revents != 0 {
            self.wake.drain();
        }
        if pfd[1].revents != 0 {
            self.drain_control();
            self.check_open()?;
        }
        Ok(n == 0 && deadline.is_some_and(|d| d <= now()))
    }

    /// Members of a group, as the daemon reports them (a `Json` response).
    pub fn members(&mut self, group: &str) -> Result<serde_json::Value, Error> {
        match self.request(Request::Members {
            group: group.to_string(),
        })? {
            Response::Json(v) => Ok(v),
            other => Err(Error::Protocol(format!("expected Json, got {other:?}"))),
        }
    }
}
