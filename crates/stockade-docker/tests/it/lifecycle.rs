//! Create, exec, destroy; reporting; images; errors; gc.

use crate::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_exec_destroy_and_report() {
    let Some(image) = image() else { return };
    let sb = sandbox(spec(&image)).await;
    let out = sh(&sb, "id -u; id -g; echo $HOME; pwd; hostname", 30_000).await;
    assert_eq!(out.exit_code, 0, "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "1000\n1000\n/tmp\n/tmp\nsandbox\n");
    let applied = sb.info().applied.join("\n");
    for want in [
        "read-only",
        "network: none",
        "no swap",
        "pids 64",
        "capabilities: the code has none",
        "seccomp",
        "landlock",
        "0700",
    ] {
        assert!(applied.contains(want), "applied lacks {want:?}: {applied}");
    }
    let id = sb.id().to_string();
    let again = provider().inspect(&id).await.unwrap();
    assert_eq!(again.applied, sb.info().applied);
    assert!(provider().list().await.unwrap().iter().any(|i| i.id == id));
    sb.destroy().await.unwrap();
    sb.destroy().await.expect("destroy is idempotent");
    assert!(!container_exists(&id), "container of {id} left behind");
    assert!(
        !std::path::Path::new("/run/stockade-docker")
            .join(&id)
            .exists()
    );
}
