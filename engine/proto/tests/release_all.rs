//! Shutdown: every algorithm's sender and receiver hand back every buffer they
//! hold, exactly once, through `Endpoint::release_all`.

use std::collections::HashSet;

use mcast_proto::any::{Algorithm, AnyReceiver, AnySender, ProtocolConfig};
use mcast_proto::{
    BufId, Endpoint, Event, Instant, OutFrame, RxBody, Sender, StreamConfig, TxBody,
};
use mcast_wire::{Flags, Seq};

fn stream(local: u32) -> StreamConfig {
    StreamConfig {
        group: 1,
        local,
        sender: 1,
        epoch: 1,
        initial_seq: Seq(u32::MAX - 2),
        window_frames: 16,
        seed: 3,
    }
}

fn returned(e: &mut impl Endpoint, into: &mut Vec<u32>) {
    while let Some(ev) = e.poll_event() {
        match ev {
            Event::Release(b) | Event::Deliver { buf: b, .. } => into.push(b.0),
        }
    }
}

#[test]
fn every_machine_hands_back_every_buffer_once() {
    for algo in Algorithm::ALL {
        let cfg = ProtocolConfig::default();
        let mut s = AnySender::new(algo, stream(1), &cfg, &[2, 3]);
        let mut r = AnyReceiver::new(algo, stream(2), &cfg);
        let mut back_s = Vec::new();
        let mut back_r = Vec::new();
        let mut given_r = HashSet::new();
        for i in 0..6 {
            s.send(
                Instant(0),
                OutFrame {
                    buf: BufId(i),
                    len: 10,
                    frag: Flags::WHOLE,
                    last: i == 5,
                },
            )
            .unwrap();
        }
        // The receiver gets every other frame addressed to it: some are held
        // out of order (MAK, ACK, NAK), some dropped at once (Go-Back-N).
        let mut n = 100;
        let mut k = 0;
        while let Some(t) = s.poll_transmit(Instant(0)) {
            if let TxBody::Buf(_) = t.body {
                let to_r = t.header.peer == 0 || t.header.peer == 2;
                k += 1;
                if to_r && k % 2 == 0 {
                    n += 1;
                    given_r.insert(n);
                    r.handle_frame(Instant(1), &t.header, RxBody::Data(BufId(n)));
                }
            }
        }
        returned(&mut s, &mut back_s);
        returned(&mut r, &mut back_r);
        s.release_all();
        r.release_all();
        returned(&mut s, &mut back_s);
        returned(&mut r, &mut back_r);
        let mut sorted = back_s.clone();
        sorted.sort_unstable();
        assert_eq!(
            sorted,
            (0..6).collect::<Vec<_>>(),
            "{algo}: the sender's buffers, once each"
        );
        let got: HashSet<u32> = back_r.iter().copied().collect();
        assert_eq!(got.len(), back_r.len(), "{algo}: no receiver buffer twice");
        assert_eq!(got, given_r, "{algo}: every receiver buffer back");
        assert_eq!((s.held_buffers(), r.held_buffers()), (0, 0), "{algo}");
    }
}
