//! The daemon's counters and everything `mcast stat` shows (the `Stats`
//! request's JSON, docs/mcastd.md).
//!
//! Owns: [`DaemonCounters`] (written by every concern, read here), the final
//! counters of groups no longer carried ([`Retired`]), the JSON shapes, and
//! the snapshots handed to the metrics exporter ([`MetricsFeed`]).
//! Does not touch: anything it reports on: it only reads.

use std::collections::VecDeque;

use mcast_engine::Transport;
use mcast_groups::detector::PeerState;
use mcast_groups::View;
use serde_json::json;

use super::Daemon;
use crate::links::is_link;
use crate::metrics::{Exporter, REFRESH_NS};

/// Groups whose final counters `mcast stat` keeps after the node leaves
/// them; also the closed receive streams kept per group.
pub(super) const MAX_RETIRED: usize = 32;

/// Final counters of groups no longer carried, newest last.
#[derive(Debug, Default)]
pub(super) struct Retired(VecDeque<serde_json::Value>);

impl Retired {
    pub(super) fn push(&mut self, group: serde_json::Value) {
        if self.0.len() >= MAX_RETIRED {
            self.0.pop_front();
        }
        self.0.push_back(group);
    }
}

/// The daemon's own counters.
#[derive(Debug, Clone, Copy, Default)]
pub struct DaemonCounters {
    pub clients_connected: u64,
    pub clients_disconnected: u64,
    pub clients_cut_off: u64,
    pub requests: u64,
    pub messages_published: u64,
    pub publish_errors: u64,
    /// A client's membership of a group number that ended here without a
    /// leave (its name moved to another number, or its join after this
    /// node's rejoin failed), seen when it published there: what it
    /// publishes there is dropped (and counted in `publish_errors`).
    pub memberships_ended: u64,
    pub fragments_delivered: u64,
    /// Batched frames written into a subscriber's ring as one record of
    /// all their messages (counted in `fragments_delivered` each).
    pub batch_records: u64,
    pub fragments_overflowed: u64,
    pub local_loopback: u64,
    pub link_messages_sent: u64,
    pub link_messages_received: u64,
    /// Link messages from a peer this node declared failed, before it came
    /// back as a new incarnation: dropped (`Liveness::declared_failed`).
    pub link_messages_from_failed: u64,
    pub link_errors: u64,
    /// Mode messages kept because their group was not carried here yet.
    pub mode_messages_early: u64,
    /// Mode messages dropped for a group not carried here: they came,
    /// after this node was declared failed, for a group it had not asked
    /// to join again yet (sent to its previous incarnation), or the mode
    /// that then carried the group takes none
    /// (`GroupMode::takes_early_messages`).
    pub mode_messages_stale: u64,
    pub link_backlog_drops: u64,
    pub group_pauses: u64,
    pub suspicions: u64,
    pub probes_sent: u64,
    pub probes_answered: u64,
    pub nodes_failed: u64,
    pub nodes_recovered: u64,
    /// Of those, peers this node had declared failed: they rejoin as a new
    /// incarnation, so nothing is asked of or resumed for the old one.
    pub recovered_evicted: u64,
    /// Receive streams of a peer's older incarnation closed when its beats
    /// showed a newer one (it restarted unnoticed).
    pub dead_streams_closed: u64,
    pub evictions: u64,
    pub link_resets: u64,
    pub role_moves: u64,
    pub rejoins: u64,
    /// Membership events held back until a flush ended.
    pub events_held: u64,
    /// Peers made suspect because they stopped acknowledging a stream.
    pub data_path_suspicions: u64,
    /// Peers made suspect because a total-order group waited ten beacon
    /// intervals on them without a stamp.
    pub beacon_suspicions: u64,
    /// Stream starts asked of senders (a view added them, no stream yet,
    /// or the stream is stuck behind the sender's window).
    pub start_requests_sent: u64,
    /// Receive streams found stuck behind their sender's window (`stuck`).
    pub stuck_streams: u64,
    /// Starts sent to members that asked for one.
    pub start_requests_answered: u64,
    /// Starts moved forward to where a closed stream had stopped, so nothing
    /// is delivered twice.
    pub starts_moved_forward: u64,
    /// Starts past frames of the same stream this node never delivered (the
    /// sender sent them while it did not count this node a member), and
    /// those frames: the clients got a `skipped` event.
    pub starts_passed_over: u64,
    pub frames_passed_over: u64,
    /// Starts held until the flush of the same stream ended, or until the
    /// group's flushes ended and their held events were written.
    pub starts_deferred: u64,
}

