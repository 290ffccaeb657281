//! Running code in a sandbox from a test: `sh`/`py` with a deadline, output as text.

use stockade_core::{ExecOutcome, ExecRequest, Sandbox};

/// Runs `sh -c script` with a deadline; panics if the exec itself fails.
pub async fn sh(sb: &Sandbox, script: &str, timeout_ms: u64) -> ExecOutcome {
    run(sb, ["/bin/sh", "-c", script], timeout_ms).await
}

/// Runs `python3 -c code` with a deadline; panics if the exec itself fails.
pub async fn py(sb: &Sandbox, code: &str, timeout_ms: u64) -> ExecOutcome {
    run(sb, ["/usr/bin/python3", "-c", code], timeout_ms).await
}

async fn run<const N: usize>(sb: &Sandbox, argv: [&str; N], timeout_ms: u64) -> ExecOutcome {
    let mut req = ExecRequest::new(argv);
    req.timeout_ms = Some(timeout_ms);
    sb.exec(req).await.expect("exec")
}

/// Output bytes as text (lossy).
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}
