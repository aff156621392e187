//! The shared-memory ring's reader (`mcast_ipc::ring`), against a peer
//! that writes anything anywhere in the ring.
//!
//! The ring lives in an anonymous mapping of this process (as in the
//! ring's own tests). The input is a script of operations, one byte each
//! plus its arguments: honest pushes and pops, and scribbles over the
//! indices, the record headers and any other byte, as a hostile process
//! sharing the memory could write them. Once anything was scribbled, the
//! reader may return garbage records but only from inside the data area,
//! or `Corrupt`, which must then stick; before that, every record must come
//! back exactly as pushed.

use std::collections::VecDeque;
use std::sync::Arc;

use mcast_ipc::ring::{
    self, init, max_payload, ring_bytes, Consumer, Producer, PushError, RecordHeader, HEADER_BYTES,
    MIN_CAPACITY, RECORD_HEADER_BYTES,
};
use mcast_ipc::shm::Mapping;

const CAP: usize = MIN_CAPACITY;
/// Where head and tail live (the ring's documented layout).
const OFF_HEAD: usize = 64;
const OFF_TAIL: usize = 128;
/// The most operations one input runs.
const MAX_OPS: usize = 512;

/// Reads the script; `None` once it is used up.
struct Script<'a> {
    data: &'a [u8],
}

impl Script<'_> {
    fn bytes<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.data.split_first_chunk::<N>()?;
        self.data = rest;
        Some(*head)
    }
    fn u8(&mut self) -> Option<u8> {
        self.bytes::<1>().map(|[b]| b)
    }
    fn u16(&mut self) -> Option<u16> {
        self.bytes().map(u16::from_le_bytes)
    }
    fn u32(&mut self) -> Option<u32> {
        self.bytes().map(u32::from_le_bytes)
    }
    fn u64(&mut self) -> Option<u64> {
        self.bytes().map(u64::from_le_bytes)
    }
}

/// The ring, both ends, and what an honest run would hold.
struct Rig {
    map: Arc<Mapping>,
    producer: Producer,
    consumer: Consumer,
    /// Records pushed and not yet popped, in order.
    model: VecDeque<(RecordHeader, Vec<u8>)>,
    /// Something other than the producer wrote into the ring.
    scribbled: bool,
    consumer_corrupt: bool,
    producer_corrupt: bool,
    pushed: u32,
}

/// Runs one script against a fresh ring.
pub fn ring_reader(data: &[u8]) {
    let map = Arc::new(Mapping::anonymous(ring_bytes(CAP)).expect("an anonymous mapping"));
    init(&map, 0, CAP).expect("a fresh ring");
    let producer = Producer::attach(map.clone(), 0, CAP).expect("a fresh ring");
    let consumer = Consumer::attach(map.clone(), 0, CAP).expect("a fresh ring");
    let mut rig = Rig {
        map,
        producer,
        consumer,
        model: VecDeque::new(),
        scribbled: false,
        consumer_corrupt: false,
        producer_corrupt: false,
        pushed: 0,
    };
    let mut script = Script { data };
    for _ in 0..MAX_OPS {
        if rig.step(&mut script).is_none() {
            break;
        }
    }
    // Drain what is left: every record, or corruption.
    for _ in 0..CAP {
        if !rig.pop() {
            break;
        }
    }
}

