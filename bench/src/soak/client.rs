//! `mcast-bench soak client`: one client's sessions: connecting, joining,
//! publishing at the rate, receiving into a `Checker`, reconnecting, and the
//! JSON records it writes.
//!
//! Owns: the client process. May not touch: other clients' records (`check`).

use super::*;

#[derive(Debug)]
pub(super) struct Records {
    file: File,
    base: Value,
}

impl Records {
    fn write(&mut self, mut v: Value) {
        if let (Some(o), Some(b)) = (v.as_object_mut(), self.base.as_object()) {
            for (k, x) in b {
                o.entry(k.clone()).or_insert_with(|| x.clone());
            }
        }
        // The records are the run's result: a write that fails must not pass unseen.
        writeln!(self.file, "{v}").expect("writing the soak records");
    }
}

/// Why a session ended.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub(super) enum End {
    /// SIGTERM or SIGINT.
    Stopped,
    /// --duration passed.
    Duration,
    /// The daemon went away.
    Disconnected,
    /// The daemon cut this client off.
    CutOff,
    /// This node rejoined after an eviction and could not join the group again.
    RejoinFailed,
}

impl End {
    fn name(self) -> &'static str {
        match self {
            End::Stopped => "stopped",
            End::Duration => "duration",
            End::Disconnected => "disconnected",
            End::CutOff => "cut_off",
            End::RejoinFailed => "rejoin_failed",
        }
    }
}

pub(super) fn client(a: &ClientArgs) -> Result<(), String> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, stop.clone())
            .map_err(|e| format!("installing the signal handler: {e}"))?;
    }
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&a.out)
        .map_err(|e| format!("{}: {e}", a.out.display()))?;
    let mut rec = Records {
        file,
        base: json!({"client": a.name, "node": a.node, "group": a.group}),
    };
    let started = mono();
    let until = a.duration.map(|d| started + Duration::from_secs_f64(d));
    let mut rng = Rng::new(a.seed ^ u64::from(std::process::id()));
    let mut session = 0u64;
    loop {
        let Some(mut c) = connect_and_join(a, &stop, until, &mut rec, session) else {
            return Ok(()); // stopped, or the duration passed, while connecting
        };
        let end = run_session(a, &mut c, &stop, until, &mut rec, session, &mut rng);
        let left = if a.leave && matches!(end, End::Stopped | End::Duration) {
            let g = c.group;
            c.client.leave(g).is_ok()
        } else {
            false
        };
        let mut ck = c.checker;
        for r in ck.records.drain(..) {
            rec.write(r);
        }
        rec.write(json!({
            "t": "end", "session": session, "why": end.name(), "time": wall(),
            "publisher": a.publish, "inc": c.inc, "published": c.published,
            "checked": ck.checked, "violations": ck.violations, "lost_messages": ck.lost_messages,
            "breaks": ck.breaks, "events": ck.events, "skipped_events": ck.skipped_events,
            "evictions": ck.evictions, "publish_errors": c.publish_errors,
            "other_errors": c.other_errors, "left": left,
            "started": c.started, "last": ck.lasts(),
        }));
        drop(c.client);
        session += 1;
        if matches!(end, End::Stopped | End::Duration) || until.is_some() {
            return Ok(());
        }
    }
}

/// One connection and what it did.
#[derive(Debug)]
pub(super) struct Session {
    client: Client,
    group: u32,
    checker: Checker,
    inc: u64,
    published: u64,
    /// Publications dropped because this client was not in the group then
    /// (its node was evicted and had not joined it again yet).
    publish_errors: u64,
    /// Other `Error` notices (written as notes).
    other_errors: u64,
    started: f64,
}

/// Connects and joins, retrying while the daemon is away or busy; None
/// when told to stop (or out of time) first.
pub(super) fn connect_and_join(
    a: &ClientArgs,
    stop: &AtomicBool,
    until: Option<Instant>,
    rec: &mut Records,
    session: u64,
) -> Option<Session> {
    let mut last_error = String::new();
    let mut tries = 0u64;
    loop {
        if stop.load(Ordering::Relaxed) || until.is_some_and(|u| mono() >= u) {
            if tries > 0 {
                rec.write(json!({"t": "gave_up", "session": session, "tries": tries,
                    "error": last_error, "time": wall()}));
            }
            return None;
        }
        if tries > 0 {
            std::thread::sleep(Duration::from_millis(200));
        }
        tries += 1;
        let mut client = match Client::connect(&a.socket, &a.name) {
            Ok(c) => c,
            Err(e) => {
                last_error = e.to_string();
                continue;
            }
        };
        match client.join(&a.group) {
            Ok(m) => {
                let inc = fnv1a(&[
                    &wall().to_bits().to_be_bytes(),
                    &std::process::id().to_be_bytes(),
                    &session.to_be_bytes(),
                ]);
                let started = wall();
                rec.write(
                    json!({"t": "session", "session": session, "publisher": a.publish,
                    "inc": inc, "number": m.group, "tries": tries, "time": started}),
                );
                return Some(Session {
                    client,
                    group: m.group,
                    checker: Checker::new(&a.group),
                    inc,
                    published: 0,
                    publish_errors: 0,
                    other_errors: 0,
                    started,
                });
            }
            Err(e) => last_error = e.to_string(),
        }
    }
}

