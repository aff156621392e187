//! Hostile local clients (issue 23): one mcastd alone in a namespace, a
//! victim client that scribbles on its shared rings or abuses the control
//! socket while the daemon runs, and a bystander (a publisher and a
//! subscriber in one group) whose every message must arrive, in order and
//! intact, before and after. Each test checks that the daemon is still
//! running and answering `Stats`, that the victim was cut off with a reason
//! (its `CutOff` notice, the log line, `daemon.clients_cut_off`), or, for
//! scribbles the daemon never reads, that nothing changed at all. Root only
//! (CI runs as root); without privileges each test skips with a message, and
//! with CI=true a skip is a failure.
#![allow(
    clippy::disallowed_methods,
    reason = "tests wait on wall-clock deadlines"
)]

#[allow(dead_code)]
mod common;

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use mcast_ipc::proto::{ClientMessage, ServerMessage, MAX_CONTROL_MESSAGE, PROTOCOL_VERSION};
use mcast_ipc::ring::{
    self, OFF_CAPACITY, OFF_CONSUMER_SLEEPING, OFF_HEAD, OFF_MAGIC, OFF_PRODUCER_WAITING, OFF_TAIL,
    OFF_VERSION,
};
use mcast_ipc::{sys, Client, Error, ErrorCode, MessageKind, Notice, Request, Response};
use serde_json::Value;

/// The bystanders' group; some victims join it too.
const GROUP: &str = "shared";
/// Bound on every wait for something the daemon should do.
const WAIT: Duration = Duration::from_secs(10);
/// How long a bystander's `Stats` may take while a victim misbehaves.
const PROMPT: Duration = Duration::from_secs(1);

/// The bystander's `i`-th message: its number, then `i % 300` bytes that
/// depend on it.
fn payload(i: u64) -> Vec<u8> {
    let mut m = i.to_le_bytes().to_vec();
    m.extend((0..i % 300).map(|k| (i as u8).wrapping_mul(31) ^ k as u8));
    m
}

/// A publisher and a subscriber in [`GROUP`], on the daemon under test.
struct Bystander {
    publ: Client,
    sub: Client,
    group: u32,
    sent: u64,
}

impl Bystander {
    fn new(socket: &Path) -> Bystander {
        let mut sub = Client::connect(socket, "bystander-sub").unwrap();
        let s = sub.join(GROUP).unwrap();
        let mut publ = Client::connect(socket, "bystander-pub").unwrap();
        let p = publ.join(GROUP).unwrap();
        assert_eq!(s.group, p.group);
        let mut b = Bystander {
            publ,
            sub,
            group: p.group,
            sent: 0,
        };
        b.exchange(200);
        b
    }

    /// Publishes `n` messages; the subscriber must receive exactly them
    /// next, in order and intact (membership events aside).
    fn exchange(&mut self, n: u64) {
        for i in self.sent..self.sent + n {
            self.publ
                .publish_blocking(self.group, &payload(i), Some(WAIT))
                .unwrap_or_else(|e| panic!("bystander publishing message {i}: {e}"));
        }
        let deadline = Instant::now() + WAIT;
        let mut next = self.sent;
        while next < self.sent + n {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "the bystander received {} of {n} messages",
                next - self.sent
            );
            let Some(m) = self
                .sub
                .recv_timeout(left)
                .unwrap_or_else(|e| panic!("bystander subscriber: {e}"))
            else {
                continue;
            };
            if m.kind == MessageKind::Membership {
                continue;
            }
            assert_eq!(m.group, self.group);
            assert_eq!(
                m.data,
                payload(next),
                "the bystander's message {next} is not the one published"
            );
            next += 1;
        }
        self.sent += n;
    }

    /// `Stats` through the bystander's publisher, within [`PROMPT`].
    fn stats(&mut self) -> Value {
        let t = Instant::now();
        let v = stats(&mut self.publ);
        assert!(
            t.elapsed() < PROMPT,
            "Stats took {:?} for the bystander",
            t.elapsed()
        );
        v
    }
}

fn stats(c: &mut Client) -> Value {
    match c.request(Request::Stats) {
        Ok(Response::Json(v)) => v,
        other => panic!("Stats answered {other:?}"),
    }
}

