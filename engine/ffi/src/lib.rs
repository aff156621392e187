//! `libmcast`: the C ABI over the `mcastd` client library
//! ([`mcast_ipc::Client`]). The C declarations are in `include/mcast.h`,
//! written by hand; `tests/header.rs` checks that they and the exports agree.
//!
//! - This module: the return codes, their mapping from [`mcast_ipc::Error`],
//!   the plain structs of the batch calls (`mcast_msg`,
//!   `mcast_message_view`), and the state behind an `mcast_client *` (the
//!   Rust client, the message a too-small buffer could not take, the notices
//!   not yet handed over, the last error's words) with the receives over it:
//!   into the caller's buffer straight from the ring, or lent to a callback.
//!   Safe code.
//! - [`event`]: membership events and notices as C sees them (kinds, the
//!   event's JSON parsed into counts and node lists). Safe code.
//! - [`capi`]: the `extern "C"` functions. The only module allowed unsafe
//!   code: it turns raw pointers into references and slices after checking
//!   them for NULL, and keeps panics from unwinding into C.
#![deny(unsafe_code)]

use std::cell::RefCell;
use std::collections::VecDeque;
use std::ffi::{c_int, c_void, CStr};
use std::time::{Duration, Instant};

use mcast_ipc::{Client, Error, Message, MessageKind, MessageRef, Notice};

#[allow(unsafe_code)]
pub mod capi;
pub mod event;
pub use capi::*;
pub use event::*;

/// Success.
pub const MCAST_OK: c_int = 0;
/// A NULL pointer, a string that is not UTF-8, or an argument out of range.
pub const MCAST_EINVAL: c_int = -1;
/// Nothing listens at the socket path: mcastd is not running there.
pub const MCAST_ENOTRUNNING: c_int = -2;
/// The daemon or the socket's file mode refused this user.
pub const MCAST_EPERM: c_int = -3;
/// The publication ring is full now.
pub const MCAST_EWOULDBLOCK: c_int = -4;
/// A blocking call's timeout passed.
pub const MCAST_ETIMEDOUT: c_int = -5;
/// A non-blocking receive found no message.
pub const MCAST_EAGAIN: c_int = -6;
/// The message is larger than the daemon accepts.
pub const MCAST_ETOOLARGE: c_int = -7;
/// The receive buffer is smaller than the waiting message.
pub const MCAST_ETOOSMALL: c_int = -8;
/// The daemon cut this client off (too slow to read, typically).
pub const MCAST_ECUTOFF: c_int = -9;
/// The connection to the daemon is gone.
pub const MCAST_EDISCONNECTED: c_int = -10;
/// The daemon answered a request with an error.
pub const MCAST_EDAEMON: c_int = -11;
/// The daemon sent something this library does not understand.
pub const MCAST_EPROTO: c_int = -12;
/// Any other OS error, or an internal failure of the library.
pub const MCAST_EIO: c_int = -13;

/// The C code of a client library error.
pub fn code_of(e: &Error) -> c_int {
    match e {
        Error::NotRunning { .. } => MCAST_ENOTRUNNING,
        Error::PermissionDenied(_) => MCAST_EPERM,
        Error::WouldBlock => MCAST_EWOULDBLOCK,
        Error::TimedOut => MCAST_ETIMEDOUT,
        Error::TooLarge { .. } => MCAST_ETOOLARGE,
        Error::CutOff { .. } => MCAST_ECUTOFF,
        Error::Disconnected { .. } => MCAST_EDISCONNECTED,
        Error::Daemon {
            code: mcast_ipc::ErrorCode::PermissionDenied,
            ..
        } => MCAST_EPERM,
        Error::Daemon { .. } => MCAST_EDAEMON,
        Error::Protocol(_) => MCAST_EPROTO,
        Error::Io(_) => MCAST_EIO,
    }
}

