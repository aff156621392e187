//! The exported functions called directly from Rust, for their error paths:
//! NULL pointers and bad strings, no daemon, too large, too small (the
//! message kept), empty, timed out, full, disconnected; and membership
//! events and notices, from a scripted stand-in for mcastd that writes what
//! the daemon writes.
// Calling the C ABI from Rust is unsafe by definition; every call here
// passes pointers to live locals or to clients from mcast_connect.
#![allow(unsafe_code, clippy::undocumented_unsafe_blocks)]

#[path = "../../ipc/tests/common/mod.rs"]
mod common;

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::{Path, PathBuf};
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use common::{Loopback, TempDir, GROUP};
use mcast::*;
use mcast_ipc::ring::{BATCH, EVENT, FIRST, LAST};
use mcast_ipc::{
    sys, Access, Member, Notice, RecordHeader, Request, Response, Server, ServerEvent, View,
};

fn cstring(p: &Path) -> CString {
    CString::new(p.to_str().unwrap()).unwrap()
}

/// `mcast_last_error(c)` as a String.
fn last_error(c: *const McastClient) -> String {
    let mut buf = [0 as c_char; 1024];
    let n = unsafe { mcast_last_error(c, buf.as_mut_ptr(), buf.len()) };
    assert!(n >= 0 && (n as usize) < buf.len(), "{n}");
    unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_str()
        .unwrap()
        .to_string()
}

fn connect(path: &Path, name: &str) -> *mut McastClient {
    let mut c = ptr::null_mut();
    let name = CString::new(name).unwrap();
    let rc = unsafe { mcast_connect(cstring(path).as_ptr(), name.as_ptr(), &mut c) };
    assert_eq!(rc, MCAST_OK, "{}", last_error(ptr::null()));
    assert!(!c.is_null());
    c
}

fn join(c: *mut McastClient) -> u32 {
    let (mut group, mut rank) = (0, 0);
    let rc = unsafe { mcast_join(c, c"g".as_ptr(), &mut group, &mut rank) };
    assert_eq!(rc, MCAST_OK, "{}", last_error(c));
    group
}

/// (rc, len, group, source) of one mcast_recv into `buf`.
fn recv(c: *mut McastClient, buf: &mut [u8], timeout_ms: c_int) -> (c_int, usize, u32, u32) {
    let (rc, len, group, source, _) = receive(buf, |p, cap, len, group, source, _| unsafe {
        mcast_recv(c, p, cap, len, group, source, timeout_ms)
    });
    (rc, len, group, source)
}

/// (rc, len, group, source, kind) of one mcast_recv_ex into `buf`.
fn recv_ex(
    c: *mut McastClient,
    buf: &mut [u8],
    timeout_ms: c_int,
) -> (c_int, usize, u32, u32, c_int) {
    receive(buf, |p, cap, len, group, source, kind| unsafe {
        mcast_recv_ex(c, p, cap, len, group, source, kind, timeout_ms)
    })
}

/// One receive into `buf` (NULL when empty) by `call(buf, cap, len_out,
/// group_out, source_out, kind_out)`: the code and what it wrote.
fn receive(
    buf: &mut [u8],
    call: impl FnOnce(*mut c_void, usize, &mut usize, &mut u32, &mut u32, &mut c_int) -> c_int,
) -> (c_int, usize, u32, u32, c_int) {
    let (mut len, mut group, mut source, mut kind) = (usize::MAX, 0, u32::MAX, -1);
    let p = if buf.is_empty() {
        ptr::null_mut()
    } else {
        buf.as_mut_ptr().cast()
    };
    let rc = call(p, buf.len(), &mut len, &mut group, &mut source, &mut kind);
    (rc, len, group, source, kind)
}

fn publish(c: *mut McastClient, group: u32, msg: &[u8]) -> c_int {
    unsafe { mcast_publish(c, group, msg.as_ptr().cast(), msg.len()) }
}

#[test]
fn null_pointers_and_bad_arguments_are_einval_not_crashes() {
    let mut c = ptr::null_mut();
    // connect: NULL path, NULL name, NULL out, name not UTF-8.
    let rc = unsafe { mcast_connect(ptr::null(), c"n".as_ptr(), &mut c) };
    assert_eq!(rc, MCAST_EINVAL);
    assert!(c.is_null());
    assert!(last_error(ptr::null()).contains("socket_path is NULL"));
    let rc = unsafe { mcast_connect(c"/x".as_ptr(), ptr::null(), &mut c) };
    assert_eq!(rc, MCAST_EINVAL);
    let rc = unsafe { mcast_connect(c"/x".as_ptr(), c"n".as_ptr(), ptr::null_mut()) };
    assert_eq!(rc, MCAST_EINVAL);
    assert!(last_error(ptr::null()).contains("out is NULL"));
    let bad = CString::new(vec![b'n', 0xff, b'x']).unwrap();
    let rc = unsafe { mcast_connect(c"/x".as_ptr(), bad.as_ptr(), &mut c) };
    assert_eq!(rc, MCAST_EINVAL);
    assert!(last_error(ptr::null()).contains("not valid UTF-8"));

    // Every client call with a NULL client.
    let mut len = 0;
    let mut buf = [0u8; 8];
    unsafe {
        assert_eq!(
            mcast_join(
                ptr::null_mut(),
                c"g".as_ptr(),
                ptr::null_mut(),
                ptr::null_mut()
            ),
            MCAST_EINVAL
        );
        assert!(last_error(ptr::null()).contains("client is NULL"));
        assert_eq!(mcast_leave(ptr::null_mut(), 1), MCAST_EINVAL);
        assert_eq!(
            mcast_publish(ptr::null_mut(), 1, buf.as_ptr().cast(), 1),
            MCAST_EINVAL
        );
        assert_eq!(
            mcast_publish_blocking(ptr::null_mut(), 1, buf.as_ptr().cast(), 1, -1),
            MCAST_EINVAL
        );
        assert_eq!(
            mcast_recv(
                ptr::null_mut(),
                buf.as_mut_ptr().cast(),
                8,
                &mut len,
                ptr::null_mut(),
                ptr::null_mut(),
                0
            ),
            MCAST_EINVAL
        );
        assert_eq!(mcast_flush(ptr::null_mut(), 0), MCAST_EINVAL);
        assert_eq!(mcast_max_message(ptr::null()), 0);
        mcast_close(ptr::null_mut());
        // last_error: NULL buffer with a capacity; size query with none.
        assert_eq!(
            mcast_last_error(ptr::null(), ptr::null_mut(), 4),
            MCAST_EINVAL
        );
        let full = mcast_last_error(ptr::null(), ptr::null_mut(), 0);
        assert_eq!(full as usize, "the client is NULL".len());
        // Truncated, NUL-terminated, full length returned.
        let mut small = [1 as c_char; 5];
        assert_eq!(mcast_last_error(ptr::null(), small.as_mut_ptr(), 5), full);
        assert_eq!(CStr::from_ptr(small.as_ptr()).to_str().unwrap(), "the ");
    }

    // Bad arguments on a live client.
    let lb = Loopback::default("ffi-inval");
    let c = connect(&lb.path, "c");
    let g = join(c);
    unsafe {
        let rc = mcast_join(c, bad.as_ptr(), ptr::null_mut(), ptr::null_mut());
        assert_eq!(rc, MCAST_EINVAL);
        assert!(
            last_error(c).contains("group is not valid UTF-8"),
            "{}",
            last_error(c)
        );
        assert_eq!(
            mcast_join(c, ptr::null(), ptr::null_mut(), ptr::null_mut()),
            MCAST_EINVAL
        );
        assert_eq!(mcast_publish(c, g, ptr::null(), 3), MCAST_EINVAL);
        assert_eq!(
            mcast_publish_blocking(c, g, c"x".as_ptr().cast(), 1, -2),
            MCAST_EINVAL
        );
        assert_eq!(
            mcast_recv(
                c,
                buf.as_mut_ptr().cast(),
                8,
                ptr::null_mut(),
                ptr::null_mut(),
                ptr::null_mut(),
                0
            ),
            MCAST_EINVAL
        );
        assert_eq!(
            mcast_recv(
                c,
                ptr::null_mut(),
                8,
                &mut len,
                ptr::null_mut(),
                ptr::null_mut(),
                0
            ),
            MCAST_EINVAL
        );
        assert_eq!(recv(c, &mut buf, -5).0, MCAST_EINVAL);
        // A zero-length message may come with a NULL pointer.
        assert_eq!(mcast_publish(c, g, ptr::null(), 0), MCAST_OK);
        mcast_close(c);
    }
}

