//! Real-kernel tests of the steering program and the AF_XDP socket, inside
//! private network namespaces (see `common`). They need root; without it they
//! skip with a message, and with `CI=true` a skip fails.

#![allow(
    clippy::disallowed_methods,
    reason = "real-kernel tests wait on wall-clock deadlines and measure rates; no protocol state reads this clock"
)]

mod common;

use std::time::{Duration, Instant};

use common::{icmp_ping, test_frame, Netns, RawSender, Topology, IFNAME};
use mcast_wire::{group_mac, MacAddr, ETHERTYPE_DEFAULT};
use mcast_xsk::{
    AttachMode, AttachedMode, BindMode, SteeringError, TxFrame, XdpSteering, XskConfig, XskError,
    XskSocket, ZeroCopy,
};

const ETHERTYPE: u16 = ETHERTYPE_DEFAULT;

/// The steering program and a socket on queue 0 of a receiver's `eth0`.
struct Receiver {
    // Socket first: it must leave the XSKMAP before the program goes.
    xsk: XskSocket,
    steering: XdpSteering,
}

fn receiver(ns: &Netns, mode: AttachMode) -> Receiver {
    ns.run(|| {
        let mut steering = XdpSteering::attach(IFNAME, ETHERTYPE, ns.mac, mode)
            .unwrap_or_else(|e| panic!("attach on {}: {e}", ns.name));
        let xsk = XskSocket::open(IFNAME, 0, XskConfig::default())
            .unwrap_or_else(|e| panic!("AF_XDP socket on {}: {e}", ns.name));
        assert_eq!(xsk.mode(), BindMode::Copy, "veth is copy mode only");
        steering.register_socket(0, &xsk).expect("register socket");
        Receiver { xsk, steering }
    })
}

/// Receives until `want` frames arrived or nothing arrives for `quiet`;
/// returns the packets' bytes and releases the frames.
fn drain(xsk: &mut XskSocket, want: usize, quiet: Duration) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    let mut batch = Vec::new();
    let mut last = Instant::now();
    while got.len() < want && last.elapsed() < quiet {
        if !xsk.poll_rx(10).expect("poll") {
            continue;
        }
        batch.clear();
        xsk.recv(&mut batch).expect("recv");
        if !batch.is_empty() {
            last = Instant::now();
        }
        for rx in &batch {
            got.push(xsk.packet(rx).expect("held frame").to_vec());
        }
        xsk.release(batch.iter().map(|r| r.frame)).expect("release");
    }
    got
}

