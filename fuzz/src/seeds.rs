//! Each target's starting corpus, made by the real encoders so that it
//! stays valid as the formats change. `fuzz/corpus/<target>/seed-NN` holds
//! these bytes; the smoke test checks they agree and rewrites them when
//! run with `MCAST_FUZZ_BLESS=1`.

use mcast_cli::links::LinkMessage;
use mcast_engine::StreamStart;
use mcast_groups::flush::{FlushFrame, FlushKey, FlushMsg};
use mcast_groups::wire::{LookupResult, Message};
use mcast_groups::{GroupError, GroupSummary, Member, NameError, View};
use mcast_ipc::proto::{self, ClientMessage, ErrorCode, Notice, Request, Response, ServerMessage};
use mcast_wire::{
    field, group_mac, node_mac, Flags, Frame, Header, Kind, RangeList, Seq, SeqRange,
    ETHERTYPE_DEFAULT,
};

/// The seeds of target `name` (empty for an unknown name).
pub fn seeds(name: &str) -> Vec<Vec<u8>> {
    match name {
        "frame" => frames(),
        "nak_ranges" => nak_lists().iter().map(emit_list).collect(),
        "group_message" => group_messages().iter().map(Message::encode).collect(),
        "link_message" => link_messages().iter().map(LinkMessage::encode).collect(),
        "ipc_request" => requests(),
        "ipc_reply" => replies(),
        "ring_reader" => ring_scripts(),
        "auth_trailer" => sealed_frames(),
        "batch_record" => batch_records(),
        _ => Vec::new(),
    }
}

// ---------------------------------------------------------------- frames

/// `auth_trailer` inputs: mode, frame length, a frame sealed with one of
/// the target's keys (or none), then a replay-window script.
fn sealed_frames() -> Vec<Vec<u8>> {
    use mcast_engine::auth::{seal, TRAILER_LEN};
    let keys = crate::auth::fuzz_keys();
    let mut out = Vec::new();
    for (i, input) in frames().into_iter().take(6).enumerate() {
        // `frame`'s inputs start with their mode byte.
        let f = &input[1..];
        // Ethernet padding past the payload would sit where the trailer goes.
        let declared = usize::from(u16::from_be_bytes([
            f[field::PAYLOAD_LEN.start],
            f[field::PAYLOAD_LEN.start + 1],
        ]));
        let len = field::PAYLOAD + declared;
        let mut b = f[..len].to_vec();
        b.resize(len + TRAILER_LEN, 0);
        let key = if i % 2 == 0 {
            keys.send()
        } else {
            keys.also().unwrap()
        };
        seal(
            &mut b,
            len,
            key,
            1_700_000_000_000_000 + i as u64,
            1 + i as u64,
        )
        .expect("room");
        let mut input = vec![0];
        input.extend_from_slice(&(b.len() as u16).to_be_bytes());
        input.extend_from_slice(&b);
        // A window script: in order, a repeat, a gap, an older one, a new session.
        for (step, c) in [
            (0u8, 5u64),
            (0, 6),
            (0, 6),
            (1, 2000),
            (0, 900),
            (2, 1),
            (3, 7),
        ] {
            input.push(step);
            input.extend_from_slice(&c.to_be_bytes());
        }
        out.push(input);
    }
    // No frame; a script that moves the window across its words: every
    // 7th counter to 300, a jump of 100, then all of them again (repeats).
    let mut input = vec![0, 0, 0];
    let counters = (1..300u64).step_by(7);
    for c in counters.clone().chain([400]).chain(counters) {
        input.push(0);
        input.extend_from_slice(&c.to_be_bytes());
    }
    out.push(input);
    // An unsealed frame, marked to be sealed by the harness.
    let mut b = frames().remove(0)[1..].to_vec();
    let mut input = vec![1];
    b.resize(b.len() + TRAILER_LEN, 0);
    input.extend_from_slice(&(b.len() as u16).to_be_bytes());
    input.extend_from_slice(&b);
    out.push(input);
    out
}