#[test]
fn no_daemon_is_enotrunning_naming_the_path() {
    let dir = TempDir::new("ffi-none");
    let path = dir.socket();
    let mut c = ptr::null_mut();
    let rc = unsafe { mcast_connect(cstring(&path).as_ptr(), c"n".as_ptr(), &mut c) };
    assert_eq!(rc, MCAST_ENOTRUNNING);
    assert!(c.is_null());
    let e = last_error(ptr::null());
    assert!(
        e.contains(path.to_str().unwrap()) && e.contains("not running"),
        "{e}"
    );
    let words = unsafe { CStr::from_ptr(mcast_strerror(rc)) };
    assert_eq!(words.to_str().unwrap(), "mcastd is not running");
}

#[test]
fn too_large_too_small_empty_and_timed_out() {
    let lb = Loopback::default("ffi-sizes");
    let a = connect(&lb.path, "a");
    let b = connect(&lb.path, "b");
    let g = join(a);
    assert_eq!(join(b), GROUP);
    assert_eq!(g, GROUP);

    // Too large: one byte over the limit.
    let max = unsafe { mcast_max_message(a) };
    assert!(max > 100);
    let big = vec![7u8; max + 1];
    assert_eq!(publish(a, g, &big), MCAST_ETOOLARGE);
    assert!(
        last_error(a).contains(&format!("limit is {max}")),
        "{}",
        last_error(a)
    );
    // The limit itself is fine.
    assert_eq!(publish(a, g, &big[..max]), MCAST_OK);
    let mut buf = vec![0u8; max];
    let (rc, len, group, _) = recv(b, &mut buf, 5000);
    assert_eq!((rc, len, group), (MCAST_OK, max, g));

    // Too small: the size comes back and the message stays.
    let msg: Vec<u8> = (0..100u8).collect();
    assert_eq!(publish(a, g, &msg), MCAST_OK);
    let mut small = [0u8; 10];
    let (rc, len, _, _) = recv(b, &mut small, 5000);
    assert_eq!((rc, len), (MCAST_ETOOSMALL, 100), "{}", last_error(b));
    assert!(last_error(b).contains("100 bytes"), "{}", last_error(b));
    // Asking the size with no buffer at all, without waiting: same answer.
    let (rc, len, _, _) = recv(b, &mut [], 0);
    assert_eq!((rc, len), (MCAST_ETOOSMALL, 100));
    // A large enough buffer gets it, whole.
    let mut buf = [0u8; 200];
    let (rc, len, group, source) = recv(b, &mut buf, 0);
    assert_eq!((rc, len, group), (MCAST_OK, 100, g));
    assert_ne!(source, 0);
    assert_eq!(&buf[..100], &msg[..]);

    // Then nothing: EAGAIN without waiting, ETIMEDOUT after a wait.
    assert_eq!(recv(b, &mut buf, 0).0, MCAST_EAGAIN);
    assert_eq!(recv(b, &mut buf, 30).0, MCAST_ETIMEDOUT);
    unsafe {
        assert_eq!(mcast_flush(a, 5000), MCAST_OK);
        mcast_close(a);
        mcast_close(b);
    }
}

#[test]
fn full_ring_would_block_then_blocking_times_out() {
    let lb = Loopback::default("ffi-full");
    let a = connect(&lb.path, "a");
    let g = join(a);
    lb.shared.paused.store(true, Ordering::SeqCst);
    lb.two_turns();
    let msg = [1u8; 1000];
    let mut n = 0;
    let rc = loop {
        let rc = publish(a, g, &msg);
        if rc != MCAST_OK {
            break rc;
        }
        n += 1;
        assert!(n < 1000, "the ring never filled");
    };
    assert_eq!(rc, MCAST_EWOULDBLOCK, "{}", last_error(a));
    let rc = unsafe { mcast_publish_blocking(a, g, msg.as_ptr().cast(), msg.len(), 30) };
    assert_eq!(rc, MCAST_ETIMEDOUT);
    assert_eq!(unsafe { mcast_flush(a, 30) }, MCAST_ETIMEDOUT);
    // Once the daemon takes records again, the blocking publish goes through.
    lb.shared.paused.store(false, Ordering::SeqCst);
    let rc = unsafe { mcast_publish_blocking(a, g, msg.as_ptr().cast(), msg.len(), -1) };
    assert_eq!(rc, MCAST_OK, "{}", last_error(a));
    unsafe { mcast_close(a) };
}

