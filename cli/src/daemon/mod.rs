//! `mcastd`'s core, wired together: one engine (the NIC queue and every
//! group's streams), the group service (registry, group agents, this node's
//! operating agent), the daemons' unicast links, and the local clients
//! served over shared memory. Single-threaded: [`Daemon::run_once`] does one
//! round of everything and sleeps on the transport and the clients'
//! descriptors at once.
//!
//! This file owns the wiring and the loop, nothing else. Each concern has a
//! module of its own (docs/mcastd.md, "Architecture"):
//!
//! | module | owns |
//! |---|---|
//! | `barrier` | each group's barrier: arrivals up the daemons' tree, the release down it |
//! | `clients` | the client service: connections, requests and replies, publication rings, lingering leaves, slow subscribers |
//! | `deliver` | the engine's deliveries: link messages to `peers`, group data through the group's mode into subscription rings |
//! | `peers` | the links between daemons: their send queues, reassembly, epochs, dispatch of what arrives |
//! | `liveness` | failure detection, eviction and rejoin |
//! | `membership` | group events and views: the groups this node carries and their local members |
//! | `streams` | receive streams: stream starts, start requests, stopped positions |
//! | `stuck` | receive streams stuck behind their sender's window, and asking their start again |
//! | `tree` | each MAK group's feedback tree: computed from the view, rooted at the agent, installed in the engine |
//! | `flush` | what the survivors of a departed sender agree on, and the frames kept for it |
//! | [`mode`] | the seam for group modes: how a group sends, acknowledges and delivers |
//! | `rekey` | reading the key files again on SIGHUP (a key rotation) |
//! | `stats` | the daemon's counters and everything `mcast stat` shows |
//!
//! Modules reach each other's state only through `Daemon` methods named in
//! their own module (several `impl Daemon` blocks), never by reaching into a
//! sibling's private struct from a third module.
//!
//! Data paths and their copies (docs/mcastd.md):
//! - publish: the client copies its message into its publication ring (1);
//!   the daemon copies it from the ring into UMEM frames (2), which the
//!   protocol then sends and resends in place.
//! - receive: the engine hands each fragment in place in its UMEM frame; the
//!   daemon copies it straight into each local subscriber's ring (1 per
//!   subscriber); the client library copies it out of the ring into the
//!   message it returns (2), or lends it in place.
//! - local subscribers of a local publisher get the message from the
//!   publication ring directly (one copy into each ring).

mod barrier;
#[cfg(test)]
mod barrier_sweep;
mod clients;
mod deliver;
mod flush;
mod liveness;
mod membership;
pub mod mode;
mod peers;
mod rekey;
#[cfg(test)]
mod seeds;
mod stats;
mod streams;
mod stuck;
mod trace;
mod tree;

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mcast_engine::{Engine, EngineError, Fragment, Transport};
use mcast_groups::GroupService;
use mcast_ipc::{ClientId, Notice, Server};
use mcast_wire::{GroupId, NodeId};

use crate::config::Config;
use crate::links::inbox;
use crate::log::Logger;

use clients::Clients;

/// The maps the per-message paths look up (clients, groups, kept streams):
/// a fast hasher, since SipHash cost more than the rest of each lookup. Their
/// keys are numbers this daemon or the registry assigns.
pub(super) type FastMap<K, V> = foldhash::HashMap<K, V>;
use deliver::{commit_subscriptions, Sink};
use flush::FlushGlue;
use liveness::Live;
use membership::LocalGroup;
use peers::Links;
pub use stats::DaemonCounters;
use streams::Streams;

