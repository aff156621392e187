//! A client in another process is SIGKILLed mid-stream: the server notices
//! the hang-up, reports Disconnected and frees everything it held for it.
//!
//! The child is this test binary run again with `MCAST_IPC_CHILD_SOCKET`
//! set, executing only `child_publisher`.
// Deadlines in wall time bound the test.
#![allow(clippy::disallowed_methods)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use mcast_ipc::{sys, Access, Response, RingSizes, Server, ServerEvent, View};

const CHILD_ENV: &str = "MCAST_IPC_CHILD_SOCKET";

/// The child's body: connect, join, publish forever. Does nothing in a
/// normal test run.
#[test]
fn child_publisher() {
    let Some(path) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let mut c = mcast_ipc::Client::connect(&path, "doomed").unwrap();
    let g = c.join("g").unwrap().group;
    let mut i = 0u64;
    loop {
        c.publish_blocking(g, &i.to_le_bytes(), None).unwrap();
        i += 1;
    }
}

fn fd_count() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

fn memfd_mappings() -> usize {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .filter(|l| l.contains("mcast-ipc-"))
        .count()
}

fn pump(server: &mut Server, events: &mut Vec<ServerEvent>) {
    let mut fds = Vec::new();
    server.poll_fds(&mut fds);
    let mut p: Vec<_> = fds.iter().map(|f| sys::pollin(*f)).collect();
    let wait = if server.prepare_sleep() {
        Duration::from_millis(20)
    } else {
        Duration::ZERO
    };
    sys::poll(&mut p, Some(wait)).unwrap();
    server.poll(events);
}

#[test]
fn a_killed_client_is_disconnected_and_its_memory_freed() {
    let dir = std::env::temp_dir().join(format!("mcast-ipc-kill-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("mcastd.sock");
    let sizes = RingSizes {
        publication: 64 << 10,
        subscription: 64 << 10,
        max_message: 1024,
    };
    let mut server = Server::bind(&path, Access::own_uid("test"), sizes, 4).unwrap();
    let fds_before = fd_count();
    assert_eq!(memfd_mappings(), 0);

    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "child_publisher",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, &path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();

    let deadline = Instant::now() + Duration::from_secs(20);
    let mut events = Vec::new();
    let mut client = None;
    let mut next = 0u64;
    // Serve the child until 10,000 of its records came through, in order.
    while next < 10_000 {
        assert!(Instant::now() < deadline, "child did not publish");
        pump(&mut server, &mut events);
        for e in events.drain(..) {
            match e {
                ServerEvent::Connected {
                    client: c,
                    pid,
                    name,
                    ..
                } => {
                    assert_eq!(pid, child.id());
                    assert_eq!(name, "doomed");
                    client = Some(c);
                }
                ServerEvent::Request { client: c, req, .. } => server.reply(
                    c,
                    req,
                    Response::Joined {
                        group: 3,
                        name: "g".into(),
                        rank: 0,
                        view: View::default(),
                    },
                ),
                ServerEvent::Disconnected { reason, .. } | ServerEvent::CutOff { reason, .. } => {
                    panic!("early: {reason}")
                }
            }
        }
        let Some(c) = client else { continue };
        let ring = server.publications(c).unwrap();
        while let Some(r) = ring.peek().unwrap() {
            assert_eq!(r.header.group, 3);
            assert_eq!(r.payload, next.to_le_bytes());
            next += 1;
            ring.pop().unwrap();
        }
        server.wake_publishers(c);
    }
    let c = client.unwrap();
    assert!(fd_count() > fds_before);
    assert_eq!(
        memfd_mappings(),
        1,
        "the server maps the client's memfd once"
    );

    // SIGKILL mid-stream: no goodbye.
    child.kill().unwrap();
    child.wait().unwrap();
    let reason = loop {
        assert!(Instant::now() < deadline, "no Disconnected after the kill");
        pump(&mut server, &mut events);
        if let Some(ServerEvent::Disconnected { client, reason }) = events.pop() {
            assert_eq!(client, c);
            break reason;
        }
        // Records still in the ring may be drained or not: nothing depends on it.
    };
    assert!(reason.contains("closed"), "{reason}");
    assert!(server.clients().is_empty());
    assert!(server.publications(c).is_none());
    assert_eq!(server.memory_bytes(), 0);
    assert_eq!(
        fd_count(),
        fds_before,
        "every fd held for the client is closed"
    );
    assert_eq!(memfd_mappings(), 0, "the client's rings are unmapped");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
