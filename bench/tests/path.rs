//! `mcast-bench path` for real, small: one subscriber through two mcastd
//! daemons with 2 % loss on the segment, every message checked by the
//! bench, and the JSON says the loss happened and was repaired. Needs root
//! (namespaces, XDP): skipped with a message otherwise, a failure when
//! `CI=true`. mcast-bench runs the mcastd beside it: the test has the
//! running cargo build it there first (it is another package's binary).

use std::process::Command;

#[test]
fn the_users_path_under_loss_delivers_everything_and_reports_it() {
    if !mcast_netns::privileged_or_skip("the_users_path_under_loss") {
        return;
    }
    let built = Command::new(env!("CARGO"))
        .args(["build", "-p", "mcast-cli", "--bin", "mcastd"])
        .args((!cfg!(debug_assertions)).then_some("--release"))
        .status()
        .unwrap();
    assert!(
        built.success(),
        "cargo build -p mcast-cli --bin mcastd failed"
    );
    let json = std::env::temp_dir().join(format!("mcast-bench-path-{}.json", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_mcast-bench"))
        .args([
            "path",
            "--receivers",
            "1",
            "--loss",
            "0.02",
            "--messages",
            "3000",
            "--repeat",
            "1",
            "--daemon-only",
            "--json",
        ])
        .arg(&json)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "mcast-bench path failed:\n{stderr}");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let _ = std::fs::remove_file(&json);
    let cells = v["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 1);
    let run = &cells[0]["daemon"][0];
    assert!(run["slowest_msgs_per_sec"].as_f64().unwrap() > 0.0, "{v:#}");
    // About 2 % of some 3,000 data frames and their control traffic.
    let dropped = run["segment_drops"].as_u64().unwrap();
    assert!(dropped >= 20, "the segment dropped only {dropped}: {v:#}");
    assert!(run["retransmitted"].as_u64().unwrap() > 0, "{v:#}");
}
