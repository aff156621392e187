//! The relays of a group in a seeded, deterministic world: members publish
//! messages of every size with every algorithm (or `auto`), links are
//! reliable and in order with random delays and, in half of the seeds,
//! losses below them as the daemons' Go-Back-N links repair them (a lost
//! message comes a retransmission timeout later, and everything sent after
//! it on that link waits behind it), members crash (losing any
//! suffix of what they had sent) or are partitioned off the majority (one
//! or several at once, running on under their old view), new members join,
//! and each view reaches each member at its own time. After every delivery and at the end the
//! checker holds the relay to docs/protocol.md §8.6:
//!
//! - each member delivers each root's messages once, in order, intact;
//! - a live root's messages reach every surviving member from the start
//!   the root gave it, with no gap;
//! - the survivors agree on a departed root's messages: any message one of
//!   them delivered, every survivor whose start is at or below it delivered;
//! - at the end no round is open, nothing waits, and every root's window
//!   is free.
//!
//! `RELAY_SEEDS=N` runs more seeds; a failure prints the seed, the failing
//! members' state ([`Relay::summary`]) and the command that replays it
//! (`RELAY_SEED=S`); `RELAY_TRACE=1` prints every link message and view.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use mcast_bcast::cost::{Fabric, Link, Model};
use mcast_bcast::relay::wire::Msg;
use mcast_bcast::relay::{Config, Output, Pick, PublishError, Relay, Stats, View};
use mcast_bcast::Algorithm;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

#[derive(Debug)]
enum Event {
    /// A link message: from, to, the time it was sent, bytes.
    Arrive(u32, u32, u64, Vec<u8>),
    Install(u32, View),
    Tick(u32),
    Publish(u32),
    Crash(u32),
    Join,
}

struct Node {
    relay: Relay,
    alive: bool,
    /// Removed from the views while still running (a pause longer than
    /// the failure detector's bound): it goes on sending what it sends.
    evicted: bool,
    /// Per root, the sequences delivered.
    delivered: BTreeMap<u32, Vec<u64>>,
    /// Per root, the start it gave this node (seen arriving).
    start: BTreeMap<u32, u64>,
    /// Messages published so far.
    published: u64,
}

fn content(root: u32, seq: u64, len: usize) -> Vec<u8> {
    let mut r = Rng(u64::from(root) << 32 ^ seq);
    (0..len).map(|_| r.next() as u8).collect()
}

struct World {
    rng: Rng,
    now: u64,
    order: u64,
    events: BinaryHeap<Reverse<(u64, u64, usize)>>,
    payloads: Vec<Option<Event>>,
    nodes: BTreeMap<u32, Node>,
    /// The last arrival time on each link, to keep links in order.
    link_at: BTreeMap<(u32, u32), u64>,
    /// Loss below the relay, per mille of link messages (0: none), and the
    /// draws for it, apart from `rng` so that the seeds without loss run as
    /// they did before it was modelled.
    loss_per_mille: u64,
    loss_rng: Rng,
    /// Link messages lost and resent.
    resent: u64,
    /// A crashed node's links lose what it sent after this time.
    cut: BTreeMap<(u32, u32), u64>,
    /// Every message's length, by (root, seq).
    lens: BTreeMap<(u32, u64), usize>,
    views: Vec<View>,
    /// The last install time per node (views arrive in order).
    installed_at: BTreeMap<u32, u64>,
    next_id: u32,
    cfg: Config,
    crashes_left: u32,
    joins_left: u32,
    messages_left: u64,
    end_of_faults: u64,
}

impl World {
    fn at(&mut self, t: u64, e: Event) {
        self.order += 1;
        self.payloads.push(Some(e));
        self.events
            .push(Reverse((t, self.order, self.payloads.len() - 1)));
    }

