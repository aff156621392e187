//! The AF_XDP data path: the XDP steering program's loader and the AF_XDP
//! socket (UMEM and rings).
//!
//! - [`loader`]: loads `ebpf/steer.bpf.c` (compiled by `build.rs` with clang),
//!   attaches it to one interface and manages its maps (subscribed group MACs,
//!   the XSKMAP, counters, the drop-ratio testing knob).
//! - [`xsk`]: one AF_XDP socket on (interface, queue) with its own UMEM, the
//!   fill/completion/RX/TX rings and exact per-frame accounting.
//! - [`sys`]: the few raw syscalls (rlimit, capabilities, mmap, sendto, poll).
//!
//! This crate performs I/O on the interfaces it is given and nothing else: it
//! never configures interfaces, never chooses one, and never attaches to an
//! interface it was not named. It knows nothing of the protocol above the
//! Ethernet header. Unsafe code lives only in [`sys`] and [`xsk`]; everything
//! else denies it.
#![deny(unsafe_code)]

pub mod loader;
pub mod sys;
pub mod xsk;

pub use loader::{AttachMode, AttachedMode, SteeringCounters, SteeringError, XdpSteering};
pub use xsk::{
    BindMode, FrameCounts, FrameState, RxFrame, SocketStats, TxFrame, XskConfig, XskError,
    XskSocket, ZeroCopy,
};
