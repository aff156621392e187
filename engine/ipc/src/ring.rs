//! A lock-free single-producer single-consumer byte ring in shared memory.
//!
//! # Layout (all little-endian, offsets from the ring's base)
//!
//! ```text
//!   0  u32 magic "MCRG"      4  u32 version (1)      8  u64 capacity
//!  64  u64 head (producer's write position, bytes ever written)
//!  72  u32 producer_waiting (producer sleeps until there is space)
//! 128  u64 tail (consumer's read position, bytes ever consumed)
//! 136  u32 consumer_sleeping (consumer sleeps until there is data)
//! 256  data[capacity]        (capacity a power of two, >= 4096)
//! ```
//!
//! head and tail live on separate cache lines; each flag lives on the line of
//! the side that sets it. Positions only grow (wrapping at 2^64); the byte
//! offset in `data` is `position & (capacity - 1)`.
//!
//! # Records
//!
//! Every record starts 8-byte aligned:
//!
//! ```text
//! u32 len | u32 group | u32 source | u32 flags | payload[len] | pad to 8
//! ```
//!
//! A record never straddles the end of `data`: when it does not fit before
//! the end, the producer writes a wrap marker (`len == u32::MAX`, only that
//! word) and the record starts at offset 0. So the largest payload that can
//! always be pushed into an empty ring is `capacity / 2 - 16`
//! ([`Producer::max_record`]). What a payload holds is the flags' business,
//! not the ring's: one message or fragment, a membership event ([`EVENT`]),
//! a scattering ([`SCATTER`]), or a batched frame's messages ([`BATCH`],
//! [`crate::batch`]).
//!
//! A record whose `flags` has [`STAMPED`] carries a `u64` after the fixed
//! header and before the payload: a CLOCK_MONOTONIC time in nanoseconds
//! ([`RecordHeader::stamp`]; per-hop timing, docs/mcastd.md "Where the time
//! goes"). A producer writes it only for a record whose stamp is not 0, so
//! a ring without tracing holds exactly the records it held before.
//!
//! # Ordering and trust
//!
//! The producer writes the record, then publishes `head` with Release; the
//! consumer reads `head` with Acquire, reads the record, then publishes
//! `tail` with Release (and the producer reads it with Acquire before reusing
//! the space).
//!
//! # Batches
//!
//! Either side can move many records per publication of its index:
//! [`Producer::try_push_deferred`] writes records the consumer cannot see yet
//! and [`Producer::commit`] publishes them all with one store of `head` (and
//! one fence to see whether the consumer sleeps); [`Consumer::pop_deferred`]
//! consumes records the producer cannot reuse yet and [`Consumer::release`]
//! hands all their space back with one store of `tail` (then one
//! [`Consumer::wake_producer`] for the batch). [`Producer::try_push`] and
//! [`Consumer::pop`] are a batch of one. Each side keeps its own index privately and only *reads* the
//! other side's, validating it against the capacity: a peer that scribbles
//! on the header or the records makes the ring report [`Corrupt`] (sticky),
//! never an out-of-bounds access, a panic or undefined behaviour. Payload
//! bytes a hostile producer changes while they are being read are merely
//! garbage.
//!
//! # Sleeping
//!
//! A consumer that finds the ring empty calls [`Consumer::prepare_sleep`]
//! (sets `consumer_sleeping`, full fence, re-checks) and, if that says so,
//! blocks in `poll()` on its wake-up eventfd; a producer that publishes while
//! the flag is set clears it and signals the eventfd given to
//! [`Producer::set_notify`]. The same handshake runs the other way for a
//! producer waiting for space ([`Producer::prepare_wait`],
//! [`Consumer::wake_producer`]). The fences make the pair of "store my
//! variable, then load the other's" sequences sequentially consistent, so a
//! wake-up cannot be lost.

use std::fmt;
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use crate::shm::Mapping;
use crate::sys::EventFd;

/// "MCRG".
pub const MAGIC: u32 = 0x4752_434d;
/// Layout version: 2 since records may be [`BATCH`] (a client of version
/// 1 would take one for a single message).
pub const VERSION: u32 = 2;
/// Bytes before the data area.
pub const HEADER_BYTES: usize = 256;
/// Bytes of the fixed record header (len, group, source, flags).
pub const RECORD_HEADER_BYTES: usize = 16;
/// Smallest capacity accepted.
pub const MIN_CAPACITY: usize = 4096;
/// Largest capacity accepted.
pub const MAX_CAPACITY: usize = 1 << 30;

