//! Rootless native sandboxes, through the CLI as a real unprivileged user: the one
//! `test.sh` makes (`useradd -m stockade-rl`, with subordinate ids) and delegates a
//! cgroup to (`stockade setup rootless --user stockade-rl`), and one it leaves without
//! either (`stockade-rl-bare`).

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::PathBuf;
use std::process::{Command, Output};

use stockade_testkit::{require, require_root};

const USER: &str = "stockade-rl";
const BARE: &str = "stockade-rl-bare";
const FIX: &str = "useradd -m stockade-rl && stockade setup rootless --user stockade-rl; useradd -M stockade-rl-bare (test.sh does)";

/// uid, gid and home of a host account.
fn account(name: &str) -> Result<(u32, u32, PathBuf), String> {
    let passwd = std::fs::read_to_string("/etc/passwd").map_err(|e| e.to_string())?;
    passwd
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.first() == Some(&name)).then(|| {
                Some((
                    f.get(2)?.parse().ok()?,
                    f.get(3)?.parse().ok()?,
                    PathBuf::from(f.get(5)?),
                ))
            })?
        })
        .ok_or_else(|| format!("no account {name}"))
}

/// `stockade ARGS` as `name`, with nothing of root's environment.
fn as_user(name: &str, args: &[&str]) -> Output {
    let (uid, gid, _) = account(name).unwrap();
    let runtime = tempfile::tempdir().unwrap().keep();
    std::os::unix::fs::chown(&runtime, Some(uid), Some(gid)).unwrap();
    std::fs::set_permissions(&runtime, std::fs::Permissions::from_mode(0o700)).unwrap();
    let out = Command::new("setpriv")
        .arg(format!("--reuid={uid}"))
        .arg(format!("--regid={gid}"))
        .arg("--init-groups")
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_stockade"))
        .args(args)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", &runtime)
        .env("XDG_RUNTIME_DIR", &runtime)
        .output()
        .expect("run setpriv");
    let _ = std::fs::remove_dir_all(&runtime);
    out
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn ready(test: &str) -> Option<(u32, u32)> {
    if !require_root(test) {
        return None;
    }
    let (uid, gid, _) = require("the rootless test user", account(USER), FIX)?;
    require("the bare rootless test user", account(BARE), FIX)?;
    Some((uid, gid))
}

#[test]
fn a_user_runs_native_sandboxes_as_their_own_uid_without_root() {
    let Some((uid, _)) = ready("a_user_runs_native_sandboxes_as_their_own_uid_without_root") else {
        return;
    };
    let out = as_user(
        USER,
        &[
            "run",
            "--",
            "sh",
            "-c",
            "id -u; grep -w 1000 /proc/self/uid_map",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let got = text(&out.stdout);
    let mut lines = got.lines();
    assert_eq!(lines.next(), Some("1000"), "{got}");
    let map: Vec<&str> = lines.next().unwrap_or("").split_whitespace().collect();
    assert_eq!(map, ["1000", &uid.to_string(), "1"], "{got}");
    // Limits hold: a memory bomb is killed inside the delegated cgroup.
    let out = as_user(
        USER,
        &[
            "run",
            "--memory",
            "64m",
            "--",
            "python3",
            "-c",
            "x = bytearray(300 << 20)",
        ],
    );
    assert_eq!(out.status.code(), Some(137), "{}", text(&out.stderr));
}

#[test]
fn a_rootless_workspace_lines_up_with_its_owner() {
    let Some((uid, gid)) = ready("a_rootless_workspace_lines_up_with_its_owner") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid)).unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let ws = format!("{}:rw", dir.path().display());
    let out = as_user(
        USER,
        &[
            "run",
            "--workspace",
            &ws,
            "--",
            "sh",
            "-c",
            "stat -c %u /work && echo made > /work/f",
        ],
    );
    assert_eq!(text(&out.stdout), "1000\n", "{}", text(&out.stderr));
    let md = std::fs::metadata(dir.path().join("f")).unwrap();
    assert_eq!((md.uid(), md.gid()), (uid, gid));
}

#[test]
fn rootless_egress_reaches_out_but_not_the_hosts_network() {
    let Some(_) = ready("rootless_egress_reaches_out_but_not_the_hosts_network") else {
        return;
    };
    // The host's default gateway is on its LAN: refused by the sandbox's firewall.
    let route = std::fs::read_to_string("/proc/net/route").unwrap();
    let gw = route
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.get(1) == Some(&"00000000"))
        .map(|f| u32::from_str_radix(f[2], 16).unwrap().to_le_bytes())
        .map(|b| format!("{}.{}.{}.{}", b[0], b[1], b[2], b[3]))
        .unwrap();
    let code = format!(
        "import socket, urllib.request\nprint(urllib.request.urlopen('https://pypi.org/simple/', timeout=20).status)\ntry:\n    socket.create_connection(('{gw}', 80), timeout=5); print('LAN REACHED')\nexcept OSError as e:\n    print('lan blocked')"
    );
    let out = as_user(USER, &["run", "--network", "--", "python3", "-c", &code]);
    assert_eq!(
        text(&out.stdout),
        "200\nlan blocked\n",
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn without_a_delegated_cgroup_the_error_names_each_limit_and_the_fix() {
    let Some(_) = ready("without_a_delegated_cgroup_the_error_names_each_limit_and_the_fix") else {
        return;
    };
    let out = as_user(BARE, &["run", "--", "true"]);
    assert_eq!(out.status.code(), Some(69), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    for want in [
        "memory 512MiB",
        "cpus 1",
        "pids 64",
        "stockade setup rootless --user stockade-rl-bare",
    ] {
        assert!(err.contains(want), "{want:?} missing from: {err}");
    }
}

#[test]
fn setup_rootless_is_for_root_and_for_real_users() {
    let Some(_) = ready("setup_rootless_is_for_root_and_for_real_users") else {
        return;
    };
    let out = as_user(USER, &["setup", "rootless", "--user", USER]);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        text(&out.stderr).contains("needs root"),
        "{}",
        text(&out.stderr)
    );
    let out = Command::new(env!("CARGO_BIN_EXE_stockade"))
        .args(["setup", "rootless", "--user", "no-such-user-here"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("useradd no-such-user-here"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_state_directory_planted_by_another_user_is_refused() {
    let Some((uid, _)) = ready("a_state_directory_planted_by_another_user_is_refused") else {
        return;
    };
    // Without XDG_RUNTIME_DIR the state goes to /tmp/stockade-UID: somebody else (root
    // here, as an attacker would be another user) made it first, world-writable.
    let planted = PathBuf::from(format!("/tmp/stockade-{uid}"));
    let _ = std::fs::remove_dir_all(&planted);
    std::fs::create_dir(&planted).unwrap();
    std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o777)).unwrap();
    let (_, gid, home) = account(USER).unwrap();
    let out = Command::new("setpriv")
        .arg(format!("--reuid={uid}"))
        .arg(format!("--regid={gid}"))
        .arg("--init-groups")
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_stockade"))
        .args(["run", "--", "true"])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", home)
        .output()
        .unwrap();
    std::fs::remove_dir_all(&planted).unwrap();
    assert_eq!(out.status.code(), Some(69), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("not a directory of uid"),
        "{}",
        text(&out.stderr)
    );
}
