//! The C API against real daemons (issue 24): the C example
//! (engine/ffi/examples/c/pubsub.c, built against libmcast) subscribes on
//! one node, a member's node is killed, and the C program prints the
//! membership event naming that node as gone, then receives what is
//! published after it. Four mcastd in network namespaces, as in
//! cluster.rs: root only; without privileges the test skips with a message,
//! and with CI=true a skip is a failure.
#![allow(
    clippy::disallowed_methods,
    reason = "tests wait on wall-clock deadlines"
)]

#[path = "../../engine/ffi/tests/cbuild/mod.rs"]
mod cbuild;
#[allow(dead_code)]
mod common;

use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use mcast_ipc::{Client, MessageKind};

/// Message `i` as pubsub.c makes it: "msg i:" then i % 200 bytes of the
/// letter 'a' + i % 26.
fn pubsub_message(i: u32) -> Vec<u8> {
    let mut m = format!("msg {i}:").into_bytes();
    m.extend(std::iter::repeat_n(
        b'a' + (i % 26) as u8,
        (i % 200) as usize,
    ));
    m
}

/// The C program, killed if the test fails before it exits.
struct CProgram {
    child: Child,
    stdout: common::SharedLog,
    stderr: common::SharedLog,
}

impl CProgram {
    /// Waits for a line of its stdout containing `needle`.
    fn wait_line(&self, needle: &str, timeout: Duration) -> String {
        common::wait_line(&self.stdout, needle, timeout)
            .unwrap_or_else(|| panic!("the C program never printed {needle:?}\n{}", self.output()))
    }

    fn output(&self) -> String {
        format!(
            "stdout:\n{}stderr:\n{}",
            self.stdout.0.lock().unwrap().lines.join(""),
            self.stderr.0.lock().unwrap().lines.join("")
        )
    }

    /// Waits up to `timeout` for it to exit and for its last lines (still
    /// in the pipes when it exits) to be read.
    fn wait(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                let left = deadline.saturating_duration_since(Instant::now());
                let read = common::wait_ended(&self.stdout, left)
                    && common::wait_ended(&self.stderr, Duration::from_secs(1));
                assert!(
                    read,
                    "the C program's output never ended\n{}",
                    self.output()
                );
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "the C program did not exit\n{}",
                self.output()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for CProgram {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_c_subscriber_sees_a_killed_members_node_gone_in_its_stream() {
    let Some(mut cluster) = common::start("cevents", "") else {
        return;
    };
    cbuild::build_library();
    let exe = cluster.dir.join("pubsub");
    cbuild::compile(
        &[&cbuild::crate_dir().join("examples/c/pubsub.c")],
        &exe,
        true,
    );
    const COUNT: u32 = 500;

    // The publisher on node 1 (the agent), a member on node 3, the C
    // subscriber on node 2.
    let mut p = Client::connect(cluster.socket(1), "publisher").unwrap();
    let mp = p.join("cev").unwrap();
    let mut doomed = Client::connect(cluster.socket(3), "doomed").unwrap();
    doomed.join("cev").unwrap();
    let mut child = Command::new(&exe)
        .arg(cluster.socket(2))
        .args(["cev", "sub", &COUNT.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the C example");
    let mut sub = CProgram {
        stdout: common::collect_lines(child.stdout.take().unwrap()),
        stderr: common::collect_lines(child.stderr.take().unwrap()),
        child,
    };
    sub.wait_line("sub: joined cev", Duration::from_secs(10));
    mcast_cli::stream::wait_nodes(&mut p, mp.group, &mp.view, 3, Duration::from_secs(20))
        .unwrap_or_else(|e| panic!("{e}\n{}", sub.output()));

    // Node 3's mcastd dies without a word; the C program hears it in its
    // stream (eviction takes about 300 ms).
    cluster.kill(3);
    let event = sub.wait_line("gone [3]", Duration::from_secs(20));
    assert!(
        event.starts_with(&format!("sub: event in group {}: view epoch ", mp.group)),
        "{event}"
    );
    // The view change came as a notice too; the program prints those left
    // when it ends, so look for it then.
    let epoch: u64 = event
        .split("view epoch ")
        .nth(1)
        .and_then(|r| r.split(',').next())
        .and_then(|e| e.parse().ok())
        .unwrap_or_else(|| panic!("no epoch in {event:?}"));

    // The stream goes on: everything published after the death arrives.
    for i in 0..COUNT {
        p.publish_blocking(mp.group, &pubsub_message(i), Some(Duration::from_secs(20)))
            .unwrap_or_else(|e| panic!("publish {i}: {e}\n{}", sub.output()));
    }
    let ack = format!("ack {COUNT}");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        assert!(Instant::now() < deadline, "no ack\n{}", sub.output());
        let Some(m) = p.recv_timeout(Duration::from_secs(1)).unwrap() else {
            continue;
        };
        if m.kind == MessageKind::Data && m.data == ack.as_bytes() {
            break;
        }
    }
    let status = sub.wait(Duration::from_secs(10));
    let out = sub.output();
    assert!(status.success(), "{status}\n{out}");
    assert!(
        out.contains(&format!("sub: received {COUNT} messages intact")),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "sub: notice view changed: group {} epoch {epoch}: ",
            mp.group
        )),
        "{out}"
    );
    drop(doomed);
}
