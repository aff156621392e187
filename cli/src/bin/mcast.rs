//! `mcast`: the command-line tool. See `mcast --help`.

use std::io::{BufReader, BufWriter, Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use mcast_cli::render;
use mcast_cli::stream::{self, StreamReader};
use mcast_ipc::{Client, Request, Response};

/// Bytes `send` reads ahead: the whole messages in it are published together.
const INPUT_BUFFER: usize = 256 << 10;
/// Bytes `recv` gathers before writing.
const OUTPUT_BUFFER: usize = 64 << 10;

/// Reliable multicast from the command line, through the local mcastd.
///
/// Examples:
///   mcast recv logs > copy.bin          # join "logs", write what arrives
///   mcast send logs big.bin             # join "logs", send the file, end the stream
///   tail -f app.log | mcast send logs - --lines   # one message per line, as each comes
///   mcast recv ledger --mode total      # refused unless every member sees one order
///   mcast members logs                  # who is in the group
///   mcast stat                          # live counters per group and peer
///   mcast doctor --interface eth0       # what to fix before mcastd can run
///   mcast keygen /etc/mcast/cluster.key # a cluster key for mcastd's key_file
///
/// `send` cuts its input into messages of --chunk bytes (with --lines, one
/// line per message, newline included) and ends the stream with an empty
/// message; `recv` writes each message's bytes to its output
/// and stops at that end (or after --count messages). With --stamp on both
/// sides each message carries its send time, and `recv` prints a latency
/// summary (one host only: both ends read the same monotonic clock).
#[derive(Parser, Debug)]
#[command(name = "mcast", version, verbatim_doc_comment)]
struct Args {
    /// mcastd's control socket.
    #[arg(
        short,
        long,
        global = true,
        env = "MCAST_SOCKET",
        default_value = "/run/mcastd/mcastd.sock"
    )]
    socket: PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Join GROUP and send FILE (or standard input: "-") as a stream of messages.
    Send {
        group: String,
        #[arg(default_value = "-")]
        file: String,
        /// Bytes per message.
        #[arg(long, default_value_t = 8192, conflicts_with = "lines")]
        chunk: usize,
        /// One message per line (its newline included, so `recv` prints the
        /// lines back as they were), sent as soon as the line is read: for
        /// logs and records. A line longer than the largest message is an
        /// error.
        #[arg(long)]
        lines: bool,
        /// Wait until the group has this many member nodes before sending.
        #[arg(long, value_name = "N")]
        wait_nodes: Option<usize>,
        /// Put the send time in each message (see `recv --stamp`).
        #[arg(long)]
        stamp: bool,
        /// Pace the messages at this many per second (default: as fast as the group takes them).
        #[arg(long, value_name = "MSGS_PER_SEC")]
        rate: Option<u64>,
        /// Give up waiting for --wait-nodes after this many seconds.
        #[arg(long, default_value_t = 30)]
        timeout: u64,
        /// Join only if mcastd runs the group in this mode (fifo,
        /// sequenced, total, broadcast): for a stream that relies on one
        /// order for every member. Refused, naming the setting, otherwise.
        #[arg(long, value_name = "MODE")]
        mode: Option<String>,
    },
    /// Join GROUP and write every message received to standard output (or --output).
    Recv {
        group: String,
        /// Stop after N messages (otherwise at the end of a `send` stream).
        #[arg(long, value_name = "N")]
        count: Option<u64>,
        /// Write here instead of standard output.
        #[arg(short, long, value_name = "FILE")]
        output: Option<PathBuf>,
        /// Messages carry send times (`send --stamp`): strip them, print latency.
        #[arg(long)]
        stamp: bool,
        /// Give up when nothing arrives for this many seconds.
        #[arg(long, value_name = "SECS")]
        idle_timeout: Option<u64>,
        /// Print "joined" to standard error once the join is complete.
        #[arg(long)]
        announce: bool,
        /// Join only if mcastd runs the group in this mode (fifo,
        /// sequenced, total, broadcast): for a stream that relies on one
        /// order for every member. Refused, naming the setting, otherwise.
        #[arg(long, value_name = "MODE")]
        mode: Option<String>,
    },
    /// Join GROUP and wait at its barrier COUNT times: each wait returns
    /// once every member of the group has reached it (members that leave
    /// or whose node fails meanwhile are not waited for, and are named).
    /// Prints one line per barrier: its index, how long this member
    /// waited, and the nodes dropped. Joining adds this process to the
    /// group: the others' barriers wait for it too.
    Barrier {
        group: String,
        /// Barriers to pass.
        #[arg(long, default_value_t = 1)]
        count: u64,
        /// Give up a barrier after this many seconds (exit status 1).
        #[arg(long, default_value_t = 60)]
        timeout: u64,
        /// Wait until the group has members on N nodes before the first
        /// barrier (a barrier only waits for the members of the view).
        #[arg(long, value_name = "N")]
        wait_nodes: Option<usize>,
    },
    /// The groups the registry knows: name, number, agent, member count.
    Groups {
        /// Print JSON for scripts (schema: docs/mcastd.md, "JSON output").
        #[arg(long)]
        json: bool,
    },
    /// The members of GROUP: rank, node, client, and the view epoch.
    Members {
        group: String,
        /// Print JSON for scripts (schema: docs/mcastd.md, "JSON output").
        #[arg(long)]
        json: bool,
    },
    /// Counters of the local mcastd: transport and XDP mode, per group and
    /// peer rates, NAKs, repairs, ACK waits, stalls, drops, clients.
    Stat {
        /// Print JSON for scripts (schema: docs/mcastd.md, "JSON output").
        #[arg(long)]
        json: bool,
        /// Print again every SECS seconds, with rates.
        #[arg(long, value_name = "SECS")]
        watch: Option<u64>,
    },
    /// Write a new random cluster key to FILE (mode 0600), for mcastd's
    /// `key_file`.
    ///
    /// Every node of a cluster needs the same key: copy the file to each
    /// (keeping it readable only by the user mcastd runs as) and set
    /// key_file = "FILE" in every mcastd.toml. Frames sealed with another
    /// key are refused. To change the key without stopping the cluster, see
    /// docs/mcastd.md "Rotating the key". Does not need mcastd running.
    Keygen {
        /// Where to write the key, e.g. /etc/mcast/cluster.key.
        file: PathBuf,
        /// Replace FILE if it exists (every node will need the new key).
        #[arg(long)]
        force: bool,
    },
    /// Check this machine for what mcastd needs, and say what to fix.
    Doctor {
        /// The interface mcastd will use.
        #[arg(short, long)]
        interface: Option<String>,
        /// mcastd's configuration file.
        #[arg(short, long)]
        config: Option<PathBuf>,
    },
}