/// Offset of the magic in a ring's header (see the layout above).
pub const OFF_MAGIC: usize = 0;
/// Offset of the layout version.
pub const OFF_VERSION: usize = 4;
/// Offset of the capacity.
pub const OFF_CAPACITY: usize = 8;
/// Offset of the producer's `head`.
pub const OFF_HEAD: usize = 64;
/// Offset of the "producer waiting" flag.
pub const OFF_PRODUCER_WAITING: usize = 72;
/// Offset of the consumer's `tail`.
pub const OFF_TAIL: usize = 128;
/// Offset of the "consumer sleeping" flag.
pub const OFF_CONSUMER_SLEEPING: usize = 136;
const WRAP: u32 = u32::MAX;

/// First fragment of a message.
pub const FIRST: u32 = 1;
/// Last fragment of a message (`FIRST | LAST` is a whole message).
pub const LAST: u32 = 2;
/// A membership event (a view change, JSON), in order with the data.
pub const EVENT: u32 = 4;
/// A scattering ([`crate::scatter`]): published by a client to a
/// total-order group, each part for one member.
pub const SCATTER: u32 = 16;
/// Several whole messages in one record ([`crate::batch`]): a batched
/// frame's messages handed to a subscriber as they came. With
/// `FIRST | LAST`.
pub const BATCH: u32 = 32;
/// The record carries a time stamp (8 bytes between header and payload).
/// Set and cleared by the ring from [`RecordHeader::stamp`]; callers never
/// see it in `flags`.
pub const STAMPED: u32 = 8;
/// Bytes of a record's time stamp.
pub const STAMP_BYTES: usize = 8;

/// The fixed header the caller attaches to every record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RecordHeader {
    /// Group number (as returned by a Join).
    pub group: u32,
    /// Sender's rank or client id (the publisher leaves 0; the daemon fills it).
    pub source: u32,
    /// [`FIRST`] / [`LAST`].
    pub flags: u32,
    /// A CLOCK_MONOTONIC time in nanoseconds the record carries (0: none,
    /// and no bytes spent): when the client published it, or when the
    /// daemon wrote it, with tracing on.
    pub stamp: u64,
}

/// One record, borrowed from the ring (zero-copy) until [`Consumer::pop`]
/// or [`Consumer::pop_deferred`].
#[derive(Debug, Clone, Copy)]
pub struct Record<'a> {
    /// The record's header.
    pub header: RecordHeader,
    /// The payload, still in shared memory.
    pub payload: &'a [u8],
}

/// The ring's shared state is inconsistent: the peer wrote something it must
/// not have. Sticky: once reported the endpoint refuses all further work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Corrupt(pub String);

impl fmt::Display for Corrupt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "shared ring corrupt: {}", self.0)
    }
}

impl std::error::Error for Corrupt {}

/// Why [`Producer::try_push`] did not push.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PushError {
    /// Not enough free space now; try again after the consumer pops.
    Full,
    /// The payload can never fit (see [`Producer::max_record`]).
    TooLarge {
        /// Payload length offered.
        len: usize,
        /// Largest payload this ring takes.
        max: usize,
    },
    /// The shared header is corrupt.
    Corrupt(Corrupt),
}

impl fmt::Display for PushError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PushError::Full => write!(f, "ring full"),
            PushError::TooLarge { len, max } => {
                write!(f, "record of {len} bytes exceeds the ring's limit of {max}")
            }
            PushError::Corrupt(c) => c.fmt(f),
        }
    }
}

impl std::error::Error for PushError {}

/// Bytes a ring of `capacity` takes in a mapping (header + data).
pub fn ring_bytes(capacity: usize) -> usize {
    HEADER_BYTES + capacity
}

/// Largest payload a ring of `capacity` takes.
pub fn max_payload(capacity: usize) -> usize {
    capacity / 2 - RECORD_HEADER_BYTES
}

fn align8(n: usize) -> usize {
    (n + 7) & !7
}

fn check_capacity(capacity: usize) -> Result<(), Corrupt> {
    if !capacity.is_power_of_two() || !(MIN_CAPACITY..=MAX_CAPACITY).contains(&capacity) {
        return Err(Corrupt(format!(
            "capacity {capacity} is not a power of two in {MIN_CAPACITY}..={MAX_CAPACITY}"
        )));
    }
    Ok(())
}

