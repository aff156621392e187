//! The engine on a real kernel: one sender and three receiver network
//! namespaces joined by a bridge (see `common::netns`), each engine on its own
//! thread inside its namespace, AF_XDP with the steering program (SKB mode)
//! or AF_PACKET. Loss is injected at every receiver with the XDP drop-ratio
//! knob (AF_XDP) or the transport's user-space knob (AF_PACKET). Each test
//! creates and removes its own namespaces. They need root: without it they
//! skip with a message, and with `CI=true` a skip fails.
//!
//! Message counts: `MCAST_MESSAGES=N` sets them; `MCAST_FULL=1` runs the
//! 100,000-message variant the issue asks for (minutes per test on 2 vCPUs);
//! the default keeps the whole suite within a few minutes.

#![allow(
    clippy::disallowed_methods,
    reason = "real-kernel tests measure wall time; no protocol state reads this clock"
)]

#[allow(dead_code)]
mod common;

use std::time::Duration;

use common::netns::{Netns, Topology, IFNAME};
use common::runs::{run, xdp};
use common::scenario::{self, Spec};
use mcast_engine::{Algorithm, PacketConfig, PacketTransport, Transport, XdpConfig, XdpTransport};
use mcast_wire::ETHERTYPE_DEFAULT;

/// Messages per run: 100,000 with MCAST_FULL=1, else `default`.
fn messages(default: usize) -> usize {
    if let Ok(n) = std::env::var("MCAST_MESSAGES") {
        return n.parse().expect("MCAST_MESSAGES is a number");
    }
    if std::env::var("MCAST_FULL").as_deref() == Ok("1") {
        return 100_000;
    }
    default
}

fn spec(topo: &Topology, algorithm: Algorithm, messages: usize, loss: f64) -> Spec {
    Spec {
        algorithm,
        messages,
        loss,
        receivers: topo
            .receivers
            .iter()
            .enumerate()
            .map(|(i, r)| (11 + i as u32, r.mac))
            .collect(),
        window_frames: 512,
        fence: false,
        fixed_len: None,
        deadline: Duration::from_secs(if messages > 20_000 { 900 } else { 120 }),
    }
}

fn packet(ns: &Netns) -> PacketTransport {
    PacketTransport::open(IFNAME, ETHERTYPE_DEFAULT, PacketConfig::default())
        .unwrap_or_else(|e| panic!("AF_PACKET on {}: {e}", ns.name))
}

macro_rules! topology {
    ($name:expr) => {
        match Topology::new($name) {
            Some(t) => t,
            None => return,
        }
    };
}

#[test]
fn xdp_mak_mixed_sizes_0_and_2_percent_loss() {
    let topo = topology!("xdp_mak_mixed_sizes_0_and_2_percent_loss");
    let n = messages(10_000);
    run(
        "af_xdp mak 0%",
        &topo,
        spec(&topo, Algorithm::Mak, n, 0.0),
        xdp(4096),
    );
    run(
        "af_xdp mak 2%",
        &topo,
        spec(&topo, Algorithm::Mak, n, 0.02),
        xdp(4096),
    );
}

#[test]
fn xdp_ack_mixed_sizes_0_and_2_percent_loss() {
    let topo = topology!("xdp_ack_mixed_sizes_0_and_2_percent_loss");
    let n = messages(3_000);
    run(
        "af_xdp ack 0%",
        &topo,
        spec(&topo, Algorithm::Ack, n, 0.0),
        xdp(4096),
    );
    run(
        "af_xdp ack 2%",
        &topo,
        spec(&topo, Algorithm::Ack, n, 0.02),
        xdp(4096),
    );
}

#[test]
fn xdp_nak_whole_run_in_the_window_with_a_fence() {
    let topo = topology!("xdp_nak_whole_run_in_the_window_with_a_fence");
    // Plain NAK never frees its window: the whole run must fit in it (a
    // power of two, see tests/memory.rs), and the last frame is protected by
    // a 64-byte fence message sent after loss is turned off.
    let window = 4096u32;
    let n = scenario::messages_fitting(messages(10_000), window as usize - 64);
    for loss in [0.0, 0.02] {
        let mut s = spec(&topo, Algorithm::Nak, n, loss);
        s.window_frames = window;
        s.fence = true;
        run(
            &format!("af_xdp nak {}%", loss * 100.0),
            &topo,
            s,
            xdp(8192),
        );
    }
}

