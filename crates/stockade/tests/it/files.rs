//! File operations, workspaces, sessions and approval (issue 3), as attacks where the
//! operation touches a boundary.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use stockade::{
    ErrorCode, FileOp, FileResult, Policy, Rule, RuleTarget, SandboxSpec, SessionConfig,
    SessionManager, Verdict,
};

use crate::*;

#[tokio::test]
async fn file_operations_work_and_are_binary_safe() {
    if !require_root("file_operations_work_and_are_binary_safe") {
        return;
    }
    let sb = sandbox(SandboxSpec::default()).await;
    let bin: Vec<u8> = (0..=255u8).cycle().take(300_000).collect();
    sb.write("/tmp/d/e/bin.dat", bin.clone()).await.unwrap();
    assert_eq!(sb.read("/tmp/d/e/bin.dat").await.unwrap(), bin);
    match sb
        .file(FileOp::Read {
            path: "/tmp/d/e/bin.dat".into(),
            offset: 299_990,
            limit: 100,
        })
        .await
        .unwrap()
    {
        FileResult::Data { data, size, eof } => {
            assert_eq!((data.len(), size, eof), (10, 300_000, true));
            assert_eq!(data, bin[299_990..]);
        }
        other => panic!("{other:?}"),
    }
    sb.write("/tmp/code.py", "x = 1\ny = 1\n").await.unwrap();
    let err = sb
        .edit("/tmp/code.py", "= 1", "= 2", false)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("occurs 2 times"), "{err}");
    let err = sb.edit("/tmp/code.py", "z", "w", false).await.unwrap_err();
    assert!(
        err.to_string().contains("not found in /tmp/code.py"),
        "{err}"
    );
    assert_eq!(
        sb.edit("/tmp/code.py", "x = 1", "x = 5", false)
            .await
            .unwrap(),
        1
    );
    assert_eq!(sb.edit("/tmp/code.py", "1", "9", true).await.unwrap(), 1);
    assert_eq!(sb.read("/tmp/code.py").await.unwrap(), b"x = 5\ny = 9\n");
    // The code sees what the file API wrote, and the other way round.
    let out = sh(
        &sb,
        "python3 /tmp/code.py; echo from-code > /tmp/out.txt; stat -c '%u' /tmp/code.py",
        5_000,
    )
    .await;
    assert_eq!(
        text(&out.stdout),
        "1000\n",
        "files belong to the sandbox user: {}",
        text(&out.stderr)
    );
    assert_eq!(sb.read("/tmp/out.txt").await.unwrap(), b"from-code\n");
    let ls = sb.ls("/tmp/d/e").await.unwrap();
    assert_eq!(ls.len(), 1);
    assert_eq!(
        (ls[0].name.as_str(), ls[0].size, ls[0].mode),
        ("bin.dat", 300_000, 0o644)
    );
    assert!(ls[0].mtime > 1_700_000_000);
    match sb
        .file(FileOp::Glob {
            pattern: "**/*.py".into(),
            root: "/tmp".into(),
        })
        .await
        .unwrap()
    {
        FileResult::Paths { paths, truncated } => {
            assert_eq!((paths, truncated), (vec!["code.py".to_string()], false));
        }
        other => panic!("{other:?}"),
    }
    sb.write("/tmp/g/a.txt", "needle one\nhay\nneedle two\n")
        .await
        .unwrap();
    sb.write("/tmp/g/b.md", "needle three\n").await.unwrap();
    match sb
        .file(FileOp::Grep {
            regex: "needle".into(),
            root: "/tmp/g".into(),
            include: Some("*.txt".into()),
            max_matches: 1,
        })
        .await
        .unwrap()
    {
        FileResult::Matches { matches, truncated } => {
            assert!(truncated);
            assert_eq!(
                (
                    matches[0].path.as_str(),
                    matches[0].line_number,
                    matches[0].line.as_str()
                ),
                ("/tmp/g/a.txt", 1, "needle one")
            );
        }
        other => panic!("{other:?}"),
    }
    sb.file(FileOp::Mkdir {
        path: "/tmp/m/n".into(),
        parents: true,
    })
    .await
    .unwrap();
    sb.file(FileOp::Rm {
        path: "/tmp/m".into(),
        recursive: true,
    })
    .await
    .unwrap();
    assert_eq!(
        sb.ls("/tmp/m").await.unwrap_err().code(),
        ErrorCode::NotFound
    );
    let err = sb
        .file(FileOp::Grep {
            regex: "(".into(),
            root: "/tmp".into(),
            include: None,
            max_matches: 0,
        })
        .await
        .unwrap_err();
    assert!(err.to_string().contains("bad regex"), "{err}");
    destroy_clean(sb).await;
}

