//! The errors a user of the engine meets. Each message names what is missing
//! and what to do; errors of the XDP loader and the AF_XDP socket pass through
//! unchanged (they already do).

use std::fmt;
use std::io;

use mcast_xsk::{SteeringError, XskError};

/// Why the engine could not start or stopped.
#[derive(Debug)]
pub enum EngineError {
    /// The process lacks a capability.
    MissingCapability {
        operation: &'static str,
        needed: &'static str,
    },
    /// No interface of that name in this network namespace.
    NoSuchInterface(String),
    /// The XDP loader failed (attach, verifier, maps, memlock...).
    Steering(SteeringError),
    /// The AF_XDP socket failed (capability, memlock, zero-copy refused...).
    Xsk(XskError),
    /// A system call failed.
    Io {
        operation: &'static str,
        source: io::Error,
    },
    /// A configuration value is out of range or inconsistent.
    Config(String),
    /// The engine's own frame ledger disagrees with the transport's (a bug).
    Accounting(String),
}

impl fmt::Display for EngineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EngineError::MissingCapability { operation, needed } => write!(
                f,
                "{operation} needs {needed}; run as root or grant it, e.g. `setcap cap_net_raw,cap_net_admin,cap_bpf,cap_ipc_lock+ep BINARY`"
            ),
            EngineError::NoSuchInterface(name) => write!(
                f,
                "interface `{name}` does not exist in this network namespace; check `ip link show` (or `ip netns exec NS ip link show`)"
            ),
            EngineError::Steering(e) => write!(f, "{e}"),
            EngineError::Xsk(e) => write!(f, "{e}"),
            EngineError::Io { operation, source } => write!(f, "{operation} failed: {source}"),
            EngineError::Config(s) => write!(f, "invalid engine configuration: {s}"),
            EngineError::Accounting(s) => write!(f, "frame accounting broken (a bug, please report): {s}"),
        }
    }
}

impl std::error::Error for EngineError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            EngineError::Steering(e) => Some(e),
            EngineError::Xsk(e) => Some(e),
            EngineError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl From<SteeringError> for EngineError {
    fn from(e: SteeringError) -> Self {
        EngineError::Steering(e)
    }
}

impl From<XskError> for EngineError {
    fn from(e: XskError) -> Self {
        EngineError::Xsk(e)
    }
}

/// Why a message was not published.
#[derive(Debug)]
pub enum PublishError {
    /// The window (or the frame pool) is full: poll the engine and retry.
    WouldBlock,
    /// No send stream is open on this engine.
    NoSendStream,
    /// The message exceeds the configured maximum.
    TooLarge { limit: usize },
    /// The blocking variant gave up after its timeout.
    TimedOut,
    /// The engine failed while the blocking variant ran it.
    Engine(EngineError),
}

impl fmt::Display for PublishError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PublishError::WouldBlock => {
                write!(f, "the send window is full; poll the engine and retry")
            }
            PublishError::NoSendStream => {
                write!(f, "no send stream is open; call Engine::open_sender first")
            }
            PublishError::TooLarge { limit } => write!(
                f,
                "message larger than the configured maximum of {limit} bytes"
            ),
            PublishError::TimedOut => write!(f, "the send window stayed full until the timeout"),
            PublishError::Engine(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for PublishError {}