/// Writes a fresh header for a ring of `capacity` at `base` in `map`.
/// Only the side that creates the memory does this, before sharing it.
pub fn init(map: &Mapping, base: usize, capacity: usize) -> Result<(), Corrupt> {
    check_capacity(capacity)?;
    if base % 64 != 0
        || base
            .checked_add(ring_bytes(capacity))
            .is_none_or(|e| e > map.len())
    {
        return Err(Corrupt(format!("ring at {base} does not fit the mapping")));
    }
    let u32_at = |off| map.atomic_u32(base + off).expect("header in bounds");
    u32_at(OFF_MAGIC).store(MAGIC, Ordering::Relaxed);
    u32_at(OFF_VERSION).store(VERSION, Ordering::Relaxed);
    map.atomic_u64(base + OFF_CAPACITY)
        .store(capacity as u64, Ordering::Relaxed);
    map.atomic_u64(base + OFF_HEAD).store(0, Ordering::Relaxed);
    map.atomic_u64(base + OFF_TAIL).store(0, Ordering::Relaxed);
    u32_at(OFF_PRODUCER_WAITING).store(0, Ordering::Relaxed);
    u32_at(OFF_CONSUMER_SLEEPING).store(0, Ordering::Relaxed);
    fence(Ordering::Release);
    Ok(())
}

/// What both endpoints share: the mapping and where the ring is in it.
#[derive(Debug)]
struct Shared {
    map: Arc<Mapping>,
    base: usize,
    capacity: usize,
}

impl Shared {
    /// Checks the header of a ring someone else initialised. `capacity` is
    /// what we were told out of band; the header must agree.
    fn attach(map: Arc<Mapping>, base: usize, capacity: usize) -> Result<Shared, Corrupt> {
        check_capacity(capacity)?;
        if base % 64 != 0
            || base
                .checked_add(ring_bytes(capacity))
                .is_none_or(|e| e > map.len())
        {
            return Err(Corrupt(format!(
                "ring of {capacity} bytes at {base} does not fit a mapping of {}",
                map.len()
            )));
        }
        fence(Ordering::Acquire);
        let magic = map
            .atomic_u32(base + OFF_MAGIC)
            .expect("in bounds")
            .load(Ordering::Relaxed);
        let version = map
            .atomic_u32(base + OFF_VERSION)
            .expect("in bounds")
            .load(Ordering::Relaxed);
        let cap = map.atomic_u64(base + OFF_CAPACITY).load(Ordering::Relaxed);
        if magic != MAGIC {
            return Err(Corrupt(format!("bad magic {magic:#x}")));
        }
        if version != VERSION {
            return Err(Corrupt(format!(
                "ring version {version}, expected {VERSION}"
            )));
        }
        if cap != capacity as u64 {
            return Err(Corrupt(format!(
                "header says capacity {cap}, expected {capacity}"
            )));
        }
        Ok(Shared {
            map,
            base,
            capacity,
        })
    }

    fn head(&self) -> &AtomicU64 {
        self.map.atomic_u64(self.base + OFF_HEAD)
    }
    fn tail(&self) -> &AtomicU64 {
        self.map.atomic_u64(self.base + OFF_TAIL)
    }
    fn flag(&self, off: usize) -> &AtomicU32 {
        self.map
            .atomic_u32(self.base + off)
            .expect("header in bounds")
    }
    fn data(&self) -> usize {
        self.base + HEADER_BYTES
    }
    /// Offset in the mapping of ring position `pos`.
    fn at(&self, pos: u64) -> usize {
        self.data() + (pos as usize & (self.capacity - 1))
    }
    fn word(&self, off: usize) -> u32 {
        // Offsets passed here are computed from validated positions and are
        // 4-aligned inside the data area; None would mean a bug in this file.
        self.map
            .atomic_u32(off)
            .map_or(WRAP, |a| a.load(Ordering::Relaxed))
    }
    fn set_word(&self, off: usize, v: u32) {
        if let Some(a) = self.map.atomic_u32(off) {
            a.store(v, Ordering::Relaxed);
        }
    }
    /// Validates that `head - tail` is a plausible fill level.
    fn used(&self, head: u64, tail: u64) -> Result<usize, Corrupt> {
        let used = head.wrapping_sub(tail);
        if used > self.capacity as u64 || head % 8 != 0 || tail % 8 != 0 {
            return Err(Corrupt(format!(
                "head {head} / tail {tail} inconsistent with capacity {}",
                self.capacity
            )));
        }
        Ok(used as usize)
    }
}

