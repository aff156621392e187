//! The `extern "C"` functions declared in `include/mcast.h`.
//!
//! Every function checks its pointers for NULL and its strings for UTF-8
//! before using them (`MCAST_EINVAL` otherwise) and runs its body under
//! `catch_unwind`, so a panic becomes `MCAST_EIO` with a message instead of
//! unwinding into C. What the checks cannot see (a dangling pointer, a buffer
//! shorter than its stated length, one client used by two threads at once,
//! a receive callback that calls back into its own client) is the caller's
//! side of each function's `# Safety` contract, as in C.

use std::ffi::{c_char, c_int, c_void, CStr, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::ptr;
use std::time::Duration;

use mcast_ipc::Client;

use crate::{
    msg_kind, notice_info, panic_message, parse_event, set_thread_error, strerror, thread_error,
    Fail, McastClient, McastEvent, McastHop, McastMessageView, McastMsg, McastNotice, McastPart,
    McastRecvCallback, MCAST_EINVAL, MCAST_EIO, MCAST_ETOOSMALL, MCAST_OK,
};

/// Runs `f`; a panic becomes `MCAST_EIO`, its message this thread's error.
fn guard(f: impl FnOnce() -> c_int) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(code) => code,
        Err(p) => {
            set_thread_error(panic_message(&*p));
            MCAST_EIO
        }
    }
}

/// Runs `f` on the client behind `c`; a failure's message becomes the
/// client's last error, a panic `MCAST_EIO`.
///
/// # Safety
/// `c` is NULL or a client from `mcast_connect`, not yet closed, that no
/// other thread uses during the call.
unsafe fn with_client(
    c: *mut McastClient,
    f: impl FnOnce(&mut McastClient) -> Result<c_int, Fail>,
) -> c_int {
    guard(|| {
        // SAFETY: by this function's contract `c` is NULL (as_mut gives None)
        // or points to a live McastClient that nothing else references now.
        let Some(cl) = (unsafe { c.as_mut() }) else {
            set_thread_error("the client is NULL".into());
            return MCAST_EINVAL;
        };
        match catch_unwind(AssertUnwindSafe(|| f(&mut *cl))) {
            Ok(Ok(code)) => code,
            Ok(Err(fail)) => {
                cl.last_error = fail.message;
                fail.code
            }
            Err(p) => {
                let m = panic_message(&*p);
                set_thread_error(m.clone());
                cl.last_error = m;
                MCAST_EIO
            }
        }
    })
}

/// A C string argument as UTF-8.
///
/// # Safety
/// `p` is NULL or a NUL-terminated string valid for reads.
unsafe fn str_arg<'a>(p: *const c_char, what: &str) -> Result<&'a str, Fail> {
    // SAFETY: the caller's contract for `p`.
    let c = unsafe { cstr_arg(p, what) }?;
    c.to_str()
        .map_err(|e| Fail::inval(format!("{what} is not valid UTF-8: {e}")))
}

/// A C string argument, checked for NULL only.
///
/// # Safety
/// `p` is NULL or a NUL-terminated string valid for reads.
unsafe fn cstr_arg<'a>(p: *const c_char, what: &str) -> Result<&'a CStr, Fail> {
    if p.is_null() {
        return Err(Fail::inval(format!("{what} is NULL")));
    }
    // SAFETY: not NULL, and by the caller's contract NUL-terminated and valid
    // for reads for as long as the call lasts.
    Ok(unsafe { CStr::from_ptr(p) })
}

/// `len` bytes at `p` (any `p`, NULL included, when `len` is 0).
///
/// # Safety
/// `p` is NULL or valid for reads of `len` bytes.
unsafe fn bytes_arg<'a>(p: *const c_void, len: usize, what: &str) -> Result<&'a [u8], Fail> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(Fail::inval(format!(
            "{what} is NULL but its length is {len}"
        )));
    }
    if len > isize::MAX as usize {
        return Err(Fail::inval(format!("{what}: length {len} is not a size")));
    }
    // SAFETY: not NULL, len within isize::MAX, and by the caller's contract
    // valid for reads of `len` bytes during the call.
    Ok(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) })
}

