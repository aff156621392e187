//! The Ethernet frame and our fixed header. Layout (offsets from the frame start;
//! multi-byte fields are big-endian):
//!
//! ```text
//!  0  dst MAC (6)          group MAC for multicast kinds, the node's MAC for unicast
//!  6  src MAC (6)
//! 12  EtherType (2)        0x88B5 by default
//! 14  version (1)          VERSION
//! 15  kind (1)             Kind
//! 16  flags (2)            Flags
//! 18  group (4)
//! 22  src node (4)         the node that sent this frame
//! 26  peer node (4)        DATA/ACK_REQ/HEARTBEAT: 0; NAK/ACK: the data sender addressed;
//!                          GBN kinds: the destination node
//! 30  epoch (4)            the data sender's session epoch
//! 34  seq (4)              serial-number arithmetic (RFC 1982)
//! 38  ack (4)              cumulative acknowledgment / requested / first missing seq
//! 42  tstamp_us (4)        sender's clock (DATA, ACK_REQ) or its echo (ACK), wrapping µs
//! 46  grtt_ns (4)          the data sender's group round-trip estimate, advertised
//! 50  group_size (2)       the data sender's view size, advertised (saturating)
//! 52  payload_len (2)
//! 54  crc32c (4)           over the payload, then bytes 14..54
//! 58  payload
//! ```

use crate::{GroupId, MacAddr, NodeId, Seq, WireError};

/// Bytes of the Ethernet II header (no VLAN tag).
pub const ETH_HEADER_LEN: usize = 14;
/// Bytes of our fixed header, after the Ethernet header.
pub const HEADER_LEN: usize = 44;
/// The protocol version this build emits and accepts. 2: the checksum covers
/// the payload first (version 1 covered the header first).
pub const VERSION: u8 = 2;

/// Byte ranges of each field, from the start of the Ethernet frame.
pub mod field {
    /// A half-open byte range.
    pub type Field = core::ops::Range<usize>;
    pub const DST_MAC: Field = 0..6;
    pub const SRC_MAC: Field = 6..12;
    pub const ETHERTYPE: Field = 12..14;
    pub const VERSION: usize = 14;
    pub const KIND: usize = 15;
    pub const FLAGS: Field = 16..18;
    pub const GROUP: Field = 18..22;
    pub const SRC: Field = 22..26;
    pub const PEER: Field = 26..30;
    pub const EPOCH: Field = 30..34;
    pub const SEQ: Field = 34..38;
    pub const ACK: Field = 38..42;
    pub const TSTAMP: Field = 42..46;
    pub const GRTT: Field = 46..50;
    pub const GROUP_SIZE: Field = 50..52;
    pub const PAYLOAD_LEN: Field = 52..54;
    pub const CRC: Field = 54..58;
    pub const PAYLOAD: usize = 58;
    /// The header bytes the checksum covers, after the payload.
    pub const CHECKED_HEADER: Field = 14..54;
}

/// What a frame is. Values 16..=31 are reserved for membership kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    /// Multicast data (MAK, ACK, NAK algorithms). Multicast.
    Data = 1,
    /// A list of missing ranges. Multicast by MAK (so receivers can suppress), unicast by plain NAK.
    Nak = 2,
    /// Cumulative acknowledgment from a receiver: `ack` is the next sequence it expects. Unicast.
    Ack = 3,
    /// The data sender asks every receiver to ACK up to `ack`. Multicast.
    AckReq = 4,
    /// Go-Back-N data, unicast to `peer`.
    GbnData = 5,
    /// Go-Back-N positive acknowledgment: `ack` is the next sequence expected. Unicast.
    Pack = 6,
    /// Go-Back-N negative acknowledgment: `ack` is the first missing sequence. Unicast.
    Nack = 7,
    /// Liveness and the sender's highest sequence (`seq`); reserved for membership (issue 5).
    Heartbeat = 8,
    /// Node liveness between daemons, outside every stream: a beat, a probe
    /// or a probe's answer (the payload's first byte says which). Unicast,
    /// unreliable, group 0.
    Beat = 16,
}

