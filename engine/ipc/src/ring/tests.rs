use super::*;
use crate::sys;
use std::time::Duration;

const CAP: usize = 4096;

fn hdr(group: u32, flags: u32) -> RecordHeader {
    RecordHeader {
        group,
        source: 7,
        flags,
        stamp: 0,
    }
}

/// A ring plus a handle on its mapping to scribble on the header.
fn ring() -> (Arc<Mapping>, Producer, Consumer) {
    let map = Arc::new(Mapping::anonymous(ring_bytes(CAP)).unwrap());
    init(&map, 0, CAP).unwrap();
    let p = Producer::attach(map.clone(), 0, CAP).unwrap();
    let c = Consumer::attach(map.clone(), 0, CAP).unwrap();
    (map, p, c)
}

fn pop_vec(c: &mut Consumer) -> Option<(RecordHeader, Vec<u8>)> {
    let r = c.peek().unwrap().map(|r| (r.header, r.payload.to_vec()));
    if r.is_some() {
        assert!(c.pop().unwrap());
    }
    r
}

#[test]
fn push_peek_pop_in_order_with_gather() {
    let (_m, mut p, mut c) = ring();
    assert!(c.peek().unwrap().is_none());
    assert!(!c.pop().unwrap());
    p.try_push(hdr(1, FIRST | LAST), &[b"hello", b" ", b"world"])
        .unwrap();
    p.try_push(hdr(2, FIRST), &[]).unwrap();
    // Peek twice: same record, nothing consumed.
    assert_eq!(c.peek().unwrap().unwrap().payload, b"hello world");
    let r = c.peek().unwrap().unwrap();
    assert_eq!(r.header, hdr(1, FIRST | LAST));
    assert_eq!(r.payload, b"hello world");
    assert!(c.pop().unwrap());
    assert_eq!(pop_vec(&mut c), Some((hdr(2, FIRST), vec![])));
    assert_eq!(pop_vec(&mut c), None);
    // 16 + 11 -> 32 bytes, 16 + 0 -> 16 bytes.
    assert_eq!(c.position(), 48);
    assert_eq!(p.free_space().unwrap(), CAP);
}

#[test]
fn a_stamped_record_carries_its_stamp_in_eight_more_bytes_and_wraps_whole() {
    let (_m, mut p, mut c) = ring();
    let stamped = RecordHeader {
        stamp: 0x0102_0304_0506_0708,
        ..hdr(3, FIRST | LAST)
    };
    p.try_push(stamped, &[b"abc"]).unwrap();
    p.try_push(hdr(4, FIRST | LAST), &[b"de"]).unwrap();
    let r = c.peek().unwrap().unwrap();
    // The flag is the ring's own: callers see the stamp, not STAMPED.
    assert_eq!(r.header, stamped);
    assert_eq!(r.payload, b"abc");
    assert!(c.pop().unwrap());
    // 16 + 8 + 3 -> 32 bytes; the unstamped one is as before (16 + 2 -> 24).
    assert_eq!(c.position(), 32);
    assert_eq!(
        pop_vec(&mut c),
        Some((hdr(4, FIRST | LAST), b"de".to_vec()))
    );
    assert_eq!(c.position(), 56);
    // Across the end of the data area: the stamp and the payload move to
    // the start together, after a wrap marker.
    // Two records take the position to 16 bytes before the end.
    for fill in [vec![7u8; 2000], vec![8u8; CAP - 16 - 56 - 2016 - 16]] {
        p.try_push(hdr(5, 3), &[&fill]).unwrap();
        assert_eq!(pop_vec(&mut c).unwrap().1, fill);
    }
    assert_eq!(c.position() as usize, CAP - 16);
    p.try_push(stamped, &[b"wrapped"]).unwrap();
    let r = c.peek().unwrap().unwrap();
    assert_eq!((r.header, r.payload), (stamped, &b"wrapped"[..]));
    assert!(c.pop().unwrap());
    assert_eq!(c.position() as usize, CAP + 32);
    // The largest stamped payload is 8 bytes below the largest plain one.
    let max = p.max_record();
    assert!(matches!(
        p.try_push(stamped, &[&vec![0; max - 7]]),
        Err(PushError::TooLarge { max: m, .. }) if m == max - 8
    ));
    p.try_push(stamped, &[&vec![1; max - 8]]).unwrap();
    assert_eq!(pop_vec(&mut c).unwrap().1.len(), max - 8);
}