#[test]
fn a_stopped_daemon_is_edisconnected() {
    let lb = Loopback::default("ffi-gone");
    let a = connect(&lb.path, "a");
    join(a);
    drop(lb);
    let mut buf = [0u8; 16];
    let (rc, _, _, _) = recv(a, &mut buf, 5000);
    assert_eq!(rc, MCAST_EDISCONNECTED, "{}", last_error(a));
    assert!(last_error(a).contains("disconnected"), "{}", last_error(a));
    // And stays so; closing does not wait.
    assert_eq!(publish(a, GROUP, b"x"), MCAST_EDISCONNECTED);
    unsafe { mcast_close(a) };
}

/// The view event a daemon writes when node 4 dies: node 4 gone and failed.
const VIEW_EVENT: &str = r#"{"epoch":6,"agent":1,"members":[{"rank":0,"node":1,"member":1},{"rank":1,"node":2,"member":3}],"joined":[],"gone":[4],"failed":[4]}"#;
/// The event of this node's eviction.
const EVICTED_EVENT: &str = r#"{"evicted":true,"by":3,"rejoining":true}"#;
/// What the scripted daemon writes into a joiner's ring: (source, flags, bytes).
const SCRIPT: [(u32, u32, &str); 4] = [
    (4, FIRST | LAST, "before"),
    (0, FIRST | LAST | EVENT, VIEW_EVENT),
    (2, FIRST | LAST, "after"),
    (0, FIRST | LAST | EVENT, EVICTED_EVENT),
];
/// What a Join of "batched" finds in its ring: the first three as one batch
/// record (a batched frame), then the fourth alone, all from node 5.
const BATCHED: [&[u8]; 4] = [b"one", b"two", b"three", b"four"];
/// The error notice the scripted daemon sends with every join.
const ERROR_NOTICE: &str = "a message for group 9, which this client has not joined, was dropped";

/// A stand-in for mcastd: a Join (of group GROUP) is answered after a
/// ViewChanged and an Error notice and after [`SCRIPT`] is in the joiner's
/// ring; a Join of "cut-me-off" cuts the client off.
struct Scripted {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    _dir: TempDir,
}

impl Scripted {
    fn start(tag: &str) -> Scripted {
        let dir = TempDir::new(tag);
        let path = dir.socket();
        let mut server =
            Server::bind(&path, Access::own_uid("test"), common::small_sizes(), 16).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            let (mut events, mut fds) = (Vec::new(), Vec::new());
            while !s.load(Ordering::SeqCst) {
                server.poll(&mut events);
                for ev in events.drain(..) {
                    if let ServerEvent::Request {
                        client,
                        req,
                        request: Request::Join { group, .. },
                    } = ev
                    {
                        if group == "cut-me-off" {
                            server.disconnect(client, "too slow: 1 MiB waiting");
                            continue;
                        }
                        let members = vec![Member {
                            rank: 0,
                            node: 1,
                            member: client.0,
                        }];
                        if group == "batched" {
                            // A batched frame as mcastd hands it over, then
                            // a lone message.
                            let sub = server.subscription(client).unwrap();
                            let frame = mcast_ipc::batch::encode(BATCHED[..3].iter().copied());
                            let mut hdr = RecordHeader {
                                group: GROUP,
                                source: 5,
                                flags: FIRST | LAST | BATCH,
                                stamp: 0,
                            };
                            sub.try_push(hdr, &[&frame]).unwrap();
                            hdr.flags = FIRST | LAST;
                            sub.try_push(hdr, &[BATCHED[3]]).unwrap();
                        } else {
                            server.notify(
                                client,
                                Notice::ViewChanged {
                                    group: GROUP,
                                    epoch: 5,
                                    members: members.clone(),
                                },
                            );
                            server.notify(
                                client,
                                Notice::Error {
                                    message: ERROR_NOTICE.into(),
                                },
                            );
                            let sub = server.subscription(client).unwrap();
                            for (source, flags, bytes) in SCRIPT {
                                let hdr = RecordHeader {
                                    group: GROUP,
                                    source,
                                    flags,
                                    stamp: 0,
                                };
                                sub.try_push(hdr, &[bytes.as_bytes()]).unwrap();
                            }
                        }
                        let view = View { epoch: 5, members };
                        let joined = Response::Joined {
                            group: GROUP,
                            name: group,
                            rank: 0,
                            view,
                        };
                        server.reply(client, req, joined);
                    }
                }
                fds.clear();
                server.poll_fds(&mut fds);
                let mut pfds: Vec<_> = fds.iter().map(|fd| sys::pollin(*fd)).collect();
                let _ = sys::poll(&mut pfds, Some(Duration::from_millis(5)));
            }
        });
        Scripted {
            path,
            stop,
            thread: Some(thread),
            _dir: dir,
        }
    }
}