/// A short, static description of a return code (`mcast_strerror`).
pub fn strerror(code: c_int) -> &'static CStr {
    match code {
        MCAST_OK => c"success",
        MCAST_EINVAL => c"invalid argument",
        MCAST_ENOTRUNNING => c"mcastd is not running",
        MCAST_EPERM => c"permission denied",
        MCAST_EWOULDBLOCK => c"publication ring full, would block",
        MCAST_ETIMEDOUT => c"timed out",
        MCAST_EAGAIN => c"no message waiting",
        MCAST_ETOOLARGE => c"message too large",
        MCAST_ETOOSMALL => c"buffer too small for the message",
        MCAST_ECUTOFF => c"cut off by mcastd",
        MCAST_EDISCONNECTED => c"disconnected from mcastd",
        MCAST_EDAEMON => c"mcastd refused the request",
        MCAST_EPROTO => c"protocol error talking to mcastd",
        MCAST_EIO => c"I/O error",
        _ => c"unknown mcast error code",
    }
}

/// A failed call: its code and the words for `mcast_last_error`.
#[derive(Debug)]
pub struct Fail {
    /// One of the negative `MCAST_E*` codes.
    pub code: c_int,
    /// What went wrong, for a person.
    pub message: String,
}

impl Fail {
    /// A failure with a code and a message.
    pub fn new(code: c_int, message: impl Into<String>) -> Fail {
        Fail {
            code,
            message: message.into(),
        }
    }

    /// An invalid argument, `what` saying which and why.
    pub fn inval(what: impl Into<String>) -> Fail {
        Fail::new(MCAST_EINVAL, what)
    }
}

impl From<Error> for Fail {
    fn from(e: Error) -> Fail {
        Fail::new(code_of(&e), e.to_string())
    }
}

/// What an `mcast_client *` points to.
#[derive(Debug)]
pub struct McastClient {
    /// The connection.
    pub client: Client,
    /// A message received but not yet handed over (the caller's buffer was
    /// too small): a copy out of the ring, the next receive returns it
    /// first. The only message this library copies on receiving one record.
    pub pending: Option<Message>,
    /// Notices taken from the client but not yet handed over by
    /// `mcast_next_notice` (the client hands over all it has at once).
    pub notices: VecDeque<Notice>,
    /// The last failed call's message, empty if none failed yet.
    pub last_error: String,
}

/// One message to publish (`mcast_msg`): `len` bytes at `data` (which may
/// be NULL when `len` is 0).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct McastMsg {
    /// The bytes.
    pub data: *const c_void,
    /// How many.
    pub len: usize,
}

/// One part of a scattering (`mcast_part`): `len` bytes at `data` (NULL
/// when `len` is 0) for the member `member` of node `node`, as the group's
/// view lists it.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct McastPart {
    /// The member's node.
    pub node: u32,
    /// The member's id on its node.
    pub member: u64,
    /// The bytes.
    pub data: *const c_void,
    /// How many.
    pub len: usize,
}

/// The last hop of the messages a client read, with the daemon tracing
/// (`struct mcast_hop`): the client library's own summary, whose layout is
/// C's (six `u64`, in the header's order).
pub type McastHop = mcast_ipc::trace::HopSummary;

/// A message lent to an `mcast_recv_batch` callback
/// (`mcast_message_view`): `data` is valid only during the call.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct McastMessageView {
    /// The bytes (not NULL, but not to be read when `len` is 0).
    pub data: *const c_void,
    /// How many.
    pub len: usize,
    /// Its group's number.
    pub group: u32,
    /// Its sender (0 for a membership event).
    pub source: u32,
    /// `MCAST_MSG_DATA` or `MCAST_MSG_MEMBERSHIP`.
    pub kind: c_int,
}

/// `mcast_recv_cb`: what `mcast_recv_batch` calls with each message.
pub type McastRecvCallback =
    Option<unsafe extern "C" fn(arg: *mut c_void, m: *const McastMessageView)>;

/// What a receive found: the message's numbers and length (longer than the
/// caller's buffer: it was kept, `MCAST_ETOOSMALL`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Received {
    /// Data or a membership event.
    pub kind: MessageKind,
    /// Its group.
    pub group: u32,
    /// Its sender.
    pub source: u32,
    /// Its length in bytes.
    pub len: usize,
}

impl Received {
    fn of(kind: MessageKind, group: u32, source: u32, len: usize) -> Received {
        Received {
            kind,
            group,
            source,
            len,
        }
    }
}