    fn drain(&mut self, id: u32) -> Result<(), String> {
        loop {
            let Some(node) = self.nodes.get_mut(&id) else {
                return Ok(());
            };
            let Some(out) = node.relay.poll() else {
                return Ok(());
            };
            match out {
                Output::Send { to, msg } => {
                    let mut lat = 1 + self.rng.below(40);
                    // Go-Back-N: each lost copy is sent again after a
                    // retransmission timeout (several round trips).
                    while self.loss_per_mille > 0 && self.loss_rng.below(1000) < self.loss_per_mille
                    {
                        lat += 100 + self.loss_rng.below(400);
                        self.resent += 1;
                    }
                    let t = (self.now + lat).max(self.link_at.get(&(id, to)).copied().unwrap_or(0));
                    self.link_at.insert((id, to), t);
                    self.at(t, Event::Arrive(id, to, self.now, msg));
                }
                Output::Deliver { root, seq, data } => {
                    let len = *self
                        .lens
                        .get(&(root, seq))
                        .ok_or(format!("node {id} delivered {root}:{seq}, never published"))?;
                    if data != content(root, seq, len) {
                        return Err(format!("node {id} delivered {root}:{seq} damaged"));
                    }
                    let list = node.delivered.entry(root).or_default();
                    if list.last().is_some_and(|&l| l >= seq) {
                        return Err(format!(
                            "node {id} delivered {root}:{seq} after {root}:{:?}",
                            list.last()
                        ));
                    }
                    list.push(seq);
                }
            }
        }
    }

    fn new_view(&mut self, members: Vec<u32>) {
        let epoch = self.views.last().map_or(1, |v| v.epoch + 1);
        let view = View { epoch, members };
        for &m in &view.members {
            let t = (self.now + 1 + self.rng.below(300))
                .max(self.installed_at.get(&m).copied().unwrap_or(0) + 1);
            self.installed_at.insert(m, t);
            self.at(t, Event::Install(m, view.clone()));
        }
        self.views.push(view);
    }

    fn alive(&self) -> Vec<u32> {
        self.nodes
            .iter()
            .filter(|(_, n)| n.alive && !n.evicted)
            .map(|(id, _)| *id)
            .collect()
    }

    fn step(&mut self, e: Event) -> Result<(), String> {
        match e {
            Event::Arrive(from, to, sent, bytes) => {
                if self.cut.get(&(from, to)).is_some_and(|&c| sent > c) {
                    return Ok(());
                }
                if std::env::var("RELAY_TRACE").is_ok() {
                    match Msg::decode(&bytes) {
                        Ok(Msg::Data(d)) => eprintln!(
                            "t={} {from}->{to} DATA root {} seq {} epoch {} direct {} pieces {}+{}/{}",
                            self.now, d.root, d.seq, d.epoch, d.direct, d.first, d.count, d.pieces
                        ),
                        Ok(m) => eprintln!("t={} {from}->{to} {m:?}", self.now),
                        Err(e) => eprintln!("t={} {from}->{to} bad {e}", self.now),
                    }
                }
                let Some(n) = self.nodes.get_mut(&to).filter(|n| n.alive) else {
                    return Ok(());
                };
                n.relay.set_now(self.now * 1_000);
                n.relay.receive(from, &bytes);
                if let Ok(Msg::Start { root, seq, .. }) = Msg::decode(&bytes) {
                    // The start the member took (a departed root's, still
                    // in flight after its round, is not taken).
                    if n.relay.position(root).is_some_and(|(s, _)| s == seq) {
                        n.start.insert(root, seq);
                    }
                }
                self.drain(to)?;
            }
            Event::Install(id, view) => {
                if std::env::var("RELAY_TRACE").is_ok() {
                    eprintln!("t={} {id} installs {view:?}", self.now);
                }
                if let Some(n) = self.nodes.get_mut(&id).filter(|n| n.alive) {
                    n.relay.install(view);
                    self.drain(id)?;
                }
            }
            Event::Tick(id) => {
                if let Some(n) = self.nodes.get_mut(&id).filter(|n| n.alive) {
                    n.relay.tick();
                    self.drain(id)?;
                    if self.now < self.end_of_faults + 20_000 {
                        let t = self.now + 20 + self.rng.below(40);
                        self.at(t, Event::Tick(id));
                    }
                }
            }
            Event::Publish(id) => {
                if self.messages_left == 0 {
                    return Ok(());
                }
                let t = self.now + 1 + self.rng.below(30);
                let who = self.alive();
                let next = who[self.rng.below(who.len() as u64) as usize];
                self.at(t, Event::Publish(next));
                let Some(n) = self.nodes.get_mut(&id).filter(|n| n.alive) else {
                    return Ok(());
                };
                let len = match self.rng.below(10) {
                    0 => 0,
                    1..=6 => self.rng.below(1500) as usize,
                    7 | 8 => self.rng.below(20_000) as usize,
                    _ => 1 + self.rng.below(8) as usize,
                };
                // The content depends on the sequence the relay gives it:
                // publish a placeholder of the right length, then check.
                let seq_guess = n.relay.position(id).map_or(0, |p| p.1);
                let data = content(id, seq_guess, len);
                match n.relay.publish(&data) {
                    Ok(seq) => {
                        assert_eq!(seq, seq_guess, "a root numbers its messages in order");
                        n.published += 1;
                        self.lens.insert((id, seq), len);
                        self.messages_left -= 1;
                        self.drain(id)?;
                    }
                    Err(PublishError::WouldBlock | PublishError::NotMember) => {}
                    Err(e) => return Err(format!("publish: {e:?}")),
                }
            }
            // A crash, or (one time in three) a partition.
            Event::Crash(id) => {
                let alive = self.alive();
                if alive.len() <= 2 || !alive.contains(&id) {
                    return Ok(());
                }
                if self.rng.below(3) == 0 {
                    // A partition: this node and maybe others are cut off
                    // from the majority's views while they go on running
                    // (and talking, among themselves and to the others,
                    // under the views they had).
                    let mut cut_off = vec![id];
                    for &other in &alive {
                        if other != id && alive.len() - cut_off.len() > 2 && self.rng.below(3) == 0
                        {
                            cut_off.push(other);
                        }
                    }
                    for n in cut_off {
                        self.nodes.get_mut(&n).expect("alive").evicted = true;
                    }
                } else {
                    self.nodes.get_mut(&id).expect("alive").alive = false;
                    for &to in &alive {
                        let c = self.now.saturating_sub(self.rng.below(60));
                        self.cut.insert((id, to), c);
                    }
                }
                let members: Vec<u32> = self.alive();
                self.new_view(members);
            }
            Event::Join => {
                let id = self.next_id;
                self.next_id += 1;
                self.nodes.insert(
                    id,
                    Node {
                        relay: Relay::new(id, self.cfg),
                        alive: true,
                        evicted: false,
                        delivered: BTreeMap::new(),
                        start: BTreeMap::new(),
                        published: 0,
                    },
                );
                let t = self.now + 10;
                self.at(t, Event::Tick(id));
                let members = self.alive();
                self.new_view(members);
            }
        }
        Ok(())
    }

