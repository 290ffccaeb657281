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

/// The attack on a container provider's agent socket, run by root inside `sb` (a
/// sandbox whose user is uid 0): unlink `/.stockade/agent.sock`, bind a socket of its
/// own there, and take the directory back with chmod. Each step must fail, and the
/// host's next exec must still reach the agent.
pub async fn assert_agent_socket_cannot_be_replaced(sb: &Sandbox) {
    let out = sh(
        sb,
        "id -u; rm -f /.stockade/agent.sock && echo UNLINKED; \
         chmod 0700 /.stockade && echo CHMODDED; \
         python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); s.bind('/.stockade/agent.sock'); print('BOUND')\" 2>/dev/null; \
         python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); s.bind('/.stockade/other.sock'); print('BOUND ANOTHER')\" 2>/dev/null; \
         true",
        30_000,
    )
    .await;
    let s = text(&out.stdout);
    assert!(s.starts_with("0\n"), "the probe did not run as root: {s}");
    for breach in ["UNLINKED", "CHMODDED", "BOUND"] {
        assert!(
            !s.contains(breach),
            "root inside {} could touch the agent's socket ({breach}): {s}",
            sb.id()
        );
    }
    let out = sh(sb, "echo still the agent", 30_000).await;
    assert_eq!(text(&out.stdout), "still the agent\n");
}