fn counter(stats: &Value, key: &str) -> u64 {
    stats["daemon"][key]
        .as_u64()
        .unwrap_or_else(|| panic!("no daemon.{key} in {stats}"))
}

/// The daemon is running, and a new client gets `Stats` answered promptly.
fn assert_serving(cluster: &mut common::Cluster) -> Value {
    let d = &mut cluster.daemons[0];
    assert_eq!(d.exited(), None, "mcastd exited; log:\n{}", d.log_text());
    let t = Instant::now();
    let mut c = Client::connect(&d.socket, "checker").unwrap();
    let v = stats(&mut c);
    assert!(
        t.elapsed() < PROMPT,
        "connect + Stats took {:?}",
        t.elapsed()
    );
    v
}

/// Waits for the victim's `CutOff` notice and returns its reason.
fn wait_cut_off(victim: &mut Client) -> String {
    let deadline = Instant::now() + WAIT;
    loop {
        for n in victim.notices() {
            if let Notice::CutOff { reason } = n {
                return reason;
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "the victim was never cut off");
        match victim.wait_notice(left) {
            Ok(_) => {}
            Err(Error::CutOff { reason }) => return reason,
            Err(e) => panic!("the victim was disconnected without a CutOff notice: {e}"),
        }
    }
}

/// Checks a cut-off: the reason names `why`, the daemon logged it, counted
/// it, and still serves; the bystander's traffic goes on.
fn assert_cut_off(
    cluster: &mut common::Cluster,
    by: &mut Bystander,
    victim: &mut Client,
    cut_before: u64,
    why: &str,
) -> u64 {
    let reason = wait_cut_off(victim);
    assert!(reason.contains(why), "cut off for {reason:?}, not {why:?}");
    let line = cluster.daemons[0].wait_log(
        &format!("msg=\"client cut off\" client={} reason=", victim.id()),
        WAIT,
    );
    assert!(line.contains(why), "{line}");
    assert!(
        matches!(victim.publish(by.group, b"x"), Err(Error::CutOff { .. })),
        "a cut-off client's calls fail"
    );
    by.exchange(300);
    let s = by.stats();
    assert_eq!(counter(&s, "clients_cut_off"), cut_before + 1, "{s}");
    assert_serving(cluster);
    cut_before + 1
}

/// Where the victim's rings are in its shared memory.
struct Rings<'a> {
    map: &'a mcast_ipc::shm::Mapping,
    publication: usize,
    subscription: usize,
    pub_capacity: usize,
    sub_capacity: usize,
}

fn rings(c: &Client) -> Rings<'_> {
    let (map, layout) = c.shared_rings();
    Rings {
        map,
        publication: layout.publication_offset(),
        subscription: layout.subscription_offset(),
        pub_capacity: layout.publication,
        sub_capacity: layout.subscription,
    }
}

impl Rings<'_> {
    fn put_u64(&self, at: usize, v: u64) {
        self.map.atomic_u64(at).store(v, Ordering::Release);
    }
    fn get_u64(&self, at: usize) -> u64 {
        self.map.atomic_u64(at).load(Ordering::Acquire)
    }
    fn put_u32(&self, at: usize, v: u32) {
        self.map
            .atomic_u32(at)
            .expect("in the mapping")
            .store(v, Ordering::Release);
    }
    /// Writes a record header `len | group | source | flags` at publication
    /// ring position `pos` (no payload).
    fn put_record(&self, pos: usize, len: u32, group: u32) {
        let at = self.publication + ring::HEADER_BYTES + pos;
        for (i, w) in [len, group, 0, ring::FIRST | ring::LAST].iter().enumerate() {
            self.put_u32(at + 4 * i, *w);
        }
    }
}

/// A value a victim writes, computed from its ring's capacity.
type FromCapacity<T> = fn(usize) -> T;
/// A subscription tail, from the ring's head and capacity.
type TailFrom = fn(u64, usize) -> u64;

fn start(test: &str, extra: &str) -> Option<(common::Cluster, Bystander)> {
    let cluster = common::start_single(test, extra)?;
    let by = Bystander::new(cluster.socket(1));
    Some((cluster, by))
}

