//! The mcastd testbed (`mcast_cli::testbed`) running this package's mcastd,
//! with the three receivers every namespace test of this package uses.

use std::path::Path;

pub mod ordered;

pub use mcast_cli::testbed::*;

fn mcastd() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_mcastd"))
}

/// A cluster of four daemons, `extra` added to every node's config (e.g.
/// `slow_subscriber = "hold"`).
pub fn start(test: &str, extra: &str) -> Option<Cluster> {
    Cluster::start(mcastd(), test, 3, |_| extra.to_owned())
}

/// [`start`] with extra config lines per node.
pub fn start_with(test: &str, extra: impl Fn(u32) -> String) -> Option<Cluster> {
    Cluster::start(mcastd(), test, 3, extra)
}

/// One daemon alone (node 1, no peers), `extra` added to its config.
pub fn start_single(test: &str, extra: &str) -> Option<Cluster> {
    Cluster::start_single(mcastd(), test, extra)
}
