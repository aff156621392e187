//! `mcastd`: the per-node daemon. See `mcastd --help` and docs/mcastd.md.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use mcast_cli::config::{Algorithm, Config, Datapath, LogLevel, Overrides, Polling, XdpMode};
use mcast_cli::daemon::Daemon;
use mcast_cli::epochs::Epochs;
use mcast_cli::log::{Level, Logger};
use mcast_cli::metrics::Exporter;
use mcast_engine::auth::Keys;
use mcast_engine::{
    sys, AuthConfig, Engine, EngineConfig, EngineError, ExtraQueue, MultiQueueTransport,
    PacketConfig, PacketTransport, Transport, XdpConfig, XdpTransport,
};
use mcast_ipc::{Access, RingSizes, Server};
use mcast_wire::ETHERTYPE_DEFAULT;
use mcast_xsk::XskConfig;

/// The reliable-multicast daemon: one per node.
///
/// mcastd owns one NIC queue (AF_XDP, or AF_PACKET as a fallback), runs the
/// protocols for every group this node's applications join, talks to the
/// other nodes' daemons over reliable unicast links, and serves local
/// applications over shared memory (a Unix socket for control, memfd rings
/// for data). Applications use the `mcast` tool or the client library.
///
/// Example: mcastd --config /etc/mcastd.toml
///
/// The configuration file (TOML) is documented in docs/mcastd.toml.example;
/// flags override it. SIGINT or SIGTERM stop the daemon cleanly: clients are
/// told, their groups left, the XDP program detached, shared memory freed.
/// SIGHUP reads the key files again (`key_file`, `accept_key_file`): the
/// steps of a key rotation (docs/mcastd.md "Rotating the key").
#[derive(Parser, Debug)]
#[command(name = "mcastd", version)]
struct Args {
    /// The configuration file.
    #[arg(short, long, value_name = "FILE", default_value = "/etc/mcastd.toml")]
    config: PathBuf,
    /// This node's id (overrides `node`).
    #[arg(long)]
    node: Option<u32>,
    /// The network interface (overrides `interface`).
    #[arg(short, long)]
    interface: Option<String>,
    /// The NIC receive queue (overrides `queue`).
    #[arg(long)]
    queue: Option<u32>,
    /// How many RX queues to serve from `queue` on, one receive thread per
    /// extra queue (overrides `queues`; AF_XDP only).
    #[arg(long)]
    queues: Option<u32>,
    /// The registry node (overrides `registry`).
    #[arg(long)]
    registry: Option<u32>,
    /// The control socket path (overrides `socket`).
    #[arg(short, long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// "xdp" or "packet" (overrides `datapath`).
    #[arg(long)]
    datapath: Option<Datapath>,
    /// "auto", "native" or "skb" (overrides `xdp_mode`).
    #[arg(long)]
    xdp_mode: Option<XdpMode>,
    /// Default algorithm of groups: "mak", "nak", "ack", "iterative" (overrides `algorithm`).
    #[arg(long)]
    algorithm: Option<Algorithm>,
    /// "adaptive", "busy" or "sleep" (overrides `polling`).
    #[arg(long)]
    polling: Option<Polling>,
    /// Pin the polling thread to this CPU (overrides `cpu`).
    #[arg(long)]
    cpu: Option<usize>,
    /// "error", "warn", "info" or "debug" (overrides `log`).
    #[arg(long)]
    log: Option<LogLevel>,
    /// Check the configuration, print it, and exit.
    #[arg(long)]
    check: bool,
}