#[test]
fn full_then_space_after_pop() {
    let (_m, mut p, mut c) = ring();
    let payload = vec![0xab; 1000 - 16]; // 1000 -> 1000 bytes aligned
    let mut n = 0;
    loop {
        match p.try_push(hdr(0, 3), &[&payload]) {
            Ok(()) => n += 1,
            Err(PushError::Full) => break,
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(n, 4);
    assert_eq!(p.free_space().unwrap(), CAP - 4000);
    assert!(!p.can_push(payload.len()).unwrap());
    assert!(c.pop().unwrap());
    assert!(p.can_push(payload.len()).unwrap());
    // The fifth record wraps: 96 bytes of marker + 1000 = exactly the free space.
    p.try_push(hdr(0, 3), &[&payload]).unwrap();
    assert_eq!(p.free_space().unwrap(), 0);
    for _ in 0..4 {
        assert_eq!(pop_vec(&mut c).unwrap().1, payload);
    }
    assert!(pop_vec(&mut c).is_none());
}

#[test]
fn exact_fit_fills_the_ring_to_the_byte() {
    let (_m, mut p, mut c) = ring();
    // Two records of exactly CAP/2 bytes fill the ring with no wrap marker.
    let half = vec![1u8; CAP / 2 - RECORD_HEADER_BYTES];
    assert_eq!(half.len(), p.max_record());
    p.try_push(hdr(0, 3), &[&half]).unwrap();
    p.try_push(hdr(0, 3), &[&half]).unwrap();
    assert_eq!(p.free_space().unwrap(), 0);
    assert_eq!(p.try_push(hdr(0, 3), &[]), Err(PushError::Full));
    assert_eq!(pop_vec(&mut c).unwrap().1, half);
    assert_eq!(pop_vec(&mut c).unwrap().1, half);
    assert_eq!(c.position(), CAP as u64);
    // One byte more than max_record can never fit.
    let too = vec![0u8; p.max_record() + 1];
    assert_eq!(
        p.try_push(hdr(0, 3), &[&too]),
        Err(PushError::TooLarge {
            len: too.len(),
            max: p.max_record()
        })
    );
}

#[test]
fn wraps_around_with_a_marker() {
    let (_m, mut p, mut c) = ring();
    // Advance to 8 bytes before the end (CAP - 8), then push 24 bytes: the
    // record cannot fit, a wrap marker fills the last 8 and it starts at 0.
    let filler = vec![9u8; 1000 - 16];
    for _ in 0..4 {
        p.try_push(hdr(0, 3), &[&filler]).unwrap();
        pop_vec(&mut c).unwrap();
    }
    let rest = CAP - 4000 - 8; // 88 bytes: leave exactly 8 before the end.
    p.try_push(hdr(0, 3), &[&vec![5u8; rest - 16]]).unwrap();
    pop_vec(&mut c).unwrap();
    assert_eq!(p.position() as usize % CAP, CAP - 8);
    p.try_push(hdr(4, 3), &[b"wrapped!"]).unwrap();
    assert_eq!(p.position() as usize, 2 * CAP + 24 - CAP);
    assert_eq!(pop_vec(&mut c), Some((hdr(4, 3), b"wrapped!".to_vec())));
    assert_eq!(c.position(), p.position());
    // A record that needs the whole wrap plus itself must still fit when empty.
    let big = vec![3u8; p.max_record()];
    p.try_push(hdr(5, 3), &[&big]).unwrap();
    assert_eq!(pop_vec(&mut c).unwrap().1, big);
}

#[test]
fn max_record_always_fits_an_empty_ring_at_any_offset() {
    let (_m, mut p, mut c) = ring();
    let big = vec![7u8; p.max_record()];
    for step in 0..CAP / 8 {
        p.try_push(hdr(0, 3), &[&big])
            .unwrap_or_else(|e| panic!("offset step {step}: {e}"));
        assert_eq!(pop_vec(&mut c).unwrap().1.len(), big.len());
        p.try_push(hdr(0, 3), &[]).unwrap(); // shift by 16
        pop_vec(&mut c).unwrap();
        p.try_push(hdr(0, 3), &[&[1u8; 8]]).unwrap(); // shift by 24
        pop_vec(&mut c).unwrap();
    }
}

#[test]
fn consumer_reports_a_head_beyond_capacity() {
    let (m, mut p, mut c) = ring();
    p.try_push(hdr(0, 3), &[b"x"]).unwrap();
    m.atomic_u64(OFF_HEAD)
        .store(CAP as u64 + 64, Ordering::Release);
    let e = c.peek().unwrap_err();
    assert!(e.to_string().contains("inconsistent"), "{e}");
    // Sticky, even if the header is repaired.
    m.atomic_u64(OFF_HEAD).store(24, Ordering::Release);
    assert!(c.pop().is_err());
    assert!(c.prepare_sleep().is_err());
}

/// Found by fuzzing (issue 23, `ring_reader`): a record peeked, then the
/// head scribbled on, then a peek that reports it: pop consumed the record
/// peeked before and published the tail, instead of refusing.
#[test]
fn pop_after_a_corrupt_peek_refuses_and_moves_nothing() {
    let (m, mut p, mut c) = ring();
    p.try_push(hdr(0, 3), &[&[7; 40]]).unwrap();
    assert_eq!(c.peek().unwrap().unwrap().payload, [7; 40]);
    m.atomic_u64(OFF_HEAD).store(1 << 40, Ordering::Release);
    assert!(c.peek().is_err());
    assert!(c.pop().is_err());
    assert_eq!(c.position(), 0);
    assert_eq!(m.atomic_u64(OFF_TAIL).load(Ordering::Acquire), 0);
}

/// Found by fuzzing (issue 23, `ring_reader`, 5-minute AFL campaign): a
/// consumer attached to a ring whose tail sits just below 2^64 panicked
/// with "attempt to add with overflow" in a debug build when it popped
/// across the wrap. Positions wrap at 2^64 on both ends, with a wrap
/// marker on the way.
#[test]
fn positions_wrap_at_2_pow_64() {
    let map = Arc::new(Mapping::anonymous(ring_bytes(CAP)).unwrap());
    init(&map, 0, CAP).unwrap();
    // 24 bytes before 2^64, and 24 bytes before the end of the data area.
    let start = u64::MAX - 23;
    map.atomic_u64(OFF_HEAD).store(start, Ordering::Release);
    map.atomic_u64(OFF_TAIL).store(start, Ordering::Release);
    let mut p = Producer::attach(map.clone(), 0, CAP).unwrap();
    let mut c = Consumer::attach(map.clone(), 0, CAP).unwrap();
    p.try_push(hdr(1, 3), &[]).unwrap(); // 16 bytes: 8 left before the end
    p.try_push(hdr(2, 3), &[&[9; 40]]).unwrap(); // a wrap marker, then at 0
    assert_eq!(p.position(), 56);
    assert_eq!(pop_vec(&mut c), Some((hdr(1, 3), vec![])));
    assert_eq!(c.position(), u64::MAX - 7);
    assert_eq!(pop_vec(&mut c), Some((hdr(2, 3), vec![9; 40])));
    assert_eq!(c.position(), 56);
    assert_eq!(p.free_space().unwrap(), CAP);
}

#[test]
fn consumer_reports_a_record_length_past_the_data() {
    let (m, mut p, mut c) = ring();
    p.try_push(hdr(0, 3), &[b"abcdefgh"]).unwrap();
    // Claim a 3000-byte payload when 24 bytes are published.
    m.atomic_u32(HEADER_BYTES)
        .unwrap()
        .store(3000, Ordering::Relaxed);
    assert!(c.peek().is_err());
    // And a length larger than any record.
    let (m, mut p, mut c) = ring();
    p.try_push(hdr(0, 3), &[b"abcdefgh"]).unwrap();
    m.atomic_u32(HEADER_BYTES)
        .unwrap()
        .store(0x7fff_fff0, Ordering::Relaxed);
    assert!(c.peek().is_err());
}

#[test]
fn consumer_reports_a_misplaced_wrap_marker_and_misaligned_head() {
    let (m, mut p, mut c) = ring();
    p.try_push(hdr(0, 3), &[b"abcdefgh"]).unwrap();
    m.atomic_u32(HEADER_BYTES)
        .unwrap()
        .store(WRAP, Ordering::Relaxed);
    assert!(c.peek().is_err());
    let (m, _p, mut c) = ring();
    m.atomic_u64(OFF_HEAD).store(13, Ordering::Release);
    assert!(c.peek().is_err());
}

#[test]
fn producer_reports_a_tail_ahead_of_head() {
    let (m, mut p, _c) = ring();
    p.try_push(hdr(0, 3), &[b"abc"]).unwrap();
    m.atomic_u64(OFF_TAIL).store(1 << 20, Ordering::Release);
    assert!(matches!(
        p.try_push(hdr(0, 3), &[b"abc"]),
        Err(PushError::Corrupt(_))
    ));
    assert!(p.free_space().is_err());
    assert!(p.can_push(1).is_err());
}

#[test]
fn attach_rejects_bad_headers() {
    let map = Arc::new(Mapping::anonymous(ring_bytes(CAP)).unwrap());
    // Never initialised: magic is 0.
    assert!(Consumer::attach(map.clone(), 0, CAP).is_err());
    init(&map, 0, CAP).unwrap();
    // Told a different capacity than the header holds.
    assert!(Producer::attach(map.clone(), 0, 2 * CAP).is_err());
    assert!(Producer::attach(map.clone(), 0, 3000).is_err());
    // A ring that does not fit the mapping.
    assert!(Producer::attach(map.clone(), 4096, CAP).is_err());
    map.atomic_u64(OFF_CAPACITY).store(8192, Ordering::Relaxed);
    assert!(Consumer::attach(map, 0, CAP).is_err());
}

#[test]
fn sleeping_consumer_is_woken_once() {
    let (_m, mut p, mut c) = ring();
    let fd = Arc::new(sys::EventFd::new().unwrap());
    p.set_notify(fd.clone());
    // Not sleeping: no signal.
    p.try_push(hdr(0, 3), &[b"a"]).unwrap();
    assert!(!fd.drain());
    // Data present: prepare_sleep refuses.
    assert!(!c.prepare_sleep().unwrap());
    pop_vec(&mut c).unwrap();
    assert!(c.prepare_sleep().unwrap());
    p.try_push(hdr(0, 3), &[b"b"]).unwrap();
    p.try_push(hdr(0, 3), &[b"c"]).unwrap();
    assert!(fd.drain(), "push into a sleeping consumer's ring signals");
    assert!(!fd.drain(), "the flag was cleared: one signal per sleep");
}

#[test]
fn waiting_producer_is_woken_after_pop() {
    let (_m, mut p, mut c) = ring();
    let fd = Arc::new(sys::EventFd::new().unwrap());
    c.set_notify(fd.clone());
    let big = vec![0u8; p.max_record()];
    p.try_push(hdr(0, 3), &[&big]).unwrap();
    p.try_push(hdr(0, 3), &[&big]).unwrap();
    assert!(p.prepare_wait(big.len()).unwrap());
    pop_vec(&mut c).unwrap();
    assert!(c.wake_producer());
    assert!(fd.drain());
    assert!(!c.wake_producer());
    assert!(!p.prepare_wait(big.len()).unwrap());
}

/// The head and tail as stored in shared memory (what the peer sees).
fn shared_indices(m: &Mapping) -> (u64, u64) {
    (
        m.atomic_u64(OFF_HEAD).load(Ordering::Acquire),
        m.atomic_u64(OFF_TAIL).load(Ordering::Acquire),
    )
}

#[test]
fn deferred_records_are_invisible_until_commit_then_all_visible_in_order() {
    let (m, mut p, mut c) = ring();
    assert!(!p.pending_commit());
    for i in 0..5u32 {
        p.try_push_deferred(hdr(i, FIRST | LAST), &[&[i as u8; 10], b"!"])
            .unwrap();
    }
    assert!(p.pending_commit());
    // Written (the producer's own position moved) but not published.
    assert_eq!(p.position(), 5 * 32);
    assert_eq!(shared_indices(&m), (0, 0));
    assert_eq!(c.pending().unwrap(), 0);
    assert!(c.peek().unwrap().is_none());
    assert!(!c.pop().unwrap());
    p.commit();
    assert!(!p.pending_commit());
    assert_eq!(shared_indices(&m), (5 * 32, 0));
    for i in 0..5u32 {
        let mut want = vec![i as u8; 10];
        want.push(b'!');
        assert_eq!(pop_vec(&mut c), Some((hdr(i, FIRST | LAST), want)));
    }
    assert_eq!(pop_vec(&mut c), None);
    // try_push publishes the records deferred before it, in order.
    p.try_push_deferred(hdr(10, 3), &[b"a"]).unwrap();
    p.try_push(hdr(11, 3), &[b"b"]).unwrap();
    assert!(!p.pending_commit());
    assert_eq!(pop_vec(&mut c), Some((hdr(10, 3), b"a".to_vec())));
    assert_eq!(pop_vec(&mut c), Some((hdr(11, 3), b"b".to_vec())));
}

#[test]
fn deferred_records_take_their_space_before_commit() {
    let (m, mut p, mut c) = ring();
    let payload = vec![0xcd; 1000 - 16]; // 1000 bytes a record
    for _ in 0..4 {
        p.try_push_deferred(hdr(0, 3), &[&payload]).unwrap();
    }
    // Nothing published, yet the space is gone.
    assert_eq!(shared_indices(&m).0, 0);
    assert_eq!(p.free_space().unwrap(), CAP - 4000);
    assert!(!p.can_push(payload.len()).unwrap());
    assert_eq!(
        p.try_push_deferred(hdr(0, 3), &[&payload]),
        Err(PushError::Full)
    );
    assert_eq!(p.try_push(hdr(0, 3), &[&payload]), Err(PushError::Full));
    // A Full try_push does not commit: its record was never written.
    assert_eq!(shared_indices(&m).0, 0);
    p.commit();
    assert_eq!(c.pending().unwrap(), 4000);
    for _ in 0..4 {
        assert_eq!(pop_vec(&mut c).unwrap().1, payload);
    }
    assert_eq!(p.free_space().unwrap(), CAP);
}

#[test]
fn deferred_records_wrap_around_and_commit_once() {
    let (m, mut p, mut c) = ring();
    // Move to 8 bytes before the end, as in wraps_around_with_a_marker.
    let filler = vec![9u8; 1000 - 16];
    for _ in 0..4 {
        p.try_push(hdr(0, 3), &[&filler]).unwrap();
        pop_vec(&mut c).unwrap();
    }
    p.try_push(hdr(0, 3), &[&[5u8; CAP - 4000 - 8 - 16]])
        .unwrap();
    pop_vec(&mut c).unwrap();
    assert_eq!(p.position() as usize % CAP, CAP - 8);
    // Three deferred records: the first needs a wrap marker, all land at 0..
    for i in 0..3u32 {
        p.try_push_deferred(hdr(i, 3), &[&[i as u8; 8]]).unwrap();
    }
    assert_eq!(p.position() as usize, CAP + 3 * 24);
    assert_eq!(shared_indices(&m).0 as usize, CAP - 8);
    assert!(c.peek().unwrap().is_none());
    p.commit();
    for i in 0..3u32 {
        assert_eq!(pop_vec(&mut c), Some((hdr(i, 3), vec![i as u8; 8])));
    }
    assert_eq!(c.position(), p.position());
}

#[test]
fn commit_wakes_a_sleeping_consumer_once_and_an_empty_commit_does_nothing() {
    let (m, mut p, mut c) = ring();
    let fd = Arc::new(sys::EventFd::new().unwrap());
    p.set_notify(fd.clone());
    assert!(c.prepare_sleep().unwrap());
    // Deferred records neither wake the consumer nor clear its flag.
    p.try_push_deferred(hdr(0, 3), &[b"a"]).unwrap();
    p.try_push_deferred(hdr(0, 3), &[b"b"]).unwrap();
    assert!(!fd.drain(), "no signal before commit");
    let sleeping = m.atomic_u32(OFF_CONSUMER_SLEEPING).unwrap();
    assert_eq!(sleeping.load(Ordering::Relaxed), 1);
    p.commit();
    assert!(fd.drain(), "commit signals a sleeping consumer");
    assert_eq!(sleeping.load(Ordering::Relaxed), 0, "and clears its flag");
    p.commit();
    assert!(!fd.drain(), "one signal for the whole batch");
    c.finish_sleep();
    pop_vec(&mut c).unwrap();
    pop_vec(&mut c).unwrap();
    // An empty commit runs no wake-up at all: a sleeping flag stays set.
    assert!(c.prepare_sleep().unwrap());
    p.commit();
    assert!(!fd.drain());
    assert_eq!(
        sleeping.load(Ordering::Relaxed),
        1,
        "empty commit: untouched"
    );
    assert_eq!(shared_indices(&m).0, 48);
}

#[test]
fn prepare_wait_commits_deferred_records_first() {
    let (m, mut p, mut c) = ring();
    let half = vec![1u8; p.max_record()];
    p.try_push_deferred(hdr(0, 3), &[&half]).unwrap();
    p.try_push_deferred(hdr(1, 3), &[&half]).unwrap();
    // Waiting for room the consumer cannot make without seeing these.
    assert!(p.prepare_wait(1).unwrap());
    assert_eq!(shared_indices(&m).0 as usize, CAP);
    assert_eq!(pop_vec(&mut c).unwrap().0, hdr(0, 3));
    p.finish_wait();
}

#[test]
fn deferred_pops_keep_the_space_until_release() {
    let (m, mut p, mut c) = ring();
    let fd = Arc::new(sys::EventFd::new().unwrap());
    c.set_notify(fd.clone());
    let big = vec![2u8; p.max_record()];
    p.try_push(hdr(0, 3), &[&big]).unwrap();
    p.try_push(hdr(1, 3), &[b"x"]).unwrap();
    assert!(!c.pending_release());
    assert_eq!(c.peek().unwrap().unwrap().header, hdr(0, 3));
    assert!(c.pop_deferred().unwrap());
    assert_eq!(c.peek().unwrap().unwrap().header, hdr(1, 3));
    assert!(c.pop_deferred().unwrap());
    assert!(!c.pop_deferred().unwrap(), "empty");
    assert!(c.pending_release());
    // The producer still sees the ring as it was.
    assert_eq!(shared_indices(&m).1, 0);
    assert!(!p.can_push(big.len()).unwrap());
    assert!(p.prepare_wait(big.len()).unwrap());
    c.release();
    assert!(!c.pending_release());
    assert_eq!(shared_indices(&m).1, c.position());
    assert!(c.wake_producer());
    assert!(fd.drain());
    assert!(p.can_push(big.len()).unwrap());
    p.finish_wait();
    c.release();
    assert_eq!(shared_indices(&m).1, c.position(), "an empty release");
}

#[test]
fn prepare_sleep_releases_deferred_pops_and_wakes_a_waiting_producer() {
    let (m, mut p, mut c) = ring();
    let fd = Arc::new(sys::EventFd::new().unwrap());
    c.set_notify(fd.clone());
    let big = vec![3u8; p.max_record()];
    p.try_push(hdr(0, 3), &[&big]).unwrap();
    p.try_push(hdr(0, 3), &[&big]).unwrap();
    assert!(p.prepare_wait(big.len()).unwrap());
    assert!(c.pop_deferred().unwrap());
    assert!(c.pop_deferred().unwrap());
    // Going to sleep on an empty ring while holding the space the
    // producer waits for would leave both asleep.
    assert!(c.prepare_sleep().unwrap());
    assert_eq!(shared_indices(&m).1 as usize, CAP);
    assert!(fd.drain(), "the waiting producer was woken");
    assert!(p.can_push(big.len()).unwrap());
}

#[test]
fn a_deferred_pop_after_corruption_refuses_and_release_keeps_what_was_read() {
    let (m, mut p, mut c) = ring();
    p.try_push(hdr(0, 3), &[&[7; 40]]).unwrap();
    p.try_push(hdr(1, 3), &[&[8; 40]]).unwrap();
    assert!(c.pop_deferred().unwrap());
    assert_eq!(c.peek().unwrap().unwrap().payload, [8; 40]);
    m.atomic_u64(OFF_HEAD).store(1 << 40, Ordering::Release);
    assert!(c.peek().is_err());
    assert!(c.pop_deferred().is_err());
    assert_eq!(c.position(), 56, "the second record was not consumed");
    c.release();
    assert_eq!(shared_indices(&m).1, 56, "the first one's space goes back");
    assert!(c.pop().is_err(), "still sticky");
}

#[test]
fn a_producer_writing_into_space_not_yet_released_is_corrupt() {
    let (m, mut p, mut c) = ring();
    let big = vec![4u8; p.max_record()];
    p.try_push(hdr(0, 3), &[&big]).unwrap();
    assert!(c.pop_deferred().unwrap());
    // Released: nothing. A head a whole ring past our released tail means
    // the producer overwrote the record we may still be reading.
    m.atomic_u64(OFF_HEAD)
        .store(CAP as u64 + 8, Ordering::Release);
    let e = c.pending().unwrap_err();
    assert!(e.to_string().contains("inconsistent"), "{e}");
}

#[test]
fn a_consumer_tail_past_what_was_published_is_corrupt() {
    let (m, mut p, _c) = ring();
    p.try_push(hdr(0, 3), &[b"abc"]).unwrap();
    p.try_push_deferred(hdr(0, 3), &[b"def"]).unwrap();
    // The consumer claims to have read the deferred record it cannot see.
    m.atomic_u64(OFF_TAIL).store(48, Ordering::Release);
    assert!(matches!(p.free_space(), Err(Corrupt(_))));
    assert!(matches!(
        p.try_push_deferred(hdr(0, 3), &[b"x"]),
        Err(PushError::Corrupt(_))
    ));
}

/// Deterministic record i: length and bytes derived from i.
fn record(i: u64, buf: &mut Vec<u8>) {
    let len = (i.wrapping_mul(2654435761) % 700) as usize;
    buf.clear();
    buf.extend((0..len).map(|k| (i as usize * 31 + k) as u8));
}

fn wait(fd: &sys::EventFd) {
    let mut pfd = [sys::pollin(fd.raw())];
    // The timeout bounds a lost wake-up to a slow test, not a hang.
    sys::poll(&mut pfd, Some(Duration::from_secs(5))).unwrap();
    fd.drain();
}

#[test]
fn two_threads_move_a_million_records_through_a_small_ring() {
    const N: u64 = 1_000_000;
    let map = Arc::new(Mapping::anonymous(ring_bytes(CAP)).unwrap());
    init(&map, 0, CAP).unwrap();
    let mut p = Producer::attach(map.clone(), 0, CAP).unwrap();
    let mut c = Consumer::attach(map, 0, CAP).unwrap();
    let data_ready = Arc::new(sys::EventFd::new().unwrap());
    let space_ready = Arc::new(sys::EventFd::new().unwrap());
    p.set_notify(data_ready.clone());
    c.set_notify(space_ready.clone());
    let producer = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let mut waits = 0u64;
        for i in 0..N {
            record(i, &mut buf);
            let (a, b) = buf.split_at(buf.len() / 3);
            loop {
                match p.try_push(hdr(i as u32, 3), &[a, b]) {
                    Ok(()) => break,
                    Err(PushError::Full) => {
                        if p.prepare_wait(buf.len()).unwrap() {
                            waits += 1;
                            wait(&space_ready);
                        }
                        p.finish_wait();
                    }
                    Err(e) => panic!("{e}"),
                }
            }
        }
        waits
    });
    let mut want = Vec::new();
    let mut sleeps = 0u64;
    for i in 0..N {
        loop {
            if let Some(r) = c.peek().unwrap() {
                record(i, &mut want);
                assert_eq!(r.header.group, i as u32, "order");
                assert!(r.payload == &want[..], "bytes of record {i}");
                c.pop().unwrap();
                c.wake_producer();
                break;
            }
            if c.prepare_sleep().unwrap() {
                sleeps += 1;
                wait(&data_ready);
            }
            c.finish_sleep();
        }
    }
    let waits = producer.join().unwrap();
    assert!(c.peek().unwrap().is_none());
    eprintln!("producer waited {waits} times, consumer slept {sleeps} times");
}

