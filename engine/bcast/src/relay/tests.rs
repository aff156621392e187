//! The relay's scripted tests: relays joined by hand-carried links, each
//! rule staged once (the seeded sweep is `tests/relay_sweep.rs`).

use super::*;

/// Relays joined by in-order links, with the messages in flight held
/// so a test can drop or deliver them.
struct Net {
    relays: BTreeMap<u32, Relay>,
    flight: VecDeque<(u32, u32, Vec<u8>)>,
    delivered: BTreeMap<u32, Vec<(u32, u64, Vec<u8>)>>,
}

impl Net {
    fn new(ids: &[u32], pick: Pick, window: u64) -> Net {
        let cfg = Config {
            pick,
            window,
            one_port_bytes: 100,
            deliver_own: true,
        };
        Net {
            relays: ids.iter().map(|&i| (i, Relay::new(i, cfg))).collect(),
            flight: VecDeque::new(),
            delivered: BTreeMap::new(),
        }
    }
    fn add(&mut self, id: u32, pick: Pick, window: u64) {
        self.relays.insert(
            id,
            Relay::new(
                id,
                Config {
                    pick,
                    window,
                    one_port_bytes: 100,
                    deliver_own: true,
                },
            ),
        );
    }
    fn collect(&mut self) {
        for (&id, r) in &mut self.relays {
            while let Some(o) = r.poll() {
                match o {
                    Output::Send { to, msg } => self.flight.push_back((id, to, msg)),
                    Output::Deliver { root, seq, data } => self
                        .delivered
                        .entry(id)
                        .or_default()
                        .push((root, seq, data)),
                }
            }
        }
    }
    fn install(&mut self, epoch: u64, members: &[u32]) {
        for m in members {
            self.relays.get_mut(m).unwrap().install(View {
                epoch,
                members: members.to_vec(),
            });
        }
        self.collect();
    }
    /// Delivers what is in flight (and what that causes) until nothing
    /// is, except what `drop` refuses.
    fn run(&mut self, drop: impl Fn(u32, u32, &Msg) -> bool) {
        while let Some((from, to, bytes)) = self.flight.pop_front() {
            let msg = Msg::decode(&bytes).unwrap();
            if drop(from, to, &msg) {
                continue;
            }
            if let Some(r) = self.relays.get_mut(&to) {
                r.receive(from, &bytes);
            }
            self.collect();
        }
    }
    fn seqs(&self, at: u32, root: u32) -> Vec<u64> {
        self.delivered
            .get(&at)
            .map(|v| v.iter().filter(|d| d.0 == root).map(|d| d.1).collect())
            .unwrap_or_default()
    }
}

#[test]
fn a_message_follows_its_schedule_and_everyone_delivers_it_once() {
    let mut net = Net::new(
        &[10, 20, 30, 40, 50, 60],
        Pick::Fixed(Algorithm::RsBcast),
        8,
    );
    net.install(1, &[10, 20, 30, 40, 50, 60]);
    net.run(|_, _, _| false);
    let root = net.relays.get_mut(&10).unwrap();
    assert_eq!(root.publish(b"hello"), Ok(0));
    net.collect();
    // RSbcast from member 0 of 6: the root's transfers go to the far end
    // of the other half at each of its ⌈log₂ 6⌉ steps: members 5, 2, 1.
    let firsts: Vec<u32> = net.flight.iter().map(|f| f.1).collect();
    assert_eq!(firsts, vec![60, 30, 20]);
    net.run(|_, _, _| false);
    for id in [10, 20, 30, 40, 50, 60] {
        assert_eq!(net.seqs(id, 10), vec![0], "node {id}");
    }
    let sent: u64 = net.relays.values().map(|r| r.stats().transfers_sent).sum();
    assert_eq!(sent, 5, "one transfer per member but the root");
}