impl Drop for Scripted {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// (rc, list) of mcast_event_nodes with room for `cap` ids.
fn event_nodes(event: &[u8], list: c_int, cap: usize) -> (c_int, Vec<u32>) {
    let mut out = vec![0u32; cap];
    let mut count = usize::MAX;
    let p = if cap == 0 {
        ptr::null_mut()
    } else {
        out.as_mut_ptr()
    };
    let rc =
        unsafe { mcast_event_nodes(event.as_ptr().cast(), event.len(), list, p, cap, &mut count) };
    out.truncate(count.min(cap));
    if count > cap {
        out.push(u32::MAX); // marks "more than copied"
    }
    (rc, out)
}

/// (rc, notice, text, full text length) of one mcast_next_notice with a
/// text buffer of `cap` bytes.
fn next_notice(c: *mut McastClient, cap: usize) -> (c_int, McastNotice, String, usize) {
    let mut n = McastNotice {
        kind: -1,
        ..McastNotice::default()
    };
    let mut buf = vec![1 as c_char; cap];
    let mut len = usize::MAX;
    let p = if cap == 0 {
        ptr::null_mut()
    } else {
        buf.as_mut_ptr()
    };
    let rc = unsafe { mcast_next_notice(c, &mut n, p, cap, &mut len) };
    let text = if rc == MCAST_OK && cap > 0 {
        unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_str()
            .unwrap()
            .to_string()
    } else {
        String::new()
    };
    (rc, n, text, len)
}

#[test]
fn recv_ex_gives_events_in_stream_order_with_their_kind() {
    let d = Scripted::start("ffi-events");
    let c = connect(&d.path, "c");
    assert_eq!(join(c), GROUP);
    let mut buf = [0u8; 512];
    let (rc, len, group, source, kind) = recv_ex(c, &mut buf, 5000);
    assert_eq!(
        (rc, group, source, kind),
        (MCAST_OK, GROUP, 4, MCAST_MSG_DATA)
    );
    assert_eq!(&buf[..len], b"before");

    // The event does not fit: its size comes back and it stays.
    let mut small = [0u8; 8];
    let (rc, len, _, _, _) = recv_ex(c, &mut small, 0);
    assert_eq!(
        (rc, len),
        (MCAST_ETOOSMALL, VIEW_EVENT.len()),
        "{}",
        last_error(c)
    );
    let (rc, len, group, source, kind) = recv_ex(c, &mut buf, 0);
    assert_eq!(
        (rc, group, source, kind),
        (MCAST_OK, GROUP, 0, MCAST_MSG_MEMBERSHIP)
    );
    let event = buf[..len].to_vec();
    assert_eq!(event, VIEW_EVENT.as_bytes());

    // Parsed without a JSON parser in C.
    let mut ev = McastEvent::default();
    let rc = unsafe { mcast_event_parse(event.as_ptr().cast(), event.len(), &mut ev) };
    assert_eq!(rc, MCAST_OK);
    assert_eq!(
        ev,
        McastEvent {
            kind: MCAST_EVENT_VIEW,
            epoch: 6,
            agent: 1,
            members: 2,
            joined: 0,
            gone: 1,
            failed: 1,
            ..McastEvent::default()
        }
    );
    assert_eq!(
        event_nodes(&event, MCAST_NODES_GONE, 4),
        (MCAST_OK, vec![4])
    );
    assert_eq!(
        event_nodes(&event, MCAST_NODES_FAILED, 1),
        (MCAST_OK, vec![4])
    );
    assert_eq!(
        event_nodes(&event, MCAST_NODES_JOINED, 0),
        (MCAST_OK, vec![])
    );
    assert_eq!(
        event_nodes(&event, MCAST_NODES_MEMBERS, 2),
        (MCAST_OK, vec![1, 2])
    );
    // Too small: the first ids, the full count, ETOOSMALL; NULL with 0 asks the count.
    assert_eq!(
        event_nodes(&event, MCAST_NODES_MEMBERS, 1),
        (MCAST_ETOOSMALL, vec![1, u32::MAX])
    );
    assert_eq!(
        event_nodes(&event, MCAST_NODES_GONE, 0),
        (MCAST_ETOOSMALL, vec![u32::MAX])
    );
    assert_eq!(event_nodes(&event, 4, 4).0, MCAST_EINVAL);
    assert!(
        last_error(ptr::null()).contains("MCAST_NODES_"),
        "{}",
        last_error(ptr::null())
    );

    let (rc, len, _, source, kind) = recv_ex(c, &mut buf, 0);
    assert_eq!((rc, source, kind), (MCAST_OK, 2, MCAST_MSG_DATA));
    assert_eq!(&buf[..len], b"after");
    let (rc, len, _, _, kind) = recv_ex(c, &mut buf, 0);
    assert_eq!((rc, kind), (MCAST_OK, MCAST_MSG_MEMBERSHIP));
    let rc = unsafe { mcast_event_parse(buf.as_ptr().cast(), len, &mut ev) };
    assert_eq!(rc, MCAST_OK);
    assert_eq!(
        (ev.kind, ev.evicted_by, ev.gone),
        (MCAST_EVENT_EVICTED, 3, 0)
    );
    assert_eq!(
        event_nodes(&buf[..len], MCAST_NODES_GONE, 4),
        (MCAST_OK, vec![])
    );

    // Then nothing.
    assert_eq!(recv_ex(c, &mut buf, 0).0, MCAST_EAGAIN);
    assert_eq!(recv_ex(c, &mut buf, 20).0, MCAST_ETIMEDOUT);
    unsafe { mcast_close(c) };
}

#[test]
fn recv_skips_events_even_one_left_pending_by_recv_ex() {
    let d = Scripted::start("ffi-skip");
    let c = connect(&d.path, "c");
    join(c);
    let mut buf = [0u8; 512];
    let (rc, len, _, source) = recv(c, &mut buf, 5000);
    assert_eq!((rc, source), (MCAST_OK, 4));
    assert_eq!(&buf[..len], b"before");
    // recv_ex leaves the event pending (buffer too small); recv drops it.
    assert_eq!(recv_ex(c, &mut [0u8; 4], 0).0, MCAST_ETOOSMALL);
    let (rc, len, _, source) = recv(c, &mut buf, 0);
    assert_eq!((rc, source), (MCAST_OK, 2), "{}", last_error(c));
    assert_eq!(&buf[..len], b"after");
    // The eviction event is skipped too: nothing left.
    assert_eq!(recv(c, &mut buf, 0).0, MCAST_EAGAIN);
    assert_eq!(recv(c, &mut buf, 20).0, MCAST_ETIMEDOUT);
    unsafe { mcast_close(c) };
}

#[test]
fn notices_come_in_order_then_the_cut_off_stays_visible() {
    let d = Scripted::start("ffi-notices");
    let c = connect(&d.path, "c");
    join(c);
    let (rc, n, text, len) = next_notice(c, 256);
    assert_eq!(rc, MCAST_OK, "{}", last_error(c));
    assert_eq!(
        n,
        McastNotice {
            kind: MCAST_NOTICE_VIEW_CHANGED,
            group: GROUP,
            epoch: 5,
            members: 1
        }
    );
    assert_eq!(text, "group 7 epoch 5: 1 members, on nodes [1]");
    assert_eq!(len, text.len());
    // Truncated like mcast_last_error, the full length returned.
    let (rc, n, text, len) = next_notice(c, 5);
    assert_eq!((rc, n.kind, n.group), (MCAST_OK, MCAST_NOTICE_ERROR, 0));
    assert_eq!(
        (text.as_str(), len),
        (&ERROR_NOTICE[..4], ERROR_NOTICE.len())
    );
    assert_eq!(next_notice(c, 16).0, MCAST_EAGAIN);

    // Cut off: the join fails, the notice says why, then the code stays.
    let rc = unsafe { mcast_join(c, c"cut-me-off".as_ptr(), ptr::null_mut(), ptr::null_mut()) };
    assert_eq!(rc, MCAST_ECUTOFF, "{}", last_error(c));
    // The scripted records are still in the ring: delivered before the code.
    let mut buf = [0u8; 512];
    assert_eq!(recv(c, &mut buf, 0).0, MCAST_OK);
    assert_eq!(recv(c, &mut buf, 0).0, MCAST_OK);
    assert_eq!(recv(c, &mut buf, 0).0, MCAST_ECUTOFF);
    // No text buffer: only the numbers and the length.
    let (rc, n, _, len) = next_notice(c, 0);
    assert_eq!((rc, n.kind), (MCAST_OK, MCAST_NOTICE_CUT_OFF));
    assert_eq!(len, "too slow: 1 MiB waiting".len());
    assert_eq!(next_notice(c, 16).0, MCAST_ECUTOFF);
    assert!(last_error(c).contains("too slow"), "{}", last_error(c));
    assert_eq!(recv_ex(c, &mut buf, 0).0, MCAST_ECUTOFF);
    unsafe { mcast_close(c) };
}

#[test]
fn event_and_notice_calls_reject_null_and_garbage() {
    let mut ev = McastEvent::default();
    let mut n = McastNotice::default();
    let mut count = 0usize;
    let mut len = 0usize;
    let mut kind = 0;
    let json = VIEW_EVENT.as_bytes();
    let mut buf = [0u8; 8];
    unsafe {
        // NULL client.
        assert_eq!(
            mcast_recv_ex(
                ptr::null_mut(),
                buf.as_mut_ptr().cast(),
                8,
                &mut len,
                ptr::null_mut(),
                ptr::null_mut(),
                &mut kind,
                0
            ),
            MCAST_EINVAL
        );
        assert_eq!(
            mcast_next_notice(ptr::null_mut(), &mut n, ptr::null_mut(), 0, &mut len),
            MCAST_EINVAL
        );
        assert!(last_error(ptr::null()).contains("client is NULL"));
        // Events: NULL out, NULL data with a length, not JSON, not an object.
        assert_eq!(
            mcast_event_parse(json.as_ptr().cast(), json.len(), ptr::null_mut()),
            MCAST_EINVAL
        );
        assert!(last_error(ptr::null()).contains("out is NULL"));
        assert_eq!(mcast_event_parse(ptr::null(), 3, &mut ev), MCAST_EINVAL);
        assert_eq!(mcast_event_parse(ptr::null(), 0, &mut ev), MCAST_EINVAL);
        for bad in [&b"hello"[..], b"[1]", br#"{"epoch":1,"gone":"x"}"#] {
            assert_eq!(
                mcast_event_parse(bad.as_ptr().cast(), bad.len(), &mut ev),
                MCAST_EINVAL
            );
            assert!(last_error(ptr::null()).contains("membership event"));
        }
        assert_eq!(
            mcast_event_nodes(
                json.as_ptr().cast(),
                json.len(),
                MCAST_NODES_GONE,
                ptr::null_mut(),
                0,
                ptr::null_mut()
            ),
            MCAST_EINVAL
        );
        assert!(last_error(ptr::null()).contains("count_out is NULL"));
        assert_eq!(
            mcast_event_nodes(
                json.as_ptr().cast(),
                json.len(),
                MCAST_NODES_GONE,
                ptr::null_mut(),
                3,
                &mut count
            ),
            MCAST_EINVAL
        );
        assert_eq!(
            mcast_event_nodes(
                b"x".as_ptr().cast(),
                1,
                MCAST_NODES_GONE,
                ptr::null_mut(),
                0,
                &mut count
            ),
            MCAST_EINVAL
        );
    }

    // On a live client.
    let d = Scripted::start("ffi-evnull");
    let c = connect(&d.path, "c");
    join(c);
    unsafe {
        assert_eq!(
            mcast_recv_ex(
                c,
                buf.as_mut_ptr().cast(),
                8,
                ptr::null_mut(),
                ptr::null_mut(),
                ptr::null_mut(),
                ptr::null_mut(),
                0
            ),
            MCAST_EINVAL
        );
        assert_eq!(
            mcast_recv_ex(
                c,
                ptr::null_mut(),
                8,
                &mut len,
                ptr::null_mut(),
                ptr::null_mut(),
                ptr::null_mut(),
                0
            ),
            MCAST_EINVAL
        );
        assert_eq!(recv_ex(c, &mut buf, -7).0, MCAST_EINVAL);
        assert_eq!(
            mcast_next_notice(c, ptr::null_mut(), ptr::null_mut(), 0, &mut len),
            MCAST_EINVAL
        );
        assert!(last_error(c).contains("out is NULL"), "{}", last_error(c));
        assert_eq!(
            mcast_next_notice(c, &mut n, ptr::null_mut(), 4, &mut len),
            MCAST_EINVAL
        );
        // The optional out-parameters may all be NULL.
        let mut big = [0u8; 512];
        assert_eq!(
            mcast_recv_ex(
                c,
                big.as_mut_ptr().cast(),
                512,
                &mut len,
                ptr::null_mut(),
                ptr::null_mut(),
                ptr::null_mut(),
                0
            ),
            MCAST_OK
        );
        assert_eq!(
            mcast_next_notice(c, &mut n, ptr::null_mut(), 0, ptr::null_mut()),
            MCAST_OK
        );
        mcast_close(c);
    }
}

/// `mcast_msg` entries for `bodies` (NULL data for an empty one).
fn msgs_of(bodies: &[Vec<u8>]) -> Vec<McastMsg> {
    bodies
        .iter()
        .map(|b| McastMsg {
            data: if b.is_empty() {
                ptr::null()
            } else {
                b.as_ptr().cast()
            },
            len: b.len(),
        })
        .collect()
}

/// (rc, *taken_out) of one mcast_publish_batch.
fn publish_batch(c: *mut McastClient, group: u32, msgs: &[McastMsg]) -> (c_int, usize) {
    let mut taken = usize::MAX;
    let rc = unsafe { mcast_publish_batch(c, group, msgs.as_ptr(), msgs.len(), &mut taken) };
    (rc, taken)
}

/// One message as an mcast_recv_batch callback saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    kind: c_int,
    group: u32,
    source: u32,
    data: Vec<u8>,
    /// Where the bytes were, as an address.
    at: usize,
}