impl Rig {
    fn step(&mut self, s: &mut Script<'_>) -> Option<()> {
        match s.u8()? % 12 {
            0 | 1 => {
                let len = usize::from(s.u16()?) % (max_payload(CAP) + 1);
                self.push(len);
            }
            2 | 3 => {
                self.pop();
            }
            4 => self.peek_twice(),
            5 => {
                // Any bytes anywhere in the ring, header included.
                let off = usize::from(s.u16()?) % ring_bytes(CAP);
                let n = usize::from(s.u8()? % 16) + 1;
                let bytes: Vec<u8> = (0..n).map_while(|_| s.u8()).collect();
                self.scribble(off, &bytes);
            }
            6 => {
                let v = s.u64()?;
                self.scribble(OFF_HEAD, &v.to_le_bytes());
            }
            7 => {
                let v = s.u64()?;
                self.scribble(OFF_TAIL, &v.to_le_bytes());
            }
            8 => {
                // A plausible head: ahead of the reader by a multiple of 8.
                let ahead = u64::from(s.u16()?) * 8;
                let head = self.consumer.position().wrapping_add(ahead);
                self.scribble(OFF_HEAD, &head.to_le_bytes());
            }
            9 => {
                // The length word of the record the reader is at.
                let len = s.u32()?;
                let off = HEADER_BYTES + (self.consumer.position() as usize & (CAP - 1));
                self.scribble(off, &len.to_le_bytes());
            }
            10 => self.pending(),
            _ => self.reattach(),
        }
        Some(())
    }

    fn scribble(&mut self, off: usize, bytes: &[u8]) {
        if self.map.write(off, bytes) {
            self.scribbled = true;
        }
    }

    fn push(&mut self, len: usize) {
        self.pushed = self.pushed.wrapping_add(1);
        // Every third record carries a time stamp (8 bytes more).
        let stamp = if self.pushed % 3 == 0 {
            u64::from(self.pushed) << 20 | 1
        } else {
            0
        };
        let extra = if stamp != 0 { ring::STAMP_BYTES } else { 0 };
        let len = len.min(max_payload(CAP) - extra);
        let hdr = RecordHeader {
            group: self.pushed,
            source: len as u32,
            flags: ring::FIRST | ring::LAST,
            stamp,
        };
        let payload: Vec<u8> = (0..len).map(|i| (i as u32 ^ self.pushed) as u8).collect();
        let fits = self.honest_fit(len + extra);
        let (a, b) = payload.split_at(len / 2);
        match self.producer.try_push(hdr, &[a, b]) {
            Ok(()) => {
                assert!(!self.producer_corrupt, "a push after Corrupt");
                assert_ne!(fits, Some(false), "pushed {len} bytes that do not fit");
                self.model.push_back((hdr, payload));
            }
            Err(PushError::Full) => {
                assert!(!self.producer_corrupt, "Full after Corrupt");
                assert_ne!(fits, Some(true), "Full for {len} bytes that fit");
            }
            Err(PushError::TooLarge { .. }) => panic!("{len} bytes is within max_payload"),
            Err(PushError::Corrupt(c)) => {
                assert!(self.scribbled, "an honest ring reported {c}");
                self.producer_corrupt = true;
            }
        }
    }

    /// Whether a record of `len` (a stamp's bytes counted) fits now, from both ends' own positions
    /// (the ring's documented rule: a record does not straddle the end, a
    /// wrap marker fills the rest); `None` once the ring was scribbled on.
    fn honest_fit(&self, len: usize) -> Option<bool> {
        if self.scribbled {
            return None;
        }
        let head = self.producer.position();
        let used = head.wrapping_sub(self.consumer.position()) as usize;
        let size = record_size(len);
        let to_end = CAP - (head as usize & (CAP - 1));
        let need = if size <= to_end { size } else { size + to_end };
        Some(need <= CAP - used)
    }

    /// Peeks and pops one record; false when the ring is empty or corrupt.
    fn pop(&mut self) -> bool {
        let before = self.consumer.position();
        let got = match self.consumer.peek() {
            Ok(Some(r)) => {
                check_in_data(&self.map, before, r.payload);
                Some((r.header, r.payload.to_vec()))
            }
            Ok(None) => None,
            Err(c) => {
                self.corrupted(&c);
                return false;
            }
        };
        assert!(!self.consumer_corrupt, "a record after Corrupt");
        let Some(got) = got else {
            if !self.scribbled {
                assert!(self.model.is_empty(), "records lost: {}", self.model.len());
            }
            return false;
        };
        match self.consumer.pop() {
            Ok(popped) => assert!(popped, "pop after a peek that found a record"),
            Err(c) => {
                self.corrupted(&c);
                return false;
            }
        }
        let moved = self.consumer.position().wrapping_sub(before);
        assert!(
            moved > 0 && moved as usize <= CAP && moved % 8 == 0,
            "pop moved the reader {moved} bytes"
        );
        if !self.scribbled {
            let want = self.model.pop_front().expect("a record the model lacks");
            assert_eq!(got, want, "the record popped is not the one pushed");
        }
        true
    }

