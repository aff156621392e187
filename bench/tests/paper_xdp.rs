//! The paper's echo runs over real AF_XDP at a tiny size: every algorithm
//! and the raw blast get every message answered, and each reply reaches the
//! sender after the replier (the last receiver) delivered the message. Needs
//! root: skipped with a message otherwise, a failure when `CI=true`.

use std::time::Duration;

use mcast_engine::bench::{paper_run, PaperMode, PaperRun};
use mcast_engine::harness::netns::Topology;
use mcast_engine::Algorithm;

#[test]
fn echo_runs_answer_every_message_after_the_last_receiver_delivered_it() {
    let Some(topo) = Topology::with_receivers("echo_runs_answer_every_message", 2) else {
        return;
    };
    let messages = 30;
    let algorithms = [
        None,
        Some(Algorithm::Iterative),
        Some(Algorithm::Ack),
        Some(Algorithm::Nak),
        Some(Algorithm::Mak),
    ];
    for algorithm in algorithms {
        let name = algorithm.map_or_else(|| "blast".to_owned(), |a| a.to_string());
        let raw = paper_run(
            &topo,
            &PaperRun {
                algorithm,
                receivers: 2,
                len: 64,
                mode: PaperMode::Echo,
                messages,
                deadline: Duration::from_secs(10),
                link_bps: None,
            },
        );
        assert_eq!(raw.sent_ns.len(), messages, "{name}");
        assert_eq!(raw.echo_ns.len(), messages, "{name}");
        assert!(
            raw.acked_ns.is_empty(),
            "{name}: no acked round trip in echo"
        );
        let replier = &raw.delivered_ns[1];
        assert_eq!(replier.len(), messages, "{name}");
        for (i, &got) in replier.iter().enumerate() {
            let (sent, rtt) = (raw.sent_ns[i], raw.echo_ns[i]);
            assert_ne!(rtt, u64::MAX, "{name}: message {i} was not answered");
            assert_ne!(got, u64::MAX, "{name}: the replier never delivered {i}");
            assert!(
                got >= sent && sent + rtt >= got,
                "{name}: message {i} sent at {sent} ns, delivered at {got}, answered after {rtt}"
            );
            // One at a time: the next is sent after this one's reply.
            if i + 1 < messages {
                assert!(raw.sent_ns[i + 1] >= sent + rtt, "{name}: {i}");
            }
        }
        if algorithm.is_some() {
            for (r, d) in raw.delivered_ns.iter().enumerate() {
                assert!(
                    d.iter().all(|&t| t != u64::MAX),
                    "{name}: receiver {r} missed a message"
                );
            }
        }
    }
}