/// The metrics exporter and when it is next given a snapshot.
#[derive(Debug)]
pub(super) struct MetricsFeed {
    exporter: Exporter,
    next_ns: u64,
}

impl MetricsFeed {
    pub(super) fn new(exporter: Exporter) -> MetricsFeed {
        MetricsFeed {
            exporter,
            next_ns: 0,
        }
    }
}

impl<T: Transport> Daemon<T> {
    /// Gives the metrics exporter a fresh snapshot once a [`REFRESH_NS`].
    pub(super) fn refresh_metrics(&mut self) {
        let Some(next_ns) = self.metrics.as_ref().map(|m| m.next_ns) else {
            return; // no metrics: not even a clock read per round
        };
        let now = mcast_engine::sys::monotonic_ns();
        if now < next_ns {
            return;
        }
        let stats = self.stats_json();
        if let Some(m) = &mut self.metrics {
            m.exporter.publish(stats);
            m.next_ns = now + REFRESH_NS;
        }
    }

    /// One group's counters (`active`: this node still carries it).
    pub(super) fn group_json(
        &self,
        g: &mcast_engine::GroupStats,
        active: bool,
    ) -> serde_json::Value {
        let lg = self.local.get(&g.group);
        json!({
            "group": g.group,
            "name": lg.map(|l| l.name.clone()),
            "active": active,
            "algorithm": g.algorithm.name(),
            "local_members": lg.map_or(0, |l| l.members.len()),
            "members_waiting_for_their_event": lg.map_or(0, |l| l.gate.waiting()),
            "view_epoch": lg.and_then(|l| l.view.as_ref()).map(|v| v.epoch),
            "mode": lg.map(|l| l.mode.stats_json()),
            "tree": self.tree_json(g.group),
            "barrier": lg.map(|l| l.barrier.stats_json()),
            "paused": g.paused,
            "queued_frames": g.queued,
            "sender": g.sender.map(|c| counters_json(&c)),
            // What this node's receivers wait on for NAKs and repairs.
            "grtt_us": g.grtt_ns.map(|ns| ns as f64 / 1_000.0),
            "batching": g.tally.map(|t| json!({
                "messages": t.messages,
                "batched": t.batched,
                "frames": t.frames,
                "payload_bytes": t.payload_bytes,
                "wire_bytes": t.wire_bytes,
                "messages_per_frame": t.messages_per_frame(),
                "wire_bytes_per_payload_byte": t.wire_per_payload_byte(),
            })),
            "receivers": g
                .receivers
                .iter()
                .map(|(n, c)| json!({"from": n, "counters": counters_json(c)}))
                .chain(lg.into_iter().flat_map(|l| l.closed.iter()).map(
                    |(n, c)| json!({"from": n, "closed": true, "counters": counters_json(c)}),
                ))
                .collect::<Vec<_>>(),
        })
    }

