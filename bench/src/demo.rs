//! The demo: one lossy multicast in the simulator, told step by step, then the
//! same traffic over plain NAK for contrast.

use mcast_sim::{Algorithm, Faults, SimConfig};

pub(crate) fn run(
    receivers: u32,
    loss: f64,
    messages: u64,
    trace: usize,
    seed: u64,
) -> Result<(), String> {
    let cfg = SimConfig {
        algorithm: Algorithm::Mak,
        receivers,
        messages,
        min_size: 64,
        max_size: 4096,
        seed,
        faults: Faults {
            loss,
            ..Faults::default()
        },
        trace_lines: 20_000,
        window_frames: crate::table::TABLE_WINDOW,
        ..SimConfig::default()
    };
    cfg.validate()?;
    println!(
        "MAK reliable multicast, simulated: 1 sender (node 1) -> {receivers} receivers (nodes 2..={}), {messages} messages \
         of 64 B to 4 KiB (fragmented above {} B),\n{:.1}% independent loss on every frame copy in each direction, \
         10 Gbit/s links with 10 us latency, window {} frames, seed {seed}.\n",
        receivers + 1,
        cfg.max_payload,
        loss * 100.0,
        cfg.window_frames
    );
    let (result, wall) = crate::timed(|| mcast_sim::run(&cfg));
    let report = result.map_err(|f| f.to_string())?;
    // The trace holds every frame; show the ones where reliability happens.
    let mut losses_shown = 0;
    let interesting: Vec<&String> = report
        .trace
        .iter()
        .filter(|l| {
            let plain_data = l.contains(" DATA ") && !l.contains("rexmit");
            if plain_data && l.contains("lost") {
                losses_shown += 1;
                return losses_shown <= 6;
            }
            !plain_data
        })
        .take(trace)
        .collect();
    println!(
        "The first {} events of the recovery (a loss, the NAK after a random wait listing what is missing, \
         the one repair, the ACKs the sender asks for); #N is a sequence number, the stream starts just \
         below 2^32 and wraps:",
        interesting.len()
    );
    for line in interesting {
        println!("  {line}");
    }
    crate::table::print_report(&cfg, &report, wall);
    let expected = cfg.messages;
    let all = report.delivered_messages.iter().all(|&d| d == expected);
    println!(
        "\n{} every receiver delivered all {expected} messages in order, exactly once, byte for byte (checked at every step).",
        if all && report.completed { "OK:" } else { "FAILED:" }
    );
    if !(all && report.completed) {
        return Err("the demo run did not complete".into());
    }

    let mut nak = crate::table::cell_config(
        Algorithm::Nak,
        receivers,
        loss,
        messages,
        seed,
        crate::table::TABLE_WINDOW,
    );
    nak.min_size = cfg.min_size;
    nak.max_size = cfg.max_size;
    nak.window_frames = nak
        .window_frames
        .max(u32::try_from(nak.total_frames()).unwrap_or(u32::MAX));
    let mak_row = crate::table::measure(&SimConfig {
        trace_lines: 0,
        ..cfg
    })?;
    let nak_row = crate::table::measure(&nak)?;
    println!("\nThe same traffic over the paper's plain NAK algorithm (unicast NAKs, no suppression, no ACKs):");
    println!("{}", crate::table::header());
    println!("{}", crate::table::format_row(&mak_row));
    println!("{}", crate::table::format_row(&nak_row));
    Ok(())
}
