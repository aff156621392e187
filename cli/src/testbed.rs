//! A testbed of mcastd daemons for tests and benchmarks: one daemon per
//! network namespace of a `mcast_netns::Topology` (a sender endpoint and
//! 1 to 16 receivers on one bridge), each a child process (`ip netns exec NS
//! mcastd --config FILE`) whose control socket lives in a private directory.
//! `Drop` stops the daemons with SIGTERM (then SIGKILL if they hang) before
//! the topology removes the namespaces.
//!
//! Owns: the daemons' processes, configurations and logs.
//! Does not touch: the machine's own interfaces (everything lives in the
//! topology's namespaces), mcastd's internals (it talks to daemons as a
//! user does: configuration, signals, logs and the control socket).
//! Panics when the testbed cannot be set up: it serves tests and benches.
#![allow(
    clippy::disallowed_methods,
    reason = "the testbed waits on wall-clock deadlines"
)]

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use mcast_netns::{Netns, Topology, IFNAME};

/// A child's output lines so far, and whether its end has been read.
#[derive(Debug, Default)]
pub struct Lines {
    pub lines: Vec<String>,
    /// The pipe reached its end: every line the child wrote is in `lines`.
    pub ended: bool,
}

/// Log lines and a signal for each new one (and for the end).
pub type SharedLog = Arc<(Mutex<Lines>, Condvar)>;

/// One node's daemon.
#[derive(Debug)]
pub struct Daemon {
    pub node: u32,
    pub ns: Netns,
    pub socket: PathBuf,
    pub config: PathBuf,
    child: Option<Child>,
    /// Every line the daemon logged so far, and a signal for each new one.
    pub log: SharedLog,
}

impl Daemon {
    /// Waits until the daemon logs a line containing `needle`.
    pub fn wait_log(&self, needle: &str, timeout: Duration) -> String {
        match wait_line(&self.log, needle, timeout) {
            Some(l) => l,
            None => panic!(
                "node {} never logged {needle:?}; log:\n{}",
                self.node,
                self.log_text()
            ),
        }
    }

    /// The daemon's process id (`ip netns exec` execs mcastd), if running.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// How the daemon exited, if it has (None while it runs).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    pub fn log_text(&self) -> String {
        self.log.0.lock().unwrap().lines.join("")
    }
}

/// One cluster at a time: four daemons per test already load two cores, and
/// a daemon starved of CPU for 150 ms is (rightly) suspected by its peers.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Daemons on a topology of their own.
#[derive(Debug)]
pub struct Cluster {
    pub daemons: Vec<Daemon>,
    pub dir: PathBuf,
    /// The mcastd binary the daemons run.
    mcastd: PathBuf,
    // Dropped after the daemons (field order).
    topo: Topology,
    // Released last, once the namespaces are gone.
    _turn: std::sync::MutexGuard<'static, ()>,
}

impl Cluster {
    /// Starts `mcastd` (the binary's path) on a new topology of one sender
    /// node (node 1) and `receivers` receiver nodes (2, 3, ...), each with
    /// the lines `extra(node)` added to its configuration; waits until every
    /// daemon is ready. Every daemon authenticates frames with one cluster
    /// key written for the cluster (`cluster.key` in its directory, also
    /// [`Cluster::key_file`]) unless `extra` says `insecure` or names a
    /// `key_file` of its own. None when the test must be skipped (no privileges).
    /// One cluster at a time per process: a second waits for the first.
    pub fn start(
        mcastd: &Path,
        test: &str,
        receivers: usize,
        extra: impl Fn(u32) -> String,
    ) -> Option<Cluster> {
        Cluster::start_nodes(mcastd, test, receivers, receivers + 1, 1, extra)
    }

    /// As [`Cluster::start`], on veths with `queues` queues each
    /// (`Topology::with_queues`; `Topology::steer_by_cpu` spreads frames
    /// over them).
    pub fn start_with_queues(
        mcastd: &Path,
        test: &str,
        receivers: usize,
        queues: u32,
        extra: impl Fn(u32) -> String,
    ) -> Option<Cluster> {
        Cluster::start_nodes(mcastd, test, receivers, receivers + 1, queues, extra)
    }

    /// One daemon alone (node 1, its own registry, no peers) on a topology
    /// of its own, with `extra` added to its configuration: for tests of
    /// what local clients can do to a daemon.
    pub fn start_single(mcastd: &Path, test: &str, extra: &str) -> Option<Cluster> {
        Cluster::start_nodes(mcastd, test, 1, 1, 1, |_| extra.to_owned())
    }