#[test]
fn scatter_collect_forwards_pieces_as_they_arrive_and_reassembles_them() {
    let ids = [1, 2, 3, 4, 5];
    let mut net = Net::new(&ids, Pick::Fixed(Algorithm::ScatterCollect), 8);
    net.install(1, &ids);
    let msg: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
    net.relays.get_mut(&3).unwrap().publish(&msg).unwrap();
    net.collect();
    net.run(|_, _, _| false);
    for id in ids {
        let d = &net.delivered[&id];
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].2, msg, "node {id}");
    }
    // Scatter: 4 transfers; ring: 4 steps of 5.
    let sent: u64 = net.relays.values().map(|r| r.stats().transfers_sent).sum();
    assert_eq!(sent, 4 + 4 * 5);
}

#[test]
fn the_window_holds_a_root_back_until_its_members_report() {
    let mut net = Net::new(&[1, 2], Pick::Fixed(Algorithm::Iterative), 4);
    net.install(1, &[1, 2]);
    net.run(|_, _, _| false);
    let r = net.relays.get_mut(&1).unwrap();
    for i in 0..4 {
        assert_eq!(r.publish(b"x"), Ok(i));
    }
    assert_eq!(r.publish(b"x"), Err(PublishError::WouldBlock));
    net.collect();
    // Member 2 reports every window/4 = 1 delivery.
    net.run(|_, _, _| false);
    assert_eq!(net.relays.get_mut(&1).unwrap().publish(b"x"), Ok(4));
    let mut lone = Relay::new(
        9,
        Config {
            pick: Pick::Fixed(Algorithm::Mst),
            window: 4,
            one_port_bytes: 100,
            deliver_own: true,
        },
    );
    assert_eq!(lone.publish(b"x"), Err(PublishError::NotMember));
}

#[test]
fn answered_transfers_measure_the_links_and_auto_uses_what_was_measured() {
    let model = Model {
        link: Link {
            alpha: 1e-3,
            beta: 1e-6,
        },
        fabric: crate::cost::Fabric::Switch,
    };
    let cfg = Config {
        pick: Pick::Auto(model),
        window: 64,
        one_port_bytes: 100,
        deliver_own: true,
    };
    let (mut root, mut member) = (Relay::new(1, cfg), Relay::new(2, cfg));
    let view = View {
        epoch: 1,
        members: vec![1, 2],
    };
    root.install(view.clone());
    member.install(view);
    while root.poll().is_some() {}
    while member.poll().is_some() {}
    // Each transfer is answered 2α + bβ after it left: α = 20 µs, β = 2 ns/B.
    let mut now = 1_000_000u64;
    for len in [200usize, 2_000, 200_000, 2_000_000]
        .into_iter()
        .cycle()
        .take(40)
    {
        root.set_now(now);
        root.publish(&vec![7; len]).unwrap();
        while let Some(o) = root.poll() {
            if let Output::Send { to: 2, msg } = o {
                member.receive(1, &msg);
            }
        }
        now += 40_000 + 2 * len as u64;
        while let Some(o) = member.poll() {
            if let Output::Send { to: 1, msg } = o {
                root.set_now(now);
                root.receive(2, &msg);
            }
        }
    }
    let (link, samples) = root.measured_link();
    let link = link.expect("a fit");
    assert_eq!(samples, 40);
    assert!(
        (link.alpha - 20e-6).abs() < 1e-7 && (link.beta - 2e-9).abs() < 1e-11,
        "{link:?}"
    );
    // The configured link (1 ms, 1 µs/B) would make `auto` choose by
    // it; the measured one is what its reasoning shows now.
    root.set_now(now);
    root.publish(b"x").unwrap();
    let (_, why) = root.choices();
    assert!(
        why.unwrap().contains("20.0 us") || why.unwrap().contains("20.1 us"),
        "{why:?}"
    );
}

#[test]
fn a_repeated_start_does_not_make_a_member_skip_what_is_on_its_way() {
    let mut net = Net::new(
        &[1, 2, 3],
        Pick::Fixed(Algorithm::Chain { segments: 2 }),
        64,
    );
    net.install(1, &[1, 2, 3]);
    net.run(|_, _, _| false);
    for _ in 0..5 {
        net.relays.get_mut(&1).unwrap().publish(&[9; 300]).unwrap();
    }
    // A START of the view member 3 already has a start from, naming the
    // root's next message, reaches it while messages 0-4 are on their way
    // (a copy of its grant, or one meant for a state it no longer has).
    let again = Msg::Start {
        root: 1,
        epoch: 1,
        seq: 5,
    };
    net.relays.get_mut(&3).unwrap().receive(1, &again.encode());
    net.collect();
    net.run(|_, _, _| false);
    assert_eq!(net.seqs(3, 1), vec![0, 1, 2, 3, 4]);
}