fn emit_list(l: &RangeList) -> Vec<u8> {
    let mut out = vec![0; l.wire_len()];
    l.emit(&mut out).expect("sized to wire_len");
    out
}

fn nak_lists() -> Vec<RangeList> {
    let mut one = RangeList::new();
    one.push(SeqRange {
        start: Seq(2),
        count: 1,
    });
    let mut wrapping = RangeList::new();
    for s in [u32::MAX - 1, u32::MAX, 0, 1, 9] {
        wrapping.push_seq(Seq(s));
    }
    let mut full = RangeList::new();
    for i in 0..64 {
        full.push_seq(Seq(i * 3));
    }
    let mut longest = RangeList::new();
    longest.push(SeqRange {
        start: Seq(100),
        count: 1 << 30,
    });
    vec![one, wrapping, full, longest]
}

/// A frame as `Frame::emit` writes it, behind mode byte `mode`.
fn frame(mode: u8, header: Header, payload: &[u8]) -> Vec<u8> {
    let header = Header {
        payload_len: payload.len() as u16,
        ..header
    };
    let mut buf = vec![0; field::PAYLOAD + payload.len()];
    buf[field::PAYLOAD..].copy_from_slice(payload);
    let dst = if matches!(header.kind, Kind::Data | Kind::Nak | Kind::AckReq) {
        group_mac(header.group)
    } else {
        node_mac(header.peer)
    };
    Frame::emit(
        &mut buf[..],
        dst,
        node_mac(header.src),
        ETHERTYPE_DEFAULT,
        &header,
    )
    .expect("sized to the frame");
    let mut out = vec![mode];
    out.extend_from_slice(&buf);
    out
}

fn frames() -> Vec<Vec<u8>> {
    let base = |kind| Header {
        group: 7,
        src: 1,
        peer: 2,
        epoch: 3,
        seq: Seq(41),
        ack: Seq(40),
        tstamp_us: 1000,
        grtt_ns: 20_000,
        group_size: 3,
        ..Header::new(kind)
    };
    let data = Header {
        flags: Flags::WHOLE.with(Flags::LAST),
        peer: 0,
        ..base(Kind::Data)
    };
    let nak = emit_list(&nak_lists()[1]);
    // Three messages in one frame (docs/protocol.md §1.10), the middle one empty.
    let batched = Header {
        flags: Flags::WHOLE.with(Flags::BATCH),
        ..data
    };
    let records = b"\x00\x03abc\x00\x00\x00\x02de";
    let mut padded = frame(0, data, b"abc");
    padded.extend_from_slice(&[0; 8]);
    vec![
        frame(0, data, b"abc"),
        frame(1, data, b"abc"),
        frame(0, base(Kind::Nak), &nak),
        frame(1, base(Kind::Nak), &nak),
        frame(0, base(Kind::Ack), &[]),
        frame(0, base(Kind::AckReq), &[]),
        frame(
            0,
            Header {
                flags: Flags::ACK_VALID.with(Flags::FRAG_FIRST),
                ..base(Kind::GbnData)
            },
            &[0x5a; 64],
        ),
        frame(0, base(Kind::Pack), &[]),
        frame(0, base(Kind::Nack), &[]),
        frame(0, base(Kind::Heartbeat), &[]),
        frame(0, base(Kind::Beat), &[1]),
        padded,
        frame(1, batched, records),
    ]
}

// ---------------------------------------------------------------- daemons

fn view() -> View {
    View {
        group: 7,
        name: "prices".into(),
        epoch: 3,
        agent: 1,
        members: vec![
            Member {
                rank: 0,
                node: 1,
                member: 10,
                place: 0,
            },
            Member {
                rank: 1,
                node: 2,
                member: 20,
                place: 1,
            },
        ],
    }
}