#[tokio::test]
async fn file_operations_cannot_reach_the_host_or_write_read_only_paths() {
    if !require_root("file_operations_cannot_reach_the_host_or_write_read_only_paths") {
        return;
    }
    let marker = format!("stockade-file-secret-{}", std::process::id());
    let planted = stockade_testkit::secret_dir().join(&marker);
    std::fs::write(&planted, "HOST SECRET").unwrap();
    let sb = sandbox(SandboxSpec::default()).await;
    // The code plants symlinks to host paths; the file API resolves them inside.
    let _ = sh(
        &sb,
        &format!(
            "ln -s {} /tmp/l1; ln -s /etc/shadow /tmp/l2; ln -s / /tmp/l3",
            planted.display()
        ),
        5_000,
    )
    .await;
    for path in [
        "/tmp/l1".to_string(),
        "/tmp/l2".into(),
        format!("/tmp/l3{}", planted.display()),
        format!("/tmp/../..{}", planted.display()),
        "/../../etc/shadow".into(),
    ] {
        let r = sb.read(&path).await;
        assert!(
            r.is_err(),
            "{path} was readable: {:?}",
            r.map(|d| String::from_utf8_lossy(&d).into_owned())
        );
        assert_eq!(r.unwrap_err().code(), ErrorCode::NotFound, "{path}");
    }
    let passwd = String::from_utf8(sb.read("/tmp/l3/etc/passwd").await.unwrap()).unwrap();
    assert!(
        passwd.contains("sandbox:x:1000") && !passwd.contains("/root:/bin/bash"),
        "host passwd leaked: {passwd}"
    );
    for path in [
        "/usr/bin/evil",
        "/etc/passwd",
        "/evil",
        "/proc/sys/kernel/hostname",
    ] {
        let err = sb.write(path, "x").await.unwrap_err();
        assert_eq!(err.code(), ErrorCode::PolicyDenied, "{path}: {err}");
    }
    std::fs::remove_file(&planted).unwrap();
    assert!(
        !std::path::Path::new("/usr/bin/evil").exists() && !std::path::Path::new("/evil").exists()
    );
    let big = vec![b'x'; (stockade::files::MAX_FILE_BYTES + 1) as usize];
    let err = sb.write("/tmp/big", big).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::LimitExceeded, "{err}");
    destroy_clean(sb).await;
}

fn tar_with(entries: &[(&str, tar::EntryType, &[u8])]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (name, kind, data) in entries {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(*kind);
        h.set_size(data.len() as u64);
        h.set_mode(if *kind == tar::EntryType::Directory {
            0o755
        } else {
            0o644
        });
        // Write the raw name so traversal entries are not normalised away.
        let bytes = name.as_bytes();
        h.as_gnu_mut().unwrap().name[..bytes.len()].copy_from_slice(bytes);
        h.set_cksum();
        b.append(&h, *data).unwrap();
    }
    b.into_inner().unwrap()
}

