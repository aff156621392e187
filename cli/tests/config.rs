//! mcastd's configuration: the example file, defaults, every validation rule
//! (each error names its key), unknown keys (named with their line), overrides.

use std::path::{Path, PathBuf};

use mcast_cli::config::{
    parse_mac, parse_mode, Algorithm, Broadcast, Config, ConfigError, Datapath, GroupMode,
    GroupSettings, LogLevel, Overrides, Polling, SlowSubscriber, XdpMode,
};
use mcast_wire::MacAddr;

const ORIGIN: &str = "/etc/mcastd.toml";

/// A valid minimal file with two peers, to which each test adds one key.
const BASE: &str = r#"
node = 1
interface = "eth0"
key_file = "/etc/mcast/cluster.key"
[[peer]]
node = 2
mac = "02:00:00:00:00:02"
[[peer]]
node = 3
mac = "02:00:00:00:00:03"
"#;

/// BASE with `top` inserted before the first table (top-level keys) and `tail` appended.
fn with(top: &str, tail: &str) -> String {
    let (head, rest) = BASE.split_at(BASE.find("[[peer]]").unwrap());
    format!("{head}{top}\n{rest}{tail}")
}

fn parse(text: &str) -> Config {
    Config::from_toml_str(text, ORIGIN).unwrap_or_else(|e| panic!("parse failed: {e}"))
}

/// Parses `text`, validates, expects an error whose message names `key`.
fn invalid(text: &str, key: &str) -> String {
    let cfg = parse(text);
    let err = cfg.validate().expect_err("validation should fail");
    let msg = err.to_string();
    assert!(msg.starts_with(ORIGIN), "{msg}");
    assert!(msg.contains(key), "error does not name `{key}`: {msg}");
    msg
}

fn example_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/mcastd.toml.example")
}

#[test]
fn the_example_file_parses_and_validates() {
    let cfg = Config::load(&example_path()).unwrap_or_else(|e| panic!("{e}"));
    cfg.validate().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(cfg.node, 1);
    assert_eq!(cfg.interface, "eth0");
    assert_eq!(cfg.peers.len(), 2);
    assert_eq!(cfg.peer_mac(2), Some(MacAddr([2, 0, 0, 0, 0, 2])));
    assert_eq!(
        cfg.group_settings("prices"),
        GroupSettings {
            algorithm: Algorithm::Nak,
            window_frames: 2048,
            slow_subscriber: SlowSubscriber::Hold,
            batch: true,
            tree_fanout: 0,
            near_repairs: true,
            mode: GroupMode::Fifo,
            commit: false,
            commit_tree_from: 17,
            broadcast: Broadcast::Auto,
        }
    );
    // The example shows the defaults: it equals the minimal file plus its peers and group.
    let mut minimal = parse(&with(
        "",
        "[[group]]\nname = \"prices\"\nalgorithm = \"nak\"\nwindow_frames = 2048\nslow_subscriber = \"hold\"\n",
    ));
    minimal.origin = cfg.origin.clone();
    assert_eq!(
        cfg, minimal,
        "the example's values differ from the defaults"
    );
}

