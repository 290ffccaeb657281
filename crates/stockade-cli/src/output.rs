//! What the CLI prints: JSON shapes scripts rely on, and errors.

use serde_json::{Value, json};
use stockade::{Error, ExecOutcome};

/// The JSON object of an exec result. Field names are a stable interface.
pub fn outcome_json(id: &str, o: &ExecOutcome) -> Value {
    json!({
        "id": id,
        "exit_code": o.exit_code,
        "signal": o.signal,
        "stdout": String::from_utf8_lossy(&o.stdout),
        "stderr": String::from_utf8_lossy(&o.stderr),
        "timed_out": o.timed_out,
        "oom_killed": o.oom_killed,
        "truncated": o.truncated(),
        "stdout_dropped_bytes": o.stdout_dropped,
        "stderr_dropped_bytes": o.stderr_dropped,
        "duration_ms": o.duration_ms,
        "egress_denied": o.egress_denied,
    })
}

/// Prints an error (JSON on stdout with `--json`, text on stderr otherwise) and
/// returns the exit code for it.
pub fn error(json: bool, e: &Error) -> i32 {
    if json {
        println!(
            "{}",
            json!({"error": {"code": e.code().as_str(), "message": e.to_string()}})
        );
    } else {
        eprintln!("stockade: error: {e}");
    }
    e.exit_code()
}
