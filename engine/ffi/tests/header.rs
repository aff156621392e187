//! `include/mcast.h` and the library agree: every function the header
//! declares is exported and every exported `mcast_*` function is declared;
//! the header's enum values (return codes, message, event, node-list and
//! notice kinds) have the Rust values; its structs (events, notices, the
//! batch calls' messages and views) have the Rust layouts; a C program
//! taking the address of every function compiles (C99, and C++ if a
//! compiler is there) and links against the static library.

mod cbuild;

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::process::Command;

#[path = "../../ipc/tests/common/mod.rs"]
mod common;

/// The header with its comments removed.
fn header_code() -> String {
    let text = std::fs::read_to_string(cbuild::crate_dir().join("include/mcast.h")).unwrap();
    let mut out = String::new();
    let mut rest = text.as_str();
    while let Some(i) = rest.find("/*") {
        out.push_str(&rest[..i]);
        let end = rest[i..].find("*/").expect("unterminated comment") + i + 2;
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// Identifiers `<prefix>[a-zA-Z0-9_]+` in `code`, with what follows each.
fn idents<'a>(code: &'a str, prefix: &str) -> Vec<(&'a str, &'a str)> {
    let mut v = Vec::new();
    let mut at = 0;
    while let Some(i) = code[at..].find(prefix) {
        let start = at + i;
        let preceded = code[..start]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        let len = code[start..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(code.len() - start);
        if !preceded {
            v.push((&code[start..start + len], &code[start + len..]));
        }
        at = start + len;
    }
    v
}

/// Functions the header declares: `mcast_[a-z_]+` followed by `(`.
fn declared_functions() -> BTreeSet<String> {
    let code = header_code();
    idents(&code, "mcast_")
        .into_iter()
        .filter(|(_, after)| after.trim_start().starts_with('('))
        .map(|(name, _)| name.to_string())
        .collect()
}

/// The `MCAST_*` names of the header's enums, in the header's order.
fn declared_codes() -> Vec<String> {
    let code = header_code();
    let mut names: Vec<String> = idents(&code, "MCAST_")
        .into_iter()
        .filter(|(_, after)| after.trim_start().starts_with('='))
        .map(|(name, _)| name.to_string())
        .collect();
    names.dedup();
    names
}

#[test]
fn header_functions_are_exactly_the_exported_ones() {
    let declared = declared_functions();
    for f in [
        "mcast_connect",
        "mcast_close",
        "mcast_join",
        "mcast_join_mode",
        "mcast_leave",
        "mcast_publish",
        "mcast_publish_blocking",
        "mcast_publish_batch",
        "mcast_publish_batch_blocking",
        "mcast_recv_batch",
        "mcast_recv",
        "mcast_recv_ex",
        "mcast_event_parse",
        "mcast_event_nodes",
        "mcast_next_notice",
        "mcast_max_message",
        "mcast_read_hop",
        "mcast_last_error",
        "mcast_strerror",
    ] {
        assert!(
            declared.contains(f),
            "{f} not parsed from the header: {declared:?}"
        );
    }
    let so = cbuild::lib_dir().join("libmcast.so");
    let o = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&so)
        .output()
        .expect("run nm");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let exported: BTreeSet<String> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace().rev();
            let (name, kind) = (f.next()?, f.next()?);
            (kind == "T" && name.starts_with("mcast_")).then(|| name.to_string())
        })
        .collect();
    let missing: Vec<_> = declared.difference(&exported).collect();
    let undeclared: Vec<_> = exported.difference(&declared).collect();
    assert!(
        missing.is_empty() && undeclared.is_empty(),
        "declared but not exported: {missing:?}; exported but not declared: {undeclared:?}"
    );
}

/// The header's structs and their fields, in declaration order.
const STRUCTS: &[(&str, &[&str])] = &[
    (
        "mcast_event",
        &[
            "kind",
            "epoch",
            "agent",
            "evicted_by",
            "skipped_sender",
            "skipped_frames",
            "members",
            "joined",
            "gone",
            "failed",
        ],
    ),
    ("mcast_notice", &["kind", "group", "epoch", "members"]),
    ("mcast_msg", &["data", "len"]),
    ("mcast_part", &["node", "member", "data", "len"]),
    (
        "mcast_message_view",
        &["data", "len", "group", "source", "kind"],
    ),
];