    /// Everything `mcast stat` shows.
    pub fn stats_json(&self) -> serde_json::Value {
        let s = self.engine.stats();
        let mut groups: Vec<_> = s
            .groups
            .iter()
            .filter(|g| !is_link(g.group))
            .map(|g| self.group_json(g, true))
            .collect();
        groups.extend(self.retired.0.iter().cloned());
        let links: Vec<_> = s
            .groups
            .iter()
            .filter(|g| is_link(g.group))
            .map(|g| {
                json!({
                    "inbox_of": g.group & !crate::links::LINK_BASE,
                    "sender": g.sender.map(|c| counters_json(&c)),
                    "receivers": g.receivers.iter().map(|(n, c)| json!({"from": n, "counters": counters_json(c)})).collect::<Vec<_>>(),
                })
            })
            .collect();
        let clients: Vec<_> = self
            .clients
            .by_id
            .iter()
            .map(|(c, st)| {
                json!({
                    "client": c.0, "name": st.name, "pid": st.pid, "uid": st.uid,
                    "groups": st.groups.iter().collect::<Vec<_>>(),
                    "published": st.published, "delivered": st.delivered,
                    "overflow_bytes": st.overflow_bytes,
                })
            })
            .collect();
        let e = &s.engine;
        let c = &self.counters;
        let fc = self.flush.flushes.counters();
        let ended = self.flush.flushes.ended_records();
        let flush = json!({
            "started": fc.started, "agreed": fc.agreed, "timed_out": fc.timed_out,
            "frames_recovered": fc.frames_recovered, "frames_served": fc.frames_served,
            "states_held": fc.states_held, "events_held": c.events_held,
            "beyond_reach": fc.beyond_reach,
            "jumps": fc.jumps,
            "frames_skipped": fc.frames_skipped,
            "ended_sender_back": fc.ended_sender_back,
            "served_after_end": fc.served_after_end,
            "resumed": fc.resumed,
            "starts_deferred": c.starts_deferred,
            "kept_frames": self.flush.kept.values().map(|k| k.frames.frames()).sum::<usize>(),
            "kept_bytes": self.flush.kept.values().map(|k| k.frames.bytes()).sum::<usize>(),
            "ended_records": ended.0,
            "ended_records_bytes": ended.1,
        });
        // Built apart: inside the whole it would pass the json! macro's
        // recursion limit.
        let passed_over = json!({"starts": c.starts_passed_over, "frames": c.frames_passed_over});
        let mut daemon = json!({
            "clients_connected": c.clients_connected, "clients_disconnected": c.clients_disconnected,
            "clients_cut_off": c.clients_cut_off, "requests": c.requests,
            "messages_published": c.messages_published, "publish_errors": c.publish_errors,
            "memberships_ended": c.memberships_ended,
            "fragments_delivered": c.fragments_delivered, "batch_records": c.batch_records,
            "fragments_overflowed": c.fragments_overflowed,
            "local_loopback": c.local_loopback, "link_messages_sent": c.link_messages_sent,
            "link_messages_received": c.link_messages_received, "link_errors": c.link_errors,
            "link_messages_from_failed": c.link_messages_from_failed,
            "mode_messages_early": c.mode_messages_early,
            "mode_messages_stale": c.mode_messages_stale,
            "link_backlog_drops": c.link_backlog_drops, "group_pauses": c.group_pauses,
            "suspicions": c.suspicions, "probes_sent": c.probes_sent,
            "probes_answered": c.probes_answered, "nodes_failed": c.nodes_failed,
            "nodes_recovered": c.nodes_recovered, "recovered_evicted": c.recovered_evicted,
            "evictions": c.evictions,
            "link_resets": c.link_resets, "role_moves": c.role_moves, "rejoins": c.rejoins,
            "data_path_suspicions": c.data_path_suspicions,
            "beacon_suspicions": c.beacon_suspicions,
            "start_requests_sent": c.start_requests_sent,
            "start_requests_answered": c.start_requests_answered,
            "starts_moved_forward": c.starts_moved_forward,
            "passed_over": passed_over,
            "dead_streams_closed": c.dead_streams_closed,
            "registry": self.groups.registry(),
            // Anti-entropy since this node last (re)joined the cluster.
            "membership_repairs": self.groups.repairs(),
            "agent_resignations": self.groups.resignations(),
            // Joins refused here as agent: the joining node's shared
            // settings of the group differ from this node's.
            "joins_refused_settings": self.groups.settings_refused(),
            // Departed senders' streams agreed on by the survivors.
            "flush": flush,
        });
        // Past the macro's recursion limit too.
        daemon["stuck_streams"] = json!(c.stuck_streams);
        json!({
            "schema": crate::render::JSON_SCHEMA,
            "version": env!("CARGO_PKG_VERSION"),
            "node": self.node,
            "incarnation": self.incarnation,
            "transport": {
                "kind": s.transport.kind,
                "xdp_mode": s.transport.attach_mode.map(|m| format!("{m:?}")),
                "xdp_fallback": s.transport.attach_fallback,
                "bind_mode": s.transport.bind_mode.map(|m| format!("{m:?}")),
                "frames": {"total": s.frames.total, "free": s.frames.free, "fill": s.frames.fill, "held": s.frames.held, "tx": s.frames.tx},
                // AF_XDP: what the kernel dropped before our RX ring (this
                // daemon fell behind: ring full, no fill frame), which no
                // protocol counter sees but as loss.
                "kernel": s.socket.map(|k| json!({
                    "rx_dropped": k.rx_dropped, "rx_ring_full": k.rx_ring_full,
                    "rx_fill_ring_empty": k.rx_fill_ring_empty, "tx_ring_empty": k.tx_ring_empty,
                })),
                // `queues` > 1: each extra queue's receive thread (the
                // first queue's frames are the engine's `rx_frames`).
                "queues": s.queues.iter().map(|q| json!({
                    "queue": q.queue, "frames": q.frames, "starved": q.starved,
                    "rx_dropped": q.kernel.rx_dropped, "rx_ring_full": q.kernel.rx_ring_full,
                    "rx_fill_ring_empty": q.kernel.rx_fill_ring_empty,
                })).collect::<Vec<_>>(),
            },
            "steering": s.steering.map(|st| format!("{st:?}")),
            "auth": {
                "authenticated": self.engine.keys().is_some(),
                "key": self.engine.keys().map(|k| k.send().id_hex()),
                "also_accepted": self.engine.keys().and_then(|k| k.also()).map(|k| k.id_hex()),
                "summary": crate::keys::describe(self.engine.keys()),
                "rx_auth_failed": e.rx_auth_failed, "rx_auth_unknown_key": e.rx_auth_unknown_key,
                "rx_replayed": e.rx_replayed,
            },
            "engine": {
                "rx_frames": e.rx_frames, "tx_frames": e.tx_frames, "tx_batches": e.tx_batches,
                "rx_checksum_failures": e.rx_checksum_failures, "rx_malformed": e.rx_malformed,
                "rx_other_group": e.rx_other_group, "rx_unrouted": e.rx_unrouted, "rx_paused": e.rx_paused,
                "rx_sender_refused": e.rx_sender_refused,
                "tx_no_frame": e.tx_no_frame, "tx_no_route": e.tx_no_route, "tx_deferred": e.tx_deferred,
                "tx_relay_missed": e.tx_relay_missed,
                "publish_would_block": e.publish_would_block, "polls": e.polls, "sleeps": e.sleeps,
            },
            "daemon": daemon,
            // Per-hop timing (`trace = true`), nanoseconds; null when off.
            "trace": self.trace.as_ref().map(|t| t.json()),
            "peers": self.live.tracker.detector().peers().map(|(n, st, last)| json!({
                "node": n,
                "state": match st {
                    PeerState::Alive => "alive".to_string(),
                    PeerState::Suspect { probes } => format!("suspect ({probes} probes)"),
                    PeerState::Failed => "failed".to_string(),
                },
                "last_heard_ms_ago": mcast_engine::sys::monotonic_ns().saturating_sub(last) / 1_000_000,
            })).collect::<Vec<_>>(),
            "groups": groups,
            "links": links,
            "clients": clients,
        })
    }
}