/// How long a receive may wait, from its `timeout_ms`.
#[derive(Debug, Clone, Copy)]
enum Deadline {
    /// 0: take what is there, `MCAST_EAGAIN` if nothing.
    Now,
    /// -1: wait for ever.
    Never,
    /// Wait until then, `MCAST_ETIMEDOUT` after.
    At(Instant, c_int),
}

impl Deadline {
    fn of(timeout_ms: c_int) -> Result<Deadline, Fail> {
        match timeout_ms {
            0 => Ok(Deadline::Now),
            -1 => Ok(Deadline::Never),
            t if t > 0 => Ok(Deadline::At(now() + Duration::from_millis(t as u64), t)),
            t => Err(Fail::inval(format!(
                "timeout_ms {t}: use -1 (forever), 0 (do not wait) or a positive count"
            ))),
        }
    }

    /// Up to `max` messages from the ring to `f`, waiting for the first
    /// until the deadline: how many, or the code saying none came.
    fn receive(
        self,
        client: &mut Client,
        max: usize,
        f: impl FnMut(MessageRef<'_>),
    ) -> Result<usize, Fail> {
        let n = match self {
            Deadline::Now => client.recv_batch(max, f)?,
            Deadline::Never => client.recv_batch_timeout(max, None, f)?,
            Deadline::At(d, _) => {
                client.recv_batch_timeout(max, Some(d.saturating_duration_since(now())), f)?
            }
        };
        match self {
            _ if n > 0 => Ok(n),
            Deadline::At(_, ms) => Err(Fail::new(
                MCAST_ETIMEDOUT,
                format!("no message within {ms} ms"),
            )),
            _ => Err(Fail::new(MCAST_EAGAIN, "no message waiting")),
        }
    }
}

/// The client's clock, for a receive's deadline across skipped events.
#[allow(
    clippy::disallowed_methods,
    reason = "a blocking call's timeout is wall time, as in mcast-ipc's client"
)]
fn now() -> Instant {
    Instant::now()
}

impl McastClient {
    /// Wraps a connected client.
    pub fn new(client: Client) -> McastClient {
        McastClient {
            client,
            pending: None,
            notices: VecDeque::new(),
            last_error: String::new(),
        }
    }

    /// Receives the next message for `mcast_recv` / `mcast_recv_ex`: the
    /// pending one first, else one from the ring, waiting as `timeout_ms`
    /// says (0: not at all, -1: forever, else milliseconds). With `events`
    /// false, membership events are skipped (a pending one too), as
    /// `mcast_recv` does.
    ///
    /// A message of at most `cap` bytes is handed to `copy` (straight from
    /// the shared ring when it is one record: no allocation) and consumed.
    /// A longer one is kept pending (copied once, here) for the next
    /// receive; the caller sees `len > cap` in what comes back.
    pub fn recv_into(
        &mut self,
        timeout_ms: c_int,
        events: bool,
        cap: usize,
        mut copy: impl FnMut(&[u8]),
    ) -> Result<Received, Fail> {
        if !events
            && self
                .pending
                .as_ref()
                .is_some_and(|m| m.kind == MessageKind::Membership)
        {
            self.pending = None;
        }
        if let Some(m) = &self.pending {
            let r = Received::of(m.kind, m.group, m.source, m.data.len());
            if m.data.len() <= cap {
                copy(&m.data);
                self.pending = None;
            }
            return Ok(r);
        }
        let deadline = Deadline::of(timeout_ms)?;
        loop {
            let mut got = None;
            let pending = &mut self.pending;
            deadline.receive(&mut self.client, 1, |m| {
                if !events && m.kind == MessageKind::Membership {
                    return;
                }
                if m.data.len() <= cap {
                    copy(m.data);
                } else {
                    *pending = Some(m.to_message());
                }
                got = Some(Received::of(m.kind, m.group, m.source, m.data.len()));
            })?;
            if let Some(r) = got {
                return Ok(r);
            }
        }
    }

