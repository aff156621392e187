//! The authentication trailer and the replay window (`mcast-auth`): what a
//! receiver checks before it reads anything else of a frame.

use std::collections::BTreeSet;

use mcast_engine::auth::{
    open, seal, ClusterKey, Keys, Replay, ReplayWindow, REPLAY_WINDOW, TRAILER_LEN,
};
use mcast_wire::{field, FRAME_OVERHEAD};

/// The two keys the target's receiver accepts.
pub fn fuzz_keys() -> Keys {
    Keys::new(
        ClusterKey::from_bytes(&[0x11; 32]),
        Some(ClusterKey::from_bytes(&[0x22; 32])),
    )
}

/// The first byte picks a mode, the next two the length of the frame part;
/// the frame follows, then a script for the replay window (9 bytes per
/// step: a session step in 0..=2 and a counter). Mode bit 0 set: the frame
/// is sealed again first with the first key (when its length fields allow),
/// so that mutated frames get past the tag; bit 1: with the second key.
/// Asserts: `open` never panics and accepts only what it can seal again to
/// the same bytes, and the window agrees with a model of every (session,
/// counter) accepted.
pub fn auth_trailer(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let Some((len, rest)) = rest.split_first_chunk::<2>() else {
        return;
    };
    let cut = usize::from(u16::from_be_bytes(*len)).min(rest.len());
    let (frame, script) = rest.split_at(cut);
    let keys = fuzz_keys();
    let mut buf = frame.to_vec();
    if mode & 3 != 0 {
        reseal(
            &mut buf,
            if mode & 2 != 0 {
                keys.also().unwrap()
            } else {
                keys.send()
            },
        );
    }
    match open(&buf, &keys) {
        Ok(o) => {
            let declared = usize::from(u16::from_be_bytes([
                buf[field::PAYLOAD_LEN.start],
                buf[field::PAYLOAD_LEN.start + 1],
            ]));
            assert_eq!(o.len, FRAME_OVERHEAD + declared);
            assert!(o.len + TRAILER_LEN <= buf.len());
            let id = u32::from_be_bytes(buf[o.len..o.len + 4].try_into().unwrap());
            let key = keys.find(id).expect("opened with an accepted key");
            let mut again = buf[..o.len + TRAILER_LEN].to_vec();
            seal(&mut again, o.len, key, o.session, o.counter).expect("room");
            assert_eq!(
                again,
                buf[..o.len + TRAILER_LEN],
                "open took a frame seal does not make"
            );
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
    window(script);
}

/// Seals `buf` again in place when its header's length field leaves room
/// for the trailer, keeping the session and counter it holds.
fn reseal(buf: &mut [u8], key: &ClusterKey) {
    if buf.len() < FRAME_OVERHEAD {
        return;
    }
    let len = FRAME_OVERHEAD
        + usize::from(u16::from_be_bytes([
            buf[field::PAYLOAD_LEN.start],
            buf[field::PAYLOAD_LEN.start + 1],
        ]));
    if len + TRAILER_LEN > buf.len() {
        return;
    }
    let be64 = |b: &[u8]| u64::from_be_bytes(b.try_into().unwrap());
    let (session, counter) = (
        be64(&buf[len + 4..len + 12]),
        be64(&buf[len + 12..len + 20]),
    );
    seal(buf, len, key, session, counter).expect("room checked");
}

/// The replay window against a model: a set of everything accepted in the
/// current session.
fn window(script: &[u8]) {
    let mut steps = script.chunks_exact(9);
    let Some(first) = steps.next() else {
        return;
    };
    let counter = |s: &[u8]| u64::from_be_bytes(s[1..9].try_into().unwrap());
    let mut session = u64::from(first[0] % 3);
    let mut w = ReplayWindow::new(session, counter(first));
    let mut seen = BTreeSet::from([counter(first)]);
    for s in steps {
        let (step, c) = (u64::from(s[0] % 4), counter(s));
        // 0 and 1: this session; 2: the next; 3: the one before.
        let sess = match step {
            2 => session.saturating_add(1),
            3 => session.saturating_sub(1),
            _ => session,
        };
        let top = *seen.iter().next_back().expect("never empty");
        let want = if sess < session {
            Err(Replay::OldSession)
        } else if sess > session {
            Ok(())
        } else if top >= c && top - c >= REPLAY_WINDOW {
            Err(Replay::TooOld)
        } else if seen.contains(&c) {
            Err(Replay::Duplicate)
        } else {
            Ok(())
        };
        assert_eq!(w.accept(sess, c), want, "session {sess} counter {c}");
        if want.is_ok() {
            if sess > session {
                session = sess;
                seen.clear();
            }
            seen.insert(c);
        }
        assert_eq!(w.session(), session);
    }
}