/// The writing end of a ring.
#[derive(Debug)]
pub struct Producer {
    ring: Shared,
    /// Our own copy of head, deferred records included: never read back
    /// from shared memory.
    head: u64,
    /// The head last stored in shared memory (what the consumer sees):
    /// `head` minus the records not yet committed.
    published: u64,
    /// The consumer's tail as last read and checked since the last commit
    /// (None: read it at the next push). Pushes between two commits read
    /// the consumer's cache line once, not once each; a push that does not
    /// fit reads it again, the consumer may have made room.
    tail_seen: Option<u64>,
    notify: Option<Arc<EventFd>>,
    corrupt: Option<Corrupt>,
}

/// The reading end of a ring.
#[derive(Debug)]
pub struct Consumer {
    ring: Shared,
    /// Our own copy of tail, deferred pops included: never read back from
    /// shared memory.
    tail: u64,
    /// The tail last stored in shared memory (what the producer sees):
    /// `tail` minus the records popped and not yet released.
    released: u64,
    /// Size of the record [`Consumer::peek`] returned (0: none).
    peeked: usize,
    /// Bytes of wrap marker skipped by peek, consumed with the record.
    skipped: usize,
    notify: Option<Arc<EventFd>>,
    corrupt: Option<Corrupt>,
}

/// A producer and consumer over one anonymous ring (tests, in-process use).
pub fn pair(capacity: usize) -> std::io::Result<(Producer, Consumer)> {
    let map = Arc::new(Mapping::anonymous(ring_bytes(capacity))?);
    init(&map, 0, capacity)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let p = Producer::attach(map.clone(), 0, capacity).map_err(std::io::Error::other)?;
    let c = Consumer::attach(map, 0, capacity).map_err(std::io::Error::other)?;
    Ok((p, c))
}

impl Producer {
    /// The producer end of the ring of `capacity` at `base`. Picks up the
    /// current head (0 for a fresh ring).
    pub fn attach(map: Arc<Mapping>, base: usize, capacity: usize) -> Result<Producer, Corrupt> {
        let ring = Shared::attach(map, base, capacity)?;
        let head = ring.head().load(Ordering::Acquire);
        let tail = ring.tail().load(Ordering::Acquire);
        ring.used(head, tail)?;
        Ok(Producer {
            ring,
            head,
            published: head,
            tail_seen: None,
            notify: None,
            corrupt: None,
        })
    }

    /// The eventfd to signal when the consumer sleeps and we publish.
    pub fn set_notify(&mut self, fd: Arc<EventFd>) {
        self.notify = Some(fd);
    }

    /// Capacity of the data area.
    pub fn capacity(&self) -> usize {
        self.ring.capacity
    }

    /// The largest payload [`Producer::try_push`] accepts.
    pub fn max_record(&self) -> usize {
        max_payload(self.ring.capacity)
    }

    fn check(&mut self) -> Result<usize, Corrupt> {
        if let Some(c) = &self.corrupt {
            return Err(c.clone());
        }
        let tail = self.ring.tail().load(Ordering::Acquire);
        // The consumer cannot have read past what we published; measured
        // from our own head, deferred records take space too.
        let used = self
            .ring
            .used(self.published, tail)
            .and_then(|_| self.ring.used(self.head, tail));
        match used {
            Ok(u) => {
                self.tail_seen = Some(tail);
                Ok(u)
            }
            Err(c) => {
                self.corrupt = Some(c.clone());
                Err(c)
            }
        }
    }

    /// Free bytes now (record headers, padding and wrap markers come out of
    /// this; see [`Producer::can_push`] for "does a payload of n fit").
    pub fn free_space(&mut self) -> Result<usize, Corrupt> {
        Ok(self.ring.capacity - self.check()?)
    }

    /// Bytes of ring a record of payload `len` needs if pushed now.
    /// (`len` counts a stamp's bytes.)
    fn need(&self, len: usize) -> (usize, usize) {
        let size = align8(RECORD_HEADER_BYTES + len);
        let to_end = self.ring.capacity - (self.head as usize & (self.ring.capacity - 1));
        if size <= to_end {
            (size, 0)
        } else {
            (size + to_end, to_end)
        }
    }