    /// `daemons` daemons (nodes 1 to `daemons`, each listing the others as
    /// peers, with the cluster key unless `extra` says otherwise, as
    /// [`Cluster::start`]) on a topology with `spare` more endpoints on the
    /// same bridge where nothing runs: [`Cluster::spare`] gives them, e.g.
    /// for a test's own raw frames from a host that is not a configured peer.
    pub fn start_with_spare(
        mcastd: &Path,
        test: &str,
        daemons: usize,
        spare: usize,
        extra: impl Fn(u32) -> String,
    ) -> Option<Cluster> {
        assert!(daemons >= 1, "at least one daemon");
        Cluster::start_nodes(mcastd, test, daemons - 1 + spare, daemons, 1, extra)
    }

    /// The topology's endpoints where no daemon runs (see
    /// [`Cluster::start_with_spare`]), in order.
    pub fn spare(&self) -> Vec<Netns> {
        std::iter::once(&self.topo.sender)
            .chain(&self.topo.receivers)
            .skip(self.daemons.len())
            .cloned()
            .collect()
    }

    /// Daemons on the first `running` endpoints (node 1 on the sender's,
    /// then the receivers'), each listing the others as peers.
    fn start_nodes(
        mcastd: &Path,
        test: &str,
        receivers: usize,
        running: usize,
        queues: u32,
        extra: impl Fn(u32) -> String,
    ) -> Option<Cluster> {
        let turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
        let topo = Topology::with_queues(test, receivers, queues)?;
        let dir = std::env::temp_dir().join(format!("mcastd-test-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let endpoints: Vec<Netns> = std::iter::once(topo.sender.clone())
            .chain(topo.receivers.iter().cloned())
            .take(running)
            .collect();
        // One cluster key for all the daemons, as an operator would deploy
        // it; a configuration that says `insecure = true` gets none.
        let key = dir.join("cluster.key");
        crate::keys::write_key_file(&key, true).unwrap();
        let mut daemons = Vec::new();
        for (i, ns) in endpoints.iter().enumerate() {
            let node = i as u32 + 1;
            let socket = dir.join(format!("node{node}.sock"));
            let extra = extra(node);
            let key_line = if extra.contains("insecure") || extra.contains("key_file") {
                String::new()
            } else {
                format!("key_file = \"{}\"\n", key.display())
            };
            // Each cluster its own state (the incarnations its runs took).
            let state = if extra.contains("state_dir") {
                String::new()
            } else {
                format!("state_dir = \"{}\"\n", dir.display())
            };
            // SKB mode unless the test asks otherwise (several queues on
            // veth need native mode: docs/datapath.md "Several NIC queues").
            let mode = if extra.contains("xdp_mode") {
                ""
            } else {
                "xdp_mode = \"skb\"\n"
            };
            let mut cfg = format!(
            "node = {node}\ninterface = \"{IFNAME}\"\nregistry = 1\nsocket = \"{}\"\ndatapath = \"xdp\"\n{mode}log = \"info\"\n{key_line}{state}{extra}\n",
            socket.display(),
        );
            for (j, peer) in endpoints.iter().enumerate() {
                if j != i {
                    cfg += &format!("[[peer]]\nnode = {}\nmac = \"{}\"\n", j + 1, peer.mac);
                }
            }
            let config = dir.join(format!("node{node}.toml"));
            std::fs::write(&config, cfg).unwrap();
            let (child, log) = spawn(mcastd, ns, &config);
            let d = Daemon {
                node,
                ns: ns.clone(),
                socket,
                config,
                child: Some(child),
                log,
            };
            d.wait_log("msg=ready", Duration::from_secs(20));
            daemons.push(d);
        }
        Some(Cluster {
            daemons,
            dir,
            mcastd: mcastd.to_owned(),
            _turn: turn,
            topo,
        })
    }
}

/// Starts `mcastd` in `ns` with `config`; its log lines go to the returned log.
fn spawn(mcastd: &Path, ns: &Netns, config: &Path) -> (Child, SharedLog) {
    let mut child = Command::new("ip")
        .args(["netns", "exec", &ns.name])
        .arg(mcastd)
        .arg("--config")
        .arg(config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn mcastd");
    let log = collect_lines(child.stderr.take().unwrap());
    (child, log)
}

/// The lines of `output` (a child's stdout or stderr), collected by a thread
/// as they come.
pub fn collect_lines(output: impl Read + Send + 'static) -> SharedLog {
    let log: SharedLog = Arc::new((Mutex::new(Lines::default()), Condvar::new()));
    let sink = log.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(output).lines() {
            let Ok(line) = line else { break };
            sink.0.lock().unwrap().lines.push(line + "\n");
            sink.1.notify_all();
        }
        sink.0.lock().unwrap().ended = true;
        sink.1.notify_all();
    });
    log
}

impl Cluster {
    /// Starts node `node`'s daemon again (after `kill` or `stop`), with a fresh log.
    pub fn restart(&mut self, node: u32) {
        let d = &mut self.daemons[node as usize - 1];
        assert!(d.child.is_none(), "node {node} is running");
        let (child, log) = spawn(&self.mcastd, &d.ns, &d.config);
        d.child = Some(child);
        d.log = log;
        d.wait_log("msg=ready", Duration::from_secs(20));
    }