/// A victim connected, joined to the bystanders' group, with nothing in
/// flight in its publication ring.
fn victim(cluster: &common::Cluster, name: &str, join: bool) -> Client {
    let mut v = Client::connect(cluster.socket(1), name).unwrap();
    if join {
        v.join(GROUP).unwrap();
    }
    v
}

#[test]
fn a_publication_head_beyond_the_ring_cuts_the_client_off() {
    let Some((mut cluster, mut by)) = start("hostile-head", "") else {
        return;
    };
    let mut cut = 0;
    let heads: [(&str, FromCapacity<u64>); 3] = [
        ("one record past the capacity", |cap| cap as u64 + 8),
        ("near 2^64", |_| u64::MAX - 7),
        ("not 8-aligned", |_| 12),
    ];
    for (what, head) in heads {
        let mut v = victim(&cluster, what, true);
        let r = rings(&v);
        r.put_u64(r.publication + OFF_HEAD, head(r.pub_capacity));
        // The bystander's traffic wakes the daemon, which then finds it.
        by.exchange(100);
        cut = assert_cut_off(&mut cluster, &mut by, &mut v, cut, "publication ring");
    }
}

#[test]
fn a_record_longer_than_the_ring_or_a_stray_wrap_marker_cuts_the_client_off() {
    let Some((mut cluster, mut by)) = start("hostile-len", "") else {
        return;
    };
    let mut cut = 0;
    let group = by.group;
    let records: [(&str, FromCapacity<u32>); 4] = [
        ("twice the ring", |cap| 2 * cap as u32),
        ("just over the largest record", |cap| {
            ring::max_payload(cap) as u32 + 1
        }),
        ("u32::MAX - 1", |_| u32::MAX - 1),
        // u32::MAX is the wrap marker: at position 0 with 32 bytes
        // published, the marker claims the whole ring.
        ("a wrap marker", |_| u32::MAX),
    ];
    for (what, len) in records {
        let mut v = victim(&cluster, what, true);
        let r = rings(&v);
        r.put_record(0, len(r.pub_capacity), group);
        r.put_u64(r.publication + OFF_HEAD, 32);
        by.exchange(100);
        cut = assert_cut_off(&mut cluster, &mut by, &mut v, cut, "publication ring");
    }
}

#[test]
fn a_record_for_a_group_not_joined_is_dropped_and_the_client_told() {
    let Some((mut cluster, mut by)) = start("hostile-group", "") else {
        return;
    };
    let before = counter(&by.stats(), "publish_errors");
    // Not a member of the bystanders' group: it writes records for it (and
    // for a group that does not exist) by hand, as the client library
    // would write them.
    let mut v = victim(&cluster, "intruder", false);
    let r = rings(&v);
    for (i, group) in [by.group, 0xdead_beef].into_iter().enumerate() {
        let pos = 24 * i;
        r.put_record(pos, 8, group);
        r.map.write(
            r.publication + ring::HEADER_BYTES + pos + ring::RECORD_HEADER_BYTES,
            b"intruder",
        );
    }
    r.put_u64(r.publication + OFF_HEAD, 48);
    // The subscriber gets exactly the bystander's messages: none of the
    // intruder's came between them.
    by.exchange(300);
    let deadline = Instant::now() + WAIT;
    let mut errors = 0;
    while errors < 2 {
        assert!(Instant::now() < deadline, "{errors} Error notices of 2");
        v.wait_notice(WAIT).unwrap();
        for n in v.notices() {
            match n {
                Notice::Error { message } => {
                    assert!(message.contains("has not joined"), "{message}");
                    errors += 1;
                }
                other => panic!("{other:?}"),
            }
        }
    }
    let s = by.stats();
    assert_eq!(counter(&s, "publish_errors"), before + 2, "{s}");
    assert_eq!(counter(&s, "clients_cut_off"), 0, "{s}");
    // Dropped, not cut off: the intruder goes on as a client.
    assert!(matches!(v.request(Request::Stats), Ok(Response::Json(_))));
    by.exchange(100);
    assert_serving(&mut cluster);
}

