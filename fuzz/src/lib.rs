//! Fuzz targets for every parser that reads bytes another party wrote
//! (issue 23): one function per target, each feeding arbitrary bytes to
//! the real parser and asserting what must hold of its answer. A target
//! panics exactly when an invariant breaks, so the same functions serve
//! the AFL harnesses (`src/bin`, feature `afl`, `scripts/fuzz.sh`) and the
//! smoke test that every `cargo test` runs (`tests/smoke.rs`).
//!
//! | target | parser | asserts |
//! |---|---|---|
//! | [`frame`] | `mcast_wire::Frame::new_checked` | no panic; a checked frame's accessors agree with its header, its payload lies inside the buffer, and emitting that header in front of that payload gives back the same bytes |
//! | [`nak_ranges`] | `mcast_wire::RangeList::parse` | accepts exactly the payloads the contract allows; emit → parse is the identity; lists built by `push_seq` stay bounded and cover what they took |
//! | [`group_message`] | `mcast_groups::wire::Message::decode` | no panic; what decodes encodes to as many bytes, which decode to the same message |
//! | [`link_message`] | `mcast_cli::links::LinkMessage::decode` | the same, and a group message inside is checked as [`group_message`] |
//! | [`ipc_request`] | `mcast_ipc::proto::decode_request` (the daemon) | what decodes re-encodes no longer than it came and decodes to the same request; an error keeps only an id the bytes really hold |
//! | [`ipc_reply`] | `ServerMessage` decoding (the client library) | what decodes re-encodes to the same message |
//! | [`auth_trailer`] | `mcast_auth::open` and `ReplayWindow` | no panic; a frame that opens seals again (same key, session, counter) to the same bytes; the window agrees with a model of every (session, counter) accepted |
//! | [`batch_record`] | `mcast_ipc::batch::next` (the client library) | no panic; each message lies in the record right after its length; the record reads whole exactly when its messages, written out again, rebuild it |
//! | [`ring_reader`] | `mcast_ipc::ring::Consumer` (and `Producer`) | a scripted producer and a hostile peer scribbling on indices, record headers and lengths: never a panic or a read outside the data area, records intact while nobody scribbles, corruption reported as a sticky error |
//!
//! [`seeds`] makes each target's starting corpus from the real encoders;
//! [`mutate`] is the seeded mutator of the smoke test.

mod auth;
mod batch;
mod ipc;
mod messages;
pub mod mutate;
mod ring;
pub mod seeds;
mod wire;

pub use auth::auth_trailer;
pub use batch::batch_record;
pub use ipc::{ipc_reply, ipc_request};
pub use messages::{group_message, link_message};
pub use ring::ring_reader;
pub use wire::{frame, nak_ranges};

/// One fuzz target: its name (that of its harness binary and corpus
/// directory) and its function.
pub type Target = (&'static str, fn(&[u8]));

/// Every target, in the order of the table above.
pub const TARGETS: &[Target] = &[
    ("frame", frame),
    ("nak_ranges", nak_ranges),
    ("group_message", group_message),
    ("link_message", link_message),
    ("ipc_request", ipc_request),
    ("ipc_reply", ipc_reply),
    ("ring_reader", ring_reader),
    ("auth_trailer", auth_trailer),
    ("batch_record", batch_record),
];
