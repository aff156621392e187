//! `mcast doctor`: the report's format, the checks on `lo` and on a missing
//! interface, and the parsers on fixture texts. Nothing here needs root.

use mcast_cli::config::Config;
use mcast_cli::doctor::{
    parse_cap_eff, parse_ids, parse_kernel_release, parse_link_kind, parse_memlock,
    parse_xdp_attached, run, Check, Limit, Report, Status,
};

#[test]
fn render_one_line_per_check_with_fix_lines() {
    let report = Report {
        checks: vec![
            Check {
                name: "kernel",
                status: Status::Ok,
                detail: "6.1.0: AF_XDP and XDP supported".into(),
                fix: None,
            },
            Check {
                name: "interface",
                status: Status::Fail,
                detail: "\"eth9\" does not exist".into(),
                fix: Some("name an interface listed by `ip link`".into()),
            },
            Check {
                name: "bpffs",
                status: Status::Warn,
                detail: "no /sys/fs/bpf".into(),
                fix: Some("mount -t bpf bpf /sys/fs/bpf".into()),
            },
            Check {
                name: "mtu",
                status: Status::Skip,
                detail: "no interface".into(),
                fix: None,
            },
        ],
    };
    assert_eq!(
        report.render(),
        "[ ok ] kernel 6.1.0: AF_XDP and XDP supported\n\
         [FAIL] interface \"eth9\" does not exist\n       fix: name an interface listed by `ip link`\n\
         [warn] bpffs no /sys/fs/bpf\n       fix: mount -t bpf bpf /sys/fs/bpf\n\
         [skip] mtu no interface\n"
    );
    assert!(!report.ok());
    let fine = Report {
        checks: report
            .checks
            .into_iter()
            .filter(|c| c.status != Status::Fail)
            .collect(),
    };
    assert!(fine.ok());
}

#[test]
fn loopback_exists_and_is_virtual() {
    let report = run(Some("lo"), None);
    let text = report.render();
    let iface = report.get("interface").expect("interface check");
    assert_eq!(iface.status, Status::Ok, "{text}");
    assert!(iface.detail.contains("virtual"), "{text}");
    assert_eq!(
        report.get("rx queues").unwrap().status,
        Status::Ok,
        "{text}"
    );
    // lo has no native XDP: skb expected.
    assert!(
        report.get("attach mode").unwrap().detail.contains("skb"),
        "{text}"
    );
    // lo's MTU 65536 does not fit a UMEM frame.
    assert_eq!(report.get("mtu").unwrap().status, Status::Warn, "{text}");
    // The embedded object always parses in a build that has it.
    assert_eq!(
        report.get("xdp object").unwrap().status,
        Status::Ok,
        "{text}"
    );
    for c in &report.checks {
        if matches!(c.status, Status::Warn | Status::Fail) {
            assert!(c.fix.is_some(), "{} has no fix: {text}", c.name);
        }
    }
}

#[test]
fn missing_interface_fails_with_a_fix() {
    let report = run(Some("mcastnope0"), None);
    let iface = report.get("interface").unwrap();
    assert_eq!(iface.status, Status::Fail);
    assert!(iface.detail.contains("mcastnope0"));
    assert!(iface.fix.as_deref().unwrap().contains("ip link"));
    assert_eq!(report.get("mtu").unwrap().status, Status::Skip);
    assert!(!report.ok());
    assert!(report.render().contains("[FAIL] interface \"mcastnope0\""));
}

#[test]
fn interface_and_queue_come_from_the_config() {
    let cfg = Config::from_toml_str(
        "node = 1\ninterface = \"lo\"\nqueue = 5\ndatapath = \"packet\"\n",
        "test.toml",
    )
    .unwrap();
    let report = run(None, Some(&cfg));
    let rx = report.get("rx queues").unwrap();
    assert_eq!(rx.status, Status::Fail, "{}", report.render());
    assert!(rx.fix.as_deref().unwrap().contains("queue"));
    assert_eq!(report.get("memlock").unwrap().status, Status::Skip);
    assert_eq!(report.get("attach mode").unwrap().status, Status::Skip);

    // No interface anywhere: interface checks are skipped, not failed.
    let report = run(None, None);
    assert_eq!(report.get("interface").unwrap().status, Status::Skip);
}

#[test]
fn cap_eff_line() {
    let status = "Name:\tmcastd\nCapInh:\t0000000000000000\nCapPrm:\t000001ffffffffff\n\
                  CapEff:\t000000c000003000\nCapBnd:\t000001ffffffffff\n";
    let caps = parse_cap_eff(status).unwrap();
    assert_eq!(caps, (1 << 12) | (1 << 13) | (1 << 38) | (1 << 39));
    assert_eq!(parse_cap_eff("Name:\tx\n"), None);
}