#[test]
fn scribbled_ring_headers_and_sleep_flags_change_nothing() {
    let Some((mut cluster, mut by)) = start("hostile-header", "") else {
        return;
    };
    // Magic, version and capacity are checked once, when each side maps
    // the rings; both keep their own copy of the capacity afterwards. The
    // sleep flags only cost a spurious wake-up.
    let mut v = victim(&cluster, "scribbler", true);
    let r = rings(&v);
    for base in [r.publication, r.subscription] {
        r.put_u32(base + OFF_MAGIC, 0x0bad_f00d);
        r.put_u32(base + OFF_VERSION, 0xffff_ffff);
        r.put_u64(base + OFF_CAPACITY, u64::MAX);
    }
    r.put_u32(r.publication + OFF_PRODUCER_WAITING, 0xffff_ffff);
    r.put_u32(r.subscription + OFF_CONSUMER_SLEEPING, 0xffff_ffff);
    by.exchange(500);
    // The victim still receives every message of the group, intact.
    let deadline = Instant::now() + WAIT;
    let mut next = 0;
    while next < by.sent - 200 {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "the scribbler received {next} messages");
        match v.recv_timeout(left).unwrap() {
            Some(m) if m.kind == MessageKind::Data => {
                assert_eq!(m.data, payload(200 + next));
                next += 1;
            }
            _ => {}
        }
    }
    // And still publishes: a message to a group of its own arrives back
    // through a second client.
    let mut other = Client::connect(cluster.socket(1), "scribbler-peer").unwrap();
    let g = other.join("scribbled").unwrap().group;
    assert_eq!(v.join("scribbled").unwrap().group, g);
    v.publish_blocking(g, b"still here", Some(WAIT)).unwrap();
    let deadline = Instant::now() + WAIT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "the scribbler's message never arrived");
        if let Some(m) = other.recv_timeout(left).unwrap() {
            if m.kind == MessageKind::Data {
                assert_eq!(m.data, b"still here");
                break;
            }
        }
    }
    let s = by.stats();
    assert_eq!(counter(&s, "clients_cut_off"), 0, "{s}");
    assert_serving(&mut cluster);
}

#[test]
fn a_subscription_tail_moved_ahead_of_head_cuts_the_client_off() {
    // "hold" is the policy under which a subscription ring that never
    // takes a record again could cost the most: the group held back and
    // the victim's queue growing.
    let Some((mut cluster, mut by)) = start("hostile-tail", "slow_subscriber = \"hold\"") else {
        return;
    };
    let mut cut = 0;
    let tails: [(&str, TailFrom); 2] = [
        ("ahead of head", |head, _| head + 64),
        ("a ring and more behind", |head, cap| {
            head.wrapping_sub(2 * cap as u64)
        }),
    ];
    for (what, tail) in tails {
        let mut v = victim(&cluster, what, true);
        let r = rings(&v);
        let head = r.get_u64(r.subscription + OFF_HEAD);
        r.put_u64(r.subscription + OFF_TAIL, tail(head, r.sub_capacity));
        // The daemon finds it when it next delivers to the victim.
        by.exchange(100);
        cut = assert_cut_off(&mut cluster, &mut by, &mut v, cut, "subscription ring");
    }
    let s = by.stats();
    assert_eq!(counter(&s, "group_pauses"), 0, "{s}");
}

/// A raw control connection: what a client that does not use the library
/// can send.
struct Raw {
    sock: OwnedFd,
    buf: Vec<u8>,
    /// The memfd and eventfds of the Welcome, kept open.
    _fds: Vec<OwnedFd>,
}

impl Raw {
    /// Connects and says Hello (the daemon sets up its rings).
    fn hello(socket: &Path, name: &str) -> Raw {
        let sock = sys::seqpacket_connect(socket).unwrap();
        let mut raw = Raw {
            sock,
            buf: vec![0; MAX_CONTROL_MESSAGE + 1],
            _fds: Vec::new(),
        };
        raw.send_blocking(&request(
            1,
            Request::Hello {
                version: PROTOCOL_VERSION,
                name: name.into(),
            },
        ));
        match raw.recv(WAIT) {
            Some(ServerMessage::Response {
                body: Response::Welcome { .. },
                ..
            }) => raw,
            other => panic!("Hello answered {other:?}"),
        }
    }

    fn send_blocking(&self, bytes: &[u8]) {
        sys::send_msg(self.sock.as_raw_fd(), bytes, &[], false).unwrap();
    }

