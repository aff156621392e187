//! `libmcast`: the C ABI over the `mcastd` client library
//! ([`mcast_ipc::Client`]). The C declarations are in `include/mcast.h`,
//! written by hand; `tests/header.rs` checks that they and the exports agree.
//!
//! - This module: the return codes, their mapping from [`mcast_ipc::Error`],
//!   and the state behind an `mcast_client *` (the Rust client, the message
//!   a too-small buffer could not take, the notices not yet handed over, the
//!   last error's words). Safe code.
//! - [`event`]: membership events and notices as C sees them (kinds, the
//!   event's JSON parsed into counts and node lists). Safe code.
//! - [`capi`]: the `extern "C"` functions. The only module allowed unsafe
//!   code: it turns raw pointers into references and slices after checking
//!   them for NULL, and keeps panics from unwinding into C.
#![deny(unsafe_code)]

use std::cell::RefCell;
use std::collections::VecDeque;
use std::ffi::{c_int, CStr};
use std::time::{Duration, Instant};

use mcast_ipc::{Client, Error, Message, MessageKind, Notice};

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
    /// too small); the next receive returns it first.
    pub pending: Option<Message>,
    /// Notices taken from the client but not yet handed over by
    /// `mcast_next_notice` (the client hands over all it has at once).
    pub notices: VecDeque<Notice>,
    /// The last failed call's message, empty if none failed yet.
    pub last_error: String,
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

    /// The next message: the pending one, else one from the ring, waiting
    /// as `timeout_ms` says (0: not at all, -1: forever, else milliseconds).
    /// With `events` false, membership events are skipped (a pending one
    /// too), as `mcast_recv` does. It stays pending until
    /// [`McastClient::take_pending`].
    pub fn next_message(&mut self, timeout_ms: c_int, events: bool) -> Result<&Message, Fail> {
        if !events
            && self
                .pending
                .as_ref()
                .is_some_and(|m| m.kind == MessageKind::Membership)
        {
            self.pending = None;
        }
        if self.pending.is_none() {
            let deadline = match timeout_ms {
                -1 => None,
                t if t >= 0 => Some(now() + Duration::from_millis(t as u64)),
                t => {
                    return Err(Fail::inval(format!(
                        "timeout_ms {t}: use -1 (forever), 0 (do not wait) or a positive count"
                    )))
                }
            };
            let m = loop {
                let m = match deadline {
                    None => self.client.recv()?,
                    Some(_) if timeout_ms == 0 => self
                        .client
                        .try_recv()?
                        .ok_or_else(|| Fail::new(MCAST_EAGAIN, "no message waiting"))?,
                    Some(d) => self
                        .client
                        .recv_timeout(d.saturating_duration_since(now()))?
                        .ok_or_else(|| {
                            Fail::new(
                                MCAST_ETIMEDOUT,
                                format!("no message within {timeout_ms} ms"),
                            )
                        })?,
                };
                if events || m.kind == MessageKind::Data {
                    break m;
                }
            };
            self.pending = Some(m);
        }
        Ok(self.pending.as_ref().expect("just filled"))
    }

    /// Drops the pending message once it has been handed over.
    pub fn take_pending(&mut self) -> Option<Message> {
        self.pending.take()
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