    /// Peek twice without popping: the same record both times.
    fn peek_twice(&mut self) {
        let first = match self.consumer.peek() {
            Ok(r) => r.map(|r| (r.header, r.payload.to_vec())),
            Err(c) => return self.corrupted(&c),
        };
        assert!(!self.consumer_corrupt, "a peek after Corrupt");
        if !self.scribbled {
            assert_eq!(first, self.model.front().cloned());
            let second = self.consumer.peek().expect("an honest ring");
            assert_eq!(first, second.map(|r| (r.header, r.payload.to_vec())));
        }
    }

    fn pending(&mut self) {
        match self.consumer.pending() {
            Ok(n) => {
                assert!(!self.consumer_corrupt, "pending after Corrupt");
                assert!(
                    n <= CAP && n % 8 == 0,
                    "{n} bytes pending in a ring of {CAP}"
                );
            }
            Err(c) => self.corrupted(&c),
        }
        match self.producer.free_space() {
            Ok(n) => {
                assert!(!self.producer_corrupt, "free space after Corrupt");
                assert!(n <= CAP, "{n} bytes free in a ring of {CAP}");
            }
            Err(c) => {
                assert!(self.scribbled, "an honest ring reported {c}");
                self.producer_corrupt = true;
            }
        }
    }

    /// A new reader on the same memory (a restarted consumer): attach
    /// checks the header as it is now.
    fn reattach(&mut self) {
        match Consumer::attach(self.map.clone(), 0, CAP) {
            Ok(c) => {
                if self.consumer.position() != c.position() && !self.scribbled {
                    panic!(
                        "attach picked up tail {} after {}",
                        c.position(),
                        self.consumer.position()
                    );
                }
                self.consumer = c;
                self.consumer_corrupt = false;
                // The new reader starts at the shared tail: a popped-but-
                // unpublished record cannot exist (pop publishes), so an
                // honest model still holds.
            }
            Err(c) => assert!(self.scribbled, "attach refused an honest ring: {c}"),
        }
    }

    fn corrupted(&mut self, c: &ring::Corrupt) {
        assert!(self.scribbled, "an honest ring reported {c}");
        let _ = c.to_string();
        self.consumer_corrupt = true;
        // Sticky: every later call says so too.
        assert!(self.consumer.pending().is_err());
        assert!(self.consumer.peek().is_err());
        assert!(self.consumer.pop().is_err());
    }
}

/// Bytes a record of `len` takes (header and padding).
fn record_size(len: usize) -> usize {
    (RECORD_HEADER_BYTES + len).div_ceil(8) * 8
}

/// A record the reader returned lies in the data area, right after its
/// header, at the reader's position or at the start after a wrap marker.
fn check_in_data(map: &Mapping, position: u64, payload: &[u8]) {
    let data = map
        .slice(HEADER_BYTES, CAP)
        .expect("the data area is mapped");
    let base = data.as_ptr() as usize;
    let at = (payload.as_ptr() as usize).wrapping_sub(base);
    assert!(
        (RECORD_HEADER_BYTES..=CAP).contains(&at) && payload.len() <= CAP - at,
        "payload of {} bytes at {at} is outside the {CAP}-byte data area",
        payload.len()
    );
    assert!(payload.len() <= max_payload(CAP));
    // Right after the header, or after a stamp (whose flag a scribbler may
    // have set on any record).
    let reader = position as usize & (CAP - 1);
    let starts = [
        at - RECORD_HEADER_BYTES,
        at.saturating_sub(RECORD_HEADER_BYTES + ring::STAMP_BYTES),
    ];
    assert!(
        starts.iter().any(|&r| r == reader || r == 0),
        "record at {starts:?}, reader at {reader}"
    );
}