/// Members 1, 2 and 3 in view 1, root 1's m0 sent (on its way).
fn three_with_m0_sent() -> Net {
    let ids = [1, 2, 3];
    let mut net = Net::new(&ids, Pick::Fixed(Algorithm::Iterative), 16);
    net.install(1, &ids);
    net.run(|_, _, _| false);
    net.relays.get_mut(&1).unwrap().publish(b"m0").unwrap();
    net.collect();
    net
}

#[test]
fn a_live_root_refeeds_what_a_view_change_left_undelivered() {
    let ids = [1, 2, 3];
    let mut net = three_with_m0_sent();
    // Node 3 never gets m0 under view 1 (its link loses it)...
    net.run(|_, to, m| to == 3 && matches!(m, Msg::Data(_)));
    assert_eq!(net.seqs(3, 1), Vec::<u64>::new());
    // ...and at the next view it asks the root, which sends it straight.
    net.install(2, &ids);
    net.run(|_, _, _| false);
    assert_eq!(net.seqs(3, 1), vec![0]);
    assert_eq!(net.relays[&1].stats().refed, 1);
}

#[test]
fn survivors_agree_on_a_departed_roots_messages_and_skip_what_none_of_them_holds() {
    let pick = Pick::Fixed(Algorithm::Iterative);
    let mut net = Net::new(&[1, 2, 3], pick, 16);
    net.install(1, &[1, 2, 3]);
    net.run(|_, _, _| false);
    // m0 reaches only node 3.
    net.relays.get_mut(&1).unwrap().publish(b"m0").unwrap();
    net.collect();
    net.run(|_, to, m| to == 2 && matches!(m, Msg::Data(_)));
    // Node 4 joins; m1 reaches nodes 2 (which cannot deliver it: m0 is
    // missing) and 4 (whose start is 1).
    net.add(4, pick, 16);
    net.install(2, &[1, 2, 3, 4]);
    // (The root never answers node 2's SYNC: it is about to crash.)
    net.run(|_, _, m| matches!(m, Msg::Sync { .. }));
    net.relays.get_mut(&1).unwrap().publish(b"m1").unwrap();
    net.collect();
    net.run(|_, to, m| to == 3 && matches!(m, Msg::Data(_)));
    assert_eq!(net.seqs(2, 1), Vec::<u64>::new());
    assert_eq!(net.seqs(4, 1), vec![1]);
    // The root and node 3 crash: no survivor holds m0.
    net.relays.remove(&1);
    net.relays.remove(&3);
    net.flight.clear();
    net.install(3, &[2, 4]);
    net.run(|_, _, _| false);
    assert_eq!(net.seqs(2, 1), vec![1], "m0 skipped, m1 re-sent by node 4");
    assert_eq!(net.relays[&2].stats().skipped, 1);
    for id in [2, 4] {
        assert_eq!(net.relays[&id].open_rounds(), 0);
        assert_eq!(
            net.relays[&id].position(1),
            None,
            "the departed root is forgotten"
        );
    }
    // What the departed root still had in flight is not wanted now.
    let late = Msg::Data(Data {
        root: 1,
        seq: 2,
        epoch: 2,
        stable: 0,
        direct: false,
        answer: false,
        algorithm: Algorithm::Iterative,
        pieces: 1,
        len: 2,
        first: 0,
        count: 1,
        bytes: b"m2".to_vec(),
    });
    net.relays.get_mut(&2).unwrap().receive(1, &late.encode());
    net.collect();
    assert_eq!(net.seqs(2, 1), vec![1]);
}