#[test]
fn defaults() {
    let cfg = parse("node = 1\ninterface = \"eth0\"\nkey_file = \"/k\"\n");
    cfg.validate().unwrap();
    assert_eq!(cfg.key_file, Some(PathBuf::from("/k")));
    assert_eq!((cfg.accept_key_file.as_ref(), cfg.insecure), (None, false));
    assert_eq!(cfg.origin, ORIGIN);
    assert_eq!(cfg.queue, 0);
    assert_eq!(cfg.registry, 1);
    assert_eq!(cfg.socket, PathBuf::from("/run/mcastd/mcastd.sock"));
    assert_eq!(cfg.socket_mode_bits(), 0o660);
    assert!(cfg.allow_uids.is_empty() && cfg.allow_gids.is_empty());
    assert_eq!(cfg.datapath, Datapath::Xdp);
    assert_eq!(cfg.xdp_mode, XdpMode::Auto);
    assert_eq!(cfg.frames, 16384);
    assert_eq!(cfg.window(), 4096);
    assert_eq!(cfg.max_message, 1 << 20);
    assert_eq!(cfg.polling, Polling::Adaptive);
    assert_eq!(cfg.spin_us, 20);
    assert_eq!(cfg.cpu, None);
    assert_eq!(cfg.algorithm, Algorithm::Mak);
    assert_eq!(cfg.slow_subscriber, SlowSubscriber::Cutoff);
    assert_eq!(cfg.subscriber_buffer, 4 << 20);
    assert_eq!(cfg.publication_buffer, 4 << 20);
    assert_eq!(cfg.max_clients, 64);
    assert_eq!(cfg.log, LogLevel::Info);
    assert_eq!(cfg.umem_bytes(), 16384 * 4096);
    assert_eq!(
        cfg.group_settings("anything"),
        GroupSettings {
            algorithm: Algorithm::Mak,
            window_frames: 4096,
            slow_subscriber: SlowSubscriber::Cutoff,
            batch: true,
            tree_fanout: 0,
            near_repairs: true,
            mode: GroupMode::Fifo,
            commit: false,
            commit_tree_from: 17,
            broadcast: Broadcast::Auto,
        }
    );
    // A group's own fanout overrides the daemon's.
    let cfg = parse(&with(
        "tree_fanout = 2\n",
        "[[group]]\nname = \"wide\"\ntree_fanout = 8\n",
    ));
    assert_eq!(cfg.group_settings("wide").tree_fanout, 8);
    assert_eq!(cfg.group_settings("other").tree_fanout, 2);
    // Local recovery: on unless turned off, per group too.
    let cfg = parse(&with(
        "near_repairs = false\n",
        "[[group]]\nname = \"near\"\nnear_repairs = true\n",
    ));
    assert!(cfg.group_settings("near").near_repairs);
    assert!(!cfg.group_settings("other").near_repairs);
    // And its mode the daemon's.
    let cfg = parse(&with(
        "mode = \"sequenced\"\n",
        "[[group]]\nname = \"own\"\nmode = \"fifo\"\n",
    ));
    assert_eq!(cfg.group_settings("own").mode, GroupMode::Fifo);
    assert_eq!(cfg.group_settings("other").mode, GroupMode::Sequenced);
    let cfg = parse(&with("", "[[group]]\nname = \"log\"\nmode = \"total\"\n"));
    assert_eq!(cfg.group_settings("log").mode, GroupMode::Total);
    assert_eq!(cfg.beacon_us, 100);
}

#[test]
fn beacon_interval_in_range() {
    invalid(&with("beacon_us = 0", ""), "beacon_us = 0");
    let msg = invalid(&with("beacon_us = 1000001", ""), "beacon_us = 1000001");
    assert!(msg.contains("100 is the default"), "{msg}");
    assert_eq!(parse(&with("beacon_us = 250", "")).beacon_us, 250);
}

#[test]
fn commit_applies_to_total_order_groups_only() {
    // Off unless asked; the daemon's default and a group's own.
    assert!(
        !parse(&with("mode = \"total\"", ""))
            .group_settings("g")
            .commit
    );
    let cfg = parse(&with("mode = \"total\"\ncommit = true", ""));
    assert!(cfg.group_settings("g").commit);
    let cfg = parse(&with(
        "",
        "[[group]]\nname = \"log\"\nmode = \"total\"\ncommit = true\n",
    ));
    assert!(cfg.group_settings("log").commit);
    assert!(!cfg.group_settings("other").commit);
    // Meaningless elsewhere: refused, saying where and what to do.
    let msg = invalid(
        &with("", "[[group]]\nname = \"plain\"\ncommit = true\n"),
        "[[group]] \"plain\"",
    );
    assert!(msg.contains("mode = \"total\""), "{msg}");
    invalid(&with("commit = true", ""), "the daemon's default");
}

#[test]
fn commit_tree_from_is_never_or_at_least_two_and_only_in_total_order_groups() {
    let cfg = parse(&with(
        "mode = \"total\"\ncommit = true\ncommit_tree_from = 0",
        "[[group]]\nname = \"log\"\ncommit_tree_from = 3\n",
    ));
    assert_eq!(cfg.group_settings("log").commit_tree_from, 3);
    assert_eq!(cfg.group_settings("other").commit_tree_from, 0);
    let msg = invalid(&with("commit_tree_from = 1", ""), "the daemon's default");
    assert!(msg.contains("0 for never"), "{msg}");
    invalid(
        &with(
            "mode = \"total\"\ncommit = true",
            "[[group]]\nname = \"g\"\ncommit_tree_from = 1\n",
        ),
        "[[group]] \"g\"",
    );
    parse(&with(
        "mode = \"total\"",
        "[[group]]\nname = \"best-effort\"\ncommit_tree_from = 2\n",
    ))
    .validate()
    .expect("the tree carries claims whether the group commits or not");
    let msg = invalid(
        &with("", "[[group]]\nname = \"fast\"\ncommit_tree_from = 2\n"),
        "[[group]] \"fast\"",
    );
    assert!(msg.contains("mode = \"total\""), "{msg}");
}