/// The callback: appends to the `Vec<Seen>` at `arg`.
unsafe extern "C" fn collect(arg: *mut c_void, m: *const McastMessageView) {
    let seen = unsafe { &mut *arg.cast::<Vec<Seen>>() };
    let m = unsafe { &*m };
    let data = if m.len == 0 {
        Vec::new()
    } else {
        unsafe { std::slice::from_raw_parts(m.data.cast::<u8>(), m.len) }.to_vec()
    };
    seen.push(Seen {
        kind: m.kind,
        group: m.group,
        source: m.source,
        data,
        at: m.data as usize,
    });
}

/// (rc, *count_out, what the callback saw) of one mcast_recv_batch.
fn recv_batch(c: *mut McastClient, max: usize, timeout_ms: c_int) -> (c_int, usize, Vec<Seen>) {
    let mut seen: Vec<Seen> = Vec::new();
    let mut count = usize::MAX;
    let arg = (&mut seen as *mut Vec<Seen>).cast::<c_void>();
    let rc = unsafe { mcast_recv_batch(c, max, Some(collect), arg, &mut count, timeout_ms) };
    (rc, count, seen)
}

/// Whether address `at` is in the shared memory of `c`'s rings.
fn in_ring(c: *mut McastClient, at: usize) -> bool {
    let (map, _) = unsafe { &*c }.client.shared_rings();
    let all = map.slice(0, map.len()).unwrap().as_ptr_range();
    (all.start as usize..all.end as usize).contains(&at)
}

