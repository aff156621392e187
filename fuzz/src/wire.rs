//! The frame parser, the NAK range list and batched payloads (`mcast-wire`).

use mcast_wire::{
    batch, field, payload_crc, Flags, Frame, Kind, RangeList, Seq, WireError, ETHERTYPE_DEFAULT,
    MAX_NAK_RANGES, RANGE_LEN,
};

/// The first byte picks a mode, the rest is the frame. Mode bit 0 set:
/// the checksum is recomputed first (when the length fields allow it), so
/// that mutated frames get past the CRC to everything checked after it.
pub fn frame(data: &[u8]) {
    let Some((&mode, bytes)) = data.split_first() else {
        return;
    };
    let mut buf = bytes.to_vec();
    if mode & 1 == 1 {
        repair_checksum(&mut buf);
    }
    match Frame::new_checked(&buf[..], ETHERTYPE_DEFAULT) {
        Ok(f) => check_frame(&f, &buf),
        Err(e) => {
            let _ = e.to_string();
        }
    }
}

/// Stores the right CRC when the buffer holds a whole header and the
/// payload its length field declares; otherwise leaves it alone.
fn repair_checksum(buf: &mut [u8]) {
    if buf.len() < field::PAYLOAD {
        return;
    }
    let declared = usize::from(u16::from_be_bytes([
        buf[field::PAYLOAD_LEN.start],
        buf[field::PAYLOAD_LEN.start + 1],
    ]));
    if declared <= buf.len() - field::PAYLOAD {
        Frame::new_unchecked(&mut buf[..]).fill_checksum();
    }
}

/// What holds of a frame `new_checked` accepted.
fn check_frame(f: &Frame<&[u8]>, buf: &[u8]) {
    let header = f.header().expect("a checked frame's header parses");
    assert_eq!(f.kind(), Ok(header.kind));
    assert_eq!(f.flags(), header.flags);
    assert_eq!(f.seq(), header.seq);
    assert_eq!(f.ethertype(), ETHERTYPE_DEFAULT);
    assert_eq!(f.payload_len(), usize::from(header.payload_len));
    let len = f.frame_len();
    assert!(
        len <= buf.len(),
        "frame of {len} bytes in {} bytes",
        buf.len()
    );
    let payload = f.payload();
    assert_eq!(payload.len(), usize::from(header.payload_len));
    assert_eq!(payload, &buf[field::PAYLOAD..len]);

    // Emitting the parsed header in front of the payload gives back the
    // frame byte for byte: every header byte is a field.
    let mut out = vec![0; len];
    out[field::PAYLOAD..].copy_from_slice(payload);
    let (_, n) = Frame::emit(
        &mut out[..],
        f.dst_mac(),
        f.src_mac(),
        ETHERTYPE_DEFAULT,
        &header,
    )
    .expect("a buffer of frame_len bytes takes the frame");
    assert_eq!(n, len);
    assert_eq!(out, buf[..len], "emit(parse(frame)) differs from the frame");
    let mut again = vec![0; len];
    again[field::PAYLOAD..].copy_from_slice(payload);
    Frame::emit_with_payload_crc(
        &mut again[..],
        f.dst_mac(),
        f.src_mac(),
        ETHERTYPE_DEFAULT,
        &header,
        payload_crc(payload),
    )
    .expect("a buffer of frame_len bytes takes the frame");
    assert_eq!(again, out, "the precomputed-CRC path differs");

    if header.kind == Kind::Nak {
        nak_ranges(payload);
    }
    if header.flags.contains(Flags::BATCH) {
        batched(header.flags, payload);
    }
}