/// The Rust structs' layouts, as the C program prints the header's.
fn rust_layouts() -> Vec<String> {
    use mcast::{
        McastEvent as E, McastMessageView as V, McastMsg as M, McastNotice as N, McastPart as P,
    };
    use std::mem::{offset_of, size_of};
    let event = [
        offset_of!(E, kind),
        offset_of!(E, epoch),
        offset_of!(E, agent),
        offset_of!(E, evicted_by),
        offset_of!(E, skipped_sender),
        offset_of!(E, skipped_frames),
        offset_of!(E, members),
        offset_of!(E, joined),
        offset_of!(E, gone),
        offset_of!(E, failed),
    ];
    let notice = [
        offset_of!(N, kind),
        offset_of!(N, group),
        offset_of!(N, epoch),
        offset_of!(N, members),
    ];
    let msg = [offset_of!(M, data), offset_of!(M, len)];
    let part = [
        offset_of!(P, node),
        offset_of!(P, member),
        offset_of!(P, data),
        offset_of!(P, len),
    ];
    let view = [
        offset_of!(V, data),
        offset_of!(V, len),
        offset_of!(V, group),
        offset_of!(V, source),
        offset_of!(V, kind),
    ];
    let line = |name: &str, size: usize, offsets: &[usize]| {
        let offs: Vec<String> = offsets.iter().map(usize::to_string).collect();
        format!("{name} {size} {}", offs.join(" "))
    };
    vec![
        line("mcast_event", size_of::<E>(), &event),
        line("mcast_notice", size_of::<N>(), &notice),
        line("mcast_msg", size_of::<M>(), &msg),
        line("mcast_part", size_of::<P>(), &part),
        line("mcast_message_view", size_of::<V>(), &view),
    ]
}

