//! What the host was like during a run, printed beside the figures so that
//! runs of different hours can be compared: how a halted vCPU wakes (the
//! idle driver and the guest's halt polling, which decide most of a
//! wake-up's cost on a virtual machine: docs/mcastd.md "Latency on
//! dedicated cores") and how the CPUs' time was spent over the run (busy,
//! idle, stolen by the hypervisor), from `/proc/stat`.
//!
//! Owns: reading those files. Everything here is best effort: a file that
//! is missing (another kernel, a container) leaves its field out.

use serde_json::{json, Value};

/// How this machine's vCPUs idle and wake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Idle {
    /// `/sys/devices/system/cpu/cpuidle/current_driver` (e.g. `haltpoll`,
    /// `intel_idle`, `acpi_idle`).
    pub driver: Option<String>,
    /// `/sys/module/haltpoll/parameters/guest_halt_poll_ns`: how long an
    /// idle vCPU polls before it halts (0: it halts at once, and waking it
    /// takes the hypervisor).
    pub halt_poll_ns: Option<u64>,
}

impl Idle {
    pub fn read() -> Idle {
        let read = |p: &str| std::fs::read_to_string(p).ok().map(|s| s.trim().to_owned());
        Idle {
            driver: read("/sys/devices/system/cpu/cpuidle/current_driver"),
            halt_poll_ns: read("/sys/module/haltpoll/parameters/guest_halt_poll_ns")
                .and_then(|s| s.parse().ok()),
        }
    }

    /// One line for a report.
    pub fn describe(&self) -> String {
        let driver = self.driver.as_deref().unwrap_or("unknown");
        match self.halt_poll_ns {
            Some(ns) => format!("idle driver {driver}, guest halt polling {ns} ns"),
            None => format!("idle driver {driver}"),
        }
    }

    pub fn to_json(&self) -> Value {
        json!({ "idle_driver": self.driver, "guest_halt_poll_ns": self.halt_poll_ns })
    }
}

/// The CPU time counters of `/proc/stat`'s first line (all CPUs), in
/// ticks: user, nice, system, idle, iowait, irq, softirq, steal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuTimes([u64; 8]);

impl CpuTimes {
    pub fn read() -> Option<CpuTimes> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        CpuTimes::parse(stat.lines().next()?)
    }

    fn parse(line: &str) -> Option<CpuTimes> {
        let mut f = line.split_whitespace();
        if f.next()? != "cpu" {
            return None;
        }
        let mut t = [0u64; 8];
        for v in &mut t {
            *v = f.next()?.parse().ok()?;
        }
        Some(CpuTimes(t))
    }

    /// How the time since `earlier` was spent: (busy, idle, stolen), as
    /// fractions of the whole; None when no time passed.
    pub fn split_since(&self, earlier: &CpuTimes) -> Option<Split> {
        let d: Vec<u64> = self
            .0
            .iter()
            .zip(earlier.0)
            .map(|(now, then)| now.saturating_sub(then))
            .collect();
        let total: u64 = d.iter().sum();
        if total == 0 {
            return None;
        }
        let idle = (d[3] + d[4]) as f64 / total as f64;
        let stolen = d[7] as f64 / total as f64;
        Some(Split {
            busy: 1.0 - idle - stolen,
            idle,
            stolen,
        })
    }
}

/// Where the CPUs' time went over an interval (fractions summing to 1).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Split {
    pub busy: f64,
    pub idle: f64,
    pub stolen: f64,
}

impl Split {
    pub fn describe(&self) -> String {
        format!(
            "CPUs busy {:.0} %, idle {:.0} %, stolen {:.1} %",
            self.busy * 100.0,
            self.idle * 100.0,
            self.stolen * 100.0
        )
    }

    pub fn to_json(self) -> Value {
        json!({ "busy": self.busy, "idle": self.idle, "stolen": self.stolen })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_split_takes_idle_and_iowait_as_idle_and_the_eighth_field_as_stolen() {
        let a = CpuTimes::parse("cpu  100 0 50 800 0 0 0 50 0 0").unwrap();
        let b = CpuTimes::parse("cpu  300 0 100 1000 100 0 0 100 0 0").unwrap();
        let s = b.split_since(&a).unwrap();
        // 600 ticks: 250 busy, 300 idle (200 + 100 iowait), 50 stolen.
        assert!((s.busy - 250.0 / 600.0).abs() < 1e-9, "{s:?}");
        assert!((s.idle - 0.5).abs() < 1e-9, "{s:?}");
        assert!((s.stolen - 50.0 / 600.0).abs() < 1e-9, "{s:?}");
        assert_eq!(a.split_since(&a), None);
        assert_eq!(CpuTimes::parse("cpu0 1 2 3 4 5 6 7 8"), None);
        assert_eq!(CpuTimes::parse("cpu 1 2 3"), None);
    }
}