/// Stores `v` at `p` unless `p` is NULL (optional out-parameters).
///
/// # Safety
/// `p` is NULL or valid for writes of a `T`.
unsafe fn put<T>(p: *mut T, v: T) {
    if !p.is_null() {
        // SAFETY: not NULL and, by the caller's contract, valid for writes.
        unsafe { p.write(v) }
    }
}

/// A `timeout_ms` argument: -1 is no timeout.
fn timeout_arg(ms: c_int) -> Result<Option<Duration>, Fail> {
    match ms {
        -1 => Ok(None),
        ms if ms >= 0 => Ok(Some(Duration::from_millis(ms as u64))),
        ms => Err(Fail::inval(format!(
            "timeout_ms {ms}: use -1 (forever), 0 or a positive count"
        ))),
    }
}

/// Connects to the daemon at `socket_path` and introduces this client as
/// `name`; on success `*out` is the new client, else NULL.
///
/// # Safety
/// `socket_path` and `name` are NULL or NUL-terminated strings; `out` is NULL
/// or valid for writes of a pointer.
#[no_mangle]
pub unsafe extern "C" fn mcast_connect(
    socket_path: *const c_char,
    name: *const c_char,
    out: *mut *mut McastClient,
) -> c_int {
    guard(|| {
        if out.is_null() {
            set_thread_error("out is NULL".into());
            return MCAST_EINVAL;
        }
        // SAFETY: not NULL, and valid for writes by the caller's contract.
        unsafe { out.write(ptr::null_mut()) };
        let connect = || -> Result<Box<McastClient>, Fail> {
            // SAFETY: the caller's contract for both strings.
            let path = unsafe { cstr_arg(socket_path, "socket_path") }?;
            // SAFETY: as above.
            let name = unsafe { str_arg(name, "name") }?;
            // A Unix path is bytes: no UTF-8 needed.
            let path = Path::new(OsStr::from_bytes(path.to_bytes()));
            Ok(Box::new(McastClient::new(Client::connect(path, name)?)))
        };
        match connect() {
            Ok(client) => {
                // SAFETY: checked above: not NULL, valid for writes.
                unsafe { out.write(Box::into_raw(client)) };
                MCAST_OK
            }
            Err(fail) => {
                set_thread_error(fail.message);
                fail.code
            }
        }
    })
}

/// Waits until the daemon has taken everything published (as `Client` does
/// on drop), then closes the connection and frees the client. NULL is a no-op.
///
/// # Safety
/// `c` is NULL or a client from `mcast_connect` not yet closed; it must not be
/// used afterwards.
#[no_mangle]
pub unsafe extern "C" fn mcast_close(c: *mut McastClient) {
    if c.is_null() {
        return;
    }
    guard(|| {
        // SAFETY: `c` came from Box::into_raw in mcast_connect and, by the
        // caller's contract, is closed only once and not used afterwards.
        drop(unsafe { Box::from_raw(c) });
        MCAST_OK
    });
}

/// Waits up to `timeout_ms` (-1: forever) until the daemon has taken every
/// message published so far.
///
/// # Safety
/// `c` is NULL or a client from `mcast_connect`, not yet closed, that no
/// other thread uses during the call.
#[no_mangle]
pub unsafe extern "C" fn mcast_flush(c: *mut McastClient, timeout_ms: c_int) -> c_int {
    let run = |cl: &mut McastClient| -> Result<c_int, Fail> {
        let t = timeout_arg(timeout_ms)?.unwrap_or(Duration::MAX);
        if cl.client.flush(t)? {
            Ok(MCAST_OK)
        } else {
            Err(mcast_ipc::Error::TimedOut.into())
        }
    };
    // SAFETY: the caller's contract is with_client's.
    unsafe { with_client(c, run) }
}

/// Joins the group named `group`; its number and our rank go to the
/// optional out-parameters.
///
/// # Safety
/// `c` is NULL or a live client (from `mcast_connect`, not yet closed) that no
/// other thread uses during the call; `group` is NULL or a NUL-terminated string;
/// `group_out` and `rank_out` are NULL or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn mcast_join(
    c: *mut McastClient,
    group: *const c_char,
    group_out: *mut u32,
    rank_out: *mut u32,
) -> c_int {
    // SAFETY: the caller's contract is mcast_join_mode's, with no mode.
    unsafe { mcast_join_mode(c, group, ptr::null(), group_out, rank_out) }
}

