//! Test helpers: a fresh socket directory per test and a loopback "daemon"
//! on a thread that answers Join with one fixed group and copies every
//! published record into every other joined client's subscription ring.
// Helpers measure wall time for test deadlines only.
#![allow(dead_code, clippy::disallowed_methods)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mcast_ipc::proto::ErrorCode;
use mcast_ipc::ring::RecordHeader;
use mcast_ipc::{
    sys, Access, ClientId, Member, Notice, Request, Response, RingSizes, Server, ServerEvent, View,
};

/// The group number the loopback gives every Join.
pub const GROUP: u32 = 7;

/// A directory under the system temp dir, unique per process and call,
/// removed on drop.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("mcast-ipc-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
    pub fn socket(&self) -> PathBuf {
        self.0.join("mcastd.sock")
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Small rings so that tests reach "full" quickly.
pub fn small_sizes() -> RingSizes {
    RingSizes {
        publication: 16 << 10,
        subscription: 16 << 10,
        max_message: 4 << 10,
    }
}

/// Knobs and observations shared with the loopback thread.
#[derive(Debug, Default)]
pub struct Shared {
    pub stop: AtomicBool,
    /// While set, the loopback does not pop publications.
    pub paused: AtomicBool,
    /// Pushes into a subscription ring that found it full (record dropped).
    pub full: AtomicU64,
    /// Records forwarded.
    pub forwarded: AtomicU64,
    /// Server::memory_bytes after the last loop iteration.
    pub memory: AtomicUsize,
    /// Iterations of the loop (to wait for "a full turn happened").
    pub turns: AtomicU64,
}

/// The loopback daemon, running on its own thread until dropped.
#[derive(Debug)]
pub struct Loopback {
    pub shared: Arc<Shared>,
    pub events: mpsc::Receiver<ServerEvent>,
    pub path: PathBuf,
    thread: Option<JoinHandle<()>>,
    pub dir: TempDir,
}

impl Loopback {
    pub fn start(tag: &str, access: Access, sizes: RingSizes) -> Loopback {
        Loopback::start_with(tag, access, sizes, false)
    }

    /// A loopback daemon that tells its clients it traces (they stamp what
    /// they publish and time what they read; it relays the stamps).
    pub fn traced(tag: &str) -> Loopback {
        Loopback::start_with(tag, Access::own_uid("test config"), small_sizes(), true)
    }

    fn start_with(tag: &str, access: Access, sizes: RingSizes, trace: bool) -> Loopback {
        let dir = TempDir::new(tag);
        let path = dir.socket();
        let mut server = Server::bind(&path, access, sizes, 16).unwrap();
        server.set_trace(trace);
        let shared = Arc::new(Shared::default());
        let (tx, events) = mpsc::channel();
        let s = shared.clone();
        let thread = std::thread::spawn(move || run(server, s, tx));
        Loopback {
            shared,
            events,
            path,
            thread: Some(thread),
            dir,
        }
    }

    pub fn default(tag: &str) -> Loopback {
        Loopback::start(tag, Access::own_uid("test config"), small_sizes())
    }

    /// The next event matching `f`, waiting at most 10 s.
    pub fn wait_event(&self, mut f: impl FnMut(&ServerEvent) -> bool) -> ServerEvent {
        loop {
            let e = self
                .events
                .recv_timeout(Duration::from_secs(10))
                .expect("no matching server event within 10 s");
            if f(&e) {
                return e;
            }
        }
    }

    /// Waits until the loop has gone round at least twice more (so that a
    /// knob just set has been seen).
    pub fn two_turns(&self) {
        let t = self.shared.turns.load(Ordering::SeqCst);
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.shared.turns.load(Ordering::SeqCst) < t + 2 {
            assert!(Instant::now() < deadline, "loopback stuck");
            std::thread::yield_now();
        }
    }
}

impl Drop for Loopback {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(mut server: Server, s: Arc<Shared>, tx: mpsc::Sender<ServerEvent>) {
    let mut events = Vec::new();
    let mut joined: BTreeSet<ClientId> = BTreeSet::new();
    let mut epoch = 1u64;
    let mut scratch = Vec::new();
    let mut fds = Vec::new();
    while !s.stop.load(Ordering::SeqCst) {
        server.poll(&mut events);
        for ev in events.drain(..) {
            match &ev {
                ServerEvent::Request {
                    client,
                    req,
                    request,
                } => match request {
                    Request::Join { group, .. } => {
                        joined.insert(*client);
                        epoch += 1;
                        let members: Vec<Member> = joined
                            .iter()
                            .enumerate()
                            .map(|(i, c)| Member {
                                rank: i as u32,
                                node: 1,
                                member: c.0,
                            })
                            .collect();
                        // Every member, the joiner included, hears of the
                        // new view before the joiner gets its answer.
                        for c in &joined {
                            server.notify(
                                *c,
                                Notice::ViewChanged {
                                    group: GROUP,
                                    epoch,
                                    members: members.clone(),
                                },
                            );
                        }
                        let rank = joined.iter().position(|c| c == client).unwrap() as u32;
                        server.reply(
                            *client,
                            *req,
                            Response::Joined {
                                group: GROUP,
                                name: group.clone(),
                                rank,
                                view: View { epoch, members },
                            },
                        );
                    }
                    Request::Leave { .. } => {
                        joined.remove(client);
                        server.reply(*client, *req, Response::Left);
                    }
                    // A barrier others already reached: released at once,
                    // nodes 7 and 9 having left meanwhile.
                    Request::Barrier { group } => server.reply(
                        *client,
                        *req,
                        Response::Released {
                            group: *group,
                            dropped: vec![7, 9],
                        },
                    ),
                    // An answer of N bytes of padding: for the reply limit.
                    Request::Query { group } if group.starts_with("big-reply:") => {
                        let n: usize = group["big-reply:".len()..].parse().unwrap_or(0);
                        let pad = "x".repeat(n);
                        server.reply(
                            *client,
                            *req,
                            Response::Json(serde_json::json!({ "pad": pad })),
                        );
                    }
                    Request::Query { group } if group == "cut-me-off" => {
                        joined.remove(client);
                        server.disconnect(*client, "test asked to be cut off");
                    }
                    Request::Query { group } => server.reply(
                        *client,
                        *req,
                        Response::error(ErrorCode::UnknownGroup, format!("no group {group}")),
                    ),
                    _ => server.reply(
                        *client,
                        *req,
                        Response::Json(serde_json::json!({ "clients": server.clients().len() })),
                    ),
                },
                ServerEvent::Disconnected { client, .. } | ServerEvent::CutOff { client, .. } => {
                    joined.remove(client);
                }
                ServerEvent::Connected { .. } => {}
            }
            let _ = tx.send(ev);
        }
        if !s.paused.load(Ordering::SeqCst) {
            for c in server.clients() {
                while let Some(p) = server.publications(c) {
                    let hdr = match p.peek() {
                        Ok(Some(r)) => {
                            scratch.clear();
                            scratch.extend_from_slice(r.payload);
                            r.header
                        }
                        Ok(None) => break,
                        Err(e) => {
                            server.disconnect(c, &e.to_string());
                            break;
                        }
                    };
                    p.pop().unwrap();
                    for d in joined.iter().filter(|d| **d != c) {
                        let out = RecordHeader {
                            source: c.0 as u32,
                            ..hdr
                        };
                        if let Some(sub) = server.subscription(*d) {
                            match sub.try_push(out, &[&scratch]) {
                                Ok(()) => {
                                    s.forwarded.fetch_add(1, Ordering::SeqCst);
                                }
                                Err(_) => {
                                    s.full.fetch_add(1, Ordering::SeqCst);
                                }
                            }
                        }
                    }
                }
                server.wake_publishers(c);
            }
        }
        s.memory.store(server.memory_bytes(), Ordering::SeqCst);
        s.turns.fetch_add(1, Ordering::SeqCst);
        // Block until something happens; the timeout only bounds how late a
        // knob change (paused, stop) is seen.
        fds.clear();
        server.poll_fds(&mut fds);
        let mut pfds: Vec<_> = fds.iter().map(|fd| sys::pollin(*fd)).collect();
        let idle = server.prepare_sleep();
        let wait = if idle {
            Duration::from_millis(5)
        } else {
            Duration::ZERO
        };
        let _ = sys::poll(&mut pfds, Some(wait));
    }
}