#[test]
fn publish_batch_then_recv_batch_move_many_messages_per_call_in_order() {
    let lb = Loopback::default("ffi-batch");
    let a = connect(&lb.path, "a");
    let b = connect(&lb.path, "b");
    let g = join(a);
    join(b);
    // 40 messages of 0 to 299 bytes, the first empty (NULL data).
    let bodies: Vec<Vec<u8>> = (0..40usize).map(|i| vec![i as u8; i * 13 % 300]).collect();
    assert_eq!(
        publish_batch(a, g, &msgs_of(&bodies)),
        (MCAST_OK, 40),
        "{}",
        last_error(a)
    );
    let mut got: Vec<Seen> = Vec::new();
    while got.len() < bodies.len() {
        let (rc, count, seen) = recv_batch(b, 16, 5000);
        assert_eq!(rc, MCAST_OK, "{}", last_error(b));
        assert_eq!(count, seen.len());
        assert!((1..=16).contains(&count), "{count}");
        got.extend(seen);
    }
    let source = got[0].source;
    assert_ne!(source, 0);
    for (i, s) in got.iter().enumerate() {
        assert_eq!(
            (s.kind, s.group, s.source, &s.data),
            (MCAST_MSG_DATA, g, source, &bodies[i]),
            "message {i}"
        );
        // Lent straight from the shared ring, not copied.
        assert!(s.data.is_empty() || in_ring(b, s.at), "message {i}");
    }
    assert!(!in_ring(b, bodies[1].as_ptr() as usize));
    // Then nothing: EAGAIN at once, ETIMEDOUT after a wait; no calls.
    assert_eq!(recv_batch(b, 16, 0), (MCAST_EAGAIN, 0, vec![]));
    assert_eq!(recv_batch(b, 16, 20), (MCAST_ETIMEDOUT, 0, vec![]));
    unsafe {
        mcast_close(a);
        mcast_close(b);
    }
}

#[test]
fn publish_batch_takes_what_fits_and_refuses_bad_batches_whole() {
    let lb = Loopback::default("ffi-batch-full");
    let a = connect(&lb.path, "a");
    let g = join(a);
    lb.shared.paused.store(true, Ordering::SeqCst);
    lb.two_turns();
    let mut taken = 7usize;
    let x = [1u8; 8];
    let max = unsafe { mcast_max_message(a) };
    let big = vec![2u8; max + 1];
    unsafe {
        // Bad arguments publish nothing (the count below proves it).
        let one = [McastMsg {
            data: x.as_ptr().cast(),
            len: 8,
        }];
        assert_eq!(
            mcast_publish_batch(a, g, one.as_ptr(), 1, ptr::null_mut()),
            MCAST_EINVAL
        );
        assert!(last_error(a).contains("taken_out is NULL"));
        assert_eq!(
            mcast_publish_batch(a, g, ptr::null(), 2, &mut taken),
            MCAST_EINVAL
        );
        assert_eq!(taken, 0);
        let holed = [
            one[0],
            McastMsg {
                data: ptr::null(),
                len: 3,
            },
        ];
        assert_eq!(
            mcast_publish_batch(a, g, holed.as_ptr(), 2, &mut taken),
            MCAST_EINVAL
        );
        assert!(
            last_error(a).contains("msgs[1].data is NULL"),
            "{}",
            last_error(a)
        );
        assert_eq!(
            mcast_publish_batch(ptr::null_mut(), g, one.as_ptr(), 1, &mut taken),
            MCAST_EINVAL
        );
        assert_eq!(
            mcast_publish_batch_blocking(a, g, one.as_ptr(), 1, &mut taken, -3),
            MCAST_EINVAL
        );
        // No messages: nothing to do.
        taken = 7;
        assert_eq!(
            mcast_publish_batch(a, g, ptr::null(), 0, &mut taken),
            MCAST_OK
        );
        assert_eq!(taken, 0);
    }
    // Too large first: refused; too large later: the batch stops before it.
    let (rc, taken) = publish_batch(a, g, &msgs_of(std::slice::from_ref(&big)));
    assert_eq!((rc, taken), (MCAST_ETOOLARGE, 0));
    let (rc, taken) = publish_batch(a, g, &msgs_of(&[x.to_vec(), big]));
    assert_eq!((rc, taken), (MCAST_OK, 1));
    // Fill the ring: after the 24-byte record above, 16 KiB holds exactly
    // five of 3,272 bytes (one fewer had the bad batches left anything).
    let bodies = vec![vec![3u8; 3256]; 20];
    let msgs = msgs_of(&bodies);
    assert_eq!(publish_batch(a, g, &msgs), (MCAST_OK, 5));
    assert_eq!(publish_batch(a, g, &msgs[5..]), (MCAST_EWOULDBLOCK, 0));
    let mut taken = 9usize;
    let rc = unsafe { mcast_publish_batch_blocking(a, g, msgs.as_ptr(), 5, &mut taken, 20) };
    assert_eq!((rc, taken), (MCAST_ETIMEDOUT, 0));
    // Once the daemon takes records again, the blocking call goes through.
    lb.shared.paused.store(false, Ordering::SeqCst);
    let rc = unsafe { mcast_publish_batch_blocking(a, g, msgs.as_ptr(), 5, &mut taken, -1) };
    assert_eq!(rc, MCAST_OK, "{}", last_error(a));
    assert!((1..=5).contains(&taken), "{taken}");
    unsafe { mcast_close(a) };
}