#[allow(
    clippy::disallowed_methods,
    reason = "a binary reads the wall clock for logs"
)]
fn wall_clock() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// This run's incarnation and authentication session as the wall clock
/// gives them (`mcast_cli::epochs`: the state file keeps them growing if the
/// clock was set back). The incarnation (its session epoch, docs/mcastd.md)
/// is the first whole second after the start, waited for: a run's
/// incarnation is then a second in which it was alive, so a run started
/// after it, even within the same second, takes a larger one. Peers tell a
/// restarted daemon by its new incarnation; a daemon killed and restarted
/// within the second it started in used to take the same one, and was told
/// by the peers that had declared its previous run failed that it had been
/// declared failed itself. The session is the start in microseconds, so a
/// later run's is larger and peers refuse this run's frames replayed after
/// it (docs/protocol.md §1.9).
#[allow(
    clippy::disallowed_methods,
    reason = "the session epoch is the start time; the wait is the point"
)]
fn clock_epochs() -> Epochs {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let next = std::time::Duration::from_secs(now.as_secs() + 1);
    std::thread::sleep(next - now);
    Epochs {
        incarnation: next.as_secs() as u32,
        session: (now.as_micros() as u64).max(1),
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    let overrides = Overrides {
        node: args.node,
        interface: args.interface.clone(),
        queue: args.queue,
        queues: args.queues,
        registry: args.registry,
        socket: args.socket.clone(),
        datapath: args.datapath,
        xdp_mode: args.xdp_mode,
        algorithm: args.algorithm,
        polling: args.polling,
        cpu: args.cpu,
        log: args.log,
        ..Overrides::default()
    };
    let cfg = match Config::resolve(&args.config, &overrides) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("mcastd: {e}");
            return ExitCode::from(2);
        }
    };
    let keys = match mcast_cli::keys::load(&cfg) {
        Ok(k) => k,
        Err(e) => {
            eprintln!("mcastd: {}: {e}", cfg.origin);
            return ExitCode::from(2);
        }
    };
    if args.check {
        println!("{cfg:#?}");
        println!("{}", mcast_cli::keys::describe(keys.as_ref()));
        return ExitCode::SUCCESS;
    }
    // Before anything is opened: clients and peers see this run only once
    // it has its incarnation.
    let state = mcast_cli::epochs::path(&cfg.state_dir, cfg.node);
    let last = mcast_cli::epochs::load(&state).unwrap_or_else(|e| {
        eprintln!("mcastd: warning: {e}; the wall clock alone gives this run's incarnation");
        None
    });
    let epochs = mcast_cli::epochs::next(clock_epochs(), last);
    if let Err(e) = mcast_cli::epochs::store(&state, epochs) {
        eprintln!("mcastd: warning: {e}; a restart after the wall clock is set back will not be recognised");
    }
    let level = match cfg.log {
        LogLevel::Error => Level::Error,
        LogLevel::Warn => Level::Warn,
        LogLevel::Info => Level::Info,
        LogLevel::Debug => Level::Debug,
    };
    let log = Logger::new(level, wall_clock);
    let shutdown = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        if let Err(e) = signal_hook::flag::register(sig, shutdown.clone()) {
            eprintln!("mcastd: cannot handle signal {sig}: {e}");
            return ExitCode::FAILURE;
        }
    }
    // SIGHUP: read the key files again (a key rotation step).
    let rekey = Arc::new(AtomicBool::new(false));
    if let Err(e) = signal_hook::flag::register(signal_hook::consts::SIGHUP, rekey.clone()) {
        eprintln!("mcastd: cannot handle SIGHUP: {e}");
        return ExitCode::FAILURE;
    }
    let reload = Reload {
        flag: rekey,
        path: args.config.clone(),
        overrides: overrides.clone(),
    };
    let result = match cfg.datapath {
        Datapath::Xdp if cfg.queues > 1 => open_queues(&cfg)
            .and_then(|t| serve(cfg, keys, t, epochs, log, shutdown, reload.clone())),
        Datapath::Xdp => {
            open_xdp(&cfg).and_then(|t| serve(cfg, keys, t, epochs, log, shutdown, reload.clone()))
        }
        Datapath::Packet => open_packet(&cfg)
            .and_then(|t| serve(cfg, keys, t, epochs, log, shutdown, reload.clone())),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mcastd: {e}");
            ExitCode::FAILURE
        }
    }
}

/// What SIGHUP's key reload needs (`mcast_cli::daemon`'s `rekey`).
#[derive(Debug, Clone)]
struct Reload {
    flag: Arc<AtomicBool>,
    path: PathBuf,
    overrides: Overrides,
}

fn xdp_config(cfg: &Config) -> XdpConfig {
    XdpConfig {
        queue: cfg.queue,
        attach: cfg.xdp_mode.to_xsk(),
        xsk: XskConfig {
            frame_count: cfg.frames,
            ..XskConfig::default()
        },
    }
}

fn xdp_error(cfg: &Config, e: EngineError) -> String {
    format!(
        "cannot open AF_XDP on {} queue {}: {e} (run `mcast doctor --interface {}`, or set datapath = \"packet\")",
        cfg.interface, cfg.queue, cfg.interface
    )
}

