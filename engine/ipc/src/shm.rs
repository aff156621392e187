//! Shared memory: a sealed `memfd` mapped `MAP_SHARED`, and bounds-checked
//! accessors over it that the ring code uses instead of raw pointers.
//!
//! The memory is shared with another process that may be hostile (the daemon
//! must assume a client can write anything anywhere in its mapping at any
//! time). Everything here is therefore defined in terms of the *mapping's*
//! bounds, never in terms of values read from it: an accessor given an
//! offset outside the mapping returns `None` (or panics for the fixed header
//! offsets, which are our own constants), so a corrupt index can at worst
//! produce garbage bytes, never an out-of-bounds access.
//!
//! Reads of payload bytes through [`Mapping::slice`] may observe concurrent
//! writes by a misbehaving peer; the caller only ever copies such bytes out
//! and never relies on them staying stable.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64};

/// One `MAP_SHARED` read-write mapping, unmapped on drop.
#[derive(Debug)]
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; every access goes
// through atomics or explicit copies, so sharing it between threads is no
// different from sharing it between processes.
unsafe impl Send for Mapping {}
// SAFETY: as above; `&Mapping` only hands out atomics and copies.
unsafe impl Sync for Mapping {}

/// The system page size.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no memory effects.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p <= 0 {
        4096
    } else {
        p as usize
    }
}

impl Mapping {
    /// Creates a sealed memfd of `len` bytes (rounded up to a page) and maps
    /// it. The memfd cannot grow or shrink (so a peer cannot make our
    /// accesses fault with SIGBUS) and its seals cannot change. It has no name
    /// in the filesystem; only holders of the fd can map it.
    pub fn create_memfd(name: &str, len: usize) -> io::Result<(OwnedFd, Mapping)> {
        let len = len.div_ceil(page_size()) * page_size();
        let cname = CString::new(name)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in memfd name"))?;
        // SAFETY: `cname` is a valid NUL-terminated string.
        let raw = unsafe {
            libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING)
        };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: memfd_create returned a new descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: ftruncate on our own fd.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
        // SAFETY: fcntl(F_ADD_SEALS) takes an int.
        if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let map = Mapping::map_fd(&fd, len)?;
        Ok((fd, map))
    }

    /// Maps `len` bytes of a memfd received from the peer. Fails unless the
    /// file is exactly `len` bytes (rounded up to a page) and sealed against
    /// shrinking.
    pub fn map_fd(fd: &OwnedFd, len: usize) -> io::Result<Mapping> {
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty mapping"));
        }
        // SAFETY: `st` is a valid, writable stat buffer.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstat on a descriptor we own, writing into `st`.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let want = len.div_ceil(page_size()) * page_size();
        if st.st_size as u64 != want as u64 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("shared memory is {} bytes, expected {want}", st.st_size),
            ));
        }
        // SAFETY: fcntl(F_GET_SEALS) takes no argument.
        let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
        if seals < 0 || seals & libc::F_SEAL_SHRINK == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "shared memory is not sealed against shrinking",
            ));
        }
        // SAFETY: a fresh shared mapping of a file at least `want` bytes long
        // (and sealed against shrinking, so it stays that long); the kernel
        // chooses the address.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                want,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping {
            ptr: NonNull::new(ptr.cast()).expect("mmap returned null"),
            len: want,
        })
    }

    /// Anonymous shared memory (tests, and rings that never leave the process).
    pub fn anonymous(len: usize) -> io::Result<Mapping> {
        let len = len.div_ceil(page_size()) * page_size();
        // SAFETY: a fresh anonymous mapping; the kernel chooses the address.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping {
            ptr: NonNull::new(ptr.cast()).expect("mmap returned null"),
            len,
        })
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: mappings are at least one page.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn check(&self, off: usize, len: usize, align: usize) -> bool {
        off % align == 0 && off.checked_add(len).is_some_and(|end| end <= self.len)
    }

    /// The u64 at `off`, as an atomic. Panics if `off` is misaligned or out
    /// of bounds: only our own header constants are passed here.
    pub fn atomic_u64(&self, off: usize) -> &AtomicU64 {
        assert!(self.check(off, 8, 8), "atomic_u64 at {off} outside mapping");
        // SAFETY: in bounds and 8-aligned (the mapping is page-aligned); the
        // memory lives as long as `self`; AtomicU64 has the layout of u64 and
        // every bit pattern is valid.
        unsafe { &*self.ptr.as_ptr().add(off).cast::<AtomicU64>() }
    }

    /// The u32 at `off`, as an atomic; `None` if misaligned or out of bounds.
    pub fn atomic_u32(&self, off: usize) -> Option<&AtomicU32> {
        if !self.check(off, 4, 4) {
            return None;
        }
        // SAFETY: in bounds and 4-aligned; lives as long as `self`; every bit
        // pattern is a valid u32.
        Some(unsafe { &*self.ptr.as_ptr().add(off).cast::<AtomicU32>() })
    }

    /// Copies `src` to `off`; false (and nothing written) if out of bounds.
    pub fn write(&self, off: usize, src: &[u8]) -> bool {
        if !self.check(off, src.len(), 1) {
            return false;
        }
        // SAFETY: the destination range is inside the mapping; `src` is a
        // Rust slice and cannot overlap shared memory we are writing (callers
        // never pass a slice of this mapping's data area into itself; if they
        // did, the overlap would only garble bytes, as with a hostile peer).
        unsafe {
            std::ptr::copy(src.as_ptr(), self.ptr.as_ptr().add(off), src.len());
        }
        true
    }

    /// The bytes at `off..off + len`; `None` if out of bounds. See the module
    /// docs on concurrent writes by a peer.
    pub fn slice(&self, off: usize, len: usize) -> Option<&[u8]> {
        if !self.check(off, len, 1) {
            return None;
        }
        // SAFETY: in bounds; the memory lives as long as `self`; u8 has no
        // invalid bit patterns.
        Some(unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(off), len) })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` describe a mapping this value created and no
        // reference into it outlives `self` (all accessors borrow `self`).
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}