    fn check_end(&self) -> Result<(), String> {
        let survivors = self.alive();
        let last = self.views.last().expect("a view");
        if last.members != survivors {
            return Err(format!(
                "the last view {:?} is not the survivors {survivors:?}",
                last.members
            ));
        }
        for (&root, rn) in &self.nodes {
            let published = self.lens.keys().filter(|(r, _)| *r == root).count() as u64;
            for &t in &survivors {
                let n = &self.nodes[&t];
                let got: &[u64] = n.delivered.get(&root).map_or(&[], |v| v.as_slice());
                if t == root {
                    if got.len() as u64 != published {
                        return Err(format!(
                            "root {root} delivered {} of its {published}",
                            got.len()
                        ));
                    }
                    continue;
                }
                let start = n.start.get(&root).copied();
                if let (Some(&first), Some(s)) = (got.first(), start) {
                    if first < s {
                        return Err(format!(
                            "node {t} delivered {root}:{first} below its start {s}"
                        ));
                    }
                }
                if rn.alive && !rn.evicted {
                    // A live root: every survivor took a start from it (the
                    // record follows what the relay took, so a start refused
                    // wrongly shows here), then everything from it, no gap.
                    let Some(s) = start else {
                        return Err(format!("node {t} took no start from live root {root}"));
                    };
                    let want: Vec<u64> = (s..published).collect();
                    if got != want.as_slice() {
                        eprintln!("views {:?}", self.views);
                        eprintln!("NODE {t}: {}", n.relay.summary());
                        eprintln!("ROOT {root}: {}", rn.relay.summary());
                        return Err(format!(
                            "node {t} from live root {root} (start {start:?}): delivered {} of {}, first missing {:?}",
                            got.len(),
                            want.len(),
                            want.iter().find(|s| !got.contains(s))
                        ));
                    }
                } else {
                    // A departed root: whatever one survivor delivered, every
                    // survivor started at or below it delivered.
                    for &u in &survivors {
                        if u == root {
                            continue;
                        }
                        for &seq in self.nodes[&u]
                            .delivered
                            .get(&root)
                            .map_or(&[][..], |v| v.as_slice())
                        {
                            if start.is_some_and(|s| s <= seq) && got.binary_search(&seq).is_err() {
                                eprintln!("views {:?}", self.views);
                                eprintln!("NODE {t}: {}", n.relay.summary());
                                eprintln!("NODE {u}: {}", self.nodes[&u].relay.summary());
                                eprintln!(
                                    "t {t} got {got:?}\nu {u} got {:?}",
                                    self.nodes[&u].delivered.get(&root)
                                );
                                return Err(format!(
                                    "departed root {root}: node {u} delivered {seq}, node {t} (start {start:?}) did not"
                                ));
                            }
                        }
                    }
                }
            }
        }
        for &t in &survivors {
            let r = &self.nodes[&t].relay;
            if r.open_rounds() != 0 {
                let d = format!("{r:#?}");
                let i = d.find("rounds:").unwrap();
                eprintln!(
                    "views {:?}\nalive {:?}\n{}",
                    self.views,
                    survivors,
                    &d[i..(i + 3000).min(d.len())]
                );
                return Err(format!(
                    "node {t} ends with {} rounds open",
                    r.open_rounds()
                ));
            }
            let bound = (self.cfg.window as usize + 2) * self.nodes.len();
            if r.held() > bound {
                return Err(format!(
                    "node {t} holds {} messages at the end (bound {bound})",
                    r.held()
                ));
            }
        }
        Ok(())
    }
}