/// Joins the group named `group` if mcastd runs it in `mode` (`"fifo"`,
/// `"sequenced"`, `"total"` or `"broadcast"`; NULL: any, as [`mcast_join`]).
/// An application that relies on one order for every member asks for
/// `"total"` or `"sequenced"`, and is refused (`MCAST_EDAEMON`, the setting
/// to change in `mcast_last_error`) where the group's configuration says
/// otherwise.
///
/// # Safety
/// As [`mcast_join`]; `mode` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn mcast_join_mode(
    c: *mut McastClient,
    group: *const c_char,
    mode: *const c_char,
    group_out: *mut u32,
    rank_out: *mut u32,
) -> c_int {
    let run = |cl: &mut McastClient| -> Result<c_int, Fail> {
        // SAFETY: the caller's contract for `group` and `mode`.
        let name = unsafe { str_arg(group, "group") }?;
        let mode = if mode.is_null() {
            None
        } else {
            // SAFETY: as above; not NULL.
            Some(unsafe { str_arg(mode, "mode") }?)
        };
        let m = cl.client.join_in_mode(name, mode)?;
        // SAFETY: the caller's contract for the out-parameters.
        unsafe {
            put(group_out, m.group);
            put(rank_out, m.rank);
        }
        Ok(MCAST_OK)
    };
    // SAFETY: the caller's contract is with_client's.
    unsafe { with_client(c, run) }
}

/// Leaves the group numbered `group`.
///
/// # Safety
/// `c` is NULL or a client from `mcast_connect`, not yet closed, that no
/// other thread uses during the call.
#[no_mangle]
pub unsafe extern "C" fn mcast_leave(c: *mut McastClient, group: u32) -> c_int {
    let run = |cl: &mut McastClient| -> Result<c_int, Fail> {
        cl.client.leave(group)?;
        Ok(MCAST_OK)
    };
    // SAFETY: the caller's contract is with_client's.
    unsafe { with_client(c, run) }
}

/// Waits at `group`'s barrier up to `timeout_ms` (-1: forever) until every
/// member of the group has reached it; the nodes dropped on the way go to
/// `dropped` (`cap` ids), their number to `*dropped_count`.
///
/// # Safety
/// `c` is NULL or a live client (from `mcast_connect`, not yet closed) that no
/// other thread uses during the call; `dropped` is NULL or valid for writes
/// of `cap` ids; `dropped_count` is NULL or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn mcast_barrier(
    c: *mut McastClient,
    group: u32,
    timeout_ms: c_int,
    dropped: *mut u32,
    cap: usize,
    dropped_count: *mut usize,
) -> c_int {
    let run = |cl: &mut McastClient| -> Result<c_int, Fail> {
        if dropped.is_null() && cap > 0 {
            return Err(Fail::inval(format!("dropped is NULL but cap is {cap}")));
        }
        let t = timeout_arg(timeout_ms)?;
        let nodes = cl.client.barrier(group, t)?;
        let n = nodes.len().min(cap);
        // SAFETY: dropped_count is NULL (put skips it) or valid for writes
        // by contract; when n > 0, cap > 0 so dropped is not NULL (checked)
        // and valid for writes of cap >= n ids, and cannot overlap `nodes`,
        // which this call owns.
        unsafe {
            put(dropped_count, nodes.len());
            if n > 0 {
                ptr::copy_nonoverlapping(nodes.as_ptr(), dropped, n);
            }
        }
        Ok(MCAST_OK)
    };
    // SAFETY: the caller's contract is with_client's.
    unsafe { with_client(c, run) }
}

/// Publishes `len` bytes at `data` to `group` without blocking.
///
/// # Safety
/// `c` is NULL or a live client (from `mcast_connect`, not yet closed) that no
/// other thread uses during the call; `data` is NULL or valid for reads of `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn mcast_publish(
    c: *mut McastClient,
    group: u32,
    data: *const c_void,
    len: usize,
) -> c_int {
    let run = |cl: &mut McastClient| -> Result<c_int, Fail> {
        // SAFETY: the caller's contract for `data`.
        let msg = unsafe { bytes_arg(data, len, "data") }?;
        cl.client.publish(group, msg)?;
        Ok(MCAST_OK)
    };
    // SAFETY: the caller's contract is with_client's.
    unsafe { with_client(c, run) }
}

