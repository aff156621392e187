//! The real-kernel harness, shared by the namespace tests and
//! `mcast-bench xdp`: the namespace topology ([`netns`]), the
//! run scenario generic over the transport ([`scenario`]) and running it on
//! the topology ([`runs`]).
//!
//! It lives in the library (not in `tests/`) so that the benchmark binary can
//! build the same topology and run the same scenario the tests check. It
//! creates network namespaces only and never touches an interface of the root
//! namespace.
pub use mcast_netns as netns;
pub mod runs;
pub mod scenario;