#[test]
fn broadcast_groups_take_an_algorithm_of_seed_003_or_auto() {
    let cfg = parse(&with(
        "",
        "[[group]]\nname = \"wan\"\nmode = \"broadcast\"\n",
    ));
    let s = cfg.group_settings("wan");
    assert_eq!(
        (s.mode, s.broadcast),
        (GroupMode::Broadcast, Broadcast::Auto)
    );
    let cfg = parse(&with(
        "broadcast = \"rsbcast\"",
        "[[group]]\nname = \"big\"\nmode = \"broadcast\"\nbroadcast = \"chain:8\"\n",
    ));
    assert_eq!(
        cfg.group_settings("big").broadcast,
        Broadcast::Fixed(mcast_bcast::Algorithm::Chain { segments: 8 })
    );
    assert_eq!(
        cfg.group_settings("other").broadcast,
        Broadcast::Fixed(mcast_bcast::Algorithm::RsBcast)
    );
    // An unknown name says which are known.
    let err = Config::from_toml_str(&with("broadcast = \"flood\"", ""), ORIGIN)
        .expect_err("an unknown algorithm")
        .to_string();
    assert!(err.contains("rsbcast") && err.contains("auto"), "{err}");
    // Meaningless in a group of another mode: refused, saying what to do.
    let msg = invalid(
        &with("", "[[group]]\nname = \"plain\"\nbroadcast = \"mst\"\n"),
        "broadcast",
    );
    assert!(msg.contains("mode = \"broadcast\""), "{msg}");
}

#[test]
fn algorithms_map_to_the_engine() {
    use mcast_engine::Algorithm as E;
    assert_eq!(Algorithm::Mak.to_engine(), E::Mak);
    assert_eq!(Algorithm::Nak.to_engine(), E::Nak);
    assert_eq!(Algorithm::Ack.to_engine(), E::Ack);
    assert_eq!(Algorithm::Iterative.to_engine(), E::Iterative);
    for a in [
        Algorithm::Mak,
        Algorithm::Nak,
        Algorithm::Ack,
        Algorithm::Iterative,
    ] {
        assert_eq!(a.name().parse::<Algorithm>(), Ok(a));
    }
    let err = "gbn".parse::<Algorithm>().unwrap_err();
    assert_eq!(
        err,
        "algorithm = \"gbn\" is not known: use one of \"mak\", \"nak\", \"ack\", \"iterative\""
    );
}

#[test]
fn missing_node_or_interface_is_named() {
    for (text, key) in [
        ("interface = \"eth0\"\n", "node"),
        ("node = 1\n", "interface"),
    ] {
        let err = Config::from_toml_str(text, ORIGIN).unwrap_err().to_string();
        assert!(err.starts_with(ORIGIN) && err.contains(key), "{err}");
    }
}

#[test]
fn unknown_key_names_the_key_and_line() {
    let text = "node = 1\ninterface = \"eth0\"\nwindow_frame = 10\n";
    let err = Config::from_toml_str(text, ORIGIN).unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(
            err,
            ConfigError::Parse {
                position: Some((3, _)),
                ..
            }
        ),
        "{msg}"
    );
    assert!(msg.starts_with("/etc/mcastd.toml:3:"), "{msg}");
    assert!(msg.contains("window_frame"), "{msg}");

    // Inside a table too.
    let err = Config::from_toml_str(
        &with("", "[[group]]\nname = \"a\"\nalgo = \"nak\"\n"),
        ORIGIN,
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("algo") && err.contains(":14:"), "{err}");
}

#[test]
fn unknown_value_names_the_key_and_choices() {
    let err = Config::from_toml_str(&with("algorithm = \"gbn\"", ""), ORIGIN)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(":5:") && err.contains("algorithm") && err.contains("mak"),
        "{err}"
    );
}

#[test]
fn node_range() {
    invalid(&BASE.replacen("node = 1", "node = 0", 1), "node = 0");
    invalid(
        &BASE.replacen("node = 1", "node = 2147483648", 1),
        "node = 2147483648",
    );
}