pub(super) fn body_len(rng: &mut Rng, max: usize) -> usize {
    let max = max as u64;
    let r = rng.unit();
    let hi = if r < 0.8 {
        512
    } else if r < 0.98 {
        4096
    } else {
        max
    };
    rng.range(0, hi.min(max)) as usize
}

pub(super) fn run_session(
    a: &ClientArgs,
    s: &mut Session,
    stop: &AtomicBool,
    until: Option<Instant>,
    rec: &mut Records,
    session: u64,
    rng: &mut Rng,
) -> End {
    let interval = Duration::from_secs_f64(1.0 / a.rate.max(1) as f64);
    let mut next_due = mono();
    let mut next_progress = mono();
    let mut msg = Vec::new();
    let mut pending: Option<usize> = None;
    let tag = group_tag(&a.group);
    let mut sabotaged = 0u64;
    loop {
        if stop.load(Ordering::Relaxed) {
            return End::Stopped;
        }
        let now = mono();
        if until.is_some_and(|u| now >= u) {
            return End::Duration;
        }
        if let Some(publisher) = a.publish {
            if now >= next_progress {
                rec.write(
                    json!({"t": "progress", "session": session, "publisher": publisher,
                    "inc": s.inc, "counter": s.published, "time": wall()}),
                );
                next_progress = now + Duration::from_secs(1);
            }
            // What is due, without blocking; a full ring delays, never skips.
            while mono() >= next_due {
                let len = *pending.get_or_insert_with(|| body_len(rng, a.max_size));
                // Sabotage (--sabotage): skip a counter, or repeat the last one.
                let mut counter = s.published;
                let mut sabotage = None;
                if let Some(every) = a.sabotage.filter(|&e| e > 0) {
                    if counter > 0 && counter / every > sabotaged {
                        if sabotaged % 2 == 0 {
                            sabotage = Some("skip");
                            counter += 1;
                        } else {
                            sabotage = Some("repeat");
                            counter -= 1;
                        }
                    }
                }
                let stamp = Stamp {
                    tag,
                    node: a.node,
                    publisher,
                    inc: s.inc,
                    counter,
                };
                encode(&stamp, len, &mut msg);
                match s.client.publish(s.group, &msg) {
                    Ok(()) => {
                        if let Some(kind) = sabotage {
                            sabotaged += 1;
                            rec.write(json!({"t": "sabotage", "session": session, "kind": kind,
                                "counter": counter, "time": wall()}));
                        }
                        if sabotage != Some("repeat") {
                            s.published = counter + 1;
                            pending = None;
                            next_due += interval;
                        }
                    }
                    Err(IpcError::WouldBlock) => break,
                    Err(e) => return ended(&e),
                }
            }
            // After a stall, go on at the rate rather than in a burst.
            if mono() > next_due + Duration::from_secs(1) {
                next_due = mono();
            }
        }
        let wait = if a.publish.is_some() {
            next_due
                .saturating_duration_since(mono())
                .clamp(Duration::from_micros(200), Duration::from_millis(20))
        } else {
            Duration::from_millis(50)
        };
        match s.client.recv_timeout(wait) {
            Ok(Some(m)) => {
                if m.kind == MessageKind::Membership {
                    s.group = m.group;
                }
                s.checker.message(&m);
                // Whatever else is there, without waiting.
                loop {
                    match s.client.try_recv() {
                        Ok(Some(m)) => {
                            if m.kind == MessageKind::Membership {
                                s.group = m.group;
                            }
                            s.checker.message(&m);
                        }
                        Ok(None) => break,
                        Err(e) => return ended(&e),
                    }
                }
            }
            Ok(None) => {}
            Err(e) => return ended(&e),
        }
        for r in s.checker.records.drain(..) {
            rec.write(r);
        }
        for n in s.client.notices() {
            match n {
                Notice::ViewChanged { group, .. } => s.group = group,
                Notice::Error { message } => {
                    if message.contains("could not join") {
                        rec.write(json!({"t": "note", "session": session, "message": message, "time": wall()}));
                        return End::RejoinFailed;
                    }
                    if message.contains("has not joined") {
                        s.publish_errors += 1;
                    } else {
                        s.other_errors += 1;
                        if s.other_errors <= 10 {
                            rec.write(json!({"t": "note", "session": session, "message": message, "time": wall()}));
                        }
                    }
                }
                Notice::CutOff { reason } => {
                    rec.write(json!({"t": "note", "session": session, "message": format!("cut off: {reason}"), "time": wall()}));
                    return End::CutOff;
                }
                Notice::Shutdown { .. } => return End::Disconnected,
            }
        }
    }
}

pub(super) fn ended(e: &IpcError) -> End {
    match e {
        IpcError::CutOff { .. } => End::CutOff,
        IpcError::Daemon {
            code: ErrorCode::UnknownGroup,
            ..
        } => End::RejoinFailed,
        _ => End::Disconnected,
    }
}