/// Publishes, waiting up to `timeout_ms` (-1: forever) for room.
///
/// # Safety
/// As for [`mcast_publish`].
#[no_mangle]
pub unsafe extern "C" fn mcast_publish_blocking(
    c: *mut McastClient,
    group: u32,
    data: *const c_void,
    len: usize,
    timeout_ms: c_int,
) -> c_int {
    let run = |cl: &mut McastClient| -> Result<c_int, Fail> {
        // SAFETY: the caller's contract for `data`.
        let msg = unsafe { bytes_arg(data, len, "data") }?;
        let t = timeout_arg(timeout_ms)?;
        cl.client.publish_blocking(group, msg, t)?;
        Ok(MCAST_OK)
    };
    // SAFETY: the caller's contract is with_client's.
    unsafe { with_client(c, run) }
}

/// Publishes the `n` messages at `msgs` as [`mcast_publish_batch`] does;
/// with `timeout_ms` (not `None`) waiting for room for the first, as
/// [`mcast_publish_batch_blocking`] does.
///
/// # Safety
/// As for [`mcast_publish_batch`].
unsafe fn publish_many(
    c: *mut McastClient,
    group: u32,
    msgs: *const McastMsg,
    n: usize,
    taken_out: *mut usize,
    timeout_ms: Option<c_int>,
) -> c_int {
    let run = |cl: &mut McastClient| -> Result<c_int, Fail> {
        if taken_out.is_null() {
            return Err(Fail::inval("taken_out is NULL"));
        }
        // SAFETY: not NULL (checked), valid for writes by contract.
        unsafe { taken_out.write(0) };
        let timeout = timeout_ms.map(timeout_arg).transpose()?;
        let msgs: &[McastMsg] = if n == 0 {
            &[]
        } else if msgs.is_null() {
            return Err(Fail::inval(format!("msgs is NULL but n is {n}")));
        } else if n > isize::MAX as usize / std::mem::size_of::<McastMsg>() {
            return Err(Fail::inval(format!("n {n} is not a count of messages")));
        } else {
            // SAFETY: not NULL, n * size_of::<McastMsg>() within isize::MAX
            // (checked), and by the caller's contract valid for reads of n
            // mcast_msg during the call.
            unsafe { std::slice::from_raw_parts(msgs, n) }
        };
        // Every entry is checked before any is published.
        for (i, m) in msgs.iter().enumerate() {
            if m.len > 0 && m.data.is_null() {
                return Err(Fail::inval(format!(
                    "msgs[{i}].data is NULL but its length is {}",
                    m.len
                )));
            }
            if m.len > isize::MAX as usize {
                return Err(Fail::inval(format!(
                    "msgs[{i}]: length {} is not a size",
                    m.len
                )));
            }
        }
        let bytes = msgs.iter().map(|m| -> &[u8] {
            if m.len == 0 {
                return &[];
            }
            // SAFETY: not NULL and len within isize::MAX (checked above);
            // by the caller's contract valid for reads of len bytes during
            // the call.
            unsafe { std::slice::from_raw_parts(m.data.cast::<u8>(), m.len) }
        });
        let taken = match timeout {
            None => cl.client.publish_batch(group, bytes)?,
            Some(t) => cl.client.publish_batch_blocking(group, bytes, t)?,
        };
        // SAFETY: not NULL (checked), valid for writes by contract.
        unsafe { taken_out.write(taken) };
        Ok(MCAST_OK)
    };
    // SAFETY: the caller's contract is with_client's.
    unsafe { with_client(c, run) }
}

/// Publishes as many of the `n` messages at `msgs`, in order, as fit now,
/// each whole, with one ring commit; `*taken_out` says how many.
///
/// # Safety
/// `c` is NULL or a live client (from `mcast_connect`, not yet closed) that
/// no other thread uses during the call; `msgs` is NULL or valid for reads of
/// `n` `mcast_msg`, each one's `data` NULL or valid for reads of its `len`
/// bytes; `taken_out` is NULL or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn mcast_publish_batch(
    c: *mut McastClient,
    group: u32,
    msgs: *const McastMsg,
    n: usize,
    taken_out: *mut usize,
) -> c_int {
    // SAFETY: the caller's contract is publish_many's.
    unsafe { publish_many(c, group, msgs, n, taken_out, None) }
}

