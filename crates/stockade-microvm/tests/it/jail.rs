//! QEMU's confinement, seen from the host: the VMM of a live sandbox runs as an
//! unprivileged uid of its own, with no capabilities, `no_new_privs` and a seccomp
//! filter, and what that uid can reach of the host excludes root-only files and
//! every other sandbox's directory. Each assertion fails when QEMU runs as root.

use std::os::unix::process::CommandExt;
use std::path::Path;

use super::*;

/// The pid of the QEMU process of sandbox `id`.
fn qemu_of(id: &str) -> u32 {
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let cmd = String::from_utf8_lossy(&cmd);
        if cmd.starts_with("qemu-system") && cmd.contains(&format!("/{id}/")) {
            return pid;
        }
    }
    panic!("no QEMU process of sandbox {id}")
}

/// The fields of `/proc/PID/status` the confinement shows in.
struct Status {
    uids: Vec<u32>,
    gids: Vec<u32>,
    groups: String,
    caps: Vec<(String, u64)>,
    no_new_privs: String,
    seccomp: String,
}

fn status(pid: u32) -> Status {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .unwrap_or_else(|| panic!("no {name} in /proc/{pid}/status:\n{text}"))
            .trim()
            .to_string()
    };
    let ids = |name: &str| -> Vec<u32> {
        field(name)
            .split_whitespace()
            .map(|v| v.parse().unwrap())
            .collect()
    };
    Status {
        uids: ids("Uid"),
        gids: ids("Gid"),
        groups: field("Groups"),
        caps: ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"]
            .iter()
            .map(|c| (c.to_string(), u64::from_str_radix(&field(c), 16).unwrap()))
            .collect(),
        no_new_privs: field("NoNewPrivs"),
        seccomp: field("Seccomp"),
    }
}

/// Asserts the confinement of the QEMU process `pid`; returns its (uid, gid).
fn assert_confined(pid: u32, what: &str) -> (u32, u32) {
    let s = status(pid);
    assert!(
        s.uids.len() == 4 && s.uids.iter().all(|u| *u == s.uids[0] && *u != 0),
        "{what}: QEMU's uids (real, effective, saved, fs) are {:?}: not one unprivileged uid",
        s.uids
    );
    assert!(
        s.gids.len() == 4 && s.gids.iter().all(|g| *g == s.gids[0] && *g != 0),
        "{what}: QEMU's gids are {:?}",
        s.gids
    );
    assert_eq!(s.groups, "", "{what}: QEMU has supplementary groups");
    for (set, value) in &s.caps {
        assert_eq!(*value, 0, "{what}: QEMU's {set} is {value:#x}, not empty");
    }
    assert_eq!(
        s.no_new_privs, "1",
        "{what}: QEMU runs without no_new_privs"
    );
    assert_eq!(
        s.seccomp, "2",
        "{what}: QEMU runs without a seccomp filter (mode {})",
        s.seccomp
    );
    let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
    assert!(
        cmd.contains(
            "-sandbox on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny"
        ),
        "{what}: QEMU's own seccomp filter is not the full one: {cmd}"
    );
    (s.uids[0], s.gids[0])
}

/// Runs `script` under `/bin/sh` as `uid`/`gid` with no supplementary groups (as
/// QEMU runs: `Command` drops them when root sets a uid): its stdout.
fn as_uid(uid: u32, gid: u32, script: &str) -> String {
    let out = std::process::Command::new("/bin/sh")
        .arg("-c")
        .arg(script)
        .uid(uid)
        .gid(gid)
        .current_dir("/")
        .output()
        .expect("run a shell as QEMU's uid");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qemu_runs_unprivileged_under_seccomp_and_its_uid_reaches_nothing_else() {
    let Some(p) = provider().await else { return };
    let a = vm(&p, spec()).await;
    let b = vm(&p, spec()).await;
    let (ida, idb) = (a.id().to_string(), b.id().to_string());
    let out = sh(&a, "echo up", 60_000).await;
    assert_eq!(text(&out.stdout), "up\n", "{out:?}");

    let (qa, qb) = (qemu_of(&ida), qemu_of(&idb));
    let (uid, gid) = assert_confined(qa, "sandbox a");
    let (uid_b, _) = assert_confined(qb, "sandbox b");
    assert_ne!(uid, uid_b, "two VMs' QEMUs share uid {uid}");

    // A process with QEMU's ids, from the host: what a QEMU escape would hold.
    let run = Path::new("/run/stockade-microvm");
    let (own, other) = (run.join(&ida), run.join(&idb));
    let reach = |path: &Path, how: &str| {
        let p = path.display();
        as_uid(
            uid,
            gid,
            &format!("{how} {p} >/dev/null 2>&1 && echo REACHED || echo refused"),
        )
    };
    // The control: its own directory and boot files are what it is given, so the
    // refusals below are the uid's, not a broken probe's.
    assert_eq!(reach(&own.join("vmm"), "ls"), "REACHED\n", "own vmm dir");
    assert_eq!(reach(&own.join("initrd"), "cat"), "REACHED\n", "own initrd");
    for (path, how) in [
        (Path::new("/etc/shadow").to_path_buf(), "cat"),
        (Path::new("/root").to_path_buf(), "ls"),
        (run.to_path_buf(), "ls"),
        (own.clone(), "ls"),
        (own.join("host.json"), "cat"),
        (own.join("record.json"), "cat"),
        (other.join("vmm"), "ls"),
        (other.join("vmm/console.log"), "cat"),
        (other.join("initrd"), "cat"),
        (other.join("host.json"), "cat"),
        (Path::new("/var/lib/stockade").to_path_buf(), "ls"),
        (
            Path::new(&format!("/proc/{qb}/environ")).to_path_buf(),
            "cat",
        ),
        (
            Path::new(&format!("/proc/{qb}/mem")).to_path_buf(),
            "head -c1",
        ),
    ] {
        assert_eq!(
            reach(&path, how),
            "refused\n",
            "QEMU's uid {uid} can `{how} {}`",
            path.display()
        );
    }
    // Nor write the sandbox's own directory (where root writes its records), nor
    // talk to its agent or the other VM's sockets.
    let wrote = as_uid(
        uid,
        gid,
        &format!(
            "touch {0}/x 2>/dev/null && echo WROTE; test -w {0}/agent.sock && echo AGENT; \
             test -w {1}/vmm/qmp.sock && echo QMP; true",
            own.display(),
            other.display()
        ),
    );
    assert_eq!(wrote, "", "QEMU's uid reached: {wrote}");
    // Another host user (nobody) does not get into a sandbox's directory at all.
    let nobody = as_uid(
        65534,
        65534,
        &format!(
            "cat {}/initrd >/dev/null 2>&1 && echo REACHED; ls {}/vmm >/dev/null 2>&1 && echo REACHED; true",
            own.display(),
            own.display()
        ),
    );
    assert_eq!(nobody, "", "nobody reached sandbox a's directory");

    // Restored by descriptor (resume), the VM is confined again, under a fresh uid.
    a.pause().await.expect("pause");
    a.resume().await.expect("resume");
    let out = sh(&a, "echo back", 60_000).await;
    assert_eq!(text(&out.stdout), "back\n", "{out:?}");
    assert_confined(qemu_of(&ida), "sandbox a resumed");

    // inspect says how QEMU is confined.
    let info = p.inspect(&ida).await.unwrap();
    assert!(
        info.applied
            .iter()
            .any(|w| w.detail.starts_with("VMM confinement:") && w.detail.contains("seccomp")),
        "{:?}",
        info.applied
    );
    a.destroy().await.unwrap();
    b.destroy().await.unwrap();
}