    /// Whether a payload of `len` bytes fits now.
    pub fn can_push(&mut self, len: usize) -> Result<bool, Corrupt> {
        let used = self.check()?;
        Ok(len <= self.max_record() && self.need(len).0 <= self.ring.capacity - used)
    }

    /// Pushes one record whose payload is the concatenation of `parts`
    /// (gather write: one copy from each part into the ring). Wakes the
    /// consumer if it sleeps. The same as [`Producer::try_push_deferred`]
    /// then [`Producer::commit`], so it also publishes records deferred
    /// before it.
    pub fn try_push(&mut self, hdr: RecordHeader, parts: &[&[u8]]) -> Result<(), PushError> {
        self.try_push_deferred(hdr, parts)?;
        self.commit();
        Ok(())
    }

    /// Writes one record as [`Producer::try_push`] does, without publishing
    /// it: the consumer sees it (and every record deferred before it, in
    /// order) at the next [`Producer::commit`]. Its space is taken at once:
    /// [`Producer::free_space`], [`Producer::can_push`] and the next push
    /// count it. No atomic store to shared memory besides the record's own
    /// words, no fence, no system call.
    pub fn try_push_deferred(
        &mut self,
        hdr: RecordHeader,
        parts: &[&[u8]],
    ) -> Result<(), PushError> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let extra = if hdr.stamp != 0 { STAMP_BYTES } else { 0 };
        if len + extra > self.max_record() {
            return Err(PushError::TooLarge {
                len,
                max: self.max_record() - extra,
            });
        }
        let (need, wrap) = self.need(len + extra);
        // Checked since the last commit, and every push since stayed within
        // the space it left: the tail can only have moved on.
        let seen = match (&self.corrupt, self.tail_seen) {
            (None, Some(tail)) => Some(self.head.wrapping_sub(tail) as usize),
            _ => None,
        };
        let used = match seen {
            Some(u) if need <= self.ring.capacity - u => u,
            _ => self.check().map_err(PushError::Corrupt)?,
        };
        if need > self.ring.capacity - used {
            return Err(PushError::Full);
        }
        let r = &self.ring;
        let mut pos = self.head;
        if wrap > 0 {
            r.set_word(r.at(pos), WRAP);
            pos = pos.wrapping_add(wrap as u64);
        }
        let off = r.at(pos);
        r.set_word(off, len as u32);
        r.set_word(off + 4, hdr.group);
        r.set_word(off + 8, hdr.source);
        let mut at = off + RECORD_HEADER_BYTES;
        if extra > 0 {
            r.set_word(off + 12, hdr.flags | STAMPED);
            r.map.write(at, &hdr.stamp.to_le_bytes());
            at += STAMP_BYTES;
        } else {
            r.set_word(off + 12, hdr.flags & !STAMPED);
        }
        for p in parts {
            // In bounds: the record fits before the end of the data area.
            r.map.write(at, p);
            at += p.len();
        }
        self.head = pos.wrapping_add(align8(RECORD_HEADER_BYTES + extra + len) as u64);
        Ok(())
    }

    /// Publishes every record deferred since the last commit with one
    /// Release store of `head`, then wakes the consumer if it sleeps (one
    /// full fence; a system call only when it sleeps). Nothing at all when
    /// nothing is deferred.
    pub fn commit(&mut self) {
        if self.head == self.published {
            return;
        }
        self.ring.head().store(self.head, Ordering::Release);
        self.published = self.head;
        // The next round's first push sees how far the consumer got (and
        // whether it broke the ring).
        self.tail_seen = None;
        self.wake_consumer();
    }

    /// Whether records were pushed with [`Producer::try_push_deferred`]
    /// and not yet published by [`Producer::commit`].
    pub fn pending_commit(&self) -> bool {
        self.head != self.published
    }

    fn wake_consumer(&self) {
        fence(Ordering::SeqCst);
        let sleeping = self.ring.flag(OFF_CONSUMER_SLEEPING);
        if sleeping.load(Ordering::Relaxed) != 0 && sleeping.swap(0, Ordering::AcqRel) != 0 {
            if let Some(n) = &self.notify {
                n.signal();
            }
        }
    }

    /// Before blocking for space for a payload of `len`: commits deferred
    /// records (the consumer must see them to make room), sets the
    /// "producer waiting" flag and re-checks. `Ok(true)`: still no room, go
    /// to sleep on the wake-up eventfd (the consumer signals it after
    /// popping). `Ok(false)`: room appeared, flag cleared, retry the push.
    pub fn prepare_wait(&mut self, len: usize) -> Result<bool, Corrupt> {
        self.commit();
        self.ring
            .flag(OFF_PRODUCER_WAITING)
            .store(1, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        if self.can_push(len)? {
            self.finish_wait();
            return Ok(false);
        }
        Ok(true)
    }

    /// Clears the "producer waiting" flag (after waking, or giving up).
    pub fn finish_wait(&mut self) {
        self.ring
            .flag(OFF_PRODUCER_WAITING)
            .store(0, Ordering::Relaxed);
    }

    /// The position of the next write (bytes ever written, deferred records
    /// included), for tests.
    pub fn position(&self) -> u64 {
        self.head
    }
}