#[test]
fn queues_are_checked() {
    let ok = parse(&with("queues = 2\nqueue_cpus = [1]", ""));
    ok.validate().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((ok.queues, ok.queue_cpus.as_slice()), (2, &[1usize][..]));
    assert_eq!(parse(BASE).queues, 1, "one queue unless asked");
    invalid(&with("queues = 0", ""), "queues = 0");
    invalid(&with("queue = 60\nqueues = 5", ""), "at most 64");
    invalid(
        &with("queues = 2\ndatapath = \"packet\"", ""),
        "needs datapath = \"xdp\"",
    );
    invalid(&with("queues = 2\nqueue_cpus = [0, 1]", ""), "queue_cpus");
    invalid(&with("queue_cpus = [0]", ""), "queue_cpus");
}

#[test]
fn interface_name() {
    invalid(&BASE.replace("\"eth0\"", "\"\""), "interface");
    invalid(
        &BASE.replace("\"eth0\"", "\"a-very-long-interface-name\""),
        "interface",
    );
}

#[test]
fn registry_must_be_self_or_peer() {
    let msg = invalid(&with("registry = 7", ""), "registry = 7");
    assert_eq!(
        msg,
        "/etc/mcastd.toml: registry = 7 is neither this node (1) nor a [[peer]]: add a [[peer]] with node = 7 or set registry to one of 1, 2, 3"
    );
    parse(&with("registry = 3", "")).validate().unwrap();
}

#[test]
fn peers_unique_not_self_unicast() {
    invalid(
        &with("", "[[peer]]\nnode = 2\nmac = \"02:00:00:00:00:09\"\n"),
        "node = 2 appears twice",
    );
    invalid(
        &with("", "[[peer]]\nnode = 1\nmac = \"02:00:00:00:00:01\"\n"),
        "node = 1 is this node",
    );
    invalid(
        &with("", "[[peer]]\nnode = 0\nmac = \"02:00:00:00:00:01\"\n"),
        "node = 0",
    );
    let err = parse(&with(
        "",
        "[[peer]]\nnode = 4\nmac = \"03:00:00:00:00:04\"\n",
    ))
    .validate()
    .unwrap_err();
    assert_eq!(err.key(), Some("peer[2].mac"));
    assert!(
        err.to_string().contains("mac = \"03:00:00:00:00:04\""),
        "{err}"
    );
}

#[test]
fn peer_mac_must_parse() {
    let err = Config::from_toml_str(
        &with("", "[[peer]]\nnode = 4\nmac = \"02:00:00:00:04\"\n"),
        ORIGIN,
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("mac = \"02:00:00:00:04\"") && err.contains(":14:"),
        "{err}"
    );
}

#[test]
fn frames_power_of_two_in_range() {
    invalid(&with("frames = 3000", ""), "frames = 3000");
    invalid(&with("frames = 32", ""), "frames = 32");
    invalid(&with("frames = 131072", ""), "frames = 131072");
    parse(&with("frames = 65536", "")).validate().unwrap();
}

#[test]
fn window_below_frames() {
    invalid(
        &with("frames = 1024\nwindow_frames = 1024", ""),
        "window_frames = 1024",
    );
    invalid(&with("window_frames = 0", ""), "window_frames = 0");
    let msg = invalid(
        &with("", "[[group]]\nname = \"prices\"\nwindow_frames = 16384\n"),
        "window_frames = 16384",
    );
    assert!(msg.contains("prices"), "{msg}");
    // Unset, the window follows the UMEM: a quarter of it, at most 4,096.
    let small = parse(&with("frames = 4096", ""));
    small.validate().unwrap();
    assert_eq!(small.window(), 1024);
    assert_eq!(small.group_settings("any").window_frames, 1024);
    let large = parse(&with("frames = 65536", ""));
    assert_eq!(large.window(), 4096);
}

#[test]
fn max_message_bounds() {
    invalid(&with("max_message = 0", ""), "max_message = 0");
    invalid(
        &with("max_message = 67108865\nsubscriber_buffer = 1000000000\npublication_buffer = 1000000000", ""),
        "max_message = 67108865",
    );
    let msg = invalid(&with("max_message = 2097152", ""), "max_message");
    assert!(msg.contains("subscriber_buffer"), "{msg}");
    let msg = invalid(
        &with("subscriber_buffer = 16777216\nmax_message = 2097152", ""),
        "max_message",
    );
    assert!(msg.contains("publication_buffer"), "{msg}");
}