#[test]
fn uid_and_gids() {
    let status = "Uid:\t1000\t1001\t1000\t1000\nGid:\t100\t101\t100\t100\nGroups:\t4 27 1000 \n";
    assert_eq!(parse_ids(status), Some((1001, vec![101, 4, 27, 1000])));
}

#[test]
fn limits_text() {
    let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                  Max cpu time              unlimited            unlimited            seconds   \n\
                  Max locked memory         8388608              8388608              bytes     \n\
                  Max address space         unlimited            unlimited            bytes     \n";
    assert_eq!(parse_memlock(limits), Some(Limit::Bytes(8 << 20)));
    let unl = "Max locked memory         unlimited            unlimited            bytes\n";
    assert_eq!(parse_memlock(unl), Some(Limit::Unlimited));
    assert_eq!(parse_memlock("Max cpu time unlimited\n"), None);
}

#[test]
fn kernel_releases() {
    assert_eq!(parse_kernel_release("6.1.0-18-amd64\n"), Some((6, 1)));
    assert_eq!(parse_kernel_release("5.10.209"), Some((5, 10)));
    assert_eq!(parse_kernel_release("6.18+deb14-amd64"), Some((6, 18)));
    assert_eq!(parse_kernel_release("6.8.0rc1"), Some((6, 8)));
    assert_eq!(parse_kernel_release("garbage"), None);
}

#[test]
fn ip_link_outputs() {
    let plain = "4: eth0: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1400 qdisc pfifo_fast state UP mode DEFAULT group default qlen 1000\n    link/ether 02:fc:00:00:00:01 brd ff:ff:ff:ff:ff:ff promiscuity 0  allmulti 0 minmtu 68 maxmtu 65535 addrgenmode eui64 numtxqueues 1 numrxqueues 1\n";
    assert_eq!(parse_xdp_attached(plain), None);
    assert_eq!(parse_link_kind(plain), None);

    let veth = "7: veth0@if6: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 xdpgeneric qdisc noqueue state UP mode DEFAULT group default qlen 1000\n    link/ether 6a:1c:2e:4b:aa:01 brd ff:ff:ff:ff:ff:ff link-netns ns1 promiscuity 0 allmulti 0 minmtu 68 maxmtu 65535 \n    veth addrgenmode eui64 numtxqueues 2 numrxqueues 2 gso_max_size 65536\n    prog/xdp id 42 name steer tag 3b185187f1855c4c jited \n";
    assert_eq!(
        parse_xdp_attached(veth).as_deref(),
        Some("xdpgeneric, prog/xdp id 42")
    );
    assert_eq!(parse_link_kind(veth).as_deref(), Some("veth"));

    let native = "3: ens5: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 xdp qdisc mq state UP\n    link/ether 0a:00:00:00:00:01 brd ff:ff:ff:ff:ff:ff\n    prog/xdp id 7 \n";
    assert_eq!(
        parse_xdp_attached(native).as_deref(),
        Some("xdp, prog/xdp id 7")
    );
}

#[test]
fn the_cluster_key_is_checked_as_mcastd_would() {
    let dir = std::env::temp_dir().join(format!("mcast-doctor-key-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let key = dir.join("cluster.key");
    let k = mcast_cli::keys::write_key_file(&key, false).unwrap();
    let cfg = |extra: &str| {
        Config::from_toml_str(&format!("node = 1\ninterface = \"lo\"\n{extra}"), "t.toml").unwrap()
    };
    let keyed = cfg(&format!("key_file = \"{}\"\n", key.display()));
    let c = run(None, Some(&keyed)).get("cluster key").unwrap().clone();
    assert_eq!(c.status, Status::Ok, "{c:?}");
    assert!(c.detail.contains(&k.id_hex()), "{c:?}");
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o604)).unwrap();
    let c = run(None, Some(&keyed)).get("cluster key").unwrap().clone();
    assert_eq!(c.status, Status::Fail, "{c:?}");
    assert!(c.detail.contains("chmod 600"), "{c:?}");
    let c = run(None, Some(&cfg("insecure = true\n")))
        .get("cluster key")
        .unwrap()
        .clone();
    assert_eq!(c.status, Status::Warn, "{c:?}");
    let c = run(None, Some(&cfg("")))
        .get("cluster key")
        .unwrap()
        .clone();
    assert_eq!(c.status, Status::Fail, "{c:?}");
    assert!(c.fix.unwrap().contains("mcast keygen"));
    std::fs::remove_dir_all(&dir).unwrap();
}