fn group_messages() -> Vec<Message> {
    let name = || "prices".to_string();
    vec![
        Message::Lookup {
            token: 1,
            create: true,
            name: name(),
        },
        Message::LookupReply {
            token: 1,
            result: LookupResult::Found { group: 7, agent: 1 },
        },
        Message::LookupReply {
            token: 2,
            result: LookupResult::NotFound,
        },
        Message::LookupReply {
            token: 3,
            result: LookupResult::Error(GroupError::InvalidName {
                name: "a b".into(),
                reason: NameError::TooLong { len: 300, max: 255 },
            }),
        },
        Message::Register {
            token: 4,
            group: 7,
            member: 10,
            name: name(),
            settings: "mode = \"total\", algorithm = \"mak\", tree_fanout = 0".into(),
        },
        Message::JoinReply {
            token: 4,
            group: 7,
            result: Ok((1, view())),
        },
        Message::JoinReply {
            token: 5,
            group: 7,
            result: Err(GroupError::GroupFull { group: 7, limit: 2 }),
        },
        Message::Leave {
            token: 6,
            group: 7,
            member: 10,
        },
        Message::LeaveReply {
            token: 6,
            group: 7,
            result: Err(GroupError::NotMember {
                group: 7,
                member: 10,
            }),
        },
        Message::View(view()),
        Message::Count {
            group: 7,
            epoch: 3,
            members: 2,
        },
        Message::Query { token: 8, group: 7 },
        Message::QueryReply {
            token: 8,
            group: 7,
            view: Some(view()),
        },
        Message::List { token: 9 },
        Message::ListReply {
            token: 9,
            groups: vec![
                GroupSummary {
                    group: 7,
                    name: name(),
                    agent: 1,
                    members: 2,
                },
                GroupSummary {
                    group: 8,
                    name: "orders".into(),
                    agent: 2,
                    members: 1,
                },
            ],
        },
        Message::Announce {
            group: 7,
            epoch: 3,
            members: 2,
            name: name(),
        },
        Message::Synced { epoch: 4 },
        Message::Sync {
            group: 7,
            epoch: 3,
            agent: 1,
            name: name(),
            members: vec![10, 11],
        },
        Message::NotAgent {
            group: 7,
            name: name(),
        },
        Message::Claim {
            token: 10,
            group: 7,
            stale: 1,
            name: name(),
        },
        Message::Resign {
            group: 7,
            name: name(),
            canonical: 9,
            agent: 2,
        },
    ]
}

fn link_messages() -> Vec<LinkMessage> {
    let key = FlushKey {
        group: 7,
        sender: 3,
        epoch: 5,
    };
    vec![
        LinkMessage::Groups(group_messages()[0].encode()),
        LinkMessage::Groups(Message::View(view()).encode()),
        LinkMessage::Start {
            group: 7,
            start: StreamStart {
                epoch: 5,
                seq: Seq(u32::MAX),
            },
        },
        LinkMessage::StartRequest { group: 7 },
        LinkMessage::Flush(FlushMsg::State {
            key,
            next: Some(Seq(41)),
            from: None,
        }),
        LinkMessage::Flush(FlushMsg::Data {
            key,
            frame: FlushFrame {
                seq: Seq(40),
                first: true,
                last: false,
                batch: false,
                data: b"abc".to_vec(),
            },
        }),
        LinkMessage::Mode {
            group: 7,
            body: vec![1, 2, 3],
        },
    ]
}

// ---------------------------------------------------------------- IPC

/// `batch_record` inputs: batched frames' payloads, as a subscriber's ring
/// holds them.
fn batch_records() -> Vec<Vec<u8>> {
    let long = [7u8; 300];
    vec![
        mcast_ipc::batch::encode([&b"one"[..]]),
        mcast_ipc::batch::encode([&b"a"[..], b"", b"third", &long]),
        mcast_ipc::batch::encode((0..21).map(|_| &long[..64])),
    ]
}