    /// Sends `signal` (e.g. "STOP", "CONT") to node `node`'s daemon.
    pub fn signal(&self, node: u32, signal: &str) {
        let d = &self.daemons[node as usize - 1];
        let pid = d.child.as_ref().expect("running").id();
        let ok = Command::new("kill")
            .args([&format!("-{signal}"), &pid.to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -{signal} {pid}");
    }

    /// Cuts node `node` off the segment (`off`), or puts it back: its bridge
    /// port stops forwarding either way. Its interface keeps its carrier, so
    /// the daemon sees nothing but silence.
    pub fn cut(&self, node: u32, off: bool) {
        let port = format!("p{}", node - 1);
        let state = if off { "0" } else { "3" };
        let out = self
            .topo
            .bridge
            .exec(&["bridge", "link", "set", "dev", &port, "state", state]);
        assert!(
            out.status.success(),
            "bridge link set dev {port} state {state}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The cluster key the daemons were started with.
    pub fn key_file(&self) -> PathBuf {
        self.dir.join("cluster.key")
    }

    /// The namespaces and the bridge the daemons run on.
    pub fn topology(&self) -> &Topology {
        &self.topo
    }

    pub fn socket(&self, node: u32) -> &PathBuf {
        &self.daemons[node as usize - 1].socket
    }

    /// Kills node `node`'s daemon with SIGKILL: no goodbye to anyone.
    pub fn kill(&mut self, node: u32) {
        let d = &mut self.daemons[node as usize - 1];
        let mut child = d.child.take().expect("running");
        child.kill().unwrap();
        child.wait().unwrap();
    }

    /// Stops node `node`'s daemon with SIGTERM and returns its exit status and log.
    pub fn stop(&mut self, node: u32) -> (std::process::ExitStatus, String) {
        let d = &mut self.daemons[node as usize - 1];
        let mut child = d.child.take().expect("running");
        stop_child(&mut child);
        let status = child.wait().unwrap();
        // The last lines may still be in the pipe.
        let _ = wait_ended(&d.log, Duration::from_secs(5));
        (status, d.log_text())
    }
}

/// The first logged line containing `needle`, waiting up to `timeout` for it.
pub fn wait_line(log: &(Mutex<Lines>, Condvar), needle: &str, timeout: Duration) -> Option<String> {
    let deadline = Instant::now() + timeout;
    let mut got = log.0.lock().unwrap();
    loop {
        if let Some(l) = got.lines.iter().find(|l| l.contains(needle)) {
            return Some(l.clone());
        }
        let left = deadline.checked_duration_since(Instant::now())?;
        got = log.1.wait_timeout(got, left).unwrap().0;
    }
}

/// Waits up to `timeout` until every line of the output has been read (the
/// writer closed it: a child that exited); whether it was.
pub fn wait_ended(log: &(Mutex<Lines>, Condvar), timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    let mut got = log.0.lock().unwrap();
    while !got.ended {
        let Some(left) = deadline.checked_duration_since(Instant::now()) else {
            return false;
        };
        got = log.1.wait_timeout(got, left).unwrap().0;
    }
    true
}

fn stop_child(child: &mut Child) {
    // `ip netns exec` execs mcastd: the child's pid is mcastd's.
    let pid = child.id() as i32;
    let _ = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    // Bounded: mcastd gives its peers at most 0.5 s to hear it leave.
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // The test failed: what each daemon said is the first thing to read.
            for d in &self.daemons {
                eprintln!("--- node {} log ---\n{}", d.node, d.log_text());
            }
        }
        for d in &mut self.daemons {
            if let Some(mut c) = d.child.take() {
                stop_child(&mut c);
                let _ = c.wait();
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