impl Kind {
    /// Parses the kind octet.
    pub const fn from_u8(v: u8) -> Result<Kind, WireError> {
        Ok(match v {
            1 => Kind::Data,
            2 => Kind::Nak,
            3 => Kind::Ack,
            4 => Kind::AckReq,
            5 => Kind::GbnData,
            6 => Kind::Pack,
            7 => Kind::Nack,
            8 => Kind::Heartbeat,
            16 => Kind::Beat,
            got => return Err(WireError::UnknownKind { got }),
        })
    }

    /// True for the kinds whose payload is application data.
    pub const fn carries_data(self) -> bool {
        matches!(self, Kind::Data | Kind::GbnData)
    }
}

/// Header flags (a bit set).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Flags(pub u16);

impl Flags {
    pub const NONE: Flags = Flags(0);
    /// The last frame of a burst: a receiver holding everything up to it ACKs (MAK).
    pub const LAST: Flags = Flags(0x0001);
    /// This frame is a retransmission.
    pub const RETRANSMIT: Flags = Flags(0x0002);
    /// The first fragment of a message.
    pub const FRAG_FIRST: Flags = Flags(0x0004);
    /// The last fragment of a message.
    pub const FRAG_LAST: Flags = Flags(0x0008);
    /// Every receiver is asked to ACK up to this frame's `seq` (MAK watermark, full buffer).
    pub const ACK_REQ: Flags = Flags(0x0010);
    /// The `ack` field carries a piggy-backed acknowledgment (GBN data).
    pub const ACK_VALID: Flags = Flags(0x0020);
    /// The payload is several whole messages, each behind a 2-byte length
    /// ([`crate::batch`]); always sent with [`Flags::WHOLE`].
    pub const BATCH: Flags = Flags(0x0040);
    /// Local recovery over the feedback tree (docs/protocol.md §3.5). On a
    /// NAK: asked of one tree neighbour (unicast), which repairs from its
    /// own copy. On DATA: that neighbour's repair, with `src` the repairing
    /// node and `peer` the data sender (always with [`Flags::RETRANSMIT`]).
    pub const NEAR: Flags = Flags(0x0080);
    /// A whole message in one frame.
    pub const WHOLE: Flags = Flags(0x000c);
    /// The bits that say what the payload is (fragment position, batch):
    /// the publisher's, carried unchanged by every machine.
    pub const PAYLOAD: Flags = Flags(0x004c);

    /// True when every bit of `other` is set.
    #[inline]
    pub const fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }

    /// The union.
    #[inline]
    #[must_use]
    pub const fn with(self, other: Flags) -> Flags {
        Flags(self.0 | other.0)
    }

    /// Without the bits of `other`.
    #[inline]
    #[must_use]
    pub const fn without(self, other: Flags) -> Flags {
        Flags(self.0 & !other.0)
    }
}

/// The parsed, owned form of our header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub kind: Kind,
    pub flags: Flags,
    pub group: GroupId,
    pub src: NodeId,
    pub peer: NodeId,
    pub epoch: u32,
    pub seq: Seq,
    pub ack: Seq,
    pub tstamp_us: u32,
    pub grtt_ns: u32,
    pub group_size: u16,
    pub payload_len: u16,
}

impl Header {
    /// A header of `kind` with every other field zero.
    pub const fn new(kind: Kind) -> Header {
        Header {
            kind,
            flags: Flags::NONE,
            group: 0,
            src: 0,
            peer: 0,
            epoch: 0,
            seq: Seq(0),
            ack: Seq(0),
            tstamp_us: 0,
            grtt_ns: 0,
            group_size: 0,
            payload_len: 0,
        }
    }
}

/// A typed view over the bytes of one Ethernet frame.
#[derive(Debug, Clone, Copy)]
pub struct Frame<T: AsRef<[u8]>> {
    buffer: T,
}

