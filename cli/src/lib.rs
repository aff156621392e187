//! mcastd's configuration and the `mcast doctor` checks.
//!
//! - [`config`]: the TOML file `mcastd` reads (`/etc/mcastd.toml`), its
//!   defaults, command-line overrides and validation with errors that name the
//!   file, the key and the fix.
//! - [`doctor`]: read-only checks of this machine and one interface (kernel,
//!   capabilities, RLIMIT_MEMLOCK, the embedded XDP object, the interface, an
//!   XDP program already attached, bpffs, the control socket's directory).
//!
//! - [`daemon`]: mcastd's core: the engine, the group service, the links
//!   between daemons and the local clients (docs/mcastd.md).
//! - [`keys`]: the cluster key files (`mcast keygen`, and their reading and
//!   permission checks at mcastd's start).
//! - [`links`]: what travels on the daemons' unicast links.
//! - [`log`]: structured `key=value` logs.
//! - [`metrics`]: the counters of `mcast stat` for Prometheus, over HTTP.
//! - [`stopped`]: where closed receive streams stopped (no repeats).
//! - [`stream`]: what `mcast send`/`recv` put in messages; `mcast`'s rendering.
//! - [`testbed`]: mcastd daemons in network namespaces, for tests and benchmarks.
//!
//! The daemon (`mcastd`) and the tool (`mcast`) binaries build on this library.

pub mod config;
pub mod daemon;
pub mod doctor;
pub mod epochs;
pub mod keys;
pub mod links;
pub mod log;
pub mod metrics;
pub mod render;
pub mod stopped;
pub mod stream;
pub mod testbed;