#[test]
fn a_member_back_as_a_new_relay_gets_a_start_though_its_roots_skipped_the_view_without_it() {
    let ids = [1, 2, 3];
    let mut net = three_with_m0_sent();
    net.run(|_, _, _| false);
    assert_eq!(net.seqs(3, 1), vec![0]);
    // Member 3 is declared failed and comes back as a new incarnation: a
    // fresh relay. Members 1 and 2 never install the view without it (the
    // agent moved: views skipped); their daemons learn of the restart from
    // its beats and say so.
    net.add(3, Pick::Fixed(Algorithm::Iterative), 16);
    net.delivered.remove(&3);
    for m in [1, 2] {
        net.relays.get_mut(&m).unwrap().member_restarted(3);
    }
    net.install(3, &ids);
    net.run(|_, _, _| false);
    net.relays.get_mut(&1).unwrap().publish(b"m1").unwrap();
    net.collect();
    net.run(|_, _, _| false);
    assert_eq!(net.seqs(3, 1), vec![1], "the new relay from its start on");
    assert_eq!(net.seqs(2, 1), vec![0, 1]);
}

#[test]
fn a_subtree_whose_interior_member_died_is_refed_by_its_nearest_live_ancestor() {
    let ids: Vec<u32> = (1..=8).collect();
    let mut net = Net::new(&ids, Pick::Fixed(Algorithm::RsBcast), 16);
    net.install(1, &ids);
    net.run(|_, _, _| false);
    // An interior member of the tree below one of the root's children.
    let s = plan(Algorithm::RsBcast, Shape::near_square(8), 0, 2).unwrap();
    let parent: BTreeMap<u32, u32> = s.steps.iter().flatten().map(|t| (t.to, t.from)).collect();
    let x = (1..8)
        .find(|&i| parent[&i] != 0 && parent.values().any(|&p| p == i))
        .expect("a tree of 8 has one");
    let (dead, ancestor) = (ids[x as usize], ids[parent[&x] as usize]);
    // m0 reaches the dead member, which dies before forwarding it.
    net.relays.get_mut(&1).unwrap().publish(b"m0").unwrap();
    net.collect();
    net.run(|from, _, m| from == dead && matches!(m, Msg::Data(_)));
    let orphans: Vec<u32> = ids
        .iter()
        .copied()
        .filter(|&i| i != dead && net.seqs(i, 1).is_empty())
        .collect();
    assert!(!orphans.is_empty());
    // Positions reach the root (a tick reports what moved).
    for r in net.relays.values_mut() {
        r.tick();
    }
    net.collect();
    net.run(|_, _, _| false);
    net.relays.remove(&dead);
    let alive: Vec<u32> = ids.iter().copied().filter(|&i| i != dead).collect();
    net.install(2, &alive);
    net.run(|_, _, _| false);
    for &i in &alive {
        assert_eq!(net.seqs(i, 1), vec![0], "node {i}");
    }
    // The dead member's parent re-fed its whole subtree; the root none.
    let root = net.relays[&1].stats();
    assert_eq!((root.refed, root.delegated), (0, orphans.len() as u64));
    assert_eq!(net.relays[&ancestor].stats().refed, orphans.len() as u64);
}

#[test]
fn a_refeed_request_the_member_cannot_serve_goes_back_to_the_root() {
    let mut net = three_with_m0_sent();
    // Node 3 never gets m0.
    net.run(|_, to, m| to == 3 && matches!(m, Msg::Data(_)));
    // The root asks node 3 to re-feed node 2: node 3 hands it back and the
    // root sends it itself.
    let ask = Msg::Refeed {
        root: 1,
        seq: 0,
        to: 2,
    };
    net.relays.get_mut(&3).unwrap().receive(1, &ask.encode());
    net.collect();
    net.run(|_, _, _| false);
    let root = net.relays[&1].stats();
    assert_eq!((root.delegations_returned, root.refed), (1, 1));
    // Only the root asks: the same request from node 2 is refused.
    let before = net.relays[&3].stats().refused;
    net.relays.get_mut(&3).unwrap().receive(2, &ask.encode());
    assert_eq!(net.relays[&3].stats().refused, before + 1);
}