#[inline]
fn be16(b: &[u8], f: field::Field) -> u16 {
    u16::from_be_bytes([b[f.start], b[f.start + 1]])
}

#[inline]
fn be32(b: &[u8], f: field::Field) -> u32 {
    u32::from_be_bytes([b[f.start], b[f.start + 1], b[f.start + 2], b[f.start + 3]])
}

impl<T: AsRef<[u8]>> Frame<T> {
    /// Wraps a buffer without checking it. Accessors may panic on a short buffer;
    /// use [`Frame::new_checked`] for anything that came from the network.
    pub const fn new_unchecked(buffer: T) -> Frame<T> {
        Frame { buffer }
    }

    /// Wraps a received buffer after checking, in order: length, EtherType,
    /// version, kind, payload length and checksum. On success no accessor panics.
    pub fn new_checked(buffer: T, ethertype: u16) -> Result<Frame<T>, WireError> {
        let frame = Frame::new_checked_but_crc(buffer, ethertype)?;
        let b = frame.buffer.as_ref();
        let expected = be32(b, field::CRC);
        let computed = checksum(b, usize::from(be16(b, field::PAYLOAD_LEN)));
        if expected != computed {
            return Err(WireError::BadChecksum { expected, computed });
        }
        Ok(frame)
    }

    /// [`Frame::new_checked`] without the checksum, for a frame whose
    /// authentication tag was verified: the tag covers every byte the CRC
    /// does, and the sender may leave the CRC field 0 (docs/protocol.md
    /// §1.9). On success no accessor panics.
    pub fn new_checked_but_crc(buffer: T, ethertype: u16) -> Result<Frame<T>, WireError> {
        let b = buffer.as_ref();
        if b.len() < ETH_HEADER_LEN {
            return Err(WireError::Truncated {
                needed: ETH_HEADER_LEN,
                got: b.len(),
            });
        }
        let et = be16(b, field::ETHERTYPE);
        if et != ethertype {
            return Err(WireError::WrongEtherType {
                expected: ethertype,
                got: et,
            });
        }
        if b.len() < field::PAYLOAD {
            return Err(WireError::Truncated {
                needed: field::PAYLOAD,
                got: b.len(),
            });
        }
        if b[field::VERSION] != VERSION {
            return Err(WireError::UnsupportedVersion {
                got: b[field::VERSION],
            });
        }
        Kind::from_u8(b[field::KIND])?;
        let declared = usize::from(be16(b, field::PAYLOAD_LEN));
        let available = b.len() - field::PAYLOAD;
        if declared > available {
            return Err(WireError::PayloadLength {
                declared,
                available,
            });
        }
        Ok(Frame { buffer })
    }

    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    pub fn dst_mac(&self) -> MacAddr {
        let mut m = [0; 6];
        m.copy_from_slice(&self.buffer.as_ref()[field::DST_MAC]);
        MacAddr(m)
    }

    pub fn src_mac(&self) -> MacAddr {
        let mut m = [0; 6];
        m.copy_from_slice(&self.buffer.as_ref()[field::SRC_MAC]);
        MacAddr(m)
    }

    pub fn ethertype(&self) -> u16 {
        be16(self.buffer.as_ref(), field::ETHERTYPE)
    }

    pub fn kind(&self) -> Result<Kind, WireError> {
        Kind::from_u8(self.buffer.as_ref()[field::KIND])
    }

    pub fn flags(&self) -> Flags {
        Flags(be16(self.buffer.as_ref(), field::FLAGS))
    }

    pub fn seq(&self) -> Seq {
        Seq(be32(self.buffer.as_ref(), field::SEQ))
    }

    pub fn payload_len(&self) -> usize {
        usize::from(be16(self.buffer.as_ref(), field::PAYLOAD_LEN))
    }