/// As [`mcast_publish_batch`], waiting up to `timeout_ms` (-1: forever)
/// for room for the first message.
///
/// # Safety
/// As for [`mcast_publish_batch`].
#[no_mangle]
pub unsafe extern "C" fn mcast_publish_batch_blocking(
    c: *mut McastClient,
    group: u32,
    msgs: *const McastMsg,
    n: usize,
    taken_out: *mut usize,
    timeout_ms: c_int,
) -> c_int {
    // SAFETY: the caller's contract is publish_many's.
    unsafe { publish_many(c, group, msgs, n, taken_out, Some(timeout_ms)) }
}

/// Publishes a scattering to a total-order group: each of the `n` parts at
/// `parts` goes to its member only, all under one place in the group's
/// order, all or none if this node fails (`Client::publish_scatter`).
/// `timeout_ms` 0: `MCAST_EWOULDBLOCK` when the ring is full; else waits for
/// room that long (-1: forever), then `MCAST_ETIMEDOUT`.
///
/// # Safety
/// `c` is NULL or a live client (from `mcast_connect`, not yet closed) that
/// no other thread uses during the call; `parts` is NULL or valid for reads
/// of `n` `mcast_part` during the call, each `data` NULL or valid for reads
/// of its `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn mcast_publish_scatter(
    c: *mut McastClient,
    group: u32,
    parts: *const McastPart,
    n: usize,
    timeout_ms: c_int,
) -> c_int {
    let run = |cl: &mut McastClient| -> Result<c_int, Fail> {
        let timeout = timeout_arg(timeout_ms)?;
        if n == 0 || parts.is_null() {
            return Err(Fail::inval(format!(
                "a scattering needs parts: parts is {}, n is {n}",
                if parts.is_null() { "NULL" } else { "not NULL" }
            )));
        }
        if n > isize::MAX as usize / std::mem::size_of::<McastPart>() {
            return Err(Fail::inval(format!("n {n} is not a count of parts")));
        }
        // SAFETY: not NULL, n * size_of::<McastPart>() within isize::MAX
        // (checked), and by the caller's contract valid for reads of n
        // mcast_part during the call.
        let parts = unsafe { std::slice::from_raw_parts(parts, n) };
        let mut list = Vec::with_capacity(n);
        for (i, p) in parts.iter().enumerate() {
            // SAFETY: the caller's contract for each part's data.
            let bytes = unsafe { bytes_arg(p.data, p.len, &format!("parts[{i}].data")) }?;
            list.push((p.node, p.member, bytes));
        }
        match timeout {
            Some(t) if t.is_zero() => cl.client.publish_scatter(group, &list)?,
            t => cl.client.publish_scatter_blocking(group, &list, t)?,
        }
        Ok(MCAST_OK)
    };
    // SAFETY: the caller's contract is with_client's.
    unsafe { with_client(c, run) }
}

