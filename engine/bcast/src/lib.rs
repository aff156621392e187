//! Broadcast where the fabric has no multicast (seed 003): how one member's
//! message reaches the p members of a group over point-to-point links.
//!
//! This crate owns the algorithms as *schedules*, not as I/O: a
//! [`Schedule`] says, step by step, which member sends which pieces of the
//! message to which other member ([`mod@plan`]). The schedule is checked by
//! [`check`] (a member only forwards what it holds, sends and receives at
//! most one transfer per step, and in the end every member holds the whole
//! message), priced by the α–β model of [`cost`] (α the start-up cost of one
//! transfer, β the time per byte), and chosen per message by
//! [`cost::choose`] (the group algorithm `auto`). The topology simulator that
//! runs a schedule on a switched r×c mesh with XY routing lives in
//! `mcast-sim` (`mcast_sim::topology`).
//!
//! Members are numbered 0..p in the order of the group's view (the
//! "logical linear array" of the seed); on a mesh, member `i` sits at row
//! `i / cols`, column `i % cols`.
#![forbid(unsafe_code)]

pub mod check;
pub mod cost;
pub mod plan;
pub mod relay;

pub use cost::{choose, Link, Model};
pub use plan::{plan, Algorithm, PlanError, Schedule, Shape, Transfer};