fn open_xdp(cfg: &Config) -> Result<XdpTransport, String> {
    XdpTransport::open(&cfg.interface, ETHERTYPE_DEFAULT, xdp_config(cfg))
        .map_err(|e| xdp_error(cfg, e))
}

/// `queues` > 1: queue `queue` for the engine, a receive thread for each
/// of the next `queues` - 1.
fn open_queues(cfg: &Config) -> Result<MultiQueueTransport, String> {
    let extra: Vec<ExtraQueue> = (1..cfg.queues)
        .map(|i| ExtraQueue {
            queue: cfg.queue + i,
            cpu: cfg.queue_cpus.get(i as usize - 1).copied(),
        })
        .collect();
    MultiQueueTransport::open(&cfg.interface, ETHERTYPE_DEFAULT, xdp_config(cfg), &extra).map_err(
        |e| {
            format!(
                "cannot open AF_XDP on {} queues {}..={}: {e} (run `mcast doctor --config FILE`)",
                cfg.interface,
                cfg.queue,
                cfg.queue + cfg.queues - 1
            )
        },
    )
}

fn open_packet(cfg: &Config) -> Result<PacketTransport, String> {
    let pc = PacketConfig {
        frame_count: cfg.frames,
        ..PacketConfig::default()
    };
    PacketTransport::open(&cfg.interface, ETHERTYPE_DEFAULT, pc)
        .map_err(|e| format!("cannot open AF_PACKET on {}: {e}", cfg.interface))
}

fn serve<T: Transport>(
    cfg: Config,
    keys: Option<Keys>,
    transport: T,
    run: Epochs,
    log: Logger,
    shutdown: Arc<AtomicBool>,
    reload: Reload,
) -> Result<(), String> {
    let mtu = sys::if_mtu(&cfg.interface)
        .map_err(|e| format!("cannot read the MTU of {}: {e}", cfg.interface))?;
    let mut ec = EngineConfig::new(cfg.node, 0, mcast_engine::Algorithm::Mak);
    ec.mtu = mtu as usize;
    ec.peers = cfg.peers.iter().map(|p| (p.node, p.mac)).collect();
    // Room for what a group mode adds (the sequenced mode's origin header).
    ec.max_message = cfg.max_message as usize + mcast_cli::daemon::mode::MODE_HEADROOM;
    ec.window_frames = cfg.window();
    ec.cpu = cfg.cpu;
    ec.seed = u64::from(cfg.node);
    match cfg.polling {
        Polling::Adaptive => ec.spin = Duration::from_micros(cfg.spin_us),
        Polling::Busy => {
            ec.spin = Duration::from_secs(3600);
        }
        Polling::Sleep => ec.spin = Duration::ZERO,
    }
    ec.max_sleep = Duration::from_millis(10);
    ec.trace = cfg.trace;
    match &keys {
        Some(_) => log.info(&mcast_cli::keys::describe(keys.as_ref()), &[]),
        None => log.warn(&mcast_cli::keys::describe(None), &[]),
    }
    ec.auth = keys.map(|keys| AuthConfig {
        keys,
        session: run.session,
    });
    let engine = Engine::new(transport, ec).map_err(|e| e.to_string())?;
    let access = Access {
        uids: cfg.allow_uids.clone(),
        gids: cfg.allow_gids.clone(),
        config: cfg.origin.clone(),
        socket_mode: cfg.socket_mode_bits(),
    };
    let sizes = RingSizes {
        publication: cfg.publication_buffer as usize,
        subscription: cfg.subscriber_buffer as usize,
        max_message: cfg.max_message as usize,
    };
    if let Some(dir) = cfg.socket.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create the socket directory {}: {e}", dir.display()))?;
    }
    let mut server =
        Server::bind(&cfg.socket, access, sizes, cfg.max_clients as usize).map_err(|e| {
            format!(
            "cannot listen on {}: {e} (is another mcastd running? remove the stale socket if not)",
            cfg.socket.display()
        )
        })?;
    server.set_trace(cfg.trace);
    let metrics = cfg.metrics_addr().map(Exporter::start).transpose()?;
    let mut daemon = Daemon::new(cfg, engine, server, run.incarnation, log, shutdown)
        .map_err(|e| e.to_string())?;
    if let Some(exporter) = metrics {
        daemon.serve_metrics(exporter);
    }
    daemon.reload_keys_on(reload.flag, reload.path, reload.overrides);
    daemon.run().map_err(|e| e.to_string())
}