#[test]
fn socket_mode_octal() {
    invalid(
        &with("socket_mode = \"0680\"", ""),
        "socket_mode = \"0680\"",
    );
    invalid(&with("socket_mode = \"rw\"", ""), "socket_mode");
    assert_eq!(parse_mode("0660"), Some(0o660));
    assert_eq!(parse_mode("600"), Some(0o600));
    assert_eq!(parse_mode("0o770"), Some(0o770));
    assert_eq!(parse_mode("17777"), None);
    assert_eq!(parse_mode(""), None);
}

#[test]
fn max_clients_nonzero() {
    invalid(&with("max_clients = 0", ""), "max_clients");
}

#[test]
fn group_names_valid_and_unique() {
    invalid(&with("", "[[group]]\nname = \"\"\n"), "name = \"\"");
    invalid(
        &with("", "[[group]]\nname = \"two words\"\n"),
        "name = \"two words\"",
    );
    invalid(
        &with("", "[[group]]\nname = \"tab\\there\"\n"),
        "[[group]] name",
    );
    let long = "x".repeat(65);
    invalid(
        &with("", &format!("[[group]]\nname = \"{long}\"\n")),
        "65 bytes",
    );
    parse(&with(
        "",
        &format!("[[group]]\nname = \"{}\"\n", "x".repeat(64)),
    ))
    .validate()
    .unwrap();
    invalid(
        &with(
            "",
            "[[group]]\nname = \"a\"\n[[group]]\nname = \"a\"\nalgorithm = \"ack\"\n",
        ),
        "name = \"a\" appears twice",
    );
}

#[test]
fn overrides_apply() {
    let mut cfg = parse(BASE);
    let o = Overrides {
        node: Some(2),
        interface: Some("veth0".into()),
        queue: Some(3),
        queues: Some(2),
        registry: Some(2),
        socket: Some("/tmp/m.sock".into()),
        datapath: Some(Datapath::Packet),
        xdp_mode: Some(XdpMode::Skb),
        frames: Some(8192),
        window_frames: Some(4096),
        algorithm: Some(Algorithm::Ack),
        polling: Some(Polling::Busy),
        spin_us: Some(0),
        cpu: Some(1),
        log: Some(LogLevel::Debug),
    };
    cfg.apply(&o);
    assert_eq!(cfg.node, 2);
    assert_eq!(cfg.interface, "veth0");
    assert_eq!(cfg.queue, 3);
    assert_eq!(cfg.queues, 2);
    assert_eq!(cfg.registry, 2);
    assert_eq!(cfg.socket, PathBuf::from("/tmp/m.sock"));
    assert_eq!(cfg.datapath, Datapath::Packet);
    assert_eq!(cfg.xdp_mode, XdpMode::Skb);
    assert_eq!(cfg.frames, 8192);
    assert_eq!(cfg.window(), 4096);
    assert_eq!(cfg.algorithm, Algorithm::Ack);
    assert_eq!(cfg.polling, Polling::Busy);
    assert_eq!(cfg.spin_us, 0);
    assert_eq!(cfg.cpu, Some(1));
    assert_eq!(cfg.log, LogLevel::Debug);
    assert_eq!(cfg.group_settings("g").algorithm, Algorithm::Ack);
    // node 2 is now also a [[peer]]: validation blames the command line too.
    let msg = cfg.validate().unwrap_err().to_string();
    assert!(msg.starts_with("/etc/mcastd.toml + command line:"), "{msg}");
    assert!(msg.contains("node = 2 is this node"), "{msg}");

    // Empty overrides change nothing, not even the origin.
    let mut cfg = parse(BASE);
    let before = cfg.clone();
    cfg.apply(&Overrides::default());
    assert_eq!(cfg, before);
}