    fn try_send(&self, bytes: &[u8]) -> io::Result<usize> {
        sys::send_msg(self.sock.as_raw_fd(), bytes, &[], true)
    }

    /// The next message, waiting up to `t`; None when the daemon closed the
    /// connection. Panics if nothing came.
    fn recv(&mut self, t: Duration) -> Option<ServerMessage> {
        let mut p = [sys::pollin(self.sock.as_raw_fd())];
        sys::poll(&mut p, Some(t)).unwrap();
        match sys::recv_msg(self.sock.as_raw_fd(), &mut self.buf, true) {
            Ok(Some(r)) if r.full_len == 0 => None,
            Ok(Some(r)) => {
                self._fds.extend(r.fds);
                Some(serde_json::from_slice(&self.buf[..r.len]).unwrap())
            }
            Ok(None) => panic!("nothing from the daemon within {t:?}"),
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => None,
            Err(e) => panic!("{e}"),
        }
    }
}

fn request(id: u64, request: Request) -> Vec<u8> {
    serde_json::to_vec(&ClientMessage { id, request }).unwrap()
}

/// Daemon's resident memory in KiB.
fn vm_rss_kib(cluster: &common::Cluster) -> u64 {
    let pid = cluster.daemons[0].pid().expect("running");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/PID/status")
}

#[test]
fn a_flood_of_control_requests_leaves_the_others_served_promptly() {
    let Some((mut cluster, mut by)) = start("hostile-flood", "") else {
        return;
    };
    const N: u64 = 10_000;
    let socket = cluster.socket(1).clone();
    // The flood: requests as fast as the socket takes them, each answered
    // (the flooder reads what comes back whenever the socket is full).
    let flood = std::thread::spawn(move || {
        let mut raw = Raw::hello(&socket, "flooder");
        let started = Instant::now();
        let (mut sent, mut answered) = (0u64, 0u64);
        while answered < N {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "{answered} of {N} answered"
            );
            // Up to 128 requests in flight: within what the daemon queues
            // for a client (MAX_PENDING), so this client reads its replies.
            if sent < N && sent - answered < 128 {
                let r = if sent % 2 == 0 {
                    Request::Stats
                } else {
                    Request::Groups
                };
                match raw.try_send(&request(sent + 2, r)) {
                    Ok(_) => {
                        sent += 1;
                        continue;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => panic!("flooder cut off after {sent} requests: {e}"),
                }
            }
            match raw.recv(WAIT) {
                Some(ServerMessage::Response { id, body }) => {
                    assert!(
                        !matches!(body, Response::Error { .. }),
                        "request {id}: {body:?}"
                    );
                    answered += 1;
                }
                Some(ServerMessage::Notice(n)) => panic!("flooder got {n:?}"),
                None => panic!("flooder disconnected after {answered} answers"),
            }
        }
        started.elapsed()
    });
    // Meanwhile the bystander publishes, receives and asks for Stats, each
    // answered within PROMPT.
    let mut rounds = 0;
    while !flood.is_finished() {
        by.exchange(50);
        by.stats();
        rounds += 1;
    }
    let took = flood.join().unwrap();
    eprintln!("{N} requests answered in {took:?}; {rounds} bystander rounds meanwhile");
    assert!(rounds > 0);
    let s = assert_serving(&mut cluster);
    assert!(counter(&s, "requests") >= N, "{s}");
    assert_eq!(counter(&s, "clients_cut_off"), 0, "{s}");
    by.exchange(100);
}

