//! The daemon shared by local users (`--socket-group`): members of the group reach the
//! unix socket, others do not, and each uid is a tenant of its own (`SO_PEERCRED`).
//! The other users are this test binary run again (`peer_client`) through `setpriv`
//! as uid 1000 and as an unused uid, in a group made for the test.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::process::Command;

use stockade::{ErrorCode, FileOp, Provider};

use crate::harness::{TestDaemon, require_root};
use crate::{create, sh, spec};

/// A group made for one test, deleted at drop.
struct TestGroup {
    name: String,
    gid: u32,
}

impl TestGroup {
    fn create() -> Option<TestGroup> {
        let name = format!("stk-it-{}", std::process::id());
        let made = Command::new("groupadd")
            .arg(&name)
            .status()
            .map_err(|e| format!("groupadd: {e}"))
            .and_then(|s| {
                s.success()
                    .then_some(())
                    .ok_or(format!("groupadd {name}: {s}"))
            });
        stockade_testkit::require(
            "groupadd",
            made,
            "install the passwd package (groupadd, from shadow-utils)",
        )?;
        let gid = gid_of(&name).expect("the group just made");
        Some(TestGroup { name, gid })
    }
}

impl Drop for TestGroup {
    fn drop(&mut self) {
        let _ = Command::new("groupdel").arg(&self.name).status();
    }
}

fn gid_of(group: &str) -> Option<u32> {
    let out = Command::new("getent")
        .args(["group", group])
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout)
        .split(':')
        .nth(2)?
        .trim()
        .parse()
        .ok()
}

/// A uid no account in /etc/passwd has.
fn unused_uid() -> u32 {
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap();
    let used: Vec<u32> = passwd
        .lines()
        .filter_map(|l| l.split(':').nth(2)?.parse().ok())
        .collect();
    (20_000..).find(|u| !used.contains(u)).unwrap()
}