#[tokio::test]
async fn tar_uploads_refuse_traversal_devices_bombs_and_floods() {
    if !require_root("tar_uploads_refuse_traversal_devices_bombs_and_floods") {
        return;
    }
    let sb = sandbox(SandboxSpec::default()).await;
    let ok = tar_with(&[
        ("dir/", tar::EntryType::Directory, b""),
        ("dir/f.txt", tar::EntryType::Regular, b"fine"),
    ]);
    sb.upload("/tmp/up", ok).await.unwrap();
    assert_eq!(sb.read("/tmp/up/dir/f.txt").await.unwrap(), b"fine");
    let cases: Vec<(&str, Vec<u8>, ErrorCode)> = vec![
        (
            "traversal",
            tar_with(&[
                ("ok.txt", tar::EntryType::Regular, b"1"),
                ("../../escaped.txt", tar::EntryType::Regular, b"x"),
            ]),
            ErrorCode::InvalidSpec,
        ),
        (
            "absolute",
            tar_with(&[("/tmp/abs.txt", tar::EntryType::Regular, b"x")]),
            ErrorCode::InvalidSpec,
        ),
        (
            "device",
            tar_with(&[("dev-null", tar::EntryType::Char, b"")]),
            ErrorCode::PolicyDenied,
        ),
        (
            "fifo",
            tar_with(&[("fifo", tar::EntryType::Fifo, b"")]),
            ErrorCode::PolicyDenied,
        ),
    ];
    for (name, archive, code) in cases {
        let err = sb.upload("/tmp/target", archive).await.unwrap_err();
        assert_eq!(err.code(), code, "{name}: {err}");
    }
    // Nothing was written, not even the valid first entry of a bad archive.
    let out = sh(
        &sb,
        "ls /tmp/target /tmp/escaped.txt /escaped.txt /tmp/abs.txt 2>&1; true",
        5_000,
    )
    .await;
    assert!(
        text(&out.stdout).matches("No such file").count() == 4,
        "{}",
        text(&out.stdout)
    );
    // A symlink entry pointing out, then a file written through it.
    let through = tar_with(&[
        ("link", tar::EntryType::Symlink, b""),
        ("link/pwned", tar::EntryType::Regular, b"x"),
    ]);
    let mut through = through;
    // Set the link target to "/usr" by rebuilding with a linkname.
    {
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Symlink);
        h.set_path("link").unwrap();
        h.set_link_name("/tmp/elsewhere").unwrap();
        h.set_size(0);
        h.set_cksum();
        b.append(&h, &b""[..]).unwrap();
        let mut h = tar::Header::new_gnu();
        h.set_path("link/pwned").unwrap();
        h.set_size(1);
        h.set_mode(0o644);
        h.set_cksum();
        b.append(&h, &b"x"[..]).unwrap();
        through = b.into_inner().unwrap_or(through);
    }
    let err = sb.upload("/tmp/t2", through).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::PolicyDenied, "{err}");
    assert_eq!(
        sb.ls("/tmp/elsewhere/pwned").await.unwrap_err().code(),
        ErrorCode::NotFound
    );
    // A gzip bomb: small compressed, huge expanded.
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..64 {
        gz.write_all(&zeros).unwrap();
    }
    let bomb = gz.finish().unwrap();
    let err = sb.upload("/tmp/bomb", bomb).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::LimitExceeded, "{err}");
    // Too many entries.
    let mut b = tar::Builder::new(Vec::new());
    for i in 0..=stockade::files::MAX_ENTRIES {
        let mut h = tar::Header::new_gnu();
        h.set_path(format!("f{i}")).unwrap();
        h.set_size(0);
        h.set_cksum();
        b.append(&h, &b""[..]).unwrap();
    }
    let err = sb
        .upload("/tmp/flood", b.into_inner().unwrap())
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::LimitExceeded, "{err}");
    // Download packs a directory, links stay links.
    let _ = sh(
        &sb,
        "mkdir -p /tmp/dl/x && echo hi > /tmp/dl/x/a && ln -s /etc/passwd /tmp/dl/link",
        5_000,
    )
    .await;
    let archive = sb.download("/tmp/dl").await.unwrap();
    let mut names: Vec<String> = tar::Archive::new(&archive[..])
        .entries()
        .unwrap()
        .map(|e| e.unwrap().path().unwrap().display().to_string())
        .collect();
    names.sort();
    assert_eq!(names, ["link", "x", "x/a"]);
    destroy_clean(sb).await;
}