#[test]
fn header_compiles_links_statically_and_its_codes_match_the_rust_ones() {
    let functions = declared_functions();
    let codes = declared_codes();
    let mut c = String::from(
        "#include <stddef.h>\n#include <stdio.h>\n#include \"mcast.h\"\nint main(void) {\n",
    );
    c.push_str("    void (*fns[])(void) = {\n");
    for f in &functions {
        writeln!(c, "        (void (*)(void))&{f},").unwrap();
    }
    c.push_str("    };\n    for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++)\n");
    c.push_str("        if (fns[i] == NULL) return 1;\n");
    for code in &codes {
        writeln!(
            c,
            "    printf(\"{code} %d %s\\n\", {code}, mcast_strerror({code}));"
        )
        .unwrap();
    }
    // The structs' layouts, as "name size offset…" lines.
    for (ty, fields) in STRUCTS {
        write!(c, "    printf(\"{ty} %zu").unwrap();
        for _ in *fields {
            c.push_str(" %zu");
        }
        write!(c, "\\n\", sizeof({ty})").unwrap();
        for f in *fields {
            write!(c, ", offsetof({ty}, {f})").unwrap();
        }
        c.push_str(");\n");
    }
    c.push_str("    return 0;\n}\n");

    let dir = common::TempDir::new("ffi-header");
    let src = dir.path().join("all.c");
    std::fs::write(&src, &c).unwrap();
    let exe = dir.path().join("all");
    cbuild::compile(&[&src], &exe, false);
    let o = Command::new(&exe).output().unwrap();
    assert!(o.status.success(), "{c}");
    let stdout = String::from_utf8_lossy(&o.stdout);
    let (layouts, lines): (Vec<&str>, Vec<&str>) =
        stdout.lines().partition(|l| !l.starts_with("MCAST_"));
    assert_eq!(layouts, rust_layouts(), "header structs vs Rust layouts");
    let got: Vec<(String, i32, String)> = lines
        .into_iter()
        .map(|l| {
            let mut f = l.splitn(3, ' ');
            let name = f.next().unwrap().to_string();
            let value = f.next().unwrap().parse().unwrap();
            (name, value, f.next().unwrap().to_string())
        })
        .collect();

    let rust = [
        ("MCAST_OK", mcast::MCAST_OK),
        ("MCAST_EINVAL", mcast::MCAST_EINVAL),
        ("MCAST_ENOTRUNNING", mcast::MCAST_ENOTRUNNING),
        ("MCAST_EPERM", mcast::MCAST_EPERM),
        ("MCAST_EWOULDBLOCK", mcast::MCAST_EWOULDBLOCK),
        ("MCAST_ETIMEDOUT", mcast::MCAST_ETIMEDOUT),
        ("MCAST_EAGAIN", mcast::MCAST_EAGAIN),
        ("MCAST_ETOOLARGE", mcast::MCAST_ETOOLARGE),
        ("MCAST_ETOOSMALL", mcast::MCAST_ETOOSMALL),
        ("MCAST_ECUTOFF", mcast::MCAST_ECUTOFF),
        ("MCAST_EDISCONNECTED", mcast::MCAST_EDISCONNECTED),
        ("MCAST_EDAEMON", mcast::MCAST_EDAEMON),
        ("MCAST_EPROTO", mcast::MCAST_EPROTO),
        ("MCAST_EIO", mcast::MCAST_EIO),
        ("MCAST_MSG_DATA", mcast::MCAST_MSG_DATA),
        ("MCAST_MSG_MEMBERSHIP", mcast::MCAST_MSG_MEMBERSHIP),
        ("MCAST_EVENT_OTHER", mcast::MCAST_EVENT_OTHER),
        ("MCAST_EVENT_VIEW", mcast::MCAST_EVENT_VIEW),
        ("MCAST_EVENT_EVICTED", mcast::MCAST_EVENT_EVICTED),
        ("MCAST_EVENT_SKIPPED", mcast::MCAST_EVENT_SKIPPED),
        ("MCAST_NODES_MEMBERS", mcast::MCAST_NODES_MEMBERS),
        ("MCAST_NODES_JOINED", mcast::MCAST_NODES_JOINED),
        ("MCAST_NODES_GONE", mcast::MCAST_NODES_GONE),
        ("MCAST_NODES_FAILED", mcast::MCAST_NODES_FAILED),
        (
            "MCAST_NOTICE_VIEW_CHANGED",
            mcast::MCAST_NOTICE_VIEW_CHANGED,
        ),
        ("MCAST_NOTICE_CUT_OFF", mcast::MCAST_NOTICE_CUT_OFF),
        ("MCAST_NOTICE_SHUTDOWN", mcast::MCAST_NOTICE_SHUTDOWN),
        ("MCAST_NOTICE_ERROR", mcast::MCAST_NOTICE_ERROR),
    ];
    let want: Vec<(String, i32)> = rust.iter().map(|(n, v)| (n.to_string(), *v)).collect();
    let have: Vec<(String, i32)> = got.iter().map(|(n, v, _)| (n.clone(), *v)).collect();
    assert_eq!(have, want, "header enum values vs Rust constants");
    // Every return code has its own description, none the "unknown" one.
    let codes: Vec<_> = got
        .iter()
        .filter(|(n, _, _)| {
            n == "MCAST_OK" || (n.starts_with("MCAST_E") && !n.starts_with("MCAST_EVENT_"))
        })
        .collect();
    assert_eq!(codes.len(), 14, "{got:?}");
    let words: BTreeSet<&str> = codes.iter().map(|(_, _, w)| w.as_str()).collect();
    assert_eq!(words.len(), codes.len(), "{got:?}");
    assert!(!words.contains("unknown mcast error code"), "{got:?}");

    // C++ sees the same declarations with C linkage, if a compiler is here.
    let cpp = dir.path().join("all.cc");
    std::fs::write(&cpp, &c).unwrap();
    match Command::new("c++")
        .args(["-fsyntax-only", "-Wall", "-Werror", "-I"])
        .arg(cbuild::crate_dir().join("include"))
        .arg(&cpp)
        .output()
    {
        Ok(o) => assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr)),
        Err(e) => eprintln!("no C++ compiler ({e}); skipping the C++ check"),
    }
}
