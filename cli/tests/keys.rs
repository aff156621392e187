//! Cluster keys through mcastd (issue 23 part 1): the daemon refuses to
//! start without a key or with one others can read, and a running cluster
//! rotates its key with SIGHUP, step by step as docs/mcastd.md "Rotating the
//! key" says, without losing a message; a node left with another key hears
//! nothing and counts why. The rotation test needs root (namespaces); the
//! start checks do not.
#![allow(
    clippy::disallowed_methods,
    reason = "tests wait on wall-clock deadlines"
)]

#[allow(dead_code)]
mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use mcast_cli::keys::write_key_file;
use mcast_ipc::{Client, MessageKind, Request, Response};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(10);

fn mcastd() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_mcastd"))
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("mcast-keys-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `mcastd --check` on a configuration: (exit code, standard error).
fn check(config: &str, dir: &Path) -> (i32, String, String) {
    let path = dir.join("mcastd.toml");
    std::fs::write(&path, config).unwrap();
    let out = Command::new(mcastd())
        .args(["--check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn mcastd_will_not_start_without_a_key_or_with_one_others_can_read() {
    let dir = scratch("start");
    let base = "node = 1\ninterface = \"eth0\"\n";
    let (code, _, err) = check(base, &dir);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("key_file") && err.contains("mcast keygen"),
        "{err}"
    );

    let key = dir.join("cluster.key");
    let k = write_key_file(&key, false).unwrap();
    let with_key = format!("{base}key_file = \"{}\"\n", key.display());
    let (code, out, err) = check(&with_key, &dir);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&k.id_hex()),
        "--check names the key's id: {out}"
    );

    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (code, _, err) = check(&with_key, &dir);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("mode 0644") && err.contains("chmod 600"),
        "{err}"
    );

    let (code, out, err) = check(&format!("{base}insecure = true\n"), &dir);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("INSECURE"), "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
}

fn message(i: u64) -> Vec<u8> {
    let mut m = i.to_be_bytes().to_vec();
    m.extend((0..200u64).map(|k| (i * 7 + k) as u8));
    m
}

/// Publishes messages `first..first + n` from `publ`; each subscriber must
/// receive exactly those, in order and intact.
fn round(publ: &mut Client, subs: &mut [Client], group: u32, first: u64, n: u64) {
    for i in first..first + n {
        publ.publish_blocking(group, &message(i), Some(WAIT))
            .unwrap_or_else(|e| panic!("publish {i}: {e}"));
    }
    for (k, s) in subs.iter_mut().enumerate() {
        let mut next = first;
        while next < first + n {
            let m = s
                .recv_timeout(WAIT)
                .unwrap()
                .unwrap_or_else(|| panic!("subscriber {k}: nothing after message {next}"));
            if m.group != group || m.kind != MessageKind::Data {
                continue;
            }
            assert_eq!(m.data, message(next), "subscriber {k}, message {next}");
            next += 1;
        }
    }
}

fn stat(c: &mut Client) -> Value {
    match c.request(Request::Stats).unwrap() {
        Response::Json(v) => v,
        other => panic!("Stats answered {other:?}"),
    }
}

