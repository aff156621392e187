//! Shared test code: the namespace topology and the run scenario, generic
//! over the transport. They moved into the library (`mcast_engine::harness`)
//! so that `mcast-bench xdp` runs the same code; the tests keep their paths.
#[allow(
    unused_imports,
    reason = "each test binary uses a different part (memory.rs only the scenario)"
)]
pub use mcast_engine::harness::{netns, runs, scenario};
