//! Running a [`Spec`] on the namespace topology: each engine on its own
//! thread inside its namespace, the transport opened there.
#![allow(
    clippy::disallowed_methods,
    reason = "real-kernel runs measure wall time; no protocol state reads this clock"
)]

use std::time::Instant;

use crate::{Engine, Transport, XdpConfig, XdpTransport};
use mcast_wire::ETHERTYPE_DEFAULT;
use mcast_xsk::{AttachMode, XskConfig};

use super::netns::{Netns, Topology, IFNAME};
use super::scenario::{self, Control, NodeResult, Spec, SENDER};

/// Runs `spec` on the topology, building each node's transport inside its
/// namespace with `open`.
pub fn run_nodes<T: Transport>(
    name: &str,
    topo: &Topology,
    spec: Spec,
    open: impl Fn(&Netns) -> T + Sync,
) -> (NodeResult, Vec<NodeResult>) {
    let ctl = Control::new(&spec);
    let started = Instant::now();
    let nodes: Vec<(u32, &Netns)> = spec
        .receivers
        .iter()
        .zip(&topo.receivers)
        .map(|(r, ns)| (r.0, ns))
        .collect();
    let (s, r) = std::thread::scope(|sc| {
        let hs: Vec<_> = nodes
            .iter()
            .map(|&(node, ns)| {
                let (spec, ctl, open) = (&spec, &ctl, &open);
                sc.spawn(move || {
                    ns.enter();
                    let e = Engine::new(open(ns), scenario::config(spec, node))
                        .unwrap_or_else(|e| panic!("engine on {}: {e}", ns.name));
                    scenario::run_receiver(e, node, spec, ctl)
                })
            })
            .collect();
        let s = sc
            .spawn(|| {
                topo.sender.enter();
                let e = Engine::new(open(&topo.sender), scenario::config(&spec, SENDER))
                    .unwrap_or_else(|e| panic!("engine on {}: {e}", topo.sender.name));
                scenario::run_sender(e, &spec, &ctl)
            })
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p));
        let r: Vec<_> = hs
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect();
        (s, r)
    });
    eprintln!("{name}: wall time {:.2} s", started.elapsed().as_secs_f64());
    (s, r)
}

/// Runs `spec` and asserts that it succeeded (see [`scenario::report`]).
pub fn run<T: Transport>(
    name: &str,
    topo: &Topology,
    spec: Spec,
    open: impl Fn(&Netns) -> T + Sync,
) {
    let (s, r) = run_nodes(name, topo, spec.clone(), open);
    scenario::report(name, &spec, &s, &r);
}

/// Opens AF_XDP (SKB mode, copy mode on veth) with `frame_count` UMEM frames.
pub fn xdp(frame_count: u32) -> impl Fn(&Netns) -> XdpTransport + Sync {
    move |ns: &Netns| {
        let cfg = XdpConfig {
            queue: 0,
            attach: AttachMode::Skb,
            xsk: XskConfig {
                frame_count,
                ..XskConfig::default()
            },
        };
        XdpTransport::open(IFNAME, ETHERTYPE_DEFAULT, cfg)
            .unwrap_or_else(|e| panic!("AF_XDP on {}: {e}", ns.name))
    }
}