#[test]
fn oversized_and_malformed_requests_are_answered_then_the_client_is_cut_off() {
    let Some((mut cluster, mut by)) = start("hostile-malformed", "") else {
        return;
    };
    let mut raw = Raw::hello(cluster.socket(1), "garbage");
    let mut garbage: Vec<Vec<u8>> = vec![
        vec![b'{'; MAX_CONTROL_MESSAGE + 1],
        b"not json".to_vec(),
        b"{\"id\": 7, \"request\": {\"type\": \"stats\"".to_vec(),
        b"{\"id\": 8, \"request\": {\"type\": \"shutdown\"}}".to_vec(),
        b"{\"id\": 9, \"request\": {\"type\": \"join\", \"group\": 5}}".to_vec(),
        b"{\"id\": -1}".to_vec(),
        b"[1, 2, 3]\n{\"id\": 10}".to_vec(),
        vec![0xff, 0xfe, 0x00, 0x80],
        Vec::from(&b"\"\\ud800\""[..]),
    ];
    garbage.push(
        format!(
            "{{\"id\": 11, \"request\": {{\"type\": \"join\", \"group\": \"{}\"}}}}",
            "x".repeat(MAX_CONTROL_MESSAGE)
        )
        .into_bytes(),
    );
    let mut answered = 0;
    let mut malformed = 0u32;
    let limit = mcast_ipc::proto::MAX_MALFORMED;
    'outer: loop {
        for g in &garbage {
            raw.send_blocking(g);
            malformed += 1;
            match raw.recv(WAIT) {
                Some(ServerMessage::Response {
                    body: Response::Error { code, message },
                    ..
                }) => {
                    let want = if g.len() > MAX_CONTROL_MESSAGE {
                        ErrorCode::TooLarge
                    } else {
                        ErrorCode::Malformed
                    };
                    assert_eq!(code, want, "{message}");
                    assert!(message.len() <= 2048, "{} bytes of error", message.len());
                    answered += 1;
                }
                other => panic!("garbage {malformed} answered {other:?}"),
            }
            if malformed == limit + 1 {
                break 'outer;
            }
            // Between the garbage, a proper request is still served.
            raw.send_blocking(&request(100 + malformed as u64, Request::Stats));
            match raw.recv(WAIT) {
                Some(ServerMessage::Response {
                    body: Response::Json(_),
                    ..
                }) => {}
                other => panic!("Stats after garbage answered {other:?}"),
            }
        }
    }
    assert_eq!(answered, limit + 1);
    // After the answer to the one past the limit: the cut-off and the close.
    let reason = match raw.recv(WAIT) {
        Some(ServerMessage::Notice(Notice::CutOff { reason })) => reason,
        other => panic!("expected a CutOff notice, got {other:?}"),
    };
    assert!(reason.contains("malformed"), "{reason}");
    let line = cluster.daemons[0].wait_log("msg=\"client cut off\"", WAIT);
    assert!(line.contains("malformed"), "{line}");
    by.exchange(300);
    let s = by.stats();
    assert_eq!(counter(&s, "clients_cut_off"), 1, "{s}");
    assert_serving(&mut cluster);
}

#[test]
fn a_client_that_never_reads_its_replies_is_cut_off_and_memory_stays_bounded() {
    let Some((mut cluster, mut by)) = start("hostile-unread", "") else {
        return;
    };
    let rss_before = vm_rss_kib(&cluster);
    let raw = Raw::hello(cluster.socket(1), "deaf");
    // Stats requests, never reading a reply, until the daemon hangs up.
    let started = Instant::now();
    let mut sent = 0u64;
    let why = loop {
        assert!(
            started.elapsed() < Duration::from_secs(30) && sent < 200_000,
            "still connected after {sent} unread replies"
        );
        match raw.try_send(&request(sent + 2, Request::Stats)) {
            Ok(_) => sent += 1,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                // Until the socket takes more (POLLOUT, 4 in <poll.h>).
                let mut p = [sys::pollin(raw.sock.as_raw_fd())];
                p[0].events = 4;
                sys::poll(&mut p, Some(Duration::from_millis(100))).unwrap();
            }
            Err(e) => break e,
        }
    };
    eprintln!(
        "hung up after {sent} requests ({why}) in {:?}",
        started.elapsed()
    );
    let line = cluster.daemons[0].wait_log("msg=\"client cut off\"", WAIT);
    assert!(line.contains("does not read"), "{line}");
    let rss_after = vm_rss_kib(&cluster);
    eprintln!("mcastd VmRSS {rss_before} KiB before, {rss_after} KiB after");
    assert!(
        rss_after < rss_before + 32 * 1024,
        "mcastd grew from {rss_before} to {rss_after} KiB"
    );
    by.exchange(300);
    let s = by.stats();
    assert_eq!(counter(&s, "clients_cut_off"), 1, "{s}");
    assert_serving(&mut cluster);
}
