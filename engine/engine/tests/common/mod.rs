//! Shared test code: the namespace topology (a copy of mcast-xsk's harness)
//! and the run scenario, generic over the transport.
pub mod netns;
pub mod runs;
pub mod scenario;