/// Runs one seed: the relays' counters, and how many link messages were
/// lost and resent below them.
fn run(seed: u64) -> Result<(Stats, u64), String> {
    run_with(seed, true)
}

/// [`run`], with the seed's loss below the relays or without any (the
/// seeds found before loss was modelled replay as they were).
fn run_with(seed: u64, loss: bool) -> Result<(Stats, u64), String> {
    let mut rng = Rng(seed);
    let algorithms = [
        Algorithm::Iterative,
        Algorithm::Hypercube,
        Algorithm::HypercubeNaive,
        Algorithm::Mst,
        Algorithm::RsBcast,
        Algorithm::Chain {
            segments: 1 + rng.below(9) as u32,
        },
        Algorithm::ScatterCollect,
        Algorithm::ScatterCollect2d,
        Algorithm::Def {
            segments: 1 + rng.below(9) as u32,
        },
    ];
    let pick = match rng.below(algorithms.len() as u64 + 1) as usize {
        i if i < algorithms.len() => Pick::Fixed(algorithms[i]),
        _ => Pick::Auto(Model {
            link: Link {
                alpha: 1e-6 * (1 + rng.below(50)) as f64,
                beta: 1e-10 * (1 + rng.below(50)) as f64,
            },
            fabric: Fabric::Switch,
        }),
    };
    let cfg = Config {
        pick,
        window: 2 + rng.below(40),
        // Sometimes every transfer waits for the last one's answer,
        // sometimes only large ones, sometimes none.
        one_port_bytes: [0, 1 + rng.below(3000), u64::MAX][rng.below(3) as usize],
        deliver_own: true,
    };
    let n0 = 2 + rng.below(6) as u32;
    let mut w = World {
        rng: Rng(seed ^ 0x5eed),
        now: 0,
        order: 0,
        events: BinaryHeap::new(),
        payloads: Vec::new(),
        nodes: BTreeMap::new(),
        link_at: BTreeMap::new(),
        loss_per_mille: {
            let mut r = Rng(seed ^ 0x1055_1055);
            [0, 0, 0, 10, 50, 200][r.below(6) as usize] * u64::from(loss)
        },
        loss_rng: Rng(seed ^ 0x1055_0000_1055),
        resent: 0,
        cut: BTreeMap::new(),
        lens: BTreeMap::new(),
        views: Vec::new(),
        installed_at: BTreeMap::new(),
        next_id: n0 + 1,
        cfg,
        crashes_left: rng.below(u64::from(n0)) as u32,
        joins_left: rng.below(3) as u32,
        messages_left: 50 + rng.below(250),
        end_of_faults: 3_000,
    };
    for id in 1..=n0 {
        w.nodes.insert(
            id,
            Node {
                relay: Relay::new(id, cfg),
                alive: true,
                evicted: false,
                delivered: BTreeMap::new(),
                start: BTreeMap::new(),
                published: 0,
            },
        );
        w.at(u64::from(id), Event::Tick(id));
        w.at(10 + u64::from(id), Event::Publish(id));
    }
    w.new_view((1..=n0).collect());
    for _ in 0..w.crashes_left {
        let t = rng.below(w.end_of_faults);
        let who = 1 + rng.below(u64::from(n0 + w.joins_left)) as u32;
        w.at(t, Event::Crash(who));
    }
    for _ in 0..w.joins_left {
        let t = rng.below(w.end_of_faults);
        w.at(t, Event::Join);
    }
    let mut steps = 0u64;
    while let Some(Reverse((t, _, i))) = w.events.pop() {
        w.now = t;
        let e = w.payloads[i].take().expect("once");
        w.step(e)?;
        steps += 1;
        if steps > 5_000_000 {
            return Err("no end after 5,000,000 events".into());
        }
    }
    if w.messages_left > 0 && !w.alive().is_empty() {
        // Every publisher blocked for good: a window never freed.
        let stuck: Vec<String> = w
            .alive()
            .iter()
            .map(|id| format!("{id}: {:?}", w.nodes[id].relay.position(*id)))
            .collect();
        return Err(format!(
            "{} messages never published; roots {stuck:?}",
            w.messages_left
        ));
    }
    w.check_end()?;
    let mut total = Stats::default();
    for n in w.nodes.values() {
        add(&mut total, &n.relay.stats());
    }
    Ok((total, w.resent))
}