impl Consumer {
    /// The consumer end of the ring of `capacity` at `base`. Picks up the
    /// current tail (0 for a fresh ring).
    pub fn attach(map: Arc<Mapping>, base: usize, capacity: usize) -> Result<Consumer, Corrupt> {
        let ring = Shared::attach(map, base, capacity)?;
        let head = ring.head().load(Ordering::Acquire);
        let tail = ring.tail().load(Ordering::Acquire);
        ring.used(head, tail)?;
        Ok(Consumer {
            ring,
            tail,
            released: tail,
            peeked: 0,
            skipped: 0,
            notify: None,
            corrupt: None,
        })
    }

    /// The eventfd to signal when a producer waits for space and we pop.
    pub fn set_notify(&mut self, fd: Arc<EventFd>) {
        self.notify = Some(fd);
    }

    /// Capacity of the data area.
    pub fn capacity(&self) -> usize {
        self.ring.capacity
    }

    fn fail(&mut self, c: Corrupt) -> Corrupt {
        // A record peeked before the corruption was found is not popped
        // after it (issue 23's fuzzing found pop consuming it).
        self.peeked = 0;
        self.skipped = 0;
        self.corrupt = Some(c.clone());
        c
    }

    /// Bytes published and not yet consumed.
    pub fn pending(&mut self) -> Result<usize, Corrupt> {
        if let Some(c) = &self.corrupt {
            return Err(c.clone());
        }
        let head = self.ring.head().load(Ordering::Acquire);
        // The producer cannot have written into space we have not released;
        // measured from our own tail, records popped deferred are gone.
        self.ring
            .used(head, self.released)
            .and_then(|_| self.ring.used(head, self.tail))
            .map_err(|c| self.fail(c))
    }