#[test]
fn xdp_iterative_mixed_sizes_0_and_2_percent_loss() {
    let topo = topology!("xdp_iterative_mixed_sizes_0_and_2_percent_loss");
    let n = messages(3_000);
    for loss in [0.0, 0.02] {
        let mut s = spec(&topo, Algorithm::Iterative, n, loss);
        s.window_frames = 128;
        run(
            &format!("af_xdp iterative {}%", loss * 100.0),
            &topo,
            s,
            xdp(4096),
        );
    }
}

#[test]
fn xdp_gbn_unicast_0_and_2_percent_loss() {
    let topo = topology!("xdp_gbn_unicast_0_and_2_percent_loss");
    let n = messages(5_000);
    for loss in [0.0, 0.02] {
        let mut s = spec(&topo, Algorithm::Iterative, n, loss);
        s.receivers.truncate(1);
        s.window_frames = 128;
        run(
            &format!("af_xdp gbn {}%", loss * 100.0),
            &topo,
            s,
            xdp(4096),
        );
    }
}

#[test]
fn packet_mak_mixed_sizes_0_and_2_percent_loss() {
    let topo = topology!("packet_mak_mixed_sizes_0_and_2_percent_loss");
    let n = messages(10_000);
    run(
        "af_packet mak 0%",
        &topo,
        spec(&topo, Algorithm::Mak, n, 0.0),
        packet,
    );
    run(
        "af_packet mak 2%",
        &topo,
        spec(&topo, Algorithm::Mak, n, 0.02),
        packet,
    );
}

#[test]
fn errors_name_the_interface_and_the_fix() {
    let topo = topology!("errors_name_the_interface_and_the_fix");
    let r = &topo.receivers[0];
    r.run(|| {
        let e = XdpTransport::open("nosuch0", ETHERTYPE_DEFAULT, XdpConfig::default()).unwrap_err();
        assert!(e.to_string().contains("`nosuch0` does not exist"), "{e}");
        let e = PacketTransport::open("nosuch0", ETHERTYPE_DEFAULT, PacketConfig::default())
            .unwrap_err();
        assert!(e.to_string().contains("`nosuch0` does not exist"), "{e}");
        // Zero-copy is refused on veth: Required fails and says what to do,
        // Preferred binds in copy mode and reports it.
        let mut cfg = XdpConfig::default();
        cfg.xsk.zero_copy = mcast_xsk::ZeroCopy::Required;
        let e = XdpTransport::open(IFNAME, ETHERTYPE_DEFAULT, cfg).unwrap_err();
        assert!(e.to_string().contains("zero-copy"), "{e}");
        let mut cfg = XdpConfig::default();
        cfg.xsk.zero_copy = mcast_xsk::ZeroCopy::Preferred;
        let t = XdpTransport::open(IFNAME, ETHERTYPE_DEFAULT, cfg).expect("preferred");
        let info = t.info();
        assert_eq!(info.bind_mode, Some(mcast_xsk::BindMode::Copy));
        assert!(info.zero_copy_refused.is_some(), "{info:?}");
        drop(t);
        // A second program on the same interface: the loader's error passes through.
        let _first =
            XdpTransport::open(IFNAME, ETHERTYPE_DEFAULT, XdpConfig::default()).expect("attach");
        let e = XdpTransport::open(IFNAME, ETHERTYPE_DEFAULT, XdpConfig::default()).unwrap_err();
        eprintln!("second attach: {e}");
        assert!(matches!(e, mcast_engine::EngineError::Steering(_)), "{e:?}");
        // Without CAP_NET_RAW the AF_PACKET transport names the capability.
        std::thread::scope(|s| {
            s.spawn(|| {
                common::netns::drop_effective_caps().expect("drop caps");
                let e = PacketTransport::open(IFNAME, ETHERTYPE_DEFAULT, PacketConfig::default())
                    .unwrap_err();
                assert!(e.to_string().contains("CAP_NET_RAW"), "{e}");
            })
            .join()
            .unwrap();
        });
    });
}