/// The daemon over transport `T`.
#[derive(Debug)]
pub struct Daemon<T: Transport> {
    cfg: Config,
    node: NodeId,
    /// This run's session epoch; a rejoin makes a new one.
    incarnation: u32,
    engine: Engine<T>,
    groups: GroupService,
    clients: Clients,
    links: Links,
    live: Live,
    /// The groups this node carries.
    /// Looked up per message published and delivered: hashed fast.
    local: FastMap<GroupId, LocalGroup>,
    streams: Streams,
    stuck: stuck::StuckWatch,
    flush: FlushGlue,
    /// Final counters of groups no longer carried, newest last.
    retired: stats::Retired,
    counters: DaemonCounters,
    /// Snapshots for the metrics server, when the configuration asks for one.
    metrics: Option<stats::MetricsFeed>,
    /// Set on SIGHUP: read the key files again (`rekey`).
    rekey: Option<rekey::Rekey>,
    log: Logger,
    shutdown: Arc<AtomicBool>,
    fds: Vec<RawFd>,
    /// The records a group's mode hands over in one call (reused).
    mode_records: mode::ModeRecords,
    /// Mode messages for groups this node does not carry yet (the view
    /// that makes it a member may still be on its way), handed to the
    /// group's mode when it starts carrying the group.
    mode_early: mode::EarlyModeMessages,
    /// Per-hop timing, with `trace = true`.
    trace: Option<Box<trace::Trace>>,
}

impl<T: Transport> Daemon<T> {
    /// A daemon over `engine` (which carries no group yet) serving `server`.
    /// `incarnation` is this run's session epoch (e.g. the start time in
    /// seconds): peers restart their link receive streams when it grows.
    pub fn new(
        cfg: Config,
        mut engine: Engine<T>,
        server: Server,
        incarnation: u32,
        log: Logger,
        shutdown: Arc<AtomicBool>,
    ) -> Result<Daemon<T>, EngineError> {
        let links = Links::open(&mut engine, &cfg, incarnation)?;
        Ok(Daemon {
            node: cfg.node,
            incarnation,
            engine,
            groups: membership::fresh_service(&cfg),
            clients: Clients::new(server),
            links,
            live: Live::new(&cfg, incarnation),
            local: FastMap::default(),
            streams: Streams::new(&cfg),
            stuck: stuck::StuckWatch::default(),
            flush: FlushGlue::default(),
            retired: stats::Retired::default(),
            counters: DaemonCounters::default(),
            metrics: None,
            rekey: None,
            log,
            shutdown,
            fds: Vec::new(),
            mode_records: Default::default(),
            mode_early: Default::default(),
            trace: cfg.trace.then(Box::default),
            cfg,
        })
    }

    /// Serves this daemon's counters through `exporter` (the `metrics` key).
    pub fn serve_metrics(&mut self, exporter: crate::metrics::Exporter) {
        self.log.info(
            "serving metrics",
            &[("url", &format!("http://{}/metrics", exporter.local_addr()))],
        );
        self.metrics = Some(stats::MetricsFeed::new(exporter));
    }

    /// Runs until the shutdown flag is set, then shuts down cleanly.
    pub fn run(mut self) -> Result<(), EngineError> {
        self.log.info(
            "ready",
            &[
                ("node", &self.node),
                ("socket", &self.cfg.socket.display()),
                ("transport", &self.engine.stats().transport.kind),
            ],
        );
        while !self.shutdown.load(Ordering::Relaxed) {
            self.run_once()?;
            self.maybe_reload_keys();
        }
        self.stop()
    }

