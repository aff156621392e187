//! Structured logs: one line per event, `key=value` pairs after a timestamp
//! and a level, values quoted when they hold spaces, on standard error.
//!
//! ```text
//! ts=1732361234.123456 level=info msg="client joined" client=3 group=prices number=1 rank=0
//! ```

use std::fmt::Write as _;
use std::io::Write as _;

/// How much to log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Error,
    Warn,
    Info,
    Debug,
}

impl Level {
    pub fn name(self) -> &'static str {
        match self {
            Level::Error => "error",
            Level::Warn => "warn",
            Level::Info => "info",
            Level::Debug => "debug",
        }
    }

    pub fn parse(s: &str) -> Option<Level> {
        Some(match s {
            "error" => Level::Error,
            "warn" => Level::Warn,
            "info" => Level::Info,
            "debug" => Level::Debug,
            _ => return None,
        })
    }
}

/// The logger: a level and a clock (wall time, seconds since the epoch).
#[derive(Debug)]
pub struct Logger {
    level: Level,
    clock: fn() -> f64,
}

impl Logger {
    pub fn new(level: Level, clock: fn() -> f64) -> Logger {
        Logger { level, clock }
    }

    pub fn enabled(&self, level: Level) -> bool {
        level <= self.level
    }

    /// Logs `msg` with `fields` at `level`.
    pub fn log(&self, level: Level, msg: &str, fields: &[(&str, &dyn std::fmt::Display)]) {
        if !self.enabled(level) {
            return;
        }
        let line = format_line((self.clock)(), level, msg, fields);
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }

    pub fn info(&self, msg: &str, fields: &[(&str, &dyn std::fmt::Display)]) {
        self.log(Level::Info, msg, fields)
    }

    pub fn warn(&self, msg: &str, fields: &[(&str, &dyn std::fmt::Display)]) {
        self.log(Level::Warn, msg, fields)
    }

    pub fn error(&self, msg: &str, fields: &[(&str, &dyn std::fmt::Display)]) {
        self.log(Level::Error, msg, fields)
    }

    pub fn debug(&self, msg: &str, fields: &[(&str, &dyn std::fmt::Display)]) {
        self.log(Level::Debug, msg, fields)
    }
}

/// One log line, newline-terminated.
pub fn format_line(
    ts: f64,
    level: Level,
    msg: &str,
    fields: &[(&str, &dyn std::fmt::Display)],
) -> String {
    let mut s = format!("ts={ts:.6} level={} msg={}", level.name(), quote(msg));
    for (k, v) in fields {
        let _ = write!(s, " {k}={}", quote(&v.to_string()));
    }
    s.push('\n');
    s
}

fn quote(v: &str) -> String {
    if !v.is_empty() && !v.contains([' ', '"', '=', '\n', '\t']) {
        return v.to_owned();
    }
    let mut q = String::with_capacity(v.len() + 2);
    q.push('"');
    for c in v.chars() {
        match c {
            '"' => q.push_str("\\\""),
            '\\' => q.push_str("\\\\"),
            '\n' => q.push_str("\\n"),
            c => q.push(c),
        }
    }
    q.push('"');
    q
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_key_value_with_quoting() {
        let l = format_line(
            1.5,
            Level::Warn,
            "slow subscriber",
            &[("client", &3), ("reason", &"ring \"full\"")],
        );
        assert_eq!(
            l,
            "ts=1.500000 level=warn msg=\"slow subscriber\" client=3 reason=\"ring \\\"full\\\"\"\n"
        );
        assert_eq!(Level::parse("debug"), Some(Level::Debug));
        assert!(Level::Error < Level::Info);
    }
}