    /// The header, parsed. On a checked frame this cannot fail.
    pub fn header(&self) -> Result<Header, WireError> {
        let b = self.buffer.as_ref();
        Ok(Header {
            kind: Kind::from_u8(b[field::KIND])?,
            flags: Flags(be16(b, field::FLAGS)),
            group: be32(b, field::GROUP),
            src: be32(b, field::SRC),
            peer: be32(b, field::PEER),
            epoch: be32(b, field::EPOCH),
            seq: Seq(be32(b, field::SEQ)),
            ack: Seq(be32(b, field::ACK)),
            tstamp_us: be32(b, field::TSTAMP),
            grtt_ns: be32(b, field::GRTT),
            group_size: be16(b, field::GROUP_SIZE),
            payload_len: be16(b, field::PAYLOAD_LEN),
        })
    }

    /// The payload (excluding any Ethernet padding after it).
    pub fn payload(&self) -> &[u8] {
        let len = self.payload_len();
        &self.buffer.as_ref()[field::PAYLOAD..field::PAYLOAD + len]
    }

    /// Bytes of the frame on the wire before padding.
    pub fn frame_len(&self) -> usize {
        field::PAYLOAD + self.payload_len()
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Frame<T> {
    /// Writes the Ethernet header and our header in front of a payload that is
    /// already in place at [`field::PAYLOAD`] (the zero-copy path: the payload is
    /// never moved), then the checksum. Returns the frame's length.
    pub fn emit(
        buffer: T,
        dst: MacAddr,
        src: MacAddr,
        ethertype: u16,
        header: &Header,
    ) -> Result<(Frame<T>, usize), WireError> {
        let mut frame = Frame::write_header(buffer, dst, src, ethertype, header)?;
        frame.fill_checksum();
        let len = frame.frame_len();
        Ok((frame, len))
    }

    /// [`Frame::emit`] with the payload's CRC already computed
    /// ([`payload_crc`], by whoever wrote the payload, while it was in cache):
    /// only the header is read here. A sender transmits a frame long after
    /// writing it (behind the queue and the window), when reading 1 KiB of
    /// payload again costs cache misses; a retransmission does not read it at
    /// all. `payload_crc` must be the payload's (checked in debug builds).
    pub fn emit_with_payload_crc(
        buffer: T,
        dst: MacAddr,
        src: MacAddr,
        ethertype: u16,
        header: &Header,
        payload_crc: u32,
    ) -> Result<(Frame<T>, usize), WireError> {
        let mut frame = Frame::write_header(buffer, dst, src, ethertype, header)?;
        debug_assert_eq!(
            payload_crc,
            self::payload_crc(frame.payload()),
            "emit_with_payload_crc given the CRC of another payload"
        );
        let crc = checksum_after(payload_crc, frame.buffer.as_ref());
        frame.buffer.as_mut()[field::CRC].copy_from_slice(&crc.to_be_bytes());
        let len = frame.frame_len();
        Ok((frame, len))
    }

    /// [`Frame::emit`] leaving the checksum field 0: for frames that will be
    /// sealed with an authentication tag, which covers every byte the CRC
    /// would (receivers then use [`Frame::new_checked_but_crc`]).
    pub fn emit_without_checksum(
        buffer: T,
        dst: MacAddr,
        src: MacAddr,
        ethertype: u16,
        header: &Header,
    ) -> Result<(Frame<T>, usize), WireError> {
        let mut frame = Frame::write_header(buffer, dst, src, ethertype, header)?;
        frame.buffer.as_mut()[field::CRC].copy_from_slice(&[0; 4]);
        let len = frame.frame_len();
        Ok((frame, len))
    }

    /// Both headers, without the checksum.
    fn write_header(
        buffer: T,
        dst: MacAddr,
        src: MacAddr,
        ethertype: u16,
        header: &Header,
    ) -> Result<Frame<T>, WireError> {
        let mut frame = Frame { buffer };
        let len = field::PAYLOAD + usize::from(header.payload_len);
        let got = frame.buffer.as_ref().len();
        if got < len {
            return Err(WireError::Truncated { needed: len, got });
        }
        let b = frame.buffer.as_mut();
        b[field::DST_MAC].copy_from_slice(&dst.0);
        b[field::SRC_MAC].copy_from_slice(&src.0);
        b[field::ETHERTYPE].copy_from_slice(&ethertype.to_be_bytes());
        b[field::VERSION] = VERSION;
        b[field::KIND] = header.kind as u8;
        b[field::FLAGS].copy_from_slice(&header.flags.0.to_be_bytes());
        b[field::GROUP].copy_from_slice(&header.group.to_be_bytes());
        b[field::SRC].copy_from_slice(&header.src.to_be_bytes());
        b[field::PEER].copy_from_slice(&header.peer.to_be_bytes());
        b[field::EPOCH].copy_from_slice(&header.epoch.to_be_bytes());
        b[field::SEQ].copy_from_slice(&header.seq.0.to_be_bytes());
        b[field::ACK].copy_from_slice(&header.ack.0.to_be_bytes());
        b[field::TSTAMP].copy_from_slice(&header.tstamp_us.to_be_bytes());
        b[field::GRTT].copy_from_slice(&header.grtt_ns.to_be_bytes());
        b[field::GROUP_SIZE].copy_from_slice(&header.group_size.to_be_bytes());
        b[field::PAYLOAD_LEN].copy_from_slice(&header.payload_len.to_be_bytes());
        Ok(frame)
    }

    /// The payload area, writable, `len` bytes from [`field::PAYLOAD`].
    pub fn payload_area_mut(buffer: &mut [u8], len: usize) -> Result<&mut [u8], WireError> {
        let needed = field::PAYLOAD + len;
        let got = buffer.len();
        buffer
            .get_mut(field::PAYLOAD..needed)
            .ok_or(WireError::Truncated { needed, got })
    }

    /// Sets the flags and recomputes the checksum (a retransmission rewrites its
    /// header in place; the payload is read, not copied).
    pub fn set_flags(&mut self, flags: Flags) {
        self.buffer.as_mut()[field::FLAGS].copy_from_slice(&flags.0.to_be_bytes());
        self.fill_checksum();
    }

    /// Recomputes and stores the checksum.
    pub fn fill_checksum(&mut self) {
        let len = self.payload_len();
        let crc = checksum(self.buffer.as_ref(), len);
        self.buffer.as_mut()[field::CRC].copy_from_slice(&crc.to_be_bytes());
    }
}

/// The first part of a frame's checksum: CRC32C over its payload alone. The
/// checksum covers the payload first so that this part can be computed when
/// the payload is written ([`Frame::emit_with_payload_crc`]).
pub fn payload_crc(payload: &[u8]) -> u32 {
    crc32c::crc32c(payload)
}

/// The checksum of frame `b`, given its payload's CRC: the checked header
/// bytes appended.
fn checksum_after(payload_crc: u32, b: &[u8]) -> u32 {
    crc32c::crc32c_append(payload_crc, &b[field::CHECKED_HEADER])
}

/// CRC32C over `payload_len` payload bytes, then the checked header bytes.
fn checksum(b: &[u8], payload_len: usize) -> u32 {
    checksum_after(
        payload_crc(&b[field::PAYLOAD..field::PAYLOAD + payload_len]),
        b,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{group_mac, node_mac, ETHERTYPE_DEFAULT};

    /// A DATA frame, byte by byte, as docs/protocol.md describes it.
    const DATA_FIXTURE: [u8; 61] = [
        0x03, 0x00, 0x00, 0x00, 0x00, 0x07, // dst: group 7
        0x02, 0x00, 0x00, 0x00, 0x00, 0x01, // src: node 1
        0x88, 0xb5, // EtherType
        0x02, 0x01, 0x00, 0x0d, // version 2, DATA, LAST|FRAG_FIRST|FRAG_LAST
        0x00, 0x00, 0x00, 0x07, // group 7
        0x00, 0x00, 0x00, 0x01, // src node 1
        0x00, 0x00, 0x00, 0x00, // peer 0
        0x00, 0x00, 0x00, 0x02, // epoch 2
        0xff, 0xff, 0xff, 0xff, // seq u32::MAX
        0x00, 0x00, 0x00, 0x00, // ack 0
        0x00, 0x00, 0x03, 0xe8, // tstamp 1000 us
        0x00, 0x00, 0x4e, 0x20, // grtt 20000 ns
        0x00, 0x03, // group size 3
        0x00, 0x03, // payload length 3
        0x7e, 0x22, 0xcb,
        0xe2, // crc32c of "abc" then bytes 14..54 (checked against a bitwise reference)
        b'a', b'b', b'c',
    ];

    fn data_header() -> Header {
        Header {
            kind: Kind::Data,
            flags: Flags::LAST.with(Flags::WHOLE),
            group: 7,
            src: 1,
            peer: 0,
            epoch: 2,
            seq: Seq(u32::MAX),
            ack: Seq(0),
            tstamp_us: 1000,
            grtt_ns: 20_000,
            group_size: 3,
            payload_len: 3,
        }
    }

    #[test]
    fn deconstruct_fixture() {
        let f = Frame::new_checked(&DATA_FIXTURE[..], ETHERTYPE_DEFAULT).unwrap();
        assert_eq!(f.dst_mac(), group_mac(7));
        assert_eq!(f.src_mac(), node_mac(1));
        assert_eq!(f.header().unwrap(), data_header());
        assert_eq!(f.payload(), b"abc");
        assert_eq!(f.frame_len(), 61);
    }

    #[test]
    fn construct_matches_fixture() {
        let mut buf = [0u8; 61];
        buf[field::PAYLOAD..].copy_from_slice(b"abc");
        let (_, len) = Frame::emit(
            &mut buf[..],
            group_mac(7),
            node_mac(1),
            ETHERTYPE_DEFAULT,
            &data_header(),
        )
        .unwrap();
        assert_eq!(len, 61);
        assert_eq!(buf, DATA_FIXTURE);
    }

    #[test]
    fn a_precomputed_payload_crc_gives_the_same_frame() {
        let mut buf = [0u8; 61];
        buf[field::PAYLOAD..].copy_from_slice(b"abc");
        let (_, len) = Frame::emit_with_payload_crc(
            &mut buf[..],
            group_mac(7),
            node_mac(1),
            ETHERTYPE_DEFAULT,
            &data_header(),
            payload_crc(b"abc"),
        )
        .unwrap();
        assert_eq!(len, 61);
        assert_eq!(buf, DATA_FIXTURE);
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "the CRC of another payload")]
    fn a_wrong_payload_crc_is_caught_in_debug_builds() {
        let mut buf = [0u8; 61];
        buf[field::PAYLOAD..].copy_from_slice(b"abc");
        let _ = Frame::emit_with_payload_crc(
            &mut buf[..],
            group_mac(7),
            node_mac(1),
            ETHERTYPE_DEFAULT,
            &data_header(),
            payload_crc(b"abd"),
        );
    }

    #[test]
    fn padding_after_payload_is_ignored() {
        let mut buf = [0u8; 64];
        buf[..61].copy_from_slice(&DATA_FIXTURE);
        let f = Frame::new_checked(&buf[..], ETHERTYPE_DEFAULT).unwrap();
        assert_eq!(f.payload(), b"abc");
    }

    #[test]
    fn every_error_says_what_was_wrong() {
        let e = Frame::new_checked(&DATA_FIXTURE[..10], ETHERTYPE_DEFAULT).unwrap_err();
        assert_eq!(
            e,
            WireError::Truncated {
                needed: 14,
                got: 10
            }
        );
        assert_eq!(
            std::format!("{e}"),
            "truncated frame: needed 14 bytes, got 10"
        );

        let e = Frame::new_checked(&DATA_FIXTURE[..40], ETHERTYPE_DEFAULT).unwrap_err();
        assert_eq!(
            e,
            WireError::Truncated {
                needed: 58,
                got: 40
            }
        );

        let e = Frame::new_checked(&DATA_FIXTURE[..], 0x0800).unwrap_err();
        assert_eq!(
            e,
            WireError::WrongEtherType {
                expected: 0x0800,
                got: 0x88b5
            }
        );

        let mut b = DATA_FIXTURE;
        b[field::VERSION] = 9;
        assert_eq!(
            Frame::new_checked(&b[..], ETHERTYPE_DEFAULT).unwrap_err(),
            WireError::UnsupportedVersion { got: 9 }
        );

        let mut b = DATA_FIXTURE;
        b[field::KIND] = 200;
        assert_eq!(
            Frame::new_checked(&b[..], ETHERTYPE_DEFAULT).unwrap_err(),
            WireError::UnknownKind { got: 200 }
        );

        let e = Frame::new_checked(&DATA_FIXTURE[..60], ETHERTYPE_DEFAULT).unwrap_err();
        assert_eq!(
            e,
            WireError::PayloadLength {
                declared: 3,
                available: 2
            }
        );
    }

    #[test]
    fn any_flipped_bit_is_a_bad_checksum() {
        for byte in field::VERSION + 2..DATA_FIXTURE.len() {
            if field::CRC.contains(&byte) || field::PAYLOAD_LEN.contains(&byte) {
                continue;
            }
            let mut b = DATA_FIXTURE;
            b[byte] ^= 0x10;
            let e = Frame::new_checked(&b[..], ETHERTYPE_DEFAULT).unwrap_err();
            assert!(
                matches!(
                    e,
                    WireError::BadChecksum { .. } | WireError::UnknownKind { .. }
                ),
                "byte {byte}: {e:?}"
            );
        }
    }

    #[test]
    fn set_flags_keeps_the_frame_valid() {
        let mut b = DATA_FIXTURE;
        let mut f = Frame::new_checked(&mut b[..], ETHERTYPE_DEFAULT).unwrap();
        f.set_flags(f.flags().with(Flags::RETRANSMIT));
        let f = Frame::new_checked(&b[..], ETHERTYPE_DEFAULT).unwrap();
        assert!(f.flags().contains(Flags::RETRANSMIT));
        assert_eq!(f.payload(), b"abc");
    }

    #[test]
    fn a_frame_for_sealing_has_no_crc_and_passes_every_other_check() {
        let mut b = [0u8; 61];
        b[58..].copy_from_slice(b"abc");
        let (_, len) = Frame::emit_without_checksum(
            &mut b[..],
            group_mac(7),
            node_mac(1),
            ETHERTYPE_DEFAULT,
            &data_header(),
        )
        .unwrap();
        assert_eq!(len, 61);
        // The fixture's bytes but the CRC's.
        assert_eq!(b[..54], DATA_FIXTURE[..54]);
        assert_eq!(b[54..58], [0; 4]);
        assert_eq!(b[58..], DATA_FIXTURE[58..]);
        assert!(matches!(
            Frame::new_checked(&b[..], ETHERTYPE_DEFAULT),
            Err(WireError::BadChecksum { expected: 0, .. })
        ));
        let f = Frame::new_checked_but_crc(&b[..], ETHERTYPE_DEFAULT).unwrap();
        assert_eq!(f.header().unwrap(), data_header());
        // Every other check still holds.
        let mut bad = b;
        bad[14] = 9;
        assert!(matches!(
            Frame::new_checked_but_crc(&bad[..], ETHERTYPE_DEFAULT),
            Err(WireError::UnsupportedVersion { got: 9 })
        ));
        assert!(Frame::new_checked_but_crc(&b[..60], ETHERTYPE_DEFAULT).is_err());
    }
}