    /// Hands up to `max` messages and events to `f` for `mcast_recv_batch`:
    /// the pending one first (then only what is already in the ring, without
    /// waiting), else waiting for the first as `timeout_ms` says. Whole
    /// messages are lent from the shared ring, with no copy. Returns how
    /// many `f` got: at least one.
    pub fn recv_batch(
        &mut self,
        max: usize,
        timeout_ms: c_int,
        mut f: impl FnMut(MessageRef<'_>),
    ) -> Result<usize, Fail> {
        if max == 0 {
            return Err(Fail::inval("max is 0: room for no message"));
        }
        let deadline = Deadline::of(timeout_ms)?;
        let Some(m) = self.pending.take() else {
            return deadline.receive(&mut self.client, max, f);
        };
        f(MessageRef {
            kind: m.kind,
            group: m.group,
            source: m.source,
            data: &m.data,
        });
        // A failure after the pending message was handed over is sticky in
        // the client (a corrupt ring, a closed connection): the next call
        // reports it, as the Rust client's batches do.
        Ok(1 + self.client.recv_batch(max - 1, f).unwrap_or(0))
    }
    /// The next notice, without waiting: `MCAST_EAGAIN` if none is there,
    /// the connection's end (`MCAST_ECUTOFF`, `MCAST_EDISCONNECTED`) once
    /// every notice before it has been handed over.
    pub fn next_notice(&mut self) -> Result<Notice, Fail> {
        if self.notices.is_empty() {
            // Reads what the control socket holds; an error only when the
            // connection is closed and no notice is left.
            self.client.wait_notice(Duration::ZERO)?;
            self.notices.extend(self.client.notices());
        }
        self.notices
            .pop_front()
            .ok_or_else(|| Fail::new(MCAST_EAGAIN, "no notice waiting"))
    }
}

thread_local! {
    /// The last error of a call that had no client to keep it in
    /// (`mcast_connect`, or a NULL client): `mcast_last_error(NULL, ...)`.
    static THREAD_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

/// Records `message` as this thread's client-less last error.
pub fn set_thread_error(message: String) {
    THREAD_ERROR.with(|e| *e.borrow_mut() = message);
}

/// This thread's client-less last error.
pub fn thread_error() -> String {
    THREAD_ERROR.with(|e| e.borrow().clone())
}

/// The words of a caught panic's payload.
pub fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    let what = if let Some(s) = p.downcast_ref::<&str>() {
        s
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.as_str()
    } else {
        "unknown panic"
    };
    format!("internal error in libmcast (please report): {what}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcast_ipc::ErrorCode;

    #[test]
    fn every_client_error_has_its_code() {
        let io = || std::io::Error::from(std::io::ErrorKind::NotFound);
        let cases = [
            (
                Error::NotRunning {
                    path: "/x".into(),
                    source: io(),
                },
                MCAST_ENOTRUNNING,
            ),
            (Error::PermissionDenied("no".into()), MCAST_EPERM),
            (Error::WouldBlock, MCAST_EWOULDBLOCK),
            (Error::TimedOut, MCAST_ETIMEDOUT),
            (Error::TooLarge { limit: 1 }, MCAST_ETOOLARGE),
            (
                Error::CutOff {
                    reason: "slow".into(),
                },
                MCAST_ECUTOFF,
            ),
            (
                Error::Disconnected {
                    reason: "gone".into(),
                },
                MCAST_EDISCONNECTED,
            ),
            (
                Error::Daemon {
                    code: ErrorCode::UnknownGroup,
                    message: "no".into(),
                },
                MCAST_EDAEMON,
            ),
            (
                Error::Daemon {
                    code: ErrorCode::PermissionDenied,
                    message: "uid 5 not in allow_uids".into(),
                },
                MCAST_EPERM,
            ),
            (Error::Protocol("?".into()), MCAST_EPROTO),
            (Error::Io(io()), MCAST_EIO),
        ];
        for (e, code) in cases {
            let f = Fail::from(e);
            assert_eq!(f.code, code, "{}", f.message);
            assert!(!f.message.is_empty());
        }
    }

    #[test]
    fn codes_have_distinct_descriptions() {
        let words: std::collections::BTreeSet<_> = (MCAST_EIO..=MCAST_OK).map(strerror).collect();
        assert_eq!(words.len(), 14);
        assert_eq!(strerror(1), c"unknown mcast error code");
        assert_eq!(strerror(MCAST_EIO - 1), c"unknown mcast error code");
    }
}