/// Runs `ops` (see `peer_client`) through the daemon at `d` as `uid`, with `group`
/// as its only supplementary group (or none); one answer per op.
fn as_user(d: &TestDaemon, uid: u32, group: Option<u32>, ops: &[String]) -> Vec<String> {
    let exe = std::env::current_exe().unwrap();
    let groups = match group {
        Some(g) => format!("--groups={g}"),
        None => "--clear-groups".to_string(),
    };
    let out = Command::new("setpriv")
        .args([
            &format!("--reuid={uid}"),
            &format!("--regid={uid}"),
            &groups,
        ])
        .arg(&exe)
        .args(["--exact", "peers::peer_client", "--ignored", "--nocapture"])
        .env("STOCKADE_IT_PEER_SOCKET", TestDaemon::socket(&d.dir))
        .env("STOCKADE_IT_PEER_OPS", ops.join("\n"))
        .env_remove("STOCKADE_TOKEN")
        .current_dir("/")
        .output()
        .expect("run setpriv (util-linux)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let answers: Vec<String> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("@@ "))
        .map(str::to_string)
        .collect();
    assert_eq!(
        answers.len(),
        ops.len(),
        "uid {uid}: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    answers
}

/// Not a test of its own: `as_user` runs it as another user. Each line of
/// `STOCKADE_IT_PEER_OPS` is an op (`health`, `create`, `create-mount`, `create-big`,
/// `create-no-seccomp`, `create-wasm`, `list`,
/// `exec ID`, `inspect ID`, `read ID PATH`, `destroy ID`); each prints
/// `@@ ok VALUE` or `@@ err CODE MESSAGE`.
#[tokio::test]
#[ignore = "a helper: the --socket-group tests run it as another user"]
async fn peer_client() {
    let socket = std::env::var("STOCKADE_IT_PEER_SOCKET").expect("run by as_user");
    let ops = std::env::var("STOCKADE_IT_PEER_OPS").unwrap();
    let addr = stockade_client::Address::Unix(socket.into());
    let c = stockade_client::RemoteProvider::connect(&addr, None).await;
    for op in ops.lines() {
        let words: Vec<&str> = op.split(' ').collect();
        let r: stockade::Result<String> = match &c {
            Err(e) => Err(stockade::Error::Internal(e.to_string())),
            Ok(c) => run_op(c, &words).await,
        };
        match r {
            Ok(v) => println!("@@ ok {}", v.trim()),
            Err(e) => println!("@@ err {:?} {e}", e.code()),
        }
    }
}

async fn run_op(c: &stockade_client::RemoteProvider, w: &[&str]) -> stockade::Result<String> {
    let io = stockade::ExecIo::none;
    match w {
        ["health"] => Ok(c.health().await?.tenant),
        ["create"] => Ok(c.create_spec(&spec(120), None, true).await?.0.id),
        ["create-mount"] => {
            let mut s = spec(60);
            s.mounts
                .push(stockade::spec::Mount::parse("/etc:/x").unwrap());
            Ok(c.create_spec(&s, None, true).await?.0.id)
        }
        ["create-big"] => {
            let mut s = spec(60);
            s.limits.memory_bytes = 100 << 30;
            Ok(c.create_spec(&s, None, true).await?.0.id)
        }
        ["create-no-seccomp"] => {
            let mut s = spec(60);
            s.hardening.seccomp = false;
            Ok(c.create_spec(&s, None, true).await?.0.id)
        }
        ["create-wasm"] => {
            let s = stockade::SandboxSpec {
                image: Some("python".into()),
                ..spec(60)
            };
            let wasm = c.clone().with_backend(Some("wasm".into()));
            Ok(wasm.create_spec(&s, None, true).await?.0.id)
        }
        ["list"] => Ok(c
            .list()
            .await?
            .into_iter()
            .map(|i| i.id)
            .collect::<Vec<_>>()
            .join(",")),
        ["exec", id] => {
            let r = stockade::CheckedRequest::new(sh("echo ran")).unwrap();
            Ok(String::from_utf8_lossy(&c.exec(id, r, io()).await?.stdout).into_owned())
        }
        ["inspect", id] => Ok(c.inspect(id).await?.id),
        ["read", id, path] => match c
            .file(
                id,
                FileOp::Read {
                    path: (*path).into(),
                    offset: 0,
                    limit: 1 << 20,
                },
            )
            .await?
        {
            stockade::FileResult::Data { data, .. } => Ok(String::from_utf8_lossy(&data).into()),
            other => Ok(format!("{other:?}")),
        },
        ["destroy", id] => c.destroy(id).await.map(|()| "destroyed".into()),
        other => panic!("unknown op {other:?}"),
    }
}

fn ops(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn socket_group_members_use_the_daemon_each_uid_its_own_tenant() {
    if !require_root("the daemon's --socket-group tests") {
        return;
    }
    let Some(group) = TestGroup::create() else {
        return;
    };
    let d = TestDaemon::start(&[&format!("--socket-group={}", group.name)]);
    let meta = std::fs::metadata(TestDaemon::socket(&d.dir)).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o660);
    assert_eq!(meta.gid(), group.gid, "the socket belongs to the group");

    // A member creates and runs; its tenant is its uid.
    let a = as_user(&d, 1000, Some(group.gid), &ops(&["health", "create"]));
    assert_eq!(a[0], "ok uid:1000");
    let mine = a[1].strip_prefix("ok sb-").map(|s| format!("sb-{s}"));
    let mine = mine.unwrap_or_else(|| panic!("uid 1000 creates: {}", a[1]));
    let a = as_user(
        &d,
        1000,
        Some(group.gid),
        &[format!("exec {mine}"), "list".into(), "create-mount".into()],
    );
    assert_eq!(a[0], "ok ran");
    assert_eq!(a[1], format!("ok {mine}"));
    // A member is not root: it mounts no host path it names.
    assert!(a[2].starts_with("err PolicyDenied"), "{}", a[2]);

    // Not in the group: the socket refuses it.
    let a = as_user(&d, 1000, None, &ops(&["health"]));
    assert!(
        a[0].starts_with("err") && a[0].contains("ermission denied"),
        "{}",
        a[0]
    );

    // Root (the local tenant, as before) and uid 1000 do not see each other's.
    let root = d.client(None).await;
    assert_eq!(root.health().await.unwrap().tenant, "local");
    let sb = create(&root, spec(120)).await;
    sb.write("/tmp/secret", "root's\n").await.unwrap();
    let theirs = sb.id().to_string();
    for e in [
        root.inspect(&mine).await.unwrap_err(),
        root.exec(
            &mine,
            stockade::CheckedRequest::new(sh("true")).unwrap(),
            stockade::ExecIo::none(),
        )
        .await
        .unwrap_err(),
        root.file(&mine, FileOp::Ls { path: "/".into() })
            .await
            .unwrap_err(),
    ] {
        assert_eq!(e.code(), ErrorCode::NotFound, "{e}");
    }
    let listed: Vec<String> = root
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|i| i.id)
        .collect();
    assert_eq!(listed, vec![theirs.clone()]);
    root.destroy(&mine).await.unwrap();

    let probes = |id: &str| {
        vec![
            "list".to_string(),
            format!("inspect {id}"),
            format!("exec {id}"),
            format!("read {id} /tmp/secret"),
            format!("destroy {id}"),
        ]
    };
    let a = as_user(&d, 1000, Some(group.gid), &probes(&theirs));
    assert_eq!(a[0], format!("ok {mine}"), "root's is not listed");
    for x in &a[1..4] {
        assert!(x.starts_with("err NotFound"), "{a:?}");
    }
    // Destroy is idempotent: a no-op on what the caller does not own.
    assert_eq!(a[4], "ok destroyed");
    assert_eq!(sb.read("/tmp/secret").await.unwrap(), b"root's\n");

    // Another member, another uid: another tenant.
    let other = unused_uid();
    let a = as_user(&d, other, Some(group.gid), &probes(&mine));
    assert_eq!(a[0], "ok ", "uid {other} sees nothing of uid 1000's");
    for x in &a[1..4] {
        assert!(x.starts_with("err NotFound"), "{a:?}");
    }
    let a = as_user(
        &d,
        1000,
        Some(group.gid),
        &[
            format!("exec {mine}"),
            format!("destroy {mine}"),
            "list".into(),
        ],
    );
    assert_eq!(a, ["ok ran", "ok destroyed", "ok "], "still uid 1000's");
    sb.destroy().await.unwrap();
    d.assert_none_left().await;
}

#[test]
fn a_socket_group_that_does_not_exist_is_refused_at_start() {
    let out = TestDaemon::run_to_exit(&[
        "--socket-group=stockade-no-such-group",
        "--listen=unix:/tmp/stockade-it-nosuchgroup.sock",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("--socket-group stockade-no-such-group") && err.contains("groupadd"),
        "{err}"
    );
    assert!(!std::path::Path::new("/tmp/stockade-it-nosuchgroup.sock").exists());
}

/// A socket-group user is a tenant like a token holder: admitted by the
/// `socket-user` profile, which refuses a sandbox larger than the host, a hardening
/// opt-out and the in-process wasm engine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn socket_group_users_are_held_to_their_profile() {
    if !require_root("the daemon's --socket-group tests") {
        return;
    }
    let Some(group) = TestGroup::create() else {
        return;
    };
    let d = TestDaemon::start(&[&format!("--socket-group={}", group.name)]);
    let a = as_user(
        &d,
        1000,
        Some(group.gid),
        &ops(&["create-big", "create-no-seccomp", "create-wasm"]),
    );
    for (x, rule) in a
        .iter()
        .zip(["max_memory", "hardening_opt_outs", "providers"])
    {
        assert!(
            x.starts_with("err PolicyDenied")
                && x.contains(&format!("profile \"socket-user\" ({rule})")),
            "{rule}: {a:?}"
        );
    }
}