#[tokio::test]
async fn approval_policy_denies_execs_and_writes_naming_the_rule() {
    if !require_root("approval_policy_denies_execs_and_writes_naming_the_rule") {
        return;
    }
    let policy = Policy::new(Verdict::Allow)
        .rule(
            Rule::new(
                "no-network-tools",
                RuleTarget::Exec,
                r"\b(curl|wget)\b",
                Verdict::Deny,
            )
            .unwrap(),
        )
        .rule(
            Rule::new(
                "ask-for-work",
                RuleTarget::FileWrite,
                r"^/tmp/protected/",
                Verdict::Ask,
            )
            .unwrap(),
        )
        .ask_with(|_, _| false);
    let sb = sandbox(SandboxSpec::default())
        .await
        .with_policy(Arc::new(policy));
    let err = sh(&sb, "true", 5_000).await;
    assert_eq!(err.exit_code, 0);
    let err = sb
        .exec(stockade::ExecRequest::new(["curl", "http://x"]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::PolicyDenied);
    assert!(err.to_string().contains("no-network-tools"), "{err}");
    let err = sb.write("/tmp/protected/a", "x").await.unwrap_err();
    assert!(err.to_string().contains("ask-for-work"), "{err}");
    sb.write("/tmp/free", "x").await.unwrap();
    destroy_clean(sb).await;
}

fn sessions(home: &std::path::Path, max_live: usize, idle: u64) -> SessionManager {
    let mut cfg = SessionConfig::new(home);
    cfg.max_live = max_live;
    cfg.idle_timeout_secs = idle;
    cfg.owner_pid = Some(std::process::id());
    SessionManager::new(provider(), cfg)
}

/// A session whose record cannot be written (a full disk, here a directory where
/// the record's temporary file goes) fails, and leaves no sandbox running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_that_cannot_be_recorded_leaves_no_sandbox() {
    if !require_root("a_session_that_cannot_be_recorded_leaves_no_sandbox") {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let m = sessions(home.path(), 2, 600);
    let dir = m.workspace("full").parent().unwrap().to_path_buf();
    std::fs::create_dir_all(dir.join("session.json.tmp")).unwrap();
    let before: Vec<String> = provider()
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|i| i.id)
        .collect();
    let err = m
        .get_or_create("full")
        .await
        .expect_err("a session without its record");
    assert!(err.to_string().contains("session.json"), "{err}");
    let left: Vec<String> = provider()
        .list()
        .await
        .unwrap()
        .into_iter()
        .filter(|i| i.spec["labels"]["stockade.session"] == "full")
        .map(|i| i.id)
        .filter(|id| !before.contains(id))
        .collect();
    assert!(left.is_empty(), "sandboxes left running: {left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_persist_workspaces_and_share_one_sandbox() {
    if !require_root("sessions_persist_workspaces_and_share_one_sandbox") {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let m = Arc::new(sessions(home.path(), 2, 600));
    // Two callers at once get the same sandbox.
    let (a, b) = tokio::join!(m.get_or_create("proj"), m.get_or_create("proj"));
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a.id(), b.id(), "two sandboxes for one session");
    let out = sh(&a, "pwd; echo persisted > notes.txt", 5_000).await;
    assert_eq!(text(&out.stdout), "/work\n", "{}", text(&out.stderr));
    let first = a.id().to_string();
    m.release("proj").await.unwrap();
    assert_no_trace(&first);
    assert_eq!(
        std::fs::read_to_string(m.workspace("proj").join("notes.txt")).unwrap(),
        "persisted\n"
    );
    let again = m.get_or_create("proj").await.unwrap();
    assert_ne!(again.id(), first);
    assert_eq!(
        text(&sh(&again, "cat /work/notes.txt", 5_000).await.stdout),
        "persisted\n"
    );
    // The limit on live sessions.
    let other = m.get_or_create("other").await.unwrap();
    let err = m
        .get_or_create("third")
        .await
        .expect_err("a third live session must be refused");
    assert_eq!(err.code(), ErrorCode::LimitExceeded, "{err}");
    let names: Vec<String> = m
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(names, ["other", "proj"]);
    assert!(m.get_or_create("../escape").await.is_err());
    let (id1, id2) = (again.id().to_string(), other.id().to_string());
    m.delete("proj").await.unwrap();
    m.delete("other").await.unwrap();
    assert!(!m.workspace("proj").exists());
    assert_no_trace(&id1);
    assert_no_trace(&id2);
}

#[tokio::test]
async fn idle_sessions_lose_their_sandbox_but_keep_the_workspace() {
    if !require_root("idle_sessions_lose_their_sandbox_but_keep_the_workspace") {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let m = sessions(home.path(), 4, 1);
    let sb = m.get_or_create("idle").await.unwrap();
    sb.write("/work/keep.txt", "kept").await.unwrap();
    let id = sb.id().to_string();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_no_trace(&id);
    assert!(m.list().await.unwrap()[0].sandbox_id.is_none());
    let next = m.get_or_create("idle").await.unwrap();
    assert_eq!(next.read("/work/keep.txt").await.unwrap(), b"kept");
    m.delete("idle").await.unwrap();
    assert_no_trace(next.id());
}

/// Runs a file operation, failing the test (instead of hanging it) if it never ends.
async fn bounded<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(120), f)
        .await
        .unwrap_or_else(|_| panic!("{what} never returned"))
}

