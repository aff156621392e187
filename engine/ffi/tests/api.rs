//! The exported functions called directly from Rust, for their error paths:
//! NULL pointers and bad strings, no daemon, too large, too small (the
//! message kept), empty, timed out, full, disconnected.
// Calling the C ABI from Rust is unsafe by definition; every call here
// passes pointers to live locals or to clients from mcast_connect.
#![allow(unsafe_code, clippy::undocumented_unsafe_blocks)]

#[path = "../../ipc/tests/common/mod.rs"]
mod common;

use std::ffi::{c_char, c_int, CStr, CString};
use std::path::Path;
use std::ptr;
use std::sync::atomic::Ordering;

use common::{Loopback, TempDir, GROUP};
use mcast::*;

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
    let (mut len, mut group, mut source) = (usize::MAX, 0, 0);
    let p = if buf.is_empty() {
        ptr::null_mut()
    } else {
        buf.as_mut_ptr().cast()
    };
    let rc = unsafe {
        mcast_recv(
            c,
            p,
            buf.len(),
            &mut len,
            &mut group,
            &mut source,
            timeout_ms,
        )
    };
    (rc, len, group, source)
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