#[test]
fn a_batch_record_reaches_c_one_message_at_a_time() {
    let d = Scripted::start("ffi-batch-record");
    let c = connect(&d.path, "c");
    let (mut group, mut rank) = (0, 0);
    let rc = unsafe { mcast_join(c, c"batched".as_ptr(), &mut group, &mut rank) };
    assert_eq!(rc, MCAST_OK, "{}", last_error(c));
    // One message per mcast_recv_ex, from inside the record...
    let mut buf = [0u8; 64];
    let (rc, len, group, source, kind) = recv_ex(c, &mut buf, 5000);
    assert_eq!(
        (rc, group, source, kind),
        (MCAST_OK, GROUP, 5, MCAST_MSG_DATA)
    );
    assert_eq!(&buf[..len], b"one");
    // ...a buffer too small keeps the next one...
    let (rc, len, _, _, _) = recv_ex(c, &mut [0u8; 2], 0);
    assert_eq!((rc, len), (MCAST_ETOOSMALL, 3));
    // ...which comes first in a batch, then the record's last, then the
    // lone message after it.
    let (rc, count, seen) = recv_batch(c, 10, 0);
    assert_eq!((rc, count), (MCAST_OK, 3), "{}", last_error(c));
    let got: Vec<(u32, &[u8])> = seen.iter().map(|s| (s.source, &s.data[..])).collect();
    assert_eq!(got, [(5, BATCHED[1]), (5, BATCHED[2]), (5, BATCHED[3])]);
    let lent: Vec<bool> = seen.iter().map(|s| in_ring(c, s.at)).collect();
    assert_eq!(lent, [false, true, true], "the kept one is a copy");
    assert_eq!(recv_batch(c, 10, 0), (MCAST_EAGAIN, 0, vec![]));
    unsafe { mcast_close(c) };
}

#[test]
fn recv_batch_gives_events_with_their_kind_after_a_kept_message() {
    let d = Scripted::start("ffi-recv-batch");
    let c = connect(&d.path, "c");
    join(c);
    // mcast_recv_ex keeps the first message for a larger buffer...
    let (rc, len, _, _, _) = recv_ex(c, &mut [0u8; 2], 5000);
    assert_eq!((rc, len), (MCAST_ETOOSMALL, "before".len()));
    // ...and mcast_recv_batch hands it over first, then what the ring holds.
    let (rc, count, seen) = recv_batch(c, 10, 0);
    assert_eq!((rc, count), (MCAST_OK, 4), "{}", last_error(c));
    let summary: Vec<(c_int, u32, u32, &[u8])> = seen
        .iter()
        .map(|s| (s.kind, s.group, s.source, &s.data[..]))
        .collect();
    assert_eq!(
        summary,
        [
            (MCAST_MSG_DATA, GROUP, 4, &b"before"[..]),
            (MCAST_MSG_MEMBERSHIP, GROUP, 0, VIEW_EVENT.as_bytes()),
            (MCAST_MSG_DATA, GROUP, 2, &b"after"[..]),
            (MCAST_MSG_MEMBERSHIP, GROUP, 0, EVICTED_EVENT.as_bytes()),
        ]
    );
    // The kept one was a copy; the rest were lent from the ring.
    let lent: Vec<bool> = seen.iter().map(|s| in_ring(c, s.at)).collect();
    assert_eq!(lent, [false, true, true, true]);
    assert_eq!(recv_batch(c, 10, 0), (MCAST_EAGAIN, 0, vec![]));
    unsafe { mcast_close(c) };

    // max bounds a batch; the rest waits for the next call.
    let c = connect(&d.path, "c2");
    join(c);
    let (rc, count, seen) = recv_batch(c, 3, 5000);
    assert_eq!((rc, count, seen.len()), (MCAST_OK, 3, 3));
    let (rc, count, seen) = recv_batch(c, 3, 0);
    assert_eq!((rc, count), (MCAST_OK, 1));
    assert_eq!(seen[0].data, EVICTED_EVENT.as_bytes());
    // Bad arguments: no callback, no room, a bad timeout, no client.
    let mut count = 5usize;
    unsafe {
        assert_eq!(
            mcast_recv_batch(c, 3, None, ptr::null_mut(), &mut count, 0),
            MCAST_EINVAL
        );
        assert_eq!(count, 0);
        assert!(last_error(c).contains("cb is NULL"), "{}", last_error(c));
        assert_eq!(
            mcast_recv_batch(c, 0, Some(collect), ptr::null_mut(), &mut count, 0),
            MCAST_EINVAL
        );
        assert_eq!(
            mcast_recv_batch(c, 3, Some(collect), ptr::null_mut(), ptr::null_mut(), -9),
            MCAST_EINVAL
        );
        assert_eq!(
            mcast_recv_batch(
                ptr::null_mut(),
                3,
                Some(collect),
                ptr::null_mut(),
                &mut count,
                0
            ),
            MCAST_EINVAL
        );
        mcast_close(c);
    }
}