/// A batched payload (docs/protocol.md §1.10): `validate` accepts exactly
/// the payloads whose records, read back, rebuild it byte for byte, and
/// reading never panics either way.
fn batched(flags: Flags, payload: &[u8]) {
    let verdict = batch::validate(flags, payload);
    let records: Vec<&[u8]> = batch::records(payload).collect();
    let mut rebuilt = vec![0; payload.len()];
    let mut len = 0;
    for r in &records {
        if len + batch::RECORD_HEADER + r.len() > rebuilt.len() {
            break;
        }
        len = batch::append(&mut rebuilt, len, r);
    }
    let whole = flags.contains(Flags::WHOLE);
    let exact = !records.is_empty() && len == payload.len() && rebuilt == payload;
    assert_eq!(
        verdict.is_ok(),
        whole && exact,
        "validate({flags:?}, {payload:?}) = {verdict:?}"
    );
    if let Ok(n) = verdict {
        assert_eq!(n, records.len());
    }
}

/// Parses a NAK payload, checks the verdict against the contract written
/// out independently here, and builds a list with `push_seq` from the same
/// bytes read as sequence numbers.
pub fn nak_ranges(data: &[u8]) {
    let parsed = RangeList::parse(data);
    assert_eq!(
        parsed.is_ok(),
        nak_contract_allows(data),
        "RangeList::parse({data:?}) = {parsed:?} disagrees with the contract"
    );
    match parsed {
        Ok(list) => {
            assert_eq!(list.len(), data.len() / RANGE_LEN);
            check_list(&list);
            let mut out = vec![0; list.wire_len()];
            assert_eq!(list.emit(&mut out), Ok(data.len()));
            assert_eq!(out, data, "emit(parse(payload)) differs from the payload");
        }
        Err(e) => {
            assert!(matches!(e, WireError::BadNak { .. }), "{e:?}");
            let _ = e.to_string();
        }
    }
    pushed_list(data);
}

/// docs/protocol.md's NAK payload: 1 to 64 ranges of 8 bytes, each with a
/// count from 1 to 2^30.
fn nak_contract_allows(data: &[u8]) -> bool {
    !data.is_empty()
        && data.len() % RANGE_LEN == 0
        && data.len() / RANGE_LEN <= MAX_NAK_RANGES
        && data.chunks_exact(RANGE_LEN).all(|r| {
            let count = u32::from_be_bytes([r[4], r[5], r[6], r[7]]);
            (1..=1 << 30).contains(&count)
        })
}

/// What holds of any list: bounded, no empty range, every range's ends in
/// it, the emitted bytes parse back to it.
fn check_list(list: &RangeList) {
    assert!(list.len() <= MAX_NAK_RANGES);
    assert_eq!(list.is_empty(), list.iter().next().is_none());
    assert_eq!(list.is_full(), list.len() == MAX_NAK_RANGES);
    let mut total = 0u64;
    for r in list.iter() {
        assert!(r.count > 0, "empty range in {list:?}");
        assert!(r.contains(r.start) && list.contains(r.start));
        let last = r.end().sub(1);
        assert!(r.contains(last), "{r:?} lacks its last sequence");
        assert!(!r.contains(r.end()) || r.count == u32::MAX);
        total += u64::from(r.count);
    }
    assert_eq!(list.seq_count(), total);
    let mut out = vec![0; list.wire_len()];
    if let Some(short) = list.wire_len().checked_sub(1) {
        assert!(list.emit(&mut out[..short]).is_err());
    }
    assert_eq!(list.emit(&mut out), Ok(list.wire_len()));
    if !list.is_empty() {
        assert_eq!(RangeList::parse(&out).as_ref(), Ok(list));
    }
}

/// `push_seq` over the bytes read as big-endian u32s: each accepted
/// sequence adds exactly one to the count and is covered afterwards.
fn pushed_list(data: &[u8]) {
    let mut list = RangeList::new();
    let mut accepted = 0u64;
    for c in data.chunks_exact(4) {
        let seq = Seq(u32::from_be_bytes([c[0], c[1], c[2], c[3]]));
        let before = list.len();
        if list.push_seq(seq) {
            accepted += 1;
            assert!(list.contains(seq));
        } else {
            assert_eq!(before, MAX_NAK_RANGES, "push_seq refused with room left");
            assert_eq!(list.len(), before);
        }
    }
    assert_eq!(list.seq_count(), accepted);
    check_list(&list);
}