/// Adds the counters the sweep reports.
fn add(total: &mut Stats, s: &Stats) {
    total.transfers_sent += s.transfers_sent;
    total.refed += s.refed;
    total.delegated += s.delegated;
    total.delegations_returned += s.delegations_returned;
    total.skipped += s.skipped;
    total.rounds += s.rounds;
    total.delivered += s.delivered;
}

fn seeds() -> Vec<u64> {
    if let Ok(s) = std::env::var("RELAY_SEED") {
        return vec![s.parse().expect("RELAY_SEED is a number")];
    }
    let n = std::env::var("RELAY_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(400);
    (0..n).collect()
}

#[test]
fn relays_deliver_every_message_once_in_order_and_survivors_agree_under_crashes_and_joins() {
    let seeds = seeds();
    let (mut total, mut resent) = (Stats::default(), 0);
    for &seed in &seeds {
        match run(seed) {
            Ok((s, r)) => {
                add(&mut total, &s);
                resent += r;
            }
            Err(e) => panic!(
                "seed {seed}: {e}\nreplay: RELAY_SEED={seed} cargo test -p mcast-bcast --test relay_sweep -- --nocapture"
            ),
        }
    }
    eprintln!(
        "{} seeds: {total:?}, {resent} link messages lost below the relays",
        seeds.len()
    );
    if seeds.len() >= 100 {
        // The faults did happen: departed roots' rounds, re-sending after
        // view changes, losses on the links.
        assert!(total.rounds > 0 && total.refed > 0, "{total:?}");
        assert!(resent > 0, "no link message lost");
        // Some re-feeds came from a nearest live ancestor, not the root.
        assert!(total.delegated > 0, "{total:?}");
    }
}

/// Seeds that once failed, each with what it found (tied to this file's
/// draws: a change to `run` re-deals them).
#[test]
fn relay_sweep_regressions() {
    // 2150: a member skipped a departed root's messages no survivor held,
    // the holder of the rest died, and the next view's round counted on the
    // member for the skipped ones: the round never closed.
    // 1237 (with loss below the relays): root 6's start to member 7, lost
    // and sent again, came after the round for 6 had closed on 7's SYNC
    // saying it had no stream from 6; 7 took it, then dropped 6's message
    // as a departed root's, and so lacked what member 1 had delivered. A
    // departed root's start is now not taken, as its data is not.
    // 59640 (with loss): root 4, cut off, went on talking under its old
    // view; members 3 and 5, whose view without it came before they heard
    // from it (so no round for it), took its start, and 5 its message too,
    // which 3 never got. A root that left a member's view before the member
    // heard from it is now not heard at all.
    for (seed, loss) in [(2150, false), (1237, true), (59640, true)] {
        if let Err(e) = run_with(seed, loss) {
            panic!(
                "seed {seed}: {e}\nreplay: RELAY_SEED={seed} cargo test -p mcast-bcast --test relay_sweep -- --nocapture"
            );
        }
    }
}