/// Rewrites node `d`'s configuration with these key lines and signals
/// SIGHUP; waits for the daemon's answer in its log (the `n`-th reload).
fn rekey(cluster: &common::Cluster, node: u32, lines: &str, expect: &str, n: usize) {
    let d = &cluster.daemons[node as usize - 1];
    let text = std::fs::read_to_string(&d.config).unwrap();
    let kept: String = text
        .lines()
        .filter(|l| !l.starts_with("key_file") && !l.starts_with("accept_key_file"))
        .map(|l| format!("{l}\n"))
        .collect();
    // Top-level keys must come before the first [[peer]] table.
    let (head, tail) = kept.split_at(kept.find("[[peer]]").unwrap_or(kept.len()));
    std::fs::write(&d.config, format!("{head}{lines}\n{tail}")).unwrap();
    cluster.signal(node, "HUP");
    let deadline = Instant::now() + WAIT;
    loop {
        let seen = d
            .log_text()
            .lines()
            .filter(|l| l.contains("keys reloaded") || l.contains("keys not reloaded"))
            .count();
        if seen >= n {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "node {node} did not reload:\n{}",
            d.log_text()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let last = d
        .log_text()
        .lines()
        .rfind(|l| l.contains("keys reloaded") || l.contains("keys not reloaded"))
        .unwrap()
        .to_owned();
    assert!(last.contains(expect), "node {node}: {last}");
}

#[test]
fn a_running_cluster_rotates_its_key_without_losing_a_message() {
    let Some(cluster) = common::Cluster::start(mcastd(), "keys-rotate", 2, |_| String::new())
    else {
        return;
    };
    let old = cluster.key_file();
    let next = cluster.dir.join("next.key");
    let k2 = write_key_file(&next, false).unwrap();
    let connect = |node: u32| Client::connect(cluster.socket(node), "rot").unwrap();
    let mut publ = connect(1);
    let joined = publ.join("rot").unwrap();
    let group = joined.group;
    let mut subs = vec![connect(2), connect(3)];
    for s in &mut subs {
        s.join("rot").unwrap();
    }
    mcast_cli::stream::wait_nodes(&mut publ, group, &joined.view, 3, Duration::from_secs(20))
        .unwrap();
    let mut sent = 0;
    round(&mut publ, &mut subs, group, sent, 300);
    sent += 300;

    let (o, n) = (old.display(), next.display());
    // 1. Every node accepts the next key too (still seals with the old).
    for node in 1..=3 {
        let lines = format!("key_file = \"{o}\"\naccept_key_file = \"{n}\"");
        rekey(&cluster, node, &lines, &k2.id_hex(), 1);
        round(&mut publ, &mut subs, group, sent, 100);
        sent += 100;
    }
    // 2. Every node seals with the next key, accepting the old (the nodes
    //    not yet switched still seal with it).
    for node in 1..=3 {
        let lines = format!("key_file = \"{n}\"\naccept_key_file = \"{o}\"");
        rekey(
            &cluster,
            node,
            &lines,
            &format!("with key {}", k2.id_hex()),
            2,
        );
        round(&mut publ, &mut subs, group, sent, 100);
        sent += 100;
    }
    // 3. The old key is dropped everywhere.
    for node in 1..=3 {
        rekey(
            &cluster,
            node,
            &format!("key_file = \"{n}\""),
            "keys reloaded",
            3,
        );
        round(&mut publ, &mut subs, group, sent, 100);
        sent += 100;
    }
    let (s2, s3) = subs.split_at_mut(1);
    for (node, c) in [(1, &mut publ), (2, &mut s2[0]), (3, &mut s3[0])] {
        let a = &stat(c)["auth"];
        assert_eq!(a["key"], k2.id_hex(), "node {node}: {a}");
        assert!(a["also_accepted"].is_null(), "node {node}: {a}");
        for k in ["rx_auth_failed", "rx_auth_unknown_key", "rx_replayed"] {
            assert_eq!(
                a[k], 0,
                "node {node} refused frames during the rotation: {a}"
            );
        }
    }

    // A key file others can read is refused at reload too; the keys stay.
    std::fs::set_permissions(&next, std::fs::Permissions::from_mode(0o644)).unwrap();
    rekey(&cluster, 3, &format!("key_file = \"{n}\""), "mode 0644", 4);
    std::fs::set_permissions(&next, std::fs::Permissions::from_mode(0o600)).unwrap();
    round(&mut publ, &mut subs, group, sent, 100);
    sent += 100;

    // A node given a key the others do not hold hears none of their frames
    // and counts them as sealed with an unknown key.
    let stray = cluster.dir.join("stray.key");
    write_key_file(&stray, false).unwrap();
    rekey(
        &cluster,
        3,
        &format!("key_file = \"{}\"", stray.display()),
        "keys reloaded",
        5,
    );
    for i in sent..sent + 20 {
        publ.publish_blocking(group, &message(i), Some(WAIT))
            .unwrap();
    }
    let deadline = Instant::now() + WAIT;
    while stat(&mut subs[1])["auth"]["rx_auth_unknown_key"]
        .as_u64()
        .unwrap()
        < 20
    {
        assert!(Instant::now() < deadline, "node 3 never refused the frames");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Node 2 still gets everything; node 3 got none of the 20.
    let mut next = sent;
    while next < sent + 20 {
        let m = subs[0]
            .recv_timeout(WAIT)
            .unwrap()
            .expect("node 2 still hears node 1");
        if m.kind == MessageKind::Data && m.group == group {
            assert_eq!(m.data, message(next));
            next += 1;
        }
    }
    while let Some(m) = subs[1].recv_timeout(Duration::from_millis(200)).unwrap() {
        assert!(
            m.kind != MessageKind::Data || m.group != group,
            "node 3 delivered a message sealed with a key it does not hold"
        );
    }
}