    /// The next record, borrowed in place (no copy), or `None` if the ring
    /// is empty. Calling it again without [`Consumer::pop`] returns the same
    /// record.
    pub fn peek(&mut self) -> Result<Option<Record<'_>>, Corrupt> {
        let mut used = self.pending()?;
        let mut pos = self.tail;
        let mut skipped = 0usize;
        let cap = self.ring.capacity;
        loop {
            if used == 0 {
                self.peeked = 0;
                return Ok(None);
            }
            let off = self.ring.at(pos);
            let to_end = cap - (pos as usize & (cap - 1));
            let len = self.ring.word(off);
            if len == WRAP {
                if skipped > 0 || to_end > used {
                    return Err(self.fail(Corrupt(format!(
                        "wrap marker at {pos} with {used} bytes published"
                    ))));
                }
                skipped = to_end;
                pos = pos.wrapping_add(to_end as u64);
                used -= to_end;
                continue;
            }
            let len = len as usize;
            let flags = self.ring.word(off + 12);
            let extra = if flags & STAMPED != 0 { STAMP_BYTES } else { 0 };
            let size = align8(RECORD_HEADER_BYTES + extra + len);
            if len + extra > max_payload(cap) || size > to_end || size > used {
                return Err(self.fail(Corrupt(format!(
                    "record of {len} bytes at {pos} exceeds the ring ({used} bytes published, {to_end} before the end)"
                ))));
            }
            let stamp = if extra > 0 {
                self.ring
                    .map
                    .slice(off + RECORD_HEADER_BYTES, STAMP_BYTES)
                    .and_then(|b| b.try_into().ok())
                    .map_or(0, u64::from_le_bytes)
            } else {
                0
            };
            let header = RecordHeader {
                group: self.ring.word(off + 4),
                source: self.ring.word(off + 8),
                flags: flags & !STAMPED,
                stamp,
            };
            let at = off + RECORD_HEADER_BYTES + extra;
            if self.ring.map.slice(at, len).is_none() {
                return Err(self.fail(Corrupt("record outside the mapping".into())));
            }
            self.peeked = size;
            self.skipped = skipped;
            let payload = self.ring.map.slice(at, len).unwrap_or_default();
            return Ok(Some(Record { header, payload }));
        }
    }

    /// Consumes the next record (the one [`Consumer::peek`] returned, if it
    /// was called) and hands its space back to the producer, with records
    /// popped deferred before it. `Ok(false)` if the ring was empty. Does not
    /// wake a waiting producer: call [`Consumer::wake_producer`] after a
    /// batch.
    pub fn pop(&mut self) -> Result<bool, Corrupt> {
        let popped = self.pop_deferred()?;
        self.release();
        Ok(popped)
    }

    /// Consumes the next record as [`Consumer::pop`] does, without handing
    /// its space back: the producer cannot reuse it, so the payloads of the
    /// records popped this way stay in place, unchanged by an honest
    /// producer, until [`Consumer::release`]. No store to shared memory.
    /// Refuses (and moves nothing) once the ring is found corrupt.
    pub fn pop_deferred(&mut self) -> Result<bool, Corrupt> {
        if let Some(c) = &self.corrupt {
            return Err(c.clone());
        }
        if self.peeked == 0 && self.peek()?.is_none() {
            return Ok(false);
        }
        // Positions wrap at 2^64 (see the layout): a ring handed over with
        // indices near the end must not panic in a debug build (issue 23).
        self.tail = self.tail.wrapping_add((self.skipped + self.peeked) as u64);
        self.peeked = 0;
        self.skipped = 0;
        Ok(true)
    }

    /// Hands the space of every record popped since the last release back
    /// to the producer with one Release store of `tail`; nothing when there
    /// is none. Records popped before the ring was found corrupt were read
    /// whole, so their space is released even then. Does not wake a waiting
    /// producer: call [`Consumer::wake_producer`] after it.
    pub fn release(&mut self) {
        if self.tail != self.released {
            self.ring.tail().store(self.tail, Ordering::Release);
            self.released = self.tail;
        }
    }

    /// Whether records were popped with [`Consumer::pop_deferred`] and their
    /// space not yet handed back by [`Consumer::release`].
    pub fn pending_release(&self) -> bool {
        self.tail != self.released
    }

    /// If the producer is waiting for space, clears its flag and signals the
    /// notify eventfd. Returns whether it signalled. One atomic load when
    /// nobody waits.
    pub fn wake_producer(&self) -> bool {
        fence(Ordering::SeqCst);
        let waiting = self.ring.flag(OFF_PRODUCER_WAITING);
        if waiting.load(Ordering::Relaxed) != 0 && waiting.swap(0, Ordering::AcqRel) != 0 {
            if let Some(n) = &self.notify {
                n.signal();
            }
            return true;
        }
        false
    }

    /// Before blocking for data: releases records popped deferred (waking
    /// the producer if it waits for that space: it may be what we wait
    /// for), sets the "consumer sleeping" flag and re-checks. `Ok(true)`:
    /// still empty, block on the wake-up eventfd (the producer signals it
    /// when it publishes). `Ok(false)`: data arrived, flag cleared.
    pub fn prepare_sleep(&mut self) -> Result<bool, Corrupt> {
        if self.pending_release() {
            self.release();
            self.wake_producer();
        }
        self.ring
            .flag(OFF_CONSUMER_SLEEPING)
            .store(1, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        if self.pending()? > 0 {
            self.finish_sleep();
            return Ok(false);
        }
        Ok(true)
    }

    /// Clears the "consumer sleeping" flag (after waking up).
    pub fn finish_sleep(&mut self) {
        self.ring
            .flag(OFF_CONSUMER_SLEEPING)
            .store(0, Ordering::Relaxed);
    }

    /// The position of the next read (bytes ever consumed, deferred pops
    /// included), for tests.
    pub fn position(&self) -> u64 {
        self.tail
    }
}

#[cfg(test)]
mod tests;