/// Receives the next message into `buf`, as [`mcast_recv`] and
/// [`mcast_recv_ex`] do; with `events` false membership events are skipped.
///
/// # Safety
/// As for [`mcast_recv_ex`].
#[allow(clippy::too_many_arguments)]
unsafe fn recv(
    c: *mut McastClient,
    buf: *mut c_void,
    cap: usize,
    len_out: *mut usize,
    group_out: *mut u32,
    source_out: *mut u32,
    kind_out: *mut c_int,
    timeout_ms: c_int,
    events: bool,
) -> c_int {
    let run = |cl: &mut McastClient| -> Result<c_int, Fail> {
        if len_out.is_null() {
            return Err(Fail::inval("len_out is NULL"));
        }
        if buf.is_null() && cap > 0 {
            return Err(Fail::inval(format!("buf is NULL but cap is {cap}")));
        }
        let m = cl.recv_into(timeout_ms, events, cap, |data| {
            if !data.is_empty() {
                // SAFETY: recv_into hands over at most cap bytes, and more
                // than 0, so cap > 0 and buf is not NULL (checked); buf is
                // valid for writes of cap bytes by contract and cannot
                // overlap the message, which is in the ring this library
                // maps or in its own memory.
                unsafe { ptr::copy_nonoverlapping(data.as_ptr(), buf.cast::<u8>(), data.len()) };
            }
        })?;
        let len = m.len;
        // SAFETY: not NULL (checked), valid for writes by contract.
        unsafe { len_out.write(len) };
        if len > cap {
            return Err(Fail::new(
                MCAST_ETOOSMALL,
                format!(
                    "buffer too small: the message waiting is {len} bytes, the buffer {cap}; \
                         it is kept for the next receive"
                ),
            ));
        }
        // SAFETY: the caller's contract for the optional out-parameters.
        unsafe {
            put(group_out, m.group);
            put(source_out, m.source);
            put(kind_out, msg_kind(m.kind));
        }
        Ok(MCAST_OK)
    };
    // SAFETY: the caller's contract is with_client's.
    unsafe { with_client(c, run) }
}

/// Receives the next data message into `buf` (`cap` bytes), skipping
/// membership events, waiting up to `timeout_ms` (0: not at all, -1:
/// forever). A message that does not fit stays pending: `MCAST_ETOOSMALL`,
/// `*len_out` its size.
///
/// # Safety
/// `c` is NULL or a live client (from `mcast_connect`, not yet closed) that no
/// other thread uses during the call; `buf` is NULL or valid for writes of `cap` bytes;
/// `len_out`, `group_out` and `source_out` are NULL or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn mcast_recv(
    c: *mut McastClient,
    buf: *mut c_void,
    cap: usize,
    len_out: *mut usize,
    group_out: *mut u32,
    source_out: *mut u32,
    timeout_ms: c_int,
) -> c_int {
    // SAFETY: the caller's contract is recv's, with no kind_out.
    unsafe {
        recv(
            c,
            buf,
            cap,
            len_out,
            group_out,
            source_out,
            ptr::null_mut(),
            timeout_ms,
            false,
        )
    }
}

/// Receives the next message or membership event, in stream order, as
/// [`mcast_recv`] does; `*kind_out` says which (`MCAST_MSG_*`), and an
/// event's bytes are its JSON.
///
/// # Safety
/// As for [`mcast_recv`]; `kind_out` is NULL or valid for writes.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn mcast_recv_ex(
    c: *mut McastClient,
    buf: *mut c_void,
    cap: usize,
    len_out: *mut usize,
    group_out: *mut u32,
    source_out: *mut u32,
    kind_out: *mut c_int,
    timeout_ms: c_int,
) -> c_int {
    // SAFETY: the caller's contract is recv's.
    unsafe {
        recv(
            c, buf, cap, len_out, group_out, source_out, kind_out, timeout_ms, true,
        )
    }
}

/// Hands up to `max` messages and membership events, in stream order, to
/// `cb`, each as an `mcast_message_view` lent for the call (whole messages
/// straight from the shared ring), waiting up to `timeout_ms` for the first;
/// `*count_out` says how many.
///
/// # Safety
/// `c` is NULL or a live client (from `mcast_connect`, not yet closed) that
/// no other thread uses during the call, nor `cb`; `cb` is NULL or a function
/// that returns normally and calls nothing on `c`; `count_out` is NULL or
/// valid for writes. `arg` is only passed to `cb`.
#[no_mangle]
pub unsafe extern "C" fn mcast_recv_batch(
    c: *mut McastClient,
    max: usize,
    cb: McastRecvCallback,
    arg: *mut c_void,
    count_out: *mut usize,
    timeout_ms: c_int,
) -> c_int {
    let run = |cl: &mut McastClient| -> Result<c_int, Fail> {
        // SAFETY: the caller's contract for count_out.
        unsafe { put(count_out, 0) };
        let Some(cb) = cb else {
            return Err(Fail::inval("cb is NULL"));
        };
        let n = cl.recv_batch(max, timeout_ms, |m| {
            let view = McastMessageView {
                data: m.data.as_ptr().cast(),
                len: m.data.len(),
                group: m.group,
                source: m.source,
                kind: msg_kind(m.kind),
            };
            // SAFETY: by the contract cb is a function of this type that
            // returns normally and does not call into this client; the view
            // and the bytes it points to live until it returns.
            unsafe { cb(arg, &view) };
        })?;
        // SAFETY: the caller's contract for count_out.
        unsafe { put(count_out, n) };
        Ok(MCAST_OK)
    };
    // SAFETY: the caller's contract is with_client's.
    unsafe { with_client(c, run) }
}

