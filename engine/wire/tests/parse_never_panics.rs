//! Property tests: the parser never panics on any input, and every frame it
//! accepts re-emits to the same bytes.

use mcast_wire::{Frame, Header, RangeList, ETHERTYPE_DEFAULT, FRAME_OVERHEAD};
use proptest::prelude::*;

fn arb_frame_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        // Anything at all.
        proptest::collection::vec(any::<u8>(), 0..200),
        // Our EtherType and version, random rest: reaches the deeper checks.
        proptest::collection::vec(any::<u8>(), 0..200).prop_map(|mut v| {
            if v.len() >= 16 {
                v[12] = 0x88;
                v[13] = 0xb5;
                v[14] = 1;
                v[15] = 1 + v[15] % 9;
            }
            v
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(20_000))]

    #[test]
    fn checked_parse_never_panics(bytes in arb_frame_bytes()) {
        if let Ok(f) = Frame::new_checked(&bytes[..], ETHERTYPE_DEFAULT) {
            let h = f.header().expect("checked frame has a valid header");
            prop_assert_eq!(usize::from(h.payload_len), f.payload().len());
            let _ = RangeList::parse(f.payload());
        }
    }

    #[test]
    fn emit_then_parse_roundtrips(
        kind in 1u8..=8, flags in any::<u16>(), group in any::<u32>(), src in any::<u32>(),
        peer in any::<u32>(), epoch in any::<u32>(), seq in any::<u32>(), ack in any::<u32>(),
        ts in any::<u32>(), grtt in any::<u32>(), gs in any::<u16>(),
        payload in proptest::collection::vec(any::<u8>(), 0..300),
    ) {
        let header = Header {
            kind: mcast_wire::Kind::from_u8(kind).unwrap(),
            flags: mcast_wire::Flags(flags), group, src, peer, epoch,
            seq: mcast_wire::Seq(seq), ack: mcast_wire::Seq(ack), tstamp_us: ts, grtt_ns: grtt,
            group_size: gs, payload_len: payload.len() as u16,
        };
        let mut buf = vec![0u8; FRAME_OVERHEAD + payload.len()];
        buf[FRAME_OVERHEAD..].copy_from_slice(&payload);
        let (_, len) = Frame::emit(&mut buf[..], mcast_wire::group_mac(group), mcast_wire::node_mac(src), ETHERTYPE_DEFAULT, &header).unwrap();
        prop_assert_eq!(len, buf.len());
        let f = Frame::new_checked(&buf[..], ETHERTYPE_DEFAULT).unwrap();
        prop_assert_eq!(f.header().unwrap(), header);
        prop_assert_eq!(f.payload(), &payload[..]);
    }

    #[test]
    fn nak_parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        if let Ok(l) = RangeList::parse(&bytes) {
            let mut out = vec![0u8; l.wire_len()];
            l.emit(&mut out).unwrap();
            prop_assert_eq!(&out[..], &bytes[..]);
        }
    }
}
