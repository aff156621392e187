//! `mcast-bench soak client` and `mcast-bench soak check`: the traffic and
//! the checker of `scripts/soak.sh` (issue 23 part 5).
//!
//! A **client** is one connection to one mcastd, a member of one group. With
//! `--publish ID` it publishes numbered messages at `--rate`; every client
//! checks every message it receives and writes what it found as JSON lines
//! to `--out`. A long-lived client reconnects when its daemon dies or cuts
//! it off (a new *session*: a new publisher incarnation, a fresh checker);
//! a churn client (`--duration`) ends instead.
//!
//! A message is [`HEADER`] bytes and a body: the magic `SOAK`, a tag of the
//! group's name, the publisher's node, its id, its incarnation (one per
//! session), the counter (0, 1, 2, ... per incarnation), the body length and
//! an FNV-1a checksum over everything else. A publisher `K` is (id,
//! incarnation).
//!
//! What the checker holds a subscriber's stream to, per publisher `K` on
//! node `N` (docs/mcastd.md, "Late join", "Membership events in the
//! stream", "When a sender leaves"; docs/testing.md "Soak"):
//! - every message is intact (checksum, length), of this group, and tagged
//!   by the daemon with the node that published it;
//! - counters from `K` only grow, for the whole session, across every view
//!   change and across this node's own eviction and rejoin: a counter at or
//!   below the last one is a repeat or a reordering;
//! - the first message from `K` may be any counter (the join point), and so
//!   may the first one after a *break*: a membership event naming `N` gone
//!   or joined, a `skipped` event for `N` (a flush's jump), or this node's
//!   eviction (`evicted`). Anywhere else, the next counter from `K` is the
//!   last plus one: a larger one is a loss;
//! - survivors agree: at the event that names `N` gone, each subscriber
//!   writes the last counter of `K` it delivered (a *cut*); `check` compares
//!   the cuts of one departure (group, view epoch, `K`), leaving out a
//!   subscriber whose node was itself evicted within 3 s (not a survivor)
//!   and departures whose flush a daemon logged as timed out (documented:
//!   survivors may then differ);
//! - liveness at the end: a client still running at the end that had been
//!   running for 10 s has received, from each publisher of its group still
//!   running, at least what that publisher had published 3 s before the end.
//!
//! Modules: `message` (the stamp a publisher puts on each message),
//! `checker` (one subscriber session's rules), `client` (the client
//! process), `check` (the run's verdict across clients and daemon logs);
//! this file holds the commands and their arguments.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use mcast_ipc::{Client, Error as IpcError, ErrorCode, Message, MessageKind, Notice};
use mcast_proto::Rng;
use serde_json::{json, Value};

/// Bytes before a message's body.
pub const HEADER: usize = 44;
const MAGIC: &[u8; 4] = b"SOAK";
/// Detailed violation records per session; the rest are only counted.
const DETAIL_LIMIT: u64 = 100;

#[derive(Subcommand, Debug)]
pub enum SoakCommand {
    /// One client of the soak: joins GROUP through the daemon at SOCKET, publishes numbered
    /// messages with --publish, checks every message it receives; JSON lines to --out.
    Client(ClientArgs),
    /// Reads every client's records (DIR/clients/*.jsonl) and the daemons' logs
    /// (DIR/logs/*.log), prints the totals and exits 1 on any violation.
    Check(CheckArgs),
}

#[derive(Args, Debug)]
pub struct ClientArgs {
    /// The daemon's control socket.
    #[arg(long)]
    socket: PathBuf,
    /// The group to join.
    #[arg(long)]
    group: String,
    /// The node the daemon runs on (for the records).
    #[arg(long)]
    node: u32,
    /// This client's name in the records.
    #[arg(long)]
    name: String,
    /// Publish, as publisher ID (distinct per client), besides checking.
    #[arg(long, value_name = "ID")]
    publish: Option<u32>,
    /// Messages per second when publishing.
    #[arg(long, default_value_t = 100)]
    rate: u64,
    /// The largest body, bytes (sizes: 80 % up to 512, 18 % up to 4 KiB, 2 % up to this).
    #[arg(long, default_value_t = 16_384)]
    max_size: usize,
    /// End after this many seconds (a churn client); otherwise run until SIGTERM or SIGINT and
    /// reconnect whenever the daemon goes away or cuts this client off.
    #[arg(long, value_name = "SECONDS")]
    duration: Option<f64>,
    /// Leave the group explicitly before ending (otherwise just disconnect).
    #[arg(long)]
    leave: bool,
    /// Append the records here.
    #[arg(long)]
    out: PathBuf,
    /// Seed of the message sizes.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Break the rules on purpose, to show the checker catches it: every EVERY messages the
    /// publisher skips a counter (a loss) or, alternately, publishes the previous one again (a
    /// repeat). A run with this must fail.
    #[arg(long, value_name = "EVERY")]
    sabotage: Option<u64>,
}

#[derive(Args, Debug)]
pub struct CheckArgs {
    /// The soak's work directory.
    dir: PathBuf,
}

pub fn run(cmd: SoakCommand) -> Result<(), String> {
    match cmd {
        SoakCommand::Client(a) => client(&a),
        SoakCommand::Check(a) => check(&a.dir),
    }
}

/// Wall time, seconds since the epoch (the daemons' logs use the same clock).
#[allow(clippy::disallowed_methods, reason = "records carry wall time")]
fn wall() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

#[allow(clippy::disallowed_methods, reason = "the publisher paces itself")]
fn mono() -> Instant {
    Instant::now()
}

mod check;
mod checker;
mod client;
mod message;
#[cfg(test)]
mod tests;

use check::*;
use checker::*;
use client::*;
use message::*;