pub(super) fn view_json(v: &View) -> serde_json::Value {
    json!({
        "group": v.group,
        "name": v.name,
        "epoch": v.epoch,
        "agent": v.agent,
        "members": v.members.iter().map(|m| json!({"rank": m.rank, "node": m.node, "member": m.member})).collect::<Vec<_>>(),
    })
}

pub(super) fn info_json(i: &mcast_groups::GroupInfo) -> serde_json::Value {
    json!({
        "group": i.group,
        "name": i.name,
        "agent": i.agent,
        "view": view_json(&i.view),
    })
}

fn counters_json(c: &mcast_proto::Counters) -> serde_json::Value {
    json!({
        "data_sent": c.data_sent, "data_retransmitted": c.data_retransmitted,
        "data_received": c.data_received, "delivered": c.delivered,
        "duplicates_dropped": c.duplicates_dropped, "out_of_window_dropped": c.out_of_window_dropped,
        "wrong_epoch_dropped": c.wrong_epoch_dropped, "repairs_deferred": c.repairs_deferred,
        "nak_rtt_samples": c.nak_rtt_samples,
        "packs_sent": c.packs_sent, "packs_received": c.packs_received,
        "nacks_sent": c.nacks_sent, "nacks_received": c.nacks_received,
        "naks_sent": c.naks_sent, "naks_received": c.naks_received, "naks_suppressed": c.naks_suppressed,
        "repairs_suppressed": c.repairs_suppressed, "naks_unrepairable": c.naks_unrepairable,
        "acks_sent": c.acks_sent, "acks_received": c.acks_received,
        "ack_reqs_sent": c.ack_reqs_sent, "ack_reqs_received": c.ack_reqs_received,
        "adverts_sent": c.adverts_sent, "adverts_received": c.adverts_received,
        "stalls": c.stalls, "timeouts": c.timeouts, "window_full": c.window_full,
        "acks_stale": c.acks_stale,
        "near_naks_sent": c.near_naks_sent, "near_naks_received": c.near_naks_received,
        "relays_sent": c.relays_sent, "relays_received": c.relays_received,
    })
}
