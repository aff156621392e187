//! The namespace test network (`mcast-netns`), shared with mcast-engine's tests
//! and `mcast-bench xdp`.
#![allow(dead_code, unused_imports)]

pub use mcast_netns::*;