#[test]
fn a_program_passes_verifier_and_attaches() {
    let Some(topo) = Topology::new("a_program_passes_verifier_and_attaches") else {
        return;
    };
    let [r1, r2, r3] = [&topo.receivers[0], &topo.receivers[1], &topo.receivers[2]];

    let auto = r1.run(|| XdpSteering::attach(IFNAME, ETHERTYPE, r1.mac, AttachMode::Auto));
    let auto = auto.unwrap_or_else(|e| panic!("Auto attach: {e}"));
    eprintln!(
        "attach mode with AttachMode::Auto on veth: {} (fallback: {:?})",
        auto.mode(),
        auto.fallback_reason()
    );
    // Nothing of ours has been sent yet. `passed` may already count the
    // kernel's own traffic on a link that just came up (IPv6 neighbour
    // discovery): the program passes it on, as it must.
    let c = auto.counters().expect("counters");
    assert_eq!(
        (
            c.redirected,
            c.not_subscribed,
            c.redirect_failed,
            c.dropped_injected
        ),
        (0, 0, 0, 0),
        "{c:?}"
    );

    let native = r2.run(|| XdpSteering::attach(IFNAME, ETHERTYPE, r2.mac, AttachMode::Native));
    match &native {
        Ok(s) => assert_eq!(s.mode(), AttachedMode::Native),
        Err(e) => eprintln!("native attach on veth refused: {e}"),
    }
    let skb = r3.run(|| XdpSteering::attach(IFNAME, ETHERTYPE, r3.mac, AttachMode::Skb));
    assert_eq!(skb.expect("SKB attach").mode(), AttachedMode::Skb);

    // A second program on the same interface is refused with a clear error.
    let again = r1.run(|| XdpSteering::attach(IFNAME, ETHERTYPE, r1.mac, AttachMode::Skb));
    let err = again.expect_err("second attach must fail");
    eprintln!("second attach: {err}");

    // A missing interface says so.
    let missing = r1.run(|| XdpSteering::attach("nosuch0", ETHERTYPE, r1.mac, AttachMode::Auto));
    assert!(
        matches!(missing, Err(SteeringError::NoSuchInterface { .. })),
        "{missing:?}"
    );
    drop(auto);
    drop(native);

    // Dropping the handle detached the program: attaching again works.
    let again = r1.run(|| XdpSteering::attach(IFNAME, ETHERTYPE, r1.mac, AttachMode::Skb));
    again.expect("re-attach after drop");

    // Native XDP on veth with a peer MTU above 3506 is refused with ERANGE,
    // reported as NativeMtuTooLarge (the peer is the bridge port p1 of r1).
    let out = topo
        .bridge
        .exec(&["ip", "link", "set", "dev", "p1", "mtu", "4000"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = r1.exec(&["ip", "link", "set", "dev", IFNAME, "mtu", "4000"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let big = r1.run(|| XdpSteering::attach(IFNAME, ETHERTYPE, r1.mac, AttachMode::Native));
    match big {
        Err(SteeringError::NativeMtuTooLarge { .. }) => {}
        other => panic!("expected NativeMtuTooLarge, got {other:?}"),
    }
}

#[test]
fn b_steers_subscribed_groups_and_own_mac_only() {
    let Some(topo) = Topology::new("b_steers_subscribed_groups_and_own_mac_only") else {
        return;
    };
    let r1 = &topo.receivers[0];
    let mut rx = receiver(r1, AttachMode::Auto);
    eprintln!("receiver attach mode: {}", rx.steering.mode());
    let sender = topo
        .sender
        .run(|| RawSender::open(IFNAME).expect("packet socket"));
    let src = topo.sender.mac;
    let (g_sub, g_other) = (group_mac(7), group_mac(8));
    rx.steering.subscribe(g_sub).expect("subscribe");

    // Subscribed group: arrives intact.
    let sent: Vec<Vec<u8>> = (0..100)
        .map(|i| test_frame(g_sub, src, ETHERTYPE, i, 60 + i as usize * 13))
        .collect();
    for f in &sent {
        sender.send(f).expect("send");
    }
    let got = drain(&mut rx.xsk, sent.len(), Duration::from_secs(2));
    assert_eq!(got, sent, "subscribed frames arrive intact and in order");

    // Unsubscribed group: not steered, counted.
    let before = rx.steering.counters().expect("counters");
    for i in 0..50 {
        sender
            .send(&test_frame(g_other, src, ETHERTYPE, i, 100))
            .expect("send");
    }
    let got = drain(&mut rx.xsk, 1, Duration::from_millis(300));
    assert!(
        got.is_empty(),
        "unsubscribed frames must not reach the socket"
    );
    let after = rx.steering.counters().expect("counters");
    assert_eq!(
        after.not_subscribed - before.not_subscribed,
        50,
        "{after:?}"
    );
    assert_eq!(after.redirected, before.redirected);

    // Our own MAC: arrives without any subscription.
    let own: Vec<Vec<u8>> = (0..20)
        .map(|i| test_frame(r1.mac, src, ETHERTYPE, i, 200))
        .collect();
    for f in &own {
        sender.send(f).expect("send");
    }
    assert_eq!(drain(&mut rx.xsk, own.len(), Duration::from_secs(2)), own);

    // Another receiver's MAC reaches r1 only if the bridge floods it; either
    // way it is not steered. Other EtherTypes to the subscribed group pass.
    for i in 0..10 {
        sender
            .send(&test_frame(g_sub, src, 0x88B6, i, 100))
            .expect("send");
    }
    assert!(drain(&mut rx.xsk, 1, Duration::from_millis(300)).is_empty());

    // After unsubscribe they stop.
    assert!(rx.steering.unsubscribe(g_sub).expect("unsubscribe"));
    assert!(!rx.steering.unsubscribe(g_sub).expect("unsubscribe twice"));
    for i in 0..50 {
        sender
            .send(&test_frame(g_sub, src, ETHERTYPE, i, 100))
            .expect("send");
    }
    assert!(drain(&mut rx.xsk, 1, Duration::from_millis(300)).is_empty());
    let c = rx.steering.counters().expect("counters");
    eprintln!("receiver counters: {c:?}");
    assert_eq!(c.redirected, 120);
    assert_eq!(c.not_subscribed, 100);
    assert_eq!(c.redirect_failed, 0);
    rx.xsk.check_conservation().expect("conservation");
}

#[test]
fn c_ip_and_arp_keep_working() {
    let Some(topo) = Topology::new("c_ip_and_arp_keep_working") else {
        return;
    };
    let r1 = &topo.receivers[0];
    let mut rx = receiver(r1, AttachMode::Auto);
    rx.steering.subscribe(group_mac(1)).expect("subscribe");
    let before = rx.steering.counters().expect("counters");
    // The ARP request for r1 and the echo request cross r1's XDP program;
    // the reply needs r1's kernel stack to have seen both.
    let dst = r1.ip;
    let rtts = topo.sender.run(move || {
        (0..3u16)
            .map(|seq| icmp_ping(dst, 0x4d58, seq, Duration::from_secs(2)).expect("ping r1"))
            .collect::<Vec<_>>()
    });
    // And the other way round: r1 resolves and pings the sender.
    let back = topo.sender.ip;
    r1.run(move || icmp_ping(back, 0x4d59, 0, Duration::from_secs(2)).expect("ping sender"));
    let after = rx.steering.counters().expect("counters");
    eprintln!("ping rtts {rtts:?}; counters {after:?}");
    // At least: ARP request + 3 echo requests + ARP reply + 1 echo reply.
    assert!(after.passed - before.passed >= 5, "{before:?} -> {after:?}");
    assert_eq!(after.redirected, 0);
    assert!(drain(&mut rx.xsk, 1, Duration::from_millis(100)).is_empty());
}

#[test]
fn d_drop_ratio_knob_drops_about_half() {
    let Some(topo) = Topology::new("d_drop_ratio_knob_drops_about_half") else {
        return;
    };
    let mut rx = receiver(&topo.receivers[0], AttachMode::Auto);
    let sender = topo
        .sender
        .run(|| RawSender::open(IFNAME).expect("packet socket"));
    let g = group_mac(42);
    rx.steering.subscribe(g).expect("subscribe");
    rx.steering.set_drop_ratio(0.5).expect("drop ratio");
    const N: u32 = 2000;
    let mut received = 0;
    for chunk in 0..N / 250 {
        for i in 0..250 {
            sender
                .send(&test_frame(
                    g,
                    topo.sender.mac,
                    ETHERTYPE,
                    chunk * 250 + i,
                    64,
                ))
                .expect("send");
        }
        received += drain(&mut rx.xsk, usize::MAX, Duration::from_millis(50)).len();
    }
    received += drain(&mut rx.xsk, usize::MAX, Duration::from_millis(300)).len();
    let c = rx.steering.counters().expect("counters");
    eprintln!(
        "drop ratio 0.5 over {N} frames: dropped {}, received {received}; {c:?}",
        c.dropped_injected
    );
    assert_eq!(c.dropped_injected + c.redirected, u64::from(N));
    assert_eq!(received as u64, c.redirected);
    assert!(
        (900..=1100).contains(&c.dropped_injected),
        "dropped {}",
        c.dropped_injected
    );

    // Off again: nothing dropped.
    rx.steering.set_drop_ratio(0.0).expect("drop ratio off");
    for i in 0..200 {
        sender
            .send(&test_frame(g, topo.sender.mac, ETHERTYPE, i, 64))
            .expect("send");
    }
    assert_eq!(drain(&mut rx.xsk, 200, Duration::from_secs(2)).len(), 200);
    assert!(rx.steering.set_drop_ratio(1.5).is_err());
}

#[test]
fn e_umem_frames_are_conserved_over_thousands_of_frames() {
    let Some(topo) = Topology::new("e_umem_frames_are_conserved_over_thousands_of_frames") else {
        return;
    };
    let r1 = &topo.receivers[0];
    let mut rx = receiver(r1, AttachMode::Auto);
    let g = group_mac(9);
    let g_echo = group_mac(10); // nobody subscribes: the echo is passed by the others
    rx.steering.subscribe(g).expect("subscribe");
    let config = XskConfig {
        frame_count: 1024,
        ring_size: 512,
        ..XskConfig::default()
    };
    let mut tx = topo
        .sender
        .run(|| XskSocket::open(IFNAME, 0, config).expect("sender AF_XDP socket"));
    tx.check_conservation().expect("initial");

    const N: u32 = 10_000;
    let src = topo.sender.mac;
    let mut sent = 0u32;
    let mut received = 0u32;
    let mut echoed = 0u32;
    let mut batch = Vec::new();
    let mut bad = 0u32;
    let start = Instant::now();
    while (sent < N || received < sent) && start.elapsed() < Duration::from_secs(20) {
        // Sender: fill up to 64 frames and transmit them.
        let mut out = Vec::new();
        while sent + (out.len() as u32) < N && out.len() < 64 {
            let Some(f) = tx.alloc() else { break };
            let bytes = test_frame(g, src, ETHERTYPE, sent + out.len() as u32, 128);
            tx.frame_mut(f).expect("held")[..bytes.len()].copy_from_slice(&bytes);
            out.push(TxFrame {
                frame: f,
                offset: 0,
                len: bytes.len() as u32,
            });
        }
        let queued = tx.transmit(&out).expect("transmit");
        // Frames the ring did not take go back to the free list.
        tx.release(out[queued..].iter().map(|t| t.frame))
            .expect("release unqueued");
        sent += queued as u32;
        tx.reap_completions().expect("reap");

        // Receiver: check each frame, echo a quarter of them from the very
        // frame they arrived in (TX of a held RX frame), release the rest.
        if rx.xsk.poll_rx(1).expect("poll") {
            batch.clear();
            rx.xsk.recv(&mut batch).expect("recv");
            let mut echo = Vec::new();
            let mut release = Vec::new();
            for r in &batch {
                let p = rx.xsk.packet(r).expect("held");
                let seq = u32::from_be_bytes([p[14], p[15], p[16], p[17]]);
                if p != test_frame(g, src, ETHERTYPE, seq, 128).as_slice() {
                    bad += 1;
                }
                if seq % 4 == 0 {
                    let frame = rx.xsk.frame_mut(r.frame).expect("held");
                    let at = r.offset as usize;
                    frame[at..at + 6].copy_from_slice(&g_echo.0);
                    echo.push(TxFrame {
                        frame: r.frame,
                        offset: r.offset,
                        len: r.len,
                    });
                } else {
                    release.push(r.frame);
                }
            }
            received += batch.len() as u32;
            let queued = rx.xsk.transmit(&echo).expect("echo");
            echoed += queued as u32;
            release.extend(echo[queued..].iter().map(|t| t.frame));
            rx.xsk.release(release).expect("release");
            rx.xsk.reap_completions().expect("reap");
        }
        rx.xsk
            .check_conservation()
            .expect("receiver conservation mid-run");
        tx.check_conservation()
            .expect("sender conservation mid-run");
    }
    let secs = start.elapsed().as_secs_f64();
    // Let the last completions come back.
    let deadline = Instant::now() + Duration::from_secs(2);
    while (tx.counts().tx > 0 || rx.xsk.counts().tx > 0) && Instant::now() < deadline {
        tx.kick().expect("kick");
        rx.xsk.kick().expect("kick");
        tx.reap_completions().expect("reap");
        rx.xsk.reap_completions().expect("reap");
        std::thread::sleep(Duration::from_millis(5));
    }
    let c_tx = tx.check_conservation().expect("sender conservation");
    let c_rx = rx.xsk.check_conservation().expect("receiver conservation");
    let steer = rx.steering.counters().expect("counters");
    eprintln!(
        "sent {sent}, received {received}, echoed {echoed} in {secs:.2} s ({:.0} frames/s end to end); sender {c_tx:?}; receiver {c_rx:?}; steering {steer:?}",
        f64::from(received) / secs
    );
    assert_eq!(bad, 0, "corrupted frames");
    assert_eq!(sent, N);
    assert_eq!(
        received, N,
        "every frame arrives (copy mode, one queue, no loss expected)"
    );
    assert_eq!(c_tx.tx, 0, "all sender TX frames completed");
    assert_eq!(c_rx.tx, 0, "all echo TX frames completed");
    assert_eq!(c_tx.held + c_rx.held, 0);
    assert_eq!(c_tx.free + c_tx.fill, c_tx.total);
}

#[test]
fn f_errors_say_what_to_do() {
    let Some(topo) = Topology::new("f_errors_say_what_to_do") else {
        return;
    };
    // ENOSPC: native XDP on a veth with fewer RX queues than its peer's TX
    // queues. Both ends live in the bridge namespace.
    let out = topo.bridge.exec(&[
        "ip",
        "link",
        "add",
        "qa",
        "numtxqueues",
        "4",
        "numrxqueues",
        "4",
        "type",
        "veth",
        "peer",
        "name",
        "qb",
        "numtxqueues",
        "1",
        "numrxqueues",
        "1",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mac = MacAddr([0x02, 0, 0, 0, 0, 0x0b]);
    let r = topo
        .bridge
        .run(|| XdpSteering::attach("qb", ETHERTYPE, mac, AttachMode::Native));
    match r {
        Err(e @ SteeringError::NativeQueueMismatch { .. }) => eprintln!("{e}"),
        other => panic!("expected NativeQueueMismatch, got {other:?}"),
    }
    // Auto falls back to SKB there, and says why.
    let auto = topo
        .bridge
        .run(|| XdpSteering::attach("qb", ETHERTYPE, mac, AttachMode::Auto));
    let auto = auto.expect("Auto falls back to SKB");
    assert_eq!(auto.mode(), AttachedMode::Skb);
    assert!(auto.fallback_reason().is_some_and(|r| r.contains("ENOSPC")));
    drop(auto);

    // Zero-copy: required fails on veth, preferred falls back and reports it.
    let r1 = &topo.receivers[0];
    let zc = |zero_copy| {
        r1.run(move || {
            XskSocket::open(
                IFNAME,
                0,
                XskConfig {
                    zero_copy,
                    ..XskConfig::default()
                },
            )
        })
    };
    match zc(ZeroCopy::Required) {
        Err(e @ XskError::ZeroCopyUnsupported(_)) => eprintln!("{e}"),
        other => panic!("expected ZeroCopyUnsupported, got {other:?}"),
    }
    let s = zc(ZeroCopy::Preferred).expect("preferred zero-copy falls back");
    assert_eq!(s.mode(), BindMode::Copy);
    eprintln!("zero-copy preferred: {:?}", s.zero_copy_refused());
    assert!(s.zero_copy_refused().is_some());
    drop(s);

    // Capabilities: a thread that dropped its effective set is told which it lacks.
    let r2 = &topo.receivers[1];
    let (steer, sock) = r2.run(|| {
        common::drop_effective_caps().expect("capset");
        (
            XdpSteering::attach(IFNAME, ETHERTYPE, r2.mac, AttachMode::Auto),
            XskSocket::open(IFNAME, 0, XskConfig::default()),
        )
    });
    let steer = steer.expect_err("attach without capabilities");
    let msg = steer.to_string();
    assert!(
        msg.contains("CAP_BPF") && msg.contains("CAP_NET_ADMIN"),
        "{msg}"
    );
    let sock = sock.expect_err("socket without capabilities");
    assert!(sock.to_string().contains("CAP_NET_RAW"), "{sock}");
    eprintln!("{msg}\n{sock}");

    // Bad configuration is refused before any syscall.
    let bad = r1.run(|| {
        XskSocket::open(
            IFNAME,
            0,
            XskConfig {
                frame_size: 3000,
                ..XskConfig::default()
            },
        )
    });
    assert!(matches!(bad, Err(XskError::InvalidConfig(_))), "{bad:?}");
}

#[test]
fn g_memlock_too_low_says_how_to_raise_it() {
    let Some(topo) = Topology::new("g_memlock_too_low_says_how_to_raise_it") else {
        return;
    };
    let r1 = &topo.receivers[0];
    // Without CAP_IPC_LOCK (and CAP_SYS_RESOURCE, so the limit cannot be
    // raised) a UMEM above RLIMIT_MEMLOCK is refused. 128 MiB is above any
    // limit the other tests raise the (process-wide) limit to.
    let r = r1.run(|| {
        common::drop_effective_caps_except(&[12, 13]).expect("capset"); // NET_ADMIN, NET_RAW
        XskSocket::open(
            IFNAME,
            0,
            XskConfig {
                frame_count: 32768,
                frame_size: 4096,
                ..XskConfig::default()
            },
        )
    });
    match r {
        Err(e @ XskError::MemlockTooLow { .. }) => {
            let msg = e.to_string();
            assert!(
                msg.contains("ulimit -l") && msg.contains("CAP_IPC_LOCK"),
                "{msg}"
            );
            eprintln!("{msg}");
        }
        other => panic!("expected MemlockTooLow, got {other:?}"),
    }
}