#[test]
fn a_barrier_returns_the_nodes_dropped_as_far_as_there_is_room() {
    let lb = Loopback::default("ffi-barrier");
    let c = connect(&lb.dir.socket(), "barrier");
    let group = join(c);
    // The loopback releases at once, nodes 7 and 9 dropped.
    let mut dropped = [0u32; 4];
    let mut count = 0usize;
    let rc = unsafe { mcast_barrier(c, group, 1000, dropped.as_mut_ptr(), 4, &mut count) };
    assert_eq!(rc, MCAST_OK, "{}", last_error(c));
    assert_eq!((count, &dropped[..2]), (2, &[7, 9][..]));
    // Room for one: the first is copied, the count is still 2.
    let mut one = [0u32; 1];
    let rc = unsafe { mcast_barrier(c, group, 1000, one.as_mut_ptr(), 1, &mut count) };
    assert_eq!((rc, count, one[0]), (MCAST_OK, 2, 7));
    // No room and no count wanted.
    let rc = unsafe { mcast_barrier(c, group, -1, ptr::null_mut(), 0, ptr::null_mut()) };
    assert_eq!(rc, MCAST_OK, "{}", last_error(c));
    // A NULL list with room claimed, and a NULL client, are errors.
    let rc = unsafe { mcast_barrier(c, group, -1, ptr::null_mut(), 3, &mut count) };
    assert_eq!(rc, MCAST_EINVAL);
    assert!(last_error(c).contains("dropped is NULL"));
    let rc = unsafe {
        mcast_barrier(
            ptr::null_mut(),
            group,
            -1,
            ptr::null_mut(),
            0,
            ptr::null_mut(),
        )
    };
    assert_eq!(rc, MCAST_EINVAL);
    unsafe { mcast_close(c) };
}

#[test]
fn read_hop_times_what_a_client_read_when_the_daemon_traces() {
    let mut hop = McastHop::default();
    unsafe {
        assert_eq!(mcast_read_hop(ptr::null(), &mut hop), MCAST_EINVAL);
    }
    let lb = Loopback::traced("ffi-hop");
    let (a, b) = (connect(&lb.path, "a"), connect(&lb.path, "b"));
    let g = join(a);
    join(b);
    unsafe {
        assert_eq!(mcast_read_hop(b, ptr::null_mut()), MCAST_EINVAL);
        for i in 0..5u8 {
            assert_eq!(mcast_publish(a, g, [i; 40].as_ptr().cast(), 40), MCAST_OK);
        }
    }
    let mut buf = [0u8; 64];
    for i in 0..5u8 {
        let (rc, len, _, _) = recv(b, &mut buf, 5000);
        assert_eq!((rc, &buf[..len]), (MCAST_OK, &[i; 40][..]));
    }
    unsafe {
        assert_eq!(mcast_read_hop(b, &mut hop), 1);
    }
    assert_eq!(hop.count, 5);
    assert!(hop.p50_ns > 0 && hop.p50_ns <= hop.max_ns, "{hop:?}");
    unsafe {
        mcast_close(a);
        mcast_close(b);
    }
    // A daemon that does not trace: 0, and *out is left alone.
    let plain = Loopback::default("ffi-nohop");
    let c = connect(&plain.path, "c");
    let mut untouched = McastHop {
        count: 77,
        ..McastHop::default()
    };
    unsafe {
        assert_eq!(mcast_read_hop(c, &mut untouched), 0);
        mcast_close(c);
    }
    assert_eq!(untouched.count, 77);
}

#[test]
fn publish_scatter_writes_one_record_of_all_parts_and_rejects_bad_ones() {
    let lb = Loopback::default("ffi-scatter");
    let a = connect(&lb.path, "a");
    let b = connect(&lb.path, "b");
    let g = join(a);
    join(b);
    let part = |node, member, data: &[u8]| McastPart {
        node,
        member,
        data: if data.is_empty() {
            ptr::null()
        } else {
            data.as_ptr().cast()
        },
        len: data.len(),
    };
    let parts = [part(1, 7, b"seven"), part(2, 9, b"")];
    let rc = unsafe { mcast_publish_scatter(a, g, parts.as_ptr(), parts.len(), 0) };
    assert_eq!(rc, MCAST_OK, "{}", last_error(a));
    // (The stand-in hands the record on as it is: the parts, encoded.)
    let mut want = Vec::new();
    mcast_ipc::scatter::encode(&[(1, 7, b"seven"), (2, 9, b"")], &mut want);
    let (rc, count, seen) = recv_batch(b, 16, 5000);
    assert_eq!((rc, count), (MCAST_OK, 1), "{}", last_error(b));
    assert_eq!(seen[0].data, want);
    // No parts, NULL parts, a NULL part with a length, a bad timeout.
    let bad = [part(1, 7, b"")];
    let mut null_data = bad;
    null_data[0].len = 3;
    let cases: [(*const McastPart, usize, c_int, &str); 4] = [
        (parts.as_ptr(), 0, 0, "needs parts"),
        (ptr::null(), 2, 0, "needs parts"),
        (null_data.as_ptr(), 1, 0, "parts[0].data is NULL"),
        (parts.as_ptr(), 2, -5, "timeout_ms"),
    ];
    for (p, n, t, why) in cases {
        let rc = unsafe { mcast_publish_scatter(a, g, p, n, t) };
        assert_eq!(rc, MCAST_EINVAL, "{why}");
        assert!(last_error(a).contains(why), "{}", last_error(a));
    }
    assert_eq!(
        unsafe { mcast_publish_scatter(ptr::null_mut(), g, parts.as_ptr(), 2, 0) },
        MCAST_EINVAL
    );
    unsafe {
        mcast_close(a);
        mcast_close(b);
    }
}

#[test]
fn a_join_names_the_mode_it_relies_on_or_none() {
    let lb = Loopback::default("ffi-mode");
    let c = connect(&lb.path, "moded");
    let (mut group, mut rank) = (0, u32::MAX);
    let rc = unsafe { mcast_join_mode(c, c"g".as_ptr(), c"total".as_ptr(), &mut group, &mut rank) };
    assert_eq!(rc, MCAST_OK, "{}", last_error(c));
    assert_eq!((group, rank), (GROUP, 0));
    lb.wait_event(|e| {
        matches!(e, ServerEvent::Request { request: Request::Join { group, mode: Some(m) }, .. }
            if group == "g" && m == "total")
    });
    let rc = unsafe {
        mcast_join_mode(
            c,
            c"h".as_ptr(),
            ptr::null(),
            ptr::null_mut(),
            ptr::null_mut(),
        )
    };
    assert_eq!(rc, MCAST_OK, "{}", last_error(c));
    lb.wait_event(|e| {
        matches!(e, ServerEvent::Request { request: Request::Join { group, mode: None }, .. }
            if group == "h")
    });
    let bad = [0xffu8 as c_char, 0];
    let rc = unsafe {
        mcast_join_mode(
            c,
            c"g".as_ptr(),
            bad.as_ptr(),
            ptr::null_mut(),
            ptr::null_mut(),
        )
    };
    assert_eq!(rc, MCAST_EINVAL);
    assert!(last_error(c).contains("mode"), "{}", last_error(c));
    unsafe { mcast_close(c) };
}
