//! The C example `examples/c/pubsub.c`, compiled against libmcast and run
//! as two processes (a subscriber, then a publisher) through the loopback
//! daemon of mcast-ipc's tests: one message per call, and in batches.

mod cbuild;
#[path = "../../ipc/tests/common/mod.rs"]
mod common;

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

use common::{Loopback, TempDir};
use mcast_ipc::{Access, Request, RingSizes, ServerEvent};

/// A child process killed if the test fails before collecting it.
struct Proc(Option<Child>);

impl Proc {
    fn spawn(exe: &Path, args: &[&str]) -> Proc {
        let child = Command::new(exe)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the C example");
        Proc(Some(child))
    }

    fn output(mut self) -> Output {
        self.0.take().unwrap().wait_with_output().unwrap()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(c) = &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn show(o: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}stderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn pubsub_example_delivers_every_message_intact_between_two_c_processes() {
    let sub_out = pubsub_pair("ffi-pubsub", &[]);
    // Messages grow to 206 bytes from a 16-byte first buffer.
    assert!(!sub_out.contains("grown 0 times"), "{sub_out}");
}

/// The same through the batch calls: up to 64 messages published per
/// call, up to 64 received per call and checked in place by a callback.
#[test]
fn pubsub_example_in_batches_delivers_every_message_intact() {
    let sub_out = pubsub_pair("ffi-pubsub-batch", &["batch"]);
    assert!(sub_out.contains("batch calls, acked"), "{sub_out}");
}

/// Runs the example's subscriber, then its publisher (with `extra`
/// arguments) on 2,000 messages; checks both succeeded and what they said.
/// The subscriber's standard output.
fn pubsub_pair(tag: &str, extra: &[&str]) -> String {
    const COUNT: &str = "2000";
    let build = TempDir::new("ffi-build");
    let exe = build.path().join("pubsub");
    cbuild::compile(
        &[&cbuild::crate_dir().join("examples/c/pubsub.c")],
        &exe,
        true,
    );

    // A small publication ring, so the publisher has to wait for room
    // (mcast_publish_blocking); a subscription ring large enough for every
    // message, because the loopback drops what does not fit.
    let lb = Loopback::start(
        tag,
        Access::own_uid("test config"),
        RingSizes {
            publication: 16 << 10,
            subscription: 1 << 20,
            max_message: 4 << 10,
        },
    );
    let sock = lb.path.to_str().unwrap();

    let args = |role| [&[sock, "prices", role, COUNT][..], extra].concat();
    let sub = Proc::spawn(&exe, &args("sub"));
    // The loopback forwards only to clients that joined: wait for the
    // subscriber's Join before the publisher starts.
    lb.wait_event(|e| {
        matches!(
            e,
            ServerEvent::Request {
                request: Request::Join { .. },
                ..
            }
        )
    });
    let publ = Proc::spawn(&exe, &args("pub"));

    let p = publ.output();
    let s = sub.output();
    assert!(p.status.success(), "publisher: {}", show(&p));
    assert!(s.status.success(), "subscriber: {}", show(&s));
    let sub_out = String::from_utf8_lossy(&s.stdout);
    assert!(
        sub_out.contains(&format!("sub: received {COUNT} messages intact")),
        "subscriber: {}",
        show(&s)
    );
    // The loopback notifies every member of each join's view: the
    // subscriber's own (epoch 2), then the publisher's (epoch 3).
    for epoch in [2, 3] {
        assert!(
            sub_out.contains(&format!(
                "sub: notice view changed: group 7 epoch {epoch}: "
            )),
            "subscriber: {}",
            show(&s)
        );
    }
    let pub_out = String::from_utf8_lossy(&p.stdout);
    assert!(
        pub_out.contains(&format!(
            "pub: published {COUNT} messages, subscriber acked"
        )),
        "publisher: {}",
        show(&p)
    );
    sub_out.into_owned()
}

#[test]
fn pubsub_example_reports_a_missing_daemon_with_the_path() {
    let build = TempDir::new("ffi-build");
    let exe = build.path().join("pubsub");
    cbuild::compile(
        &[&cbuild::crate_dir().join("examples/c/pubsub.c")],
        &exe,
        false,
    );
    let missing = build.path().join("no-daemon.sock");
    let o = Proc::spawn(&exe, &[missing.to_str().unwrap(), "g", "sub", "1"]).output();
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("mcastd is not running") && err.contains(missing.to_str().unwrap()),
        "{}",
        show(&o)
    );
}