/// Joins `group` and, with `wait_nodes`, waits up to `timeout_s` seconds
/// until its view has members on that many nodes.
fn join_and_wait(
    client: &mut Client,
    group: &str,
    mode: Option<&str>,
    wait_nodes: Option<usize>,
    timeout_s: u64,
) -> Result<mcast_ipc::Membership, String> {
    let m = client
        .join_in_mode(group, mode)
        .map_err(|e| e.to_string())?;
    if let Some(n) = wait_nodes {
        stream::wait_nodes(client, m.group, &m.view, n, Duration::from_secs(timeout_s))?;
    }
    Ok(m)
}

fn main() -> ExitCode {
    let args = Args::parse();
    let r = match args.command {
        Command::Doctor { interface, config } => doctor(interface, config),
        Command::Keygen { file, force } => keygen(&file, force),
        cmd => run(&args.socket, cmd),
    };
    match r {
        Ok(code) => code,
        Err(e) => {
            eprintln!("mcast: {e}");
            ExitCode::FAILURE
        }
    }
}

fn keygen(file: &std::path::Path, force: bool) -> Result<ExitCode, String> {
    let key = mcast_cli::keys::write_key_file(file, force)?;
    println!(
        "wrote cluster key {} to {} (mode 0600): copy it to every node and set key_file = {:?} in mcastd.toml",
        key.id_hex(),
        file.display(),
        file.display().to_string()
    );
    Ok(ExitCode::SUCCESS)
}

