//! User namespaces of native sandboxes, tested as attacks: the host ids sandboxed code
//! runs as belong to nobody and to no other sandbox, root inside is powerless outside
//! its own files, and workspaces line up with their host owners.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::time::Duration;

use stockade::{ExecRequest, Sandbox, SandboxSpec};
use stockade_spec::{Mount, User};

use crate::{destroy_clean, py, require_root, sandbox, sh, state_root, text};

fn native_only(test: &str) -> bool {
    if !require_root(test) {
        return false;
    }
    !matches!(std::env::var("STOCKADE_TEST_PROVIDER").as_deref(), Ok(p) if p != "native")
}

/// Host uids of `/etc/passwd`.
fn host_account_uids() -> Vec<u32> {
    std::fs::read_to_string("/etc/passwd")
        .unwrap()
        .lines()
        .filter_map(|l| l.split(':').nth(2)?.parse().ok())
        .collect()
}

fn init_pid(sb: &Sandbox) -> u32 {
    let st: serde_json::Value = serde_json::from_slice(
        &std::fs::read(state_root().join(sb.id()).join("state.json")).unwrap(),
    )
    .unwrap();
    st["init_pid"].as_u64().unwrap() as u32
}

/// Host pids and uids of the processes named `comm` in `sb`'s pid namespace.
fn host_processes(sb: &Sandbox, comm: &str) -> Vec<(u32, u32)> {
    let ns = std::fs::read_link(format!("/proc/{}/ns/pid", init_pid(sb))).unwrap();
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok() != Some(ns.clone()) {
            continue;
        }
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let name = status
            .lines()
            .next()
            .unwrap_or("")
            .trim_start_matches("Name:")
            .trim();
        if name != comm {
            continue;
        }
        let uid = status
            .lines()
            .find(|l| l.starts_with("Uid:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|u| u.parse().ok())
            .unwrap();
        found.push((pid, uid));
    }
    found
}

/// Starts `sleep` in the background in `sb` and returns its host pid and uid.
async fn sleeper(sb: &Sandbox) -> (u32, u32) {
    let mut r = ExecRequest::new(["/bin/sh", "-c", "sleep 60 &"].map(String::from));
    r.background = true;
    r.timeout_ms = Some(10_000);
    let out = sb.exec(r).await.unwrap();
    assert_eq!(out.exit_code, 0, "{}", text(&out.stderr));
    for _ in 0..100 {
        if let Some(p) = host_processes(sb, "sleep").first() {
            return *p;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no sleep process found in {}", sb.id());
}

/// Runs `code` (Python) on the host as `uid`/`gid` with `pid` as argv[1]; its stdout.
fn host_python_as(uid: u32, gid: u32, code: &str, pid: u32) -> String {
    let out = std::process::Command::new("python3")
        .args(["-c", code, &pid.to_string()])
        .uid(uid)
        .gid(gid)
        .output()
        .unwrap();
    format!("{}{}", text(&out.stdout), text(&out.stderr))
}

const SIGNAL: &str = "import os, sys\ntry:\n    os.kill(int(sys.argv[1]), 0); print('SIGNALLED')\nexcept PermissionError:\n    print('EPERM')";
const PTRACE: &str = "import ctypes, sys\nlibc = ctypes.CDLL(None, use_errno=True)\nr = libc.ptrace(16, int(sys.argv[1]), 0, 0)\nprint('ATTACHED' if r == 0 else 'ERRNO %d' % ctypes.get_errno())";

#[tokio::test]
async fn sandboxed_code_runs_as_host_ids_of_no_account_and_of_no_other_sandbox() {
    if !native_only("sandboxed_code_runs_as_host_ids_of_no_account_and_of_no_other_sandbox") {
        return;
    }
    let (a, b) = (
        sandbox(SandboxSpec::default()).await,
        sandbox(SandboxSpec::default()).await,
    );
    // Both are uid 1000 inside.
    for sb in [&a, &b] {
        assert_eq!(text(&sh(sb, "id -u", 5_000).await.stdout), "1000\n");
    }
    let ((pa, ua), (pb, ub)) = (sleeper(&a).await, sleeper(&b).await);
    let accounts = host_account_uids();
    for (uid, sb) in [(ua, &a), (ub, &b)] {
        assert!(
            !accounts.contains(&uid),
            "{} runs as host uid {uid}, an account",
            sb.id()
        );
        assert!(
            uid >= 65_536,
            "host uid {uid} is in the range of ordinary accounts"
        );
        // PID 1 (the agent) is root of the namespace, not host root either.
        let status = std::fs::read_to_string(format!("/proc/{}/status", init_pid(sb))).unwrap();
        let uid0 = status
            .lines()
            .find(|l| l.starts_with("Uid:"))
            .unwrap()
            .to_string();
        assert!(
            !uid0.contains("\t0\t"),
            "PID 1 of {} is host root: {uid0}",
            sb.id()
        );
        let info = sb.info();
        let line = info
            .applied
            .iter()
            .find(|w| w.kind == stockade::WallKind::UserNamespace)
            .unwrap();
        assert!(
            line.enforced && line.detail.contains(&format!("uid 1000 is host uid {uid}")),
            "{line}"
        );
    }
    assert_ne!(ua, ub, "two live sandboxes share host uid {ua}");
    // Same uid inside, different host ids: a process with a's credentials can
    // neither signal nor trace b's (and the check does work: b's own uid may signal).
    let gid = |uid: u32| uid; // gids are mapped like uids
    assert_eq!(host_python_as(ua, gid(ua), SIGNAL, pb).trim(), "EPERM");
    assert_eq!(host_python_as(ub, gid(ub), SIGNAL, pa).trim(), "EPERM");
    assert_eq!(host_python_as(ub, gid(ub), SIGNAL, pb).trim(), "SIGNALLED");
    let traced = host_python_as(ua, gid(ua), PTRACE, pb);
    assert!(traced.trim().starts_with("ERRNO"), "{traced}");
    destroy_clean(a).await;
    destroy_clean(b).await;
}

#[tokio::test]
async fn a_range_is_leased_for_the_sandboxs_life_and_released_at_destroy() {
    if !native_only("a_range_is_leased_for_the_sandboxs_life_and_released_at_destroy") {
        return;
    }
    let sb = sandbox(SandboxSpec::default()).await;
    let st: serde_json::Value = serde_json::from_slice(
        &std::fs::read(state_root().join(sb.id()).join("state.json")).unwrap(),
    )
    .unwrap();
    let first = st["host_ids"]["first"].as_u64().unwrap();
    let lease = stockade::idpool::lease_dir().join(first.to_string());
    assert_eq!(std::fs::read_to_string(&lease).unwrap(), sb.id());
    let try_lock = || {
        let f = std::fs::File::open(&lease).unwrap();
        f.try_lock().is_ok()
    };
    assert!(!try_lock(), "the lease of a live sandbox is not locked");
    destroy_clean(sb).await;
    assert!(try_lock(), "the lease outlived its sandbox");
}

fn workspace(owner: u32, mode: u32) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("in.txt"), "from the host\n").unwrap();
    std::fs::set_permissions(
        d.path().join("in.txt"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    for p in [d.path().to_path_buf(), d.path().join("in.txt")] {
        std::os::unix::fs::chown(&p, Some(owner), Some(owner)).unwrap();
    }
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(mode)).unwrap();
    d
}

fn mounted(dir: &Path, writable: bool, user: User) -> SandboxSpec {
    SandboxSpec {
        mounts: vec![Mount {
            host: dir.to_path_buf(),
            target: "/work".into(),
            writable,
        }],
        user,
        ..Default::default()
    }
}

#[tokio::test]
async fn workspaces_appear_owned_by_the_sandbox_user_and_writes_land_as_their_owner() {
    if !native_only("workspaces_appear_owned_by_the_sandbox_user_and_writes_land_as_their_owner") {
        return;
    }
    // What `mktemp -d` makes: root-owned, 0700. Read-only: readable, not writable.
    let ro = workspace(0, 0o700);
    let sb = sandbox(mounted(ro.path(), false, User::default())).await;
    let out = sh(
        &sb,
        "cat /work/in.txt; stat -c '%u' /work; echo x > /work/new || echo DENIED",
        5_000,
    )
    .await;
    assert_eq!(
        text(&out.stdout),
        "from the host\n1000\nDENIED\n",
        "{}",
        text(&out.stderr)
    );
    destroy_clean(sb).await;
    // Writable, owned by root and by another host user (uid 1000 exists here).
    for owner in [0u32, 1000] {
        let rw = workspace(owner, 0o755);
        let sb = sandbox(mounted(rw.path(), true, User::default())).await;
        let out = sh(
            &sb,
            "cat /work/in.txt && echo new > /work/out.txt && mkdir /work/d && echo ok",
            5_000,
        )
        .await;
        assert_eq!(
            text(&out.stdout),
            "from the host\nok\n",
            "{}",
            text(&out.stderr)
        );
        for p in ["out.txt", "d"] {
            let md = std::fs::metadata(rw.path().join(p)).unwrap();
            assert_eq!(
                (md.uid(), md.gid()),
                (owner, owner),
                "{p} in a workspace of {owner}"
            );
        }
        // A setuid file there would be the host owner's: refused however it is asked for.
        let out = py(
            &sb,
            "import os\nfor how in ('chmod', 'open'):\n    try:\n        if how == 'chmod': os.chmod('/work/out.txt', 0o4755)\n        else: os.close(os.open('/work/s', os.O_CREAT | os.O_WRONLY, 0o6755))\n        print(how, 'ALLOWED')\n    except PermissionError:\n        print(how, 'EPERM')",
            5_000,
        )
        .await;
        assert_eq!(
            text(&out.stdout),
            "chmod EPERM\nopen EPERM\n",
            "{}",
            text(&out.stderr)
        );
        let mode = std::fs::metadata(rw.path().join("out.txt")).unwrap().mode();
        assert_eq!(mode & 0o6000, 0, "a set-id bit reached the host: {mode:o}");
        destroy_clean(sb).await;
    }
    // Read-only stays read-only for root inside.
    let ro = workspace(0, 0o755);
    let root = User { uid: 0, gid: 0 };
    let sb = sandbox(mounted(ro.path(), false, root)).await;
    let out = sh(
        &sb,
        "id -u; cat /work/in.txt; touch /work/x || echo DENIED",
        5_000,
    )
    .await;
    assert_eq!(
        text(&out.stdout),
        "0\nfrom the host\nDENIED\n",
        "{}",
        text(&out.stderr)
    );
    assert!(!ro.path().join("x").exists());
    destroy_clean(sb).await;
}

#[tokio::test]
async fn a_filesystem_that_cannot_be_idmapped_is_refused_by_name() {
    if !native_only("a_filesystem_that_cannot_be_idmapped_is_refused_by_name") {
        return;
    }
    let spec = mounted(Path::new("/sys/kernel"), false, User::default());
    let opts = stockade::CreateOptions {
        owner_pid: Some(std::process::id()),
    };
    let Err(err) = Sandbox::create(crate::provider(), spec, opts).await else {
        panic!("a sandbox was created over sysfs");
    };
    let msg = err.to_string();
    assert!(
        msg.contains("sysfs does not support idmapped mounts"),
        "{msg}"
    );
}

const ROOT_WRITES: &str = "echo 'extra:x:5000:5000::/:/bin/sh' >> /etc/passwd && mkdir -p /usr/local/lib/pkg && echo 'print(42)' > /usr/local/lib/pkg/mod.py && echo conf > /etc/pkg.conf && chown 5000:5000 /etc/pkg.conf && echo WROTE";

#[tokio::test]
async fn root_inside_installs_into_a_writable_root_and_nothing_else() {
    if !native_only("root_inside_installs_into_a_writable_root_and_nothing_else") {
        return;
    }
    let root = User { uid: 0, gid: 0 };
    let spec = SandboxSpec {
        user: root,
        writable: true,
        ..Default::default()
    };
    let sb = sandbox(spec.clone()).await;
    let out = sh(&sb, ROOT_WRITES, 10_000).await;
    assert_eq!(text(&out.stdout), "WROTE\n", "{}", text(&out.stderr));
    let out = sh(
        &sb,
        "tail -1 /etc/passwd; stat -c '%u' /etc/pkg.conf",
        5_000,
    )
    .await;
    assert_eq!(text(&out.stdout), "extra:x:5000:5000::/:/bin/sh\n5000\n");
    // Root of the sandbox's own namespace only: no mount, no module, no /proc/sys, no
    // network, no raw sockets.
    let out = py(
        &sb,
        "import ctypes, os, socket\nlibc = ctypes.CDLL(None, use_errno=True)\nos.makedirs('/tmp/m', exist_ok=True)\nprint('mount', libc.mount(b'none', b'/tmp/m', b'tmpfs', 0, None), ctypes.get_errno())\nprint('module', libc.syscall(313, -1, b'', 0), ctypes.get_errno())\ntry:\n    open('/proc/sys/kernel/hostname', 'w').write('x'); print('sysctl WROTE')\nexcept OSError as e:\n    print('sysctl', type(e).__name__)\ntry:\n    socket.create_connection(('1.1.1.1', 53), timeout=3); print('net REACHED')\nexcept OSError as e:\n    print('net', type(e).__name__)\ntry:\n    socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP); print('raw OPENED')\nexcept OSError as e:\n    print('raw', type(e).__name__)",
        20_000,
    )
    .await;
    let got = text(&out.stdout);
    let lines: Vec<&str> = got.lines().collect();
    assert_eq!(lines.len(), 5, "{got}{}", text(&out.stderr));
    assert!(
        lines[0].starts_with("mount -1 ") && lines[1].starts_with("module -1 "),
        "{got}"
    );
    assert_eq!(
        &lines[2..],
        ["sysctl OSError", "net OSError", "raw PermissionError"],
        "{got}"
    );
    destroy_clean(sb).await;
    // Discarded with the sandbox; the host's files were never touched.
    let again = sandbox(spec).await;
    let out = sh(
        &again,
        "grep -c extra /etc/passwd; ls /usr/local/lib/pkg 2>&1 | head -1",
        5_000,
    )
    .await;
    assert!(
        text(&out.stdout).starts_with("0\n"),
        "{}",
        text(&out.stdout)
    );
    destroy_clean(again).await;
    assert!(!Path::new("/usr/local/lib/pkg").exists());
    // Without a writable root the same writes fail.
    let sb = sandbox(SandboxSpec {
        user: root,
        ..Default::default()
    })
    .await;
    let out = sh(&sb, ROOT_WRITES, 10_000).await;
    assert_ne!(out.exit_code, 0);
    assert_eq!(text(&out.stdout), "");
    let out = sh(&sb, "touch /usr/x || touch /etc/x || echo DENIED", 5_000).await;
    assert_eq!(text(&out.stdout), "DENIED\n");
    destroy_clean(sb).await;
}

#[tokio::test]
async fn root_inside_cannot_read_the_hosts_private_keys() {
    if !native_only("root_inside_cannot_read_the_hosts_private_keys") {
        return;
    }
    if !Path::new("/etc/ssl/private").is_dir() {
        std::fs::create_dir_all("/etc/ssl/private").unwrap();
        std::fs::set_permissions("/etc/ssl/private", std::fs::Permissions::from_mode(0o700))
            .unwrap();
    }
    let sb = sandbox(SandboxSpec {
        user: User { uid: 0, gid: 0 },
        writable: true,
        ..Default::default()
    })
    .await;
    let out = sh(
        &sb,
        "ls -A /etc/ssl/private 2>&1; ls /etc/ssl/certs | head -1 >/dev/null && echo CERTS",
        5_000,
    )
    .await;
    let got = text(&out.stdout);
    assert!(
        got.contains("Permission denied") && got.ends_with("CERTS\n"),
        "{got}"
    );
    destroy_clean(sb).await;
}

/// Makes inotify instances until the kernel refuses (at most 1,000) and prints how many
/// and the errno of the refusal.
const INOTIFY_COUNT: &str = "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nn = 0\nwhile n < 1000 and libc.inotify_init() >= 0:\n    n += 1\nprint(n, ctypes.get_errno())";
/// [`INOTIFY_COUNT`] into `/tmp/held`, then holds the instances for a minute.
const INOTIFY_HOLD: &str = "import ctypes, sys, time\nlibc = ctypes.CDLL(None, use_errno=True)\nn = 0\nwhile n < 1000 and libc.inotify_init() >= 0:\n    n += 1\nopen('/tmp/held', 'w').write('%d %d' % (n, ctypes.get_errno()))\ntime.sleep(60)";

/// Runs `code` (Python) on the host as the test's own user; its stdout and stderr.
fn host_python(code: &str, arg: &str) -> String {
    let out = std::process::Command::new("python3")
        .args(["-c", code, arg])
        .output()
        .unwrap();
    format!("{}{}", text(&out.stdout), text(&out.stderr))
}

#[tokio::test]
async fn a_sandbox_spends_per_user_counts_of_its_own_not_host_roots() {
    if !native_only("a_sandbox_spends_per_user_counts_of_its_own_not_host_roots") {
        return;
    }
    let (a, b) = (
        sandbox(SandboxSpec::default()).await,
        sandbox(SandboxSpec::default()).await,
    );
    // The kernel charges inotify instances, keys and namespaces made inside a user
    // namespace to the namespace's owner: that must be the sandbox's own host id.
    let owner = host_python(
        "import fcntl, os, struct, sys\nfd = os.open('/proc/%s/ns/user' % sys.argv[1], os.O_RDONLY)\nprint(struct.unpack('I', fcntl.ioctl(fd, 0xb704, bytes(4)))[0])",
        &init_pid(&a).to_string(),
    );
    let st: serde_json::Value = serde_json::from_slice(
        &std::fs::read(state_root().join(a.id()).join("state.json")).unwrap(),
    )
    .unwrap();
    let first = st["host_ids"]["first"].as_u64().unwrap();
    assert_eq!(
        owner.trim(),
        first.to_string(),
        "the user namespace of {} is not owned by its leased id",
        a.id()
    );
    // a takes every inotify instance it can and holds them.
    let mut r =
        ExecRequest::new(["/bin/sh", "-c", "python3 -c \"$0\" &", INOTIFY_HOLD].map(String::from));
    r.background = true;
    r.timeout_ms = Some(10_000);
    let out = a.exec(r).await.unwrap();
    assert_eq!(out.exit_code, 0, "{}", text(&out.stderr));
    let mut held = String::new();
    for _ in 0..200 {
        held = text(&sh(&a, "cat /tmp/held", 5_000).await.stdout);
        if !held.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let held_n: u32 = held.split_whitespace().next().unwrap().parse().unwrap();
    assert!(
        held_n >= 1,
        "the sandbox could make no inotify instance: {held}"
    );
    // Host root, and another sandbox, still have their own.
    let root = host_python(
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nfd = libc.inotify_init()\nprint('OK' if fd >= 0 else 'ERRNO %d' % ctypes.get_errno())",
        "",
    );
    assert_eq!(
        root.trim(),
        "OK",
        "host root lost its inotify instances to a sandbox holding {held_n}"
    );
    let other = text(&py(&b, INOTIFY_COUNT, 10_000).await.stdout);
    let other_n: u32 = other.split_whitespace().next().unwrap().parse().unwrap();
    assert!(
        other_n >= 64,
        "a second sandbox got {other_n} inotify instances while the first holds {held_n}"
    );
    destroy_clean(a).await;
    destroy_clean(b).await;
}

/// Root inside (an exec as uid 0, E2B's `user="root"`) creates files in a writable
/// workspace, as on any machine, owned on the host by the sandbox's own root (the
/// first id of its range): never host root, never a host account. Before, the
/// workspace's idmap had no line for root inside and every create failed with
/// EOVERFLOW.
#[tokio::test]
async fn root_inside_writes_a_workspace_as_the_sandboxs_own_root() {
    if !native_only("root_inside_writes_a_workspace_as_the_sandboxs_own_root") {
        return;
    }
    if stockade_testkit::rootless() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut spec = SandboxSpec::default();
    spec.mounts.push(Mount {
        host: dir.path().into(),
        target: "/work".into(),
        writable: true,
    });
    let sb = sandbox(spec).await;
    let mut req = ExecRequest::new([
        "sh",
        "-c",
        "echo r > /work/by-root && id -u && stat -c '%u' /work/by-root",
    ]);
    req.uid = Some(0);
    req.timeout_ms = Some(10_000);
    let out = sb.exec(req).await.unwrap();
    assert_eq!(
        text(&out.stdout),
        "0\n0\n",
        "root inside could not write: {}",
        text(&out.stderr)
    );
    let out = sh(&sb, "echo u > /work/by-user && echo ok", 10_000).await;
    assert_eq!(text(&out.stdout), "ok\n", "{}", text(&out.stderr));
    let by_root = std::fs::metadata(dir.path().join("by-root")).unwrap();
    let by_user = std::fs::metadata(dir.path().join("by-user")).unwrap();
    // The exec user's files are the workspace owner's (host root's tempdir here).
    assert_eq!(by_user.uid(), dir.path().metadata().unwrap().uid());
    assert!(
        by_root.uid() >= 65_536 && !host_account_uids().contains(&by_root.uid()),
        "root inside wrote as host uid {}",
        by_root.uid()
    );
    destroy_clean(sb).await;
}