// Issue 14, finding 9: FIFOs, sockets and devices are refused at once, never waited on.
#[tokio::test]
async fn file_operations_refuse_fifos_sockets_and_devices_at_once() {
    if !require_root("file_operations_refuse_fifos_sockets_and_devices_at_once") {
        return;
    }
    let sb = sandbox(SandboxSpec::default()).await;
    let made = sh(
        &sb,
        "mkfifo /tmp/f && mkdir /tmp/d && mkfifo /tmp/d/p && echo hi > /tmp/d/a && \
         python3 -c \"import socket; socket.socket(socket.AF_UNIX).bind('/tmp/d/s')\" && echo made",
        10_000,
    )
    .await;
    assert_eq!(text(&made.stdout), "made\n", "{made:?}");
    for path in ["/tmp/f", "/tmp/d/s", "/dev/zero"] {
        let err = bounded(&format!("read {path}"), sb.read(path))
            .await
            .unwrap_err();
        assert!(
            err.to_string().contains("not a regular file"),
            "read {path}: {err}"
        );
        let err = bounded(&format!("download {path}"), sb.download(path))
            .await
            .unwrap_err();
        assert!(
            err.to_string().contains("not a regular file"),
            "download {path}: {err}"
        );
    }
    let err = bounded("write onto a fifo", sb.write("/tmp/f", "x"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("not a regular file"), "{err}");
    let err = bounded("edit a fifo", sb.edit("/tmp/f", "a", "b", false))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("not a regular file"), "{err}");
    // A directory holding a fifo and a socket downloads without them.
    let archive = bounded("download /tmp/d", sb.download("/tmp/d"))
        .await
        .unwrap();
    let names: Vec<String> = tar::Archive::new(&archive[..])
        .entries()
        .unwrap()
        .map(|e| e.unwrap().path().unwrap().display().to_string())
        .collect();
    assert_eq!(names, ["a"]);
    let found = bounded("grep over a fifo", sb.grep("hi", "/tmp/d", None, 0))
        .await
        .unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    let globbed = bounded("glob over a fifo", sb.glob("*", "/tmp/d"))
        .await
        .unwrap();
    assert_eq!(globbed, ["a", "p", "s"]);
    // Nothing of the operations is left running.
    let ps = sh(
        &sb,
        "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done",
        5_000,
    )
    .await;
    assert!(
        !text(&ps.stdout).contains("fileop"),
        "file operations left processes behind:\n{}",
        text(&ps.stdout)
    );
    destroy_clean(sb).await;
}

// File operations as root of the sandbox's own user namespace (E2B's `user="root"`):
// they make root's files where the sandbox may write, and no more: not the read-only
// root, not PID 1's memory, not a uid the sandbox does not map.
#[tokio::test]
async fn file_operations_as_root_stay_inside_the_sandbox() {
    if !require_root("file_operations_as_root_stay_inside_the_sandbox") {
        return;
    }
    let sb = sandbox(SandboxSpec::default()).await;
    let write = |path: &str| FileOp::Write {
        path: path.into(),
        data: b"by root".to_vec(),
        mode: Some(0o600),
    };
    sb.file_as(0, write("/tmp/root.txt"))
        .await
        .expect("root writes /tmp");
    let out = sh(&sb, "stat -c %u:%a /tmp/root.txt; cat /tmp/root.txt", 5_000).await;
    assert_eq!(text(&out.stdout).lines().next(), Some("0:600"), "{out:?}");
    assert!(
        !text(&out.stdout).contains("by root"),
        "the sandbox user read root's 0600 file"
    );
    match sb
        .file_as(
            0,
            FileOp::Read {
                path: "/tmp/root.txt".into(),
                offset: 0,
                limit: 100,
            },
        )
        .await
        .unwrap()
    {
        FileResult::Data { data, .. } => assert_eq!(data, b"by root"),
        other => panic!("{other:?}"),
    }
    for outside in ["/usr/bin/evil", "/etc/passwd", "/x"] {
        let err = sb.file_as(0, write(outside)).await.expect_err(outside);
        assert!(
            matches!(err.code(), ErrorCode::PolicyDenied | ErrorCode::NotFound),
            "{outside}: {err}"
        );
    }
    for secret in ["/proc/1/environ", "/proc/1/mem"] {
        let r = sb
            .file_as(
                0,
                FileOp::Read {
                    path: secret.into(),
                    offset: 0,
                    limit: 100,
                },
            )
            .await;
        assert!(
            !matches!(&r, Ok(FileResult::Data { data, .. }) if !data.is_empty()),
            "root of the sandbox read {secret}: {r:?}"
        );
    }
    let err = sb
        .file_as(70_000, write("/tmp/far.txt"))
        .await
        .expect_err("a uid the sandbox does not map");
    assert_eq!(err.code(), ErrorCode::PolicyDenied, "{err}");
    assert!(err.to_string().contains("70000"), "{err}");
    destroy_clean(sb).await;
}