/// Runs `f` with no client: a failure's message becomes this thread's
/// client-less last error, a panic `MCAST_EIO`.
fn without_client(f: impl FnOnce() -> Result<c_int, Fail>) -> c_int {
    guard(|| match f() {
        Ok(code) => code,
        Err(fail) => {
            set_thread_error(fail.message);
            fail.code
        }
    })
}

/// Parses the membership event of `len` bytes at `data` into `*out`.
///
/// # Safety
/// `data` is NULL or valid for reads of `len` bytes; `out` is NULL or valid
/// for writes of an `mcast_event`.
#[no_mangle]
pub unsafe extern "C" fn mcast_event_parse(
    data: *const c_void,
    len: usize,
    out: *mut McastEvent,
) -> c_int {
    without_client(|| {
        if out.is_null() {
            return Err(Fail::inval("out is NULL"));
        }
        // SAFETY: the caller's contract for `data`.
        let bytes = unsafe { bytes_arg(data, len, "data") }?;
        let ev = parse_event(bytes)?;
        // SAFETY: not NULL (checked), valid for writes by contract.
        unsafe { out.write(ev.info) };
        Ok(MCAST_OK)
    })
}

/// Copies the node list `list` (`MCAST_NODES_*`) of the membership event at
/// `data` into `out` (`cap` ids); `*count_out` is the list's length.
///
/// # Safety
/// `data` is NULL or valid for reads of `len` bytes; `out` is NULL or valid
/// for writes of `cap` ids; `count_out` is NULL or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn mcast_event_nodes(
    data: *const c_void,
    len: usize,
    list: c_int,
    out: *mut u32,
    cap: usize,
    count_out: *mut usize,
) -> c_int {
    without_client(|| {
        if count_out.is_null() {
            return Err(Fail::inval("count_out is NULL"));
        }
        if out.is_null() && cap > 0 {
            return Err(Fail::inval(format!("out is NULL but cap is {cap}")));
        }
        // SAFETY: the caller's contract for `data`.
        let bytes = unsafe { bytes_arg(data, len, "data") }?;
        let ev = parse_event(bytes)?;
        let nodes = ev.nodes(list)?;
        let n = nodes.len().min(cap);
        // SAFETY: count_out is not NULL (checked) and valid for writes by
        // contract; when n > 0, cap > 0 so out is not NULL (checked) and
        // valid for writes of cap >= n ids, and cannot overlap `nodes`,
        // which this call owns.
        unsafe {
            count_out.write(nodes.len());
            if n > 0 {
                ptr::copy_nonoverlapping(nodes.as_ptr(), out, n);
            }
        }
        if nodes.len() > cap {
            return Err(Fail::new(
                MCAST_ETOOSMALL,
                format!(
                    "{} nodes in the list, room for {cap}; the first {n} were copied",
                    nodes.len()
                ),
            ));
        }
        Ok(MCAST_OK)
    })
}

/// Hands over the next notice without waiting: its numbers into `*out`, its
/// text (NUL-terminated, truncated to `cap`) into `buf`, the text's full
/// length into `*len_out`.
///
/// # Safety
/// `c` is NULL or a live client (from `mcast_connect`, not yet closed) that no
/// other thread uses during the call; `out` is NULL or valid for writes of an
/// `mcast_notice`; `buf` is NULL or valid for writes of `cap` bytes; `len_out`
/// is NULL or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn mcast_next_notice(
    c: *mut McastClient,
    out: *mut McastNotice,
    buf: *mut c_char,
    cap: usize,
    len_out: *mut usize,
) -> c_int {
    let run = |cl: &mut McastClient| -> Result<c_int, Fail> {
        if out.is_null() {
            return Err(Fail::inval("out is NULL"));
        }
        if buf.is_null() && cap > 0 {
            return Err(Fail::inval(format!("buf is NULL but cap is {cap}")));
        }
        let (info, text) = notice_info(&cl.next_notice()?);
        // SAFETY: out is not NULL (checked) and valid for writes by contract;
        // buf is NULL only with cap 0 (checked) and else valid for writes of
        // cap bytes; len_out is NULL or valid for writes.
        unsafe {
            out.write(info);
            let len = copy_text(&text, buf, cap);
            put(len_out, len);
        }
        Ok(MCAST_OK)
    };
    // SAFETY: the caller's contract is with_client's.
    unsafe { with_client(c, run) }
}

