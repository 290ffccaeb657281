//! What the monitor reports and keeps on disk: its launch report, the sandbox's
//! state file with its timed steps, the pause files, the host ids.

use super::*;

/// The monitor's one-line JSON answer on its stdout once the sandbox is up (or not).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LaunchReport {
    /// The agent listens; `state.json` is written.
    Ready(SandboxState),
    /// Launch failed; nothing is left behind.
    Failed { code: ErrorCode, message: String },
}

/// What `state.json` records about a live native sandbox.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SandboxState {
    pub id: String,
    /// Host pid of the monitor (parent of the agent, outside the namespaces).
    pub monitor_pid: u32,
    /// Start time of the monitor (clock ticks since boot), to detect pid reuse.
    pub monitor_start_ticks: u64,
    /// Host pid of the agent (PID 1 inside).
    pub init_pid: u32,
    pub created_at_ms: u64,
    pub expires_at_ms: u64,
    pub owner_pid: Option<u32>,
    /// Cgroup directories to remove at destroy.
    pub cgroups: Vec<PathBuf>,
    /// Hardening actually applied (`inspect`).
    pub applied: Vec<crate::Wall>,
    /// The user's spec.
    pub spec: serde_json::Value,
    /// The host ids the sandbox's ids 0 to `count - 1` are, when it has a user
    /// namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_ids: Option<HostIds>,
    /// The steps of the sandbox's start, as the monitor and PID 1 timed them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<TimedStep>,
}

/// One step of a native sandbox's start, timed on the host's `CLOCK_MONOTONIC` (one
/// clock for every process there: the sandbox has no time namespace), in ns.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimedStep {
    pub name: String,
    pub start_ns: u64,
    pub end_ns: u64,
}

impl TimedStep {
    /// PID 1 sends its steps to the monitor after `ok`, one per line:
    /// `start_ns end_ns name`.
    pub fn to_line(&self) -> String {
        format!("{} {} {}\n", self.start_ns, self.end_ns, self.name)
    }

    /// The steps in `text` (lines of [`TimedStep::to_line`]); lines that are not one
    /// are skipped.
    pub fn parse_lines(text: &str) -> Vec<TimedStep> {
        text.lines()
            .filter_map(|l| {
                let mut it = l.splitn(3, ' ');
                let start_ns = it.next()?.parse().ok()?;
                let end_ns = it.next()?.parse().ok()?;
                let name = it.next()?.to_string();
                (end_ns >= start_ns && !name.is_empty()).then_some(TimedStep {
                    name,
                    start_ns,
                    end_ns,
                })
            })
            .collect()
    }
}

/// In a native sandbox's state directory: the unix ms at which its current pause
/// began (present only while it is paused, i.e. its cgroup is frozen).
pub const PAUSED_FILE: &str = "paused";
/// In a native sandbox's state directory: the total ms of its pauses that ended.
pub const PAUSED_TOTAL_FILE: &str = "paused-ms";

/// How long a native sandbox has been paused, read from its state directory: the
/// lifetime does not run while a sandbox is paused (as E2B's timeout), so its
/// deadline is the planned one plus [`PausedTime::total_ms`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PausedTime {
    /// When the current pause began (unix ms), if paused now.
    pub since_ms: Option<u64>,
    /// Every pause's length so far, the current one up to `now_ms` included.
    pub total_ms: u64,
}

impl PausedTime {
    /// Reads the pause files of `state_dir` (missing or unreadable files: not paused,
    /// nothing paused before).
    pub fn read(state_dir: &std::path::Path, now_ms: u64) -> PausedTime {
        let num = |f: &str| {
            std::fs::read_to_string(state_dir.join(f))
                .ok()
                .and_then(|t| t.trim().parse::<u64>().ok())
        };
        let since_ms = num(PAUSED_FILE);
        let ended = num(PAUSED_TOTAL_FILE).unwrap_or(0);
        PausedTime {
            since_ms,
            total_ms: ended + since_ms.map_or(0, |s| now_ms.saturating_sub(s)),
        }
    }

    /// The deadline of a sandbox planned to end at `planned_ms`.
    pub fn deadline(&self, planned_ms: u64) -> u64 {
        planned_ms.saturating_add(self.total_ms)
    }
}

/// A sandbox's range of host ids (uids and gids alike).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostIds {
    /// Host id of id 0 inside.
    pub first: u32,
    /// How many ids are mapped.
    pub count: u32,
}

#[cfg(test)]
mod tests {
    use super::TimedStep;

    #[test]
    fn timed_steps_go_through_lines_and_bad_lines_are_skipped() {
        let steps = vec![
            TimedStep {
                name: "PID 1: build the root and pivot into it".into(),
                start_ns: 10,
                end_ns: 2_000_000,
            },
            TimedStep {
                name: "x".into(),
                start_ns: 5,
                end_ns: 5,
            },
        ];
        let mut text: String = steps.iter().map(TimedStep::to_line).collect();
        // What a confused or hostile writer could add: none of it is a step.
        text.push_str("\n1 2\n3 1 backwards\nnot numbers at all\n7 9 \n-1 2 negative\n");
        assert_eq!(TimedStep::parse_lines(&text), steps);
    }
}