fn requests() -> Vec<Vec<u8>> {
    let group = || "prices".to_string();
    [
        Request::Hello {
            version: proto::PROTOCOL_VERSION,
            name: "fuzz".into(),
        },
        Request::Join {
            group: group(),
            mode: None,
        },
        Request::Join {
            group: group(),
            mode: Some("total".into()),
        },
        Request::Leave { group: 7 },
        Request::Query { group: group() },
        Request::Groups,
        Request::Members { group: group() },
        Request::Stats,
    ]
    .into_iter()
    .enumerate()
    .map(|(i, request)| {
        serde_json::to_vec(&ClientMessage {
            id: i as u64 + 1,
            request,
        })
        .expect("requests serialize")
    })
    .collect()
}

fn replies() -> Vec<Vec<u8>> {
    let member = |rank, node, member| proto::Member { rank, node, member };
    let responses = [
        Response::Welcome {
            client_id: 1,
            max_message: 1 << 20,
            pub_ring_bytes: 1 << 20,
            sub_ring_bytes: 1 << 22,
            trace: true,
        },
        Response::Joined {
            group: 7,
            name: "prices".into(),
            rank: 1,
            view: proto::View {
                epoch: 3,
                members: vec![member(0, 1, 10), member(1, 2, 20)],
            },
        },
        Response::Left,
        Response::error(ErrorCode::UnknownGroup, "no group \"x\""),
        Response::Json(serde_json::json!({
            "frames": 12, "loss": 0.015, "groups": ["prices", null, true], "rtt_us": -1.5e3
        })),
    ];
    let notices = [
        Notice::ViewChanged {
            group: 7,
            epoch: 4,
            members: vec![member(0, 1, 10)],
        },
        Notice::CutOff {
            reason: "too slow".into(),
        },
        Notice::Shutdown {
            reason: "SIGTERM".into(),
        },
        Notice::Error {
            message: "not joined".into(),
        },
    ];
    responses
        .into_iter()
        .enumerate()
        .map(|(i, body)| ServerMessage::Response {
            id: i as u64 + 1,
            body,
        })
        .chain(notices.into_iter().map(ServerMessage::Notice))
        .map(|m| serde_json::to_vec(&m).expect("server messages serialize"))
        .collect()
}

// ---------------------------------------------------------------- ring

/// Scripts in `crate::ring`'s language: op byte (mod 12), then arguments.
fn ring_scripts() -> Vec<Vec<u8>> {
    let push = |len: u16| {
        let mut v = vec![0];
        v.extend_from_slice(&len.to_le_bytes());
        v
    };
    let pop = vec![2];
    let mut honest = Vec::new();
    for len in [0, 5, 100, 2032] {
        honest.extend(push(len));
    }
    honest.extend([pop.clone(), vec![4], pop.clone(), vec![10]].concat());
    // Fill, drain, and wrap around several times.
    let mut wrapping = Vec::new();
    for _ in 0..6 {
        wrapping.extend(push(1500));
        wrapping.extend(push(700));
        wrapping.extend(&pop);
        wrapping.extend(&pop);
    }
    let mut bad_head = push(40);
    bad_head.push(6);
    bad_head.extend_from_slice(&(1u64 << 40).to_le_bytes());
    bad_head.extend(&pop);
    let mut bad_len = push(40);
    bad_len.extend(push(8));
    bad_len.push(9);
    bad_len.extend_from_slice(&3000u32.to_le_bytes());
    bad_len.extend([4, 2, 2]);
    let mut plausible_head = push(16);
    plausible_head.push(8);
    plausible_head.extend_from_slice(&64u16.to_le_bytes());
    plausible_head.extend([2, 2, 2]);
    let mut scribble = push(24);
    scribble.extend([5, 0x10, 0x01, 3, 0xff, 0xff, 0xff, 0xff]);
    scribble.extend([2, 11, 2]);
    vec![
        honest,
        wrapping,
        bad_head,
        bad_len,
        plausible_head,
        scribble,
    ]
}