/// Copies `text` into `buf` (`cap` bytes) as a NUL-terminated string,
/// truncated to `cap - 1` bytes (nothing when `cap` is 0), and returns its
/// full length, as snprintf does.
///
/// # Safety
/// `buf` is valid for writes of `cap` bytes when `cap` is not 0.
unsafe fn copy_text(text: &str, buf: *mut c_char, cap: usize) -> usize {
    let bytes = text.as_bytes();
    if cap > 0 {
        let n = bytes.len().min(cap - 1);
        // SAFETY: by the contract buf is valid for writes of cap > n bytes;
        // `text` is ours, so no overlap.
        unsafe {
            ptr::copy_nonoverlapping(bytes.as_ptr(), buf.cast::<u8>(), n);
            buf.add(n).write(0);
        }
    }
    bytes.len()
}

/// The largest message `mcast_publish` accepts; 0 for a NULL client.
///
/// # Safety
/// `c` is NULL or a client from `mcast_connect`, not yet closed.
#[no_mangle]
pub unsafe extern "C" fn mcast_max_message(c: *const McastClient) -> usize {
    // SAFETY: by the contract, NULL (None) or a live client.
    match unsafe { c.as_ref() } {
        Some(cl) => cl.client.max_message(),
        None => 0,
    }
}

/// The last hop of every message `c` read, when its daemon traces
/// (`trace = true`): fills `*out` and returns 1; 0 (and `*out` untouched)
/// when the daemon does not trace; `MCAST_EINVAL` for a NULL pointer.
///
/// # Safety
/// `c` is NULL or a client from `mcast_connect`, not yet closed; `out` is
/// NULL or valid for a write of one `mcast_hop`.
#[no_mangle]
pub unsafe extern "C" fn mcast_read_hop(c: *const McastClient, out: *mut McastHop) -> c_int {
    guard(|| {
        // SAFETY: by the contract, NULL (None) or a live client.
        let Some(cl) = (unsafe { c.as_ref() }) else {
            set_thread_error("the client is NULL".into());
            return MCAST_EINVAL;
        };
        if out.is_null() {
            return MCAST_EINVAL;
        }
        match cl.client.read_hop() {
            Some(hop) => {
                // SAFETY: not NULL (checked), valid for one write by contract.
                unsafe { out.write(hop) };
                1
            }
            None => 0,
        }
    })
}

/// Copies the last error's message (NUL-terminated, truncated to `cap`) and
/// returns its full length; for a NULL client, this thread's last error of a
/// call without a client (`mcast_connect`, a NULL client).
///
/// # Safety
/// `c` is NULL or a client from `mcast_connect`, not yet closed; `buf` is
/// NULL or valid for writes of `cap` bytes.
#[no_mangle]
pub unsafe extern "C" fn mcast_last_error(
    c: *const McastClient,
    buf: *mut c_char,
    cap: usize,
) -> c_int {
    guard(|| {
        if buf.is_null() && cap > 0 {
            return MCAST_EINVAL;
        }
        // SAFETY: by the contract, NULL (None) or a live client.
        let msg = match unsafe { c.as_ref() } {
            Some(cl) => cl.last_error.clone(),
            None => thread_error(),
        };
        // SAFETY: buf is not NULL when cap > 0 (checked) and then valid for
        // writes of cap bytes by contract.
        let len = unsafe { copy_text(&msg, buf, cap) };
        len.min(c_int::MAX as usize) as c_int
    })
}

/// A static description of a return code; never NULL.
#[no_mangle]
pub extern "C" fn mcast_strerror(code: c_int) -> *const c_char {
    strerror(code).as_ptr()
}