    /// One round: clients' requests, publications, the engine (with sleep),
    /// link messages, group events, overflowing subscribers.
    pub fn run_once(&mut self) -> Result<bool, EngineError> {
        // The group service's clock (request deadlines) before any request.
        self.groups.tick(mcast_engine::sys::monotonic_ns());
        let mut work = self.serve_clients();
        work |= self.take_publications()?;
        self.fds.clear();
        self.clients.server.poll_fds(&mut self.fds);
        let modes_due = self.modes_due();
        // Sleep only if no client has published meanwhile (the marks make
        // the next publish ring the doorbell, one of `fds`).
        let may_sleep = !work && self.clients.server.prepare_sleep();
        let max_sleep = match (may_sleep, modes_due) {
            (false, _) => Some(Duration::ZERO),
            (true, None) => None,
            (true, Some(due)) => Some(Duration::from_nanos(
                due.saturating_sub(mcast_engine::sys::monotonic_ns()),
            )),
        };
        // What the publications' loopback wrote is seen before any sleep.
        commit_subscriptions(&mut self.clients);
        work |= self.engine_turn(Some(max_sleep))?;
        if may_sleep {
            self.clients.server.finish_sleep();
            // Perhaps a client's doorbell woke the engine: what it published
            // leaves now, not after the rest of the round and the next
            // round's look at the control sockets (docs/benchmarks.md
            // "Where the time goes").
            if self.take_publications()? {
                work = true;
                self.engine_turn(None)?;
            }
        }
        work |= self.handle_links()?;
        work |= self.poll_modes()?;
        work |= self.finish_flushes()?;
        work |= self.ask_stuck_streams()?;
        work |= self.liveness()?;
        work |= self.handle_group_events()?;
        work |= self.flush_links()?;
        work |= self.flush_overflow()?;
        work |= self.finish_lingering();
        // Flushed frames and membership events of the phases above.
        commit_subscriptions(&mut self.clients);
        self.refresh_metrics();
        Ok(work)
    }

    /// The engine's turn, delivering into the subscribers' rings (and
    /// publishing what it wrote): with `wait`, one `run_once_deliver` that
    /// may sleep up to the given time (`None`: the engine's own bound) or
    /// until a frame or one of the clients' descriptors wakes it; without,
    /// one poll.
    fn engine_turn(&mut self, wait: Option<Option<Duration>>) -> Result<bool, EngineError> {
        let mut sink = Sink {
            clients: &mut self.clients,
            local: &mut self.local,
            kept: &mut self.flush.kept,
            links: &mut self.links,
            counters: &mut self.counters,
            max_message: self.cfg.max_message as usize + mode::MODE_HEADROOM,
            trace: self.trace.as_deref_mut(),
        };
        let work = match wait {
            Some(max_sleep) => self
                .engine
                .run_once_deliver(&mut sink, &self.fds, max_sleep)?,
            None => self.engine.poll_deliver(&mut sink)?,
        };
        commit_subscriptions(&mut self.clients);
        if let Some(t) = self.trace.as_deref_mut() {
            t.drain(&mut self.engine);
        }
        Ok(work)
    }

    /// Tells clients, leaves the groups on their behalf (briefly running the
    /// links so the agents hear it), and stops the engine.
    pub fn stop(mut self) -> Result<(), EngineError> {
        self.log
            .info("shutting down", &[("clients", &self.clients.by_id.len())]);
        let ids: Vec<ClientId> = self.clients.by_id.keys().copied().collect();
        for c in ids {
            self.clients.server.notify(
                c,
                Notice::Shutdown {
                    reason: "mcastd is shutting down".into(),
                },
            );
            self.groups.member_gone(c.0);
        }
        for l in std::mem::take(&mut self.clients.lingering) {
            l.carry_out(&mut self.groups);
        }
        let deadline = mcast_engine::sys::monotonic_ns() + 500_000_000;
        while mcast_engine::sys::monotonic_ns() < deadline {
            self.flush_group_sends();
            self.flush_links()?;
            let mut sink = |_: Fragment<'_>| {};
            self.engine.poll_deliver(&mut sink)?;
            if self.links.backlog.values().all(|q| q.is_empty())
                && self
                    .cfg
                    .peers
                    .iter()
                    .all(|p| self.engine.group_send_idle(inbox(p.node)))
            {
                break;
            }
        }
        let (report, _transport) = self.engine.shutdown()?;
        self.log.info(
            "stopped",
            &[
                ("frames_free", &report.ledger.transport.free),
                ("messages_published", &self.counters.messages_published),
            ],
        );
        Ok(())
    }

    /// The daemon's counters.
    pub fn counters(&self) -> DaemonCounters {
        self.counters
    }
}