#[test]
fn resolve_loads_applies_validates() {
    let dir = std::env::temp_dir().join(format!("mcast-cli-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("mcastd.toml");
    std::fs::write(&path, BASE).unwrap();
    let cfg = Config::resolve(
        &path,
        &Overrides {
            queue: Some(2),
            ..Overrides::default()
        },
    )
    .unwrap();
    assert_eq!(cfg.queue, 2);
    let err = Config::resolve(
        &path,
        &Overrides {
            node: Some(0),
            ..Overrides::default()
        },
    )
    .unwrap_err();
    assert_eq!(err.key(), Some("node"));
    let err = Config::load(&dir.join("absent.toml"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("absent.toml") && err.contains("--config"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn mac_parsing() {
    assert_eq!(
        parse_mac("02:00:00:00:00:0a"),
        Some(MacAddr([2, 0, 0, 0, 0, 10]))
    );
    assert_eq!(
        parse_mac("02-AB-00-00-00-0A"),
        Some(MacAddr([2, 0xab, 0, 0, 0, 10]))
    );
    assert_eq!(parse_mac("02:00:00:00:00"), None);
    assert_eq!(parse_mac("02:00:00:00:00:00:00"), None);
    assert_eq!(parse_mac("2:00:00:00:00:00"), None);
    assert_eq!(parse_mac("zz:00:00:00:00:00"), None);
}

#[test]
fn metrics_address_must_parse_and_is_off_by_default() {
    assert_eq!(parse(BASE).metrics_addr(), None);
    let msg = invalid(&with("metrics = \"localhost\"", ""), "metrics");
    assert!(msg.contains("127.0.0.1:9464"), "{msg}");
    invalid(&with("metrics = \"127.0.0.1\"", ""), "metrics");
    let cfg = parse(&with("metrics = \"[::1]:9464\"", ""));
    cfg.validate().unwrap();
    assert_eq!(cfg.metrics_addr(), Some("[::1]:9464".parse().unwrap()));
}

#[test]
fn a_cluster_key_is_required_unless_the_file_says_insecure() {
    let bare = "node = 1\ninterface = \"eth0\"\n";
    let msg = invalid(bare, "key_file");
    assert!(
        msg.contains("mcast keygen") && msg.contains("insecure = true"),
        "{msg}"
    );
    parse(&format!("{bare}insecure = true\n"))
        .validate()
        .unwrap();
    let msg = invalid(&with("insecure = true", ""), "insecure");
    assert!(msg.contains("both set"), "{msg}");
    let msg = invalid(
        &format!("{bare}insecure = true\naccept_key_file = \"/b\"\n"),
        "accept_key_file",
    );
    assert!(msg.contains("without key_file"), "{msg}");
    let msg = invalid(
        &with("accept_key_file = \"/etc/mcast/cluster.key\"", ""),
        "accept_key_file",
    );
    assert!(msg.contains("same file"), "{msg}");
    parse(&with("accept_key_file = \"/etc/mcast/next.key\"", ""))
        .validate()
        .unwrap();
}

#[test]
fn the_settings_every_node_must_share_name_what_changes_the_protocol_only() {
    let cfg = parse(&with(
        "",
        "[[group]]\nname = \"log\"\nmode = \"total\"\ncommit = true\n[[group]]\nname = \"b\"\nmode = \"broadcast\"\nbroadcast = \"mst\"\n",
    ));
    cfg.validate().unwrap();
    let log = cfg.group_settings("log");
    assert_eq!(
        log.shared(),
        "mode = \"total\", algorithm = \"mak\", tree_fanout = 0, commit = true, commit_tree_from = 17"
    );
    assert_eq!(
        cfg.group_settings("any").shared(),
        "mode = \"fifo\", algorithm = \"mak\", tree_fanout = 0"
    );
    assert_eq!(cfg.group_settings("b").shared(), "mode = \"broadcast\"");
    // Without commit, the tree carries the claims: its size is shared too.
    let mut claims = log;
    claims.commit = false;
    let mut other = claims;
    other.commit_tree_from = 0;
    assert_ne!(other.shared(), claims.shared());
    // Each node's own choices leave the description alike.
    let mut own = log;
    own.window_frames /= 2;
    own.batch = !own.batch;
    own.near_repairs = !own.near_repairs;
    own.slow_subscriber = SlowSubscriber::Hold;
    assert_eq!(own.shared(), log.shared());
    // Those of the protocol do not.
    for change in [
        |s: &mut GroupSettings| s.mode = GroupMode::Sequenced,
        |s: &mut GroupSettings| s.algorithm = Algorithm::Nak,
        |s: &mut GroupSettings| s.tree_fanout = 8,
        |s: &mut GroupSettings| s.commit = false,
        |s: &mut GroupSettings| s.commit_tree_from = 0,
    ] {
        let mut s = log;
        change(&mut s);
        assert_ne!(s.shared(), log.shared(), "{s:?}");
    }
}