/// A producer reads the consumer's tail once per commit, not per push: a
/// tail broken between two commits is found by the first push after the
/// next commit (or by a push that does not fit, which reads it again), and
/// space the consumer hands back mid-batch is still used.
#[test]
fn the_consumer_s_tail_is_read_once_per_commit_and_again_when_a_push_does_not_fit() {
    let rec = [5u8; 240]; // 256 bytes of ring with its header
    let (m, mut p, mut c) = ring();
    p.try_push(hdr(0, 3), &[&rec]).unwrap();
    // Deferred: the producer reads the tail (0) and keeps it until a commit.
    p.try_push_deferred(hdr(0, 3), &[&rec]).unwrap();
    // The consumer takes the first record and hands its space back.
    assert!(c.pop().unwrap());
    assert_eq!(shared_indices(&m).1, 256);
    // Without a commit, the producer fills the ring: 15 records fit in
    // what it saw, the 16th only in the space handed back.
    for i in 0..CAP / 256 - 1 {
        p.try_push_deferred(hdr(0, 3), &[&rec])
            .unwrap_or_else(|e| panic!("push {i}: {e:?}"));
    }
    assert!(matches!(
        p.try_push_deferred(hdr(0, 3), &[&rec]),
        Err(PushError::Full)
    ));
    p.commit();

    // A tail moved ahead of head between commits: pushes within what the
    // producer saw go on, the first push after the commit finds it.
    let (m, mut p, _c) = ring();
    p.try_push(hdr(0, 3), &[b"abc"]).unwrap();
    p.try_push_deferred(hdr(0, 3), &[b"abc"]).unwrap();
    m.atomic_u64(OFF_TAIL).store(1 << 20, Ordering::Release);
    p.try_push_deferred(hdr(0, 3), &[b"abc"]).unwrap();
    p.commit();
    assert!(matches!(
        p.try_push_deferred(hdr(0, 3), &[b"abc"]),
        Err(PushError::Corrupt(_))
    ));
}