fn doctor(interface: Option<String>, config: Option<PathBuf>) -> Result<ExitCode, String> {
    let cfg = match &config {
        Some(p) => Some(mcast_cli::config::Config::load(p).map_err(|e| e.to_string())?),
        None => None,
    };
    let iface = interface.or_else(|| cfg.as_ref().map(|c| c.interface.clone()));
    let report = mcast_cli::doctor::run(iface.as_deref(), cfg.as_ref());
    print!("{}", report.render());
    Ok(if report.ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn run(socket: &PathBuf, cmd: Command) -> Result<ExitCode, String> {
    let name = format!("mcast-{}", std::process::id());
    let mut client = Client::connect(socket, &name).map_err(|e| e.to_string())?;
    match cmd {
        Command::Send {
            group,
            file,
            chunk,
            lines,
            wait_nodes,
            stamp,
            rate,
            timeout,
            mode,
        } => {
            if !lines && chunk == 0 || chunk + stream::STAMP_LEN > client.max_message() {
                return Err(format!(
                    "--chunk {chunk} must be between 1 and {} (mcastd's max_message minus the stamp)",
                    client.max_message() - stream::STAMP_LEN
                ));
            }
            let m = join_and_wait(&mut client, &group, mode.as_deref(), wait_nodes, timeout)?;
            // A large buffer: the messages it holds go out in one batch.
            let source: Box<dyn Read> = if file == "-" {
                Box::new(std::io::stdin().lock())
            } else {
                Box::new(
                    std::fs::File::open(&file).map_err(|e| format!("cannot open {file}: {e}"))?,
                )
            };
            let mut input = BufReader::with_capacity(INPUT_BUFFER, source);
            let sent = if lines {
                let stamp_len = if stamp { stream::STAMP_LEN } else { 0 };
                let max_line = client.max_message() - stamp_len;
                stream::send_lines(&mut client, m.group, &mut input, max_line, stamp, rate)?
            } else {
                stream::send(&mut client, m.group, &mut input, chunk, stamp, rate)?
            };
            eprintln!(
                "mcast: sent {} bytes in {} messages to {group} in {:.3} s ({:.1} MB/s)",
                sent.bytes,
                sent.messages,
                sent.elapsed.as_secs_f64(),
                sent.bytes as f64 / sent.elapsed.as_secs_f64().max(1e-9) / 1e6
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Recv {
            group,
            count,
            output,
            stamp,
            idle_timeout,
            announce,
            mode,
        } => {
            let m = client
                .join_in_mode(&group, mode.as_deref())
                .map_err(|e| e.to_string())?;
            if announce {
                eprintln!("mcast: joined {group} (group {}, rank {})", m.group, m.rank);
            }
            // One buffered writer: messages are written into it as a batch
            // lends them, and it is flushed when the ring runs dry.
            let mut out: Box<dyn Write> = match &output {
                Some(p) => Box::new(BufWriter::with_capacity(
                    OUTPUT_BUFFER,
                    std::fs::File::create(p)
                        .map_err(|e| format!("cannot create {}: {e}", p.display()))?,
                )),
                None => Box::new(BufWriter::with_capacity(
                    OUTPUT_BUFFER,
                    std::io::stdout().lock(),
                )),
            };
            let mut reader = StreamReader::new(stamp);
            let got = reader.run(
                &mut client,
                m.group,
                &mut out,
                count,
                idle_timeout.map(Duration::from_secs),
            )?;
            out.flush()
                .map_err(|e| format!("writing the output: {e}"))?;
            eprintln!(
                "mcast: received {} bytes in {} messages from {group}{}",
                got.bytes,
                got.messages,
                if got.ended { " (end of stream)" } else { "" }
            );
            if let Some(s) = reader.latency_summary() {
                eprintln!("mcast: latency {s}");
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Barrier {
            group,
            count,
            timeout,
            wait_nodes,
        } => {
            let m = join_and_wait(&mut client, &group, None, wait_nodes, timeout)?;
            for i in 1..=count {
                let t0 = mcast_engine::sys::monotonic_ns();
                let dropped = client
                    .barrier(m.group, Some(Duration::from_secs(timeout)))
                    .map_err(|e| format!("barrier {i} of {group}: {e}"))?;
                let waited = Duration::from_nanos(mcast_engine::sys::monotonic_ns() - t0);
                if dropped.is_empty() {
                    println!("barrier {i}: released after {waited:?}");
                } else {
                    println!("barrier {i}: released after {waited:?}, without nodes {dropped:?}");
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Groups { json } => {
            let v = json_request(&mut client, Request::Groups)?;
            if json {
                println!("{:#}", render::groups_json(v));
            } else {
                print!("{}", render::render_groups(&v));
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Members { group, json } => {
            let v = json_request(
                &mut client,
                Request::Members {
                    group: group.clone(),
                },
            )?;
            if v.is_null() {
                return Err(format!("no group named {group:?} (see `mcast groups`)"));
            }
            if json {
                println!("{:#}", render::members_json(v));
            } else {
                print!("{}", render::render_members(&v));
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Stat { json, watch } => {
            let mut prev: Option<(serde_json::Value, u64)> = None;
            loop {
                let v = json_request(&mut client, Request::Stats)?;
                let now = mcast_engine::sys::monotonic_ns();
                if json {
                    println!("{v:#}");
                } else {
                    print!(
                        "{}",
                        render::render_stats(
                            &v,
                            prev.as_ref().map(|(p, t)| (p, (now - t) as f64 / 1e9))
                        )
                    );
                }
                let Some(secs) = watch else {
                    return Ok(ExitCode::SUCCESS);
                };
                prev = Some((v, now));
                // A display refresh, not a synchronisation.
                std::thread::sleep(Duration::from_secs(secs.max(1)));
            }
        }
        Command::Doctor { .. } | Command::Keygen { .. } => {
            unreachable!("handled before connecting")
        }
    }
}

fn json_request(client: &mut Client, r: Request) -> Result<serde_json::Value, String> {
    match client.request(r).map_err(|e| e.to_string())? {
        Response::Json(v) => Ok(v),
        Response::Error { message, .. } => Err(message),
        other => Err(format!("unexpected answer from mcastd: {other:?}")),
    }
}
