//! An interrupted real-kernel bench removes its network namespaces: the
//! `mcast-bench` binary is started as a process, interrupted once its
//! namespaces exist, and must exit with 128 + the signal, say so, and leave
//! no namespace of its own behind. Needs root: skipped with a message
//! otherwise, and a failure instead of a skip when `CI=true`.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::Mutex;
use std::time::Duration;

use mcast_engine::harness::netns::privileged_or_skip;

/// One bench at a time: each builds a topology and loads both CPUs.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// The longest any one step may take (start-up, the cleanup after a signal).
const STEP: Duration = Duration::from_secs(60);

/// The namespaces of process `pid` (`mc<pid>-<n>-<role>`, see `mcast-netns`).
fn namespaces_of(pid: u32) -> Vec<String> {
    let out = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("ip netns list");
    let prefix = format!("mc{pid}-");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(&prefix))
        .map(str::to_owned)
        .collect()
}

/// The bench process. If a check fails while it runs, it is stopped with
/// SIGTERM (so that it still removes its namespaces), then SIGKILL if it has
/// not exited within [`STEP`]; whatever namespaces it left (the checks have
/// failed by then) are removed, so a failing test leaves none either.
struct Bench(Child);

impl Drop for Bench {
    fn drop(&mut self) {
        let pid = self.0.id();
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
            let (tx, rx) = mpsc::channel();
            std::thread::scope(|s| {
                let child = &mut self.0;
                s.spawn(move || {
                    let _ = tx.send(child.wait());
                });
                if rx.recv_timeout(STEP).is_err() {
                    let _ = Command::new("kill")
                        .args(["-KILL", &pid.to_string()])
                        .status();
                }
            });
        }
        for name in namespaces_of(pid) {
            let _ = Command::new("ip").args(["netns", "del", &name]).status();
        }
    }
}

/// Every line the child writes to stderr, as it comes.
fn lines_of(child: &mut Child) -> Receiver<String> {
    let stderr = child.stderr.take().expect("piped stderr");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Starts `mcast-bench ARGS`, waits for the line naming its namespaces,
/// sends `signal` (`INT`, `TERM`), and returns how it exited and what it
/// wrote to stderr, after checking that its namespaces existed before the
/// signal and exist no more after it.
fn interrupt(args: &[&str], signal: &str, namespaces: usize) -> (ExitStatus, String) {
    let mut child = Bench(
        Command::new(env!("CARGO_BIN_EXE_mcast-bench"))
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start mcast-bench"),
    );
    let pid = child.0.id();
    let lines = lines_of(&mut child.0);
    let mut log = String::new();
    // Bounded: the child writes a few lines before its namespaces exist.
    for _ in 0..1000 {
        match lines.recv_timeout(STEP) {
            Ok(line) => {
                log.push_str(&line);
                log.push('\n');
                // "network namespaces mc<pid>-<n>-br ... created"
                if line.contains(&format!("network namespaces mc{pid}-")) {
                    break;
                }
            }
            Err(e) => panic!("mcast-bench never named its namespaces ({e:?}):\n{log}"),
        }
    }
    let before = namespaces_of(pid);
    assert_eq!(
        before.len(),
        namespaces,
        "the run's namespaces before the signal: {before:?}\n{log}"
    );
    let sent = Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .expect("kill");
    assert!(sent.success(), "kill -{signal} {pid}");
    // Everything it writes until it closes stderr (it exits), within STEP.
    loop {
        match lines.recv_timeout(STEP) {
            Ok(line) => {
                log.push_str(&line);
                log.push('\n');
            }
            Err(RecvTimeoutError::Disconnected) => break,
            Err(RecvTimeoutError::Timeout) => {
                panic!("mcast-bench still running {STEP:?} after SIG{signal}:\n{log}")
            }
        }
    }
    let status = child.0.wait().expect("wait for mcast-bench");
    let after = namespaces_of(pid);
    assert!(
        after.is_empty(),
        "namespaces left behind after SIG{signal}: {after:?}\n{log}"
    );
    (status, log)
}

#[test]
fn an_interrupted_paper_run_removes_its_namespaces() {
    let _guard = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    if !privileged_or_skip("an_interrupted_paper_run_removes_its_namespaces") {
        return;
    }
    let out = std::env::temp_dir().join(format!("mcast-paper-interrupt-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let (status, log) = interrupt(
        &[
            "paper",
            "--backends",
            "xdp",
            "--quick",
            "--no-progress",
            "--out",
            out.to_str().expect("utf-8 path"),
        ],
        "INT",
        // The bridge, the sender and 6 receivers.
        8,
    );
    assert_eq!(status.code(), Some(130), "exit status {status}\n{log}");
    assert!(
        log.contains("interrupted by SIGINT") && log.contains("removed 8 network namespace(s)"),
        "{log}"
    );
    assert!(
        !out.join("results.json").exists(),
        "an interrupted run writes no results"
    );
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn an_interrupted_xdp_run_removes_its_namespaces() {
    let _guard = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    if !privileged_or_skip("an_interrupted_xdp_run_removes_its_namespaces") {
        return;
    }
    // The bridge, the sender and 3 receivers.
    let (status, log) = interrupt(&["xdp"], "TERM", 5);
    assert_eq!(status.code(), Some(143), "exit status {status}\n{log}");
    assert!(
        log.contains("interrupted by SIGTERM") && log.contains("removed 5 network namespace(s)"),
        "{log}"
    );
}
