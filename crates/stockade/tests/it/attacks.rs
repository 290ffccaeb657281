//! Escape attempts. Each fails its test when the attack succeeds.

use std::net::TcpListener;
use std::sync::Arc;
use std::time::{Duration, Instant};

use stockade::spec::Mount;
use stockade::{ExecRequest, SandboxSpec};

use crate::*;

#[tokio::test]
async fn network_egress_to_host_loopback_is_blocked() {
    if !require_root("network_egress_to_host_loopback_is_blocked") {
        return;
    }
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let sb = sandbox(SandboxSpec::default()).await;
    let code = format!(
        "import socket\ntry:\n socket.create_connection(('127.0.0.1', {port}), timeout=2); print('CONNECTED')\nexcept OSError as e: print('refused', e)\n\
         try:\n socket.create_connection(('1.1.1.1', 53), timeout=2); print('CONNECTED')\nexcept OSError as e: print('refused', e)\n\
         try:\n socket.getaddrinfo('pypi.org', 443); print('RESOLVED')\nexcept OSError as e: print('no dns', e)"
    );
    let out = py(&sb, &code, 20_000).await;
    let stdout = text(&out.stdout);
    assert!(
        !stdout.contains("CONNECTED"),
        "the sandbox reached the network: {stdout}"
    );
    assert!(
        !stdout.contains("RESOLVED"),
        "the sandbox resolved a name: {stdout}"
    );
    assert_eq!(
        stdout.lines().filter(|l| l.starts_with("refused")).count(),
        2,
        "{stdout} {}",
        text(&out.stderr)
    );
    assert!(
        listener.accept().is_err(),
        "the host listener received a connection"
    );
    // Only loopback exists inside.
    let ifs = sh(&sb, "cat /proc/net/dev", 5_000).await;
    let names: Vec<String> = text(&ifs.stdout)
        .lines()
        .skip(2)
        .filter_map(|l| l.split(':').next().map(|s| s.trim().to_string()))
        .collect();
    assert_eq!(names, ["lo"], "interfaces inside: {names:?}");
    destroy_clean(sb).await;
}

#[tokio::test]
async fn writes_outside_tmp_and_writable_mounts_fail() {
    if !require_root("writes_outside_tmp_and_writable_mounts_fail") {
        return;
    }
    let rw = tempfile::tempdir().unwrap();
    let ro = tempfile::tempdir().unwrap();
    // The sandbox user (1000) owns the writable dir, as a workspace owner would; it
    // could write the read-only one if the mount were not read-only.
    // (Rootless, the caller's own directories are already the sandbox user's.)
    if !stockade_testkit::rootless() {
        for d in [rw.path(), ro.path()] {
            std::os::unix::fs::chown(d, Some(1000), Some(1000)).unwrap();
        }
    }
    std::fs::write(ro.path().join("keep.txt"), "original").unwrap();
    let mut spec = SandboxSpec::default();
    spec.mounts.push(Mount {
        host: rw.path().into(),
        target: "/out".into(),
        writable: true,
    });
    spec.mounts.push(Mount {
        host: ro.path().into(),
        target: "/in".into(),
        writable: false,
    });
    let sb = sandbox(spec).await;
    for path in [
        "/x",
        "/usr/x",
        "/usr/bin/x",
        "/etc/passwd",
        "/etc/x",
        "/bin/x",
        "/in/keep.txt",
        "/in/new",
        "/proc/x",
        "/dev/x",
        "/sys/x",
    ] {
        let out = sh(&sb, &format!("echo pwned > {path}"), 5_000).await;
        assert_ne!(out.exit_code, 0, "writing {path} succeeded");
    }
    let out = sh(&sb, "echo ok > /tmp/a && cat /tmp/a && echo data > /out/result.txt && echo ok > /dev/null && echo shm > /dev/shm/s", 5_000).await;
    assert_eq!(out.exit_code, 0, "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "ok\n");
    assert_eq!(
        std::fs::read_to_string(rw.path().join("result.txt")).unwrap(),
        "data\n"
    );
    assert_eq!(
        std::fs::read_to_string(ro.path().join("keep.txt")).unwrap(),
        "original"
    );
    assert!(!ro.path().join("new").exists());
    destroy_clean(sb).await;
}

/// With every opt-out the spec has (seccomp, landlock, no_new_privs, capabilities)
/// and a writable mount of a root-owned directory, the code still cannot leave a
/// setuid or setgid file there for the host's users to run.
#[tokio::test]
async fn no_setuid_file_reaches_a_writable_mount_whatever_the_hardening() {
    if !require_root("no_setuid_file_reaches_a_writable_mount_whatever_the_hardening") {
        return;
    }
    let rw = tempfile::tempdir().unwrap();
    // Native maps the sandbox user to the directory's owner (root here, rootless the
    // caller); the other providers pass the guest's ids through, so it is the
    // sandbox user's there.
    if (on_gvisor() || on_microvm()) && !stockade_testkit::rootless() {
        std::os::unix::fs::chown(rw.path(), Some(1000), Some(1000)).unwrap();
    }
    let mut spec = SandboxSpec::default();
    spec.hardening.seccomp = false;
    spec.hardening.landlock = false;
    spec.hardening.no_new_privileges = false;
    spec.hardening.drop_capabilities = false;
    spec.mounts.push(Mount {
        host: rw.path().into(),
        target: "/work".into(),
        writable: true,
    });
    if crate::remote_run() {
        // Through the daemon's doors a tenant may not turn hardening off: the opt-out
        // is refused there, and the attack runs with the hardening on.
        let e = stockade::Sandbox::create(crate::provider(), spec.clone(), Default::default())
            .await
            .map(drop)
            .unwrap_err();
        assert_eq!(e.code(), stockade::ErrorCode::PolicyDenied, "{e}");
        spec.hardening = Default::default();
    }
    let sb = sandbox(spec).await;
    let out = py(
        &sb,
        r#"
import os, shutil, stat
tries = []
def attempt(name, f):
    try:
        f(); tries.append(name + ':done')
    except OSError as e:
        tries.append('%s:%s' % (name, e.errno))
shutil.copy('/bin/sh', '/work/sh')
attempt('chmod', lambda: os.chmod('/work/sh', 0o4755))
attempt('chmod-g', lambda: os.chmod('/work/sh', 0o2755))
attempt('fchmod', lambda: os.fchmod(os.open('/work/sh', os.O_RDONLY), 0o6755))
attempt('open', lambda: os.close(os.open('/work/o', os.O_CREAT | os.O_WRONLY, 0o4755)))
attempt('mknod', lambda: os.mknod('/work/n', 0o4755 | stat.S_IFREG))
attempt('plain', lambda: os.chmod('/work/sh', 0o755))
print(' '.join(tries))
"#,
        20_000,
    )
    .await;
    let report = format!(
        "{}
{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(
        report.contains("plain:done"),
        "the mount is not writable: {report}"
    );
    for entry in std::fs::read_dir(rw.path()).unwrap() {
        let e = entry.unwrap();
        use std::os::unix::fs::MetadataExt;
        let m = e.metadata().unwrap();
        assert_eq!(
            m.mode() & 0o6000,
            0,
            "{} is setuid/setgid on the host (owner {}): {report}",
            e.path().display(),
            m.uid()
        );
    }
    destroy_clean(sb).await;
}

#[tokio::test]
async fn host_secrets_and_environment_are_invisible() {
    if !require_root("host_secrets_and_environment_are_invisible") {
        return;
    }
    let marker = format!("stockade-secret-{}", std::process::id());
    let planted = stockade_testkit::secret_dir().join(&marker);
    std::fs::write(&planted, "TOP SECRET").unwrap();
    // The host environment (set on the real CLI process) is checked in the CLI tests;
    // here: only the allowlisted variables exist inside.
    let sb = sandbox(SandboxSpec::default()).await;
    let out = sh(
        &sb,
        &format!(
            "cat {}; ls /root /home /var /run; env; cat /etc/shadow; grep -r 'TOP SECRET' /etc /tmp 2>/dev/null",
            planted.display()
        ),
        10_000,
    )
    .await;
    std::fs::remove_file(&planted).unwrap();
    let all = text(&out.stdout) + &text(&out.stderr);
    assert!(!all.contains("TOP SECRET"), "host file leaked: {all}");
    let env = text(&sh(&sb, "env", 5_000).await.stdout);
    let mut keys: Vec<&str> = env
        .lines()
        .filter_map(|l| l.split('=').next())
        .filter(|k| *k != "PWD" && *k != "SHLVL" && *k != "_")
        .collect();
    keys.sort();
    assert_eq!(keys, ["HOME", "LANG", "PATH"], "environment inside: {env}");
    destroy_clean(sb).await;
}

#[tokio::test]
async fn fork_bomb_is_contained_and_host_stays_responsive() {
    if !require_root("fork_bomb_is_contained_and_host_stays_responsive") {
        return;
    }
    let sb = sandbox(SandboxSpec::default()).await;
    let started = Instant::now();
    // The parent only sleeps (it never needs a free pid); its child and every
    // descendant fork as fast as they can. On microvm the host sees none of the
    // guest's processes: the parent counts the sandbox user's processes once the
    // bomb has run 1.5 s (every one of them is in the sandbox's cgroup) and prints it.
    let count = if on_microvm() {
        "time.sleep(1.5)\nn = 0\nfor p in os.listdir('/proc'):\n    try:\n        n += p.isdigit() and os.stat('/proc/' + p).st_uid == 1000\n    except OSError:\n        pass\nprint('pids', n, flush=True)\n"
    } else {
        ""
    };
    let code = format!(
        "import os, time\nif os.fork() == 0:\n    while True:\n        try:\n            os.fork()\n        except OSError:\n            pass\n{count}time.sleep(30)"
    );
    // Under TCG (microvm here) the guest's Python starts, and counts beside the bomb,
    // at emulated speed: 4 s was not always enough for it to print.
    let deadline_ms: u64 = if on_microvm() { 10_000 } else { 4_000 };
    let bomb = tokio::spawn({
        let sb = sb.clone();
        async move { py(&sb, &code, deadline_ms).await }
    });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // The host can still start processes while the bomb runs.
    let t = Instant::now();
    let st = std::process::Command::new("/bin/true").status().unwrap();
    assert!(st.success());
    // Uncontained, the bomb takes every pid and the spawn above fails; contained, it
    // is only slower on a loaded 2-core host (the suites run side by side): 10 s
    // bounds a host that is stalled, not one that is busy.
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "host spawn took {:?}",
        t.elapsed()
    );
    let counting = Instant::now();
    let pids = if on_microvm() {
        None
    } else if on_gvisor() {
        // The host cgroup counts gVisor's own tasks (ptrace stubs, several per process
        // inside); the cap of 64 holds for the processes gVisor's kernel runs.
        Some(gvisor_ps(sb.id()).len().to_string())
    } else {
        Some(
            std::fs::read_to_string(format!(
                "/sys/fs/cgroup/pids/{}/{}/pids.current",
                stockade_testkit::cgroup_parent(),
                sb.id()
            ))
            .or_else(|_| {
                std::fs::read_to_string(format!(
                    "/sys/fs/cgroup/{}/{}/pids.current",
                    stockade_testkit::cgroup_parent(),
                    sb.id()
                ))
            })
            .unwrap(),
        )
    };
    let counted = counting.elapsed();
    let out = bomb.await.unwrap();
    let pids = pids.unwrap_or_else(|| {
        let o = text(&out.stdout);
        o.strip_prefix("pids ")
            .unwrap_or_else(|| panic!("the bomb's parent did not count: {out:?}"))
            .to_string()
    });
    assert!(
        pids.trim().parse::<u32>().unwrap() <= 64,
        "pids in sandbox: {pids}"
    );
    assert!(out.timed_out, "bomb should run into its deadline");
    // Its deadline kills the whole tree: the exec's answer is not held up long past it.
    assert!(
        started.elapsed() < Duration::from_millis(deadline_ms + 6_000),
        "the bomb's exec (deadline {deadline_ms} ms) answered after {:?} (counting its \
         processes took {counted:?}; the exec itself took {} ms)",
        started.elapsed(),
        out.duration_ms
    );
    // The sandbox still works afterwards and nothing of the bomb remains.
    let after = sh(&sb, "for p in /proc/[0-9]*; do cat $p/comm; done", 5_000).await;
    let comms = text(&after.stdout);
    assert!(
        comms.lines().filter(|l| *l == "sh").count() <= 1 && !comms.contains("python"),
        "bomb processes left: {comms}"
    );
    destroy_clean(sb).await;
}

#[tokio::test]
async fn memory_bomb_ends_with_oom_killed() {
    if !require_root("memory_bomb_ends_with_oom_killed") {
        return;
    }
    let mut spec = SandboxSpec::default();
    spec.limits.memory_bytes = 128 << 20;
    let sb = sandbox(spec).await;
    let out = py(
        &sb,
        "a = []\nwhile True: a.append(bytearray(16 << 20))",
        60_000,
    )
    .await;
    assert!(out.oom_killed, "expected oom_killed: {out:?}");
    assert_eq!(out.signal, Some(9));
    assert!(!out.timed_out);
    // The agent survived and serves the next exec.
    assert_eq!(sh(&sb, "echo alive", 5_000).await.stdout, b"alive\n");
    destroy_clean(sb).await;
}

#[tokio::test]
async fn deadline_kills_cpu_spin_and_double_forked_children_within_a_second() {
    if !require_root("deadline_kills_cpu_spin_and_double_forked_children_within_a_second") {
        return;
    }
    let sb = sandbox(SandboxSpec::default()).await;
    let script = "(sleep 1000 &) ; (setsid sh -c 'while :; do :; done' &) ; nohup sleep 999 >/dev/null 2>&1 & while :; do :; done";
    let t = Instant::now();
    let out = sh(&sb, script, 1_000).await;
    let took = t.elapsed();
    assert!(out.timed_out, "{out:?}");
    // Under gVisor's ptrace platform killing and reaping a tree is slower, and PID 1
    // also sweeps what was reparented to it (gVisor 2022 ignores the shim's
    // subreaper mark): 2.3 s was seen under CI load. What survived is checked below.
    let bound = if on_gvisor() { 5_000 } else { 2_000 };
    assert!(
        took < Duration::from_millis(bound),
        "exec returned {took:?} after start (deadline 1 s, bound {bound} ms)"
    );
    let ps = sh(&sb, "for p in /proc/[0-9]*; do cat $p/comm; done", 5_000).await;
    let comms = text(&ps.stdout);
    assert!(
        !comms.contains("sleep"),
        "background children survived the deadline: {comms}"
    );
    assert!(
        comms.lines().filter(|l| *l == "sh").count() <= 1,
        "spinning shells survived: {comms}"
    );
    destroy_clean(sb).await;
}

#[tokio::test]
async fn a_gigabyte_of_output_is_capped_and_host_memory_stays_bounded() {
    if !require_root("a_gigabyte_of_output_is_capped_and_host_memory_stays_bounded") {
        return;
    }
    let sb = sandbox(SandboxSpec::default()).await;
    let rss_before = own_rss_kb();
    let out = sh(
        &sb,
        "head -c 1073741824 /dev/zero; echo tail-marker",
        120_000,
    )
    .await;
    assert_eq!(out.exit_code, 0, "{}", text(&out.stderr));
    assert!(out.truncated());
    assert_eq!(out.stdout.len(), 1 << 20);
    assert_eq!(out.stdout_dropped, (1u64 << 30) + 12 - (1 << 20));
    assert!(
        text(&out.stdout).ends_with("tail-marker\n"),
        "the tail is kept"
    );
    let grown = own_rss_kb().saturating_sub(rss_before);
    assert!(grown < 64 * 1024, "client memory grew by {grown} KiB");
    destroy_clean(sb).await;
}

fn own_rss_kb() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    s.lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn setuid_binaries_give_no_root() {
    if !require_root("setuid_binaries_give_no_root") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let suid = dir.path().join("id");
    std::fs::copy("/usr/bin/id", &suid).unwrap();
    std::fs::set_permissions(&suid, std::os::unix::fs::PermissionsExt::from_mode(0o4755)).unwrap();
    let mut spec = SandboxSpec::default();
    // A provider without host mounts (microvm) is tested on the setuid programs of
    // its own root (the host's /usr, setuid bits kept in its image).
    let mounts = provider().capabilities().mounts;
    if mounts {
        spec.mounts.push(Mount {
            host: dir.path().into(),
            target: "/suid".into(),
            writable: false,
        });
    }
    let sb = sandbox(spec).await;
    if mounts {
        let out = sh(&sb, "/suid/id -u; /suid/id -ur", 5_000).await;
        assert_eq!(
            text(&out.stdout),
            "1000\n1000\n",
            "setuid gave another uid: {}",
            text(&out.stderr)
        );
    } else {
        let out = sh(
            &sb,
            "ls -l /usr/bin/su /usr/bin/passwd /usr/bin/mount",
            5_000,
        )
        .await;
        assert!(
            text(&out.stdout).matches("rws").count() >= 2,
            "no setuid programs to try inside: {out:?}"
        );
    }
    // Host setuid programs (su, passwd, mount) do not give root either.
    let out = sh(&sb, "for p in /usr/bin/su /usr/bin/passwd /usr/bin/mount; do [ -x $p ] && $p --help >/dev/null 2>&1; done; id -u", 5_000).await;
    assert_eq!(text(&out.stdout), "1000\n");
    destroy_clean(sb).await;
}

#[tokio::test]
async fn dangerous_syscalls_are_refused() {
    if !require_root("dangerous_syscalls_are_refused") {
        return;
    }
    let sb = sandbox(SandboxSpec::default()).await;
    // x86_64 numbers: ptrace 101, mount 165, unshare 272, bpf 321, keyctl 250,
    // setns 308, io_uring_setup 425, userfaultfd 323, perf_event_open 298.
    let code = r#"
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
buf = ctypes.create_string_buffer(256)
calls = {
 "ptrace": (101, 16, 1, 0, 0),
 "mount": (165, b"none", b"/tmp", b"tmpfs", 0, 0),
 "unshare_user": (272, 0x10000000),
 "unshare_net": (272, 0x40000000),
 "bpf": (321, 0, buf, 128),
 "keyctl": (250, 0, 0, 0, 0, 0),
 "setns": (308, 0, 0),
 "io_uring_setup": (425, 8, buf),
 "userfaultfd": (323, 0),
 "perf_event_open": (298, buf, 0, -1, -1, 0),
}
for name, args in calls.items():
    r = libc.syscall(*args)
    print(name, r, os.strerror(ctypes.get_errno()) if r < 0 else "SUCCEEDED")
"#;
    let out = py(&sb, code, 10_000).await;
    let stdout = text(&out.stdout);
    assert_eq!(out.exit_code, 0, "{}", text(&out.stderr));
    assert_eq!(stdout.lines().count(), 10, "{stdout}");
    for line in stdout.lines() {
        assert!(line.contains(" -1 "), "syscall was not refused: {line}");
        assert!(!line.contains("SUCCEEDED"), "{line}");
    }
    // Threads (clone without namespace flags) still work.
    let threads = py(&sb, "import threading; t = threading.Thread(target=print, args=('thread ok',)); t.start(); t.join()", 5_000).await;
    assert_eq!(
        text(&threads.stdout),
        "thread ok\n",
        "{}",
        text(&threads.stderr)
    );
    destroy_clean(sb).await;
}

/// The host kernel's build configuration (`/proc/config.gz`), its crash-dump layout
/// (`/sys/kernel/vmcoreinfo`: symbol addresses that undo KASLR) and build notes, and
/// the firmware tables were readable in native sandboxes. Each one the host has is
/// masked inside (empty, or unlike the host's), whatever the provider.
#[tokio::test]
async fn the_host_kernels_build_and_firmware_files_stay_on_the_host() {
    if !require_root("the_host_kernels_build_and_firmware_files_stay_on_the_host") {
        return;
    }
    let sum = |out: &[u8]| {
        text(out)
            .split_whitespace()
            .next()
            .unwrap_or("")
            .to_string()
    };
    let sb = sandbox(SandboxSpec::default()).await;
    let mut checked = 0;
    for f in [
        "/proc/config.gz",
        "/sys/kernel/vmcoreinfo",
        "/sys/kernel/notes",
    ] {
        let Ok(host) = std::process::Command::new("sha256sum").arg(f).output() else {
            continue;
        };
        if !host.status.success() {
            continue;
        }
        checked += 1;
        let inside = sh(&sb, &format!("cat {f} 2>/dev/null | sha256sum"), 10_000).await;
        assert_ne!(
            sum(&inside.stdout),
            sum(&host.stdout),
            "{f} reads as the host's inside the sandbox"
        );
    }
    // A microVM's guest has firmware tables of its own (the VM's), not the host's.
    if !on_microvm() && std::fs::read_dir("/sys/firmware").is_ok_and(|mut d| d.next().is_some()) {
        checked += 1;
        let out = sh(&sb, "ls -A /sys/firmware 2>/dev/null", 10_000).await;
        assert!(
            text(&out.stdout).trim().is_empty(),
            "the host's firmware tables are listed inside: {}",
            text(&out.stdout)
        );
    }
    eprintln!("{checked} host kernel files checked");
    destroy_clean(sb).await;
}

/// A native sandbox whose processes are moved out of its cgroups (by someone on the
/// host) once ran on without memory or pids limits, and nothing said so. Its monitor
/// sees PID 1 leave a group within seconds and kills the sandbox.
#[tokio::test]
async fn a_sandbox_moved_out_of_its_cgroups_is_killed_not_left_unlimited() {
    if !require_root("a_sandbox_moved_out_of_its_cgroups_is_killed_not_left_unlimited")
        || on_gvisor()
        || on_microvm()
        || std::env::var_os("STOCKADE_TEST_ROOTLESS").is_some()
    {
        return;
    }
    let sb = sandbox(SandboxSpec {
        timeout_secs: 120,
        ..SandboxSpec::default()
    })
    .await;
    let id = sb.id().to_string();
    sh(&sb, "sleep 100 > /dev/null 2>&1 &", 5_000).await;
    // Every process of the sandbox, moved to the root group of each hierarchy.
    let mut moved = 0;
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cg) = std::fs::read_to_string(format!("/proc/{pid}/cgroup")) else {
            continue;
        };
        for line in cg.lines().filter(|l| l.contains(&id)) {
            let mut f = line.splitn(3, ':');
            let (_, controllers) = (f.next(), f.next().unwrap_or(""));
            let root = if controllers.is_empty() {
                if std::path::Path::new("/sys/fs/cgroup/unified").is_dir() {
                    "/sys/fs/cgroup/unified".to_string()
                } else {
                    "/sys/fs/cgroup".to_string()
                }
            } else {
                format!("/sys/fs/cgroup/{controllers}")
            };
            if std::fs::write(format!("{root}/cgroup.procs"), pid.to_string()).is_ok() {
                moved += 1;
            }
        }
    }
    assert!(
        moved > 0,
        "no process of {id} was found in a cgroup of its own"
    );
    let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let alive = sb.exec(ExecRequest::new(["true"])).await.is_ok();
        if !alive {
            break;
        }
        assert!(
            std::time::Instant::now() < until,
            "{id} still runs 20 s after leaving its cgroups, without its limits"
        );
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    let _ = sb.destroy().await;
}

#[tokio::test]
async fn proc_sys_is_read_only_and_the_agent_is_out_of_reach() {
    if !require_root("proc_sys_is_read_only_and_the_agent_is_out_of_reach") {
        return;
    }
    let sb = sandbox(SandboxSpec::default()).await;
    let out = sh(&sb, "echo 1 > /proc/sys/kernel/hostname; echo 1 > /proc/sys/vm/drop_caches; grep ' /proc/sys ' /proc/self/mountinfo", 5_000).await;
    let mi = text(&out.stdout);
    assert!(
        mi.contains(" ro,") || mi.contains(" ro "),
        "/proc/sys not read-only: {mi}"
    );
    assert!(
        text(&out.stderr).matches("Read-only file system").count() >= 2,
        "{}",
        text(&out.stderr)
    );
    // PID 1 is the agent: cannot be signalled, traced, or read.
    let out = sh(
        &sb,
        "kill -9 1 && echo KILLED; cat /proc/1/environ && echo READ_ENV; cat /proc/1/mem && echo READ_MEM; ls /proc/1/fd && echo LISTED_FD; \
         find / -name 'agent.sock' -o -name 'state.json' 2>/dev/null | grep . && echo FOUND_SOCKET; tty && echo HAS_TTY; true",
        10_000,
    )
    .await;
    let stdout = text(&out.stdout);
    for breach in [
        "KILLED",
        "READ_ENV",
        "READ_MEM",
        "LISTED_FD",
        "FOUND_SOCKET",
        "HAS_TTY",
    ] {
        assert!(!stdout.contains(breach), "{breach}: {stdout}");
    }
    assert_eq!(
        sh(&sb, "echo agent alive", 5_000).await.stdout,
        b"agent alive\n"
    );
    destroy_clean(sb).await;
}

#[tokio::test]
async fn exec_input_is_checked() {
    if !require_root("exec_input_is_checked") {
        return;
    }
    let sb = sandbox(SandboxSpec::default()).await;
    let err = sb
        .exec(ExecRequest::new(Vec::<String>::new()))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("argv is empty"), "{err}");
    let mut r = ExecRequest::new(["true"]);
    r.cwd = Some("relative".into());
    assert!(
        sb.exec(r)
            .await
            .unwrap_err()
            .to_string()
            .contains("not absolute")
    );
    let out = sb
        .exec(ExecRequest::new(["/no/such/program"]))
        .await
        .unwrap();
    assert_eq!(out.exit_code, 127);
    assert!(
        text(&out.stderr).contains("/no/such/program"),
        "{}",
        text(&out.stderr)
    );
    destroy_clean(sb).await;
}

#[tokio::test]
async fn cpu_quota_holds_a_multi_threaded_spin() {
    if !require_root("cpu_quota_holds_a_multi_threaded_spin") {
        return;
    }
    let mut spec = SandboxSpec::default();
    spec.limits.cpus = 0.5;
    let sb = sandbox(spec).await;
    // Two spinning processes for 2 s of wall time would use ~4 CPU-seconds unlimited
    // (on 2+ cores); half a CPU allows about 1.
    let code = [
        "import os, time, resource",
        "pids = []",
        "for _ in range(2):",
        "    pid = os.fork()",
        "    if pid == 0:",
        "        end = time.time() + 2",
        "        while time.time() < end: pass",
        "        os._exit(0)",
        "    pids.append(pid)",
        "for p in pids: os.waitpid(p, 0)",
        "r = resource.getrusage(resource.RUSAGE_CHILDREN)",
        "print(r.ru_utime + r.ru_stime)",
    ]
    .join("\n");
    // On gVisor the CPU time the code reads is gVisor's own accounting, which does
    // not see the host's CFS throttling of the sandbox (2022: two throttled spinners
    // report ~1.8 CPU-s). The quota is on the host cgroup runsc runs in, so there the
    // CPU the whole sandbox used (the spinners and gVisor's own kernel) is read from
    // that cgroup across the exec, against the exec's wall time (Python's start under
    // gVisor adds a second or more to the 2 s of spinning): half a CPU allows about
    // half of it; unthrottled, two spinners on 2+ cores would use ~1.6 times it.
    // On microvm the quota is the host cgroup around QEMU (the guest's own clock
    // runs on while QEMU is throttled, so the code inside sees its vCPU as busy the
    // whole time): read there, as for gVisor.
    let host_usage = if on_gvisor() {
        Some(gvisor_cpu_usage_secs(sb.id()))
    } else if on_microvm() {
        Some(microvm_cpu_usage_secs(sb.id()))
    } else {
        None
    };
    let out = py(&sb, &code, 30_000).await;
    let inside: f64 = text(&out.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{} {}", text(&out.stdout), text(&out.stderr)));
    if let Some(before) = host_usage {
        let now = if on_microvm() {
            microvm_cpu_usage_secs(sb.id())
        } else {
            gvisor_cpu_usage_secs(sb.id())
        };
        let used = now - before;
        let wall = out.duration_ms as f64 / 1000.0;
        assert!(
            used < 0.7 * wall,
            "the sandbox used {used:.2} CPU-seconds in {wall:.2} s with cpus=0.5"
        );
    } else {
        assert!(
            inside < 1.4,
            "two spinners used {inside:.2} CPU-seconds in 2 s with cpus=0.5"
        );
    }
    destroy_clean(sb).await;
}

/// CPU seconds the host cgroup around the VMM of microVM sandbox `id` has used: the
/// guest's code, its kernel and QEMU's emulation together.
fn microvm_cpu_usage_secs(id: &str) -> f64 {
    let v2 = format!("/sys/fs/cgroup/stockade-microvm/{id}/cpu.stat");
    let v1 = format!("/sys/fs/cgroup/cpuacct/stockade-microvm/{id}/cpuacct.usage");
    if let Ok(stat) = std::fs::read_to_string(&v2) {
        let usec: u64 = stat
            .lines()
            .find_map(|l| l.strip_prefix("usage_usec "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no usage_usec in {v2}: {stat}"));
        return usec as f64 / 1e6;
    }
    let ns: u64 = std::fs::read_to_string(&v1)
        .unwrap_or_else(|e| panic!("neither {v2} nor {v1}: {e}"))
        .trim()
        .parse()
        .unwrap();
    ns as f64 / 1e9
}

/// CPU seconds the host cgroup of gVisor sandbox `id` (runsc's `cgroupsPath`) has
/// used: the sandbox's code and gVisor's own kernel together.
fn gvisor_cpu_usage_secs(id: &str) -> f64 {
    let parent = stockade_testkit::cgroup_parent();
    let v2 = format!("/sys/fs/cgroup/{parent}/{id}/cpu.stat");
    let v1 = format!("/sys/fs/cgroup/cpuacct/{parent}/{id}/cpuacct.usage");
    if let Ok(stat) = std::fs::read_to_string(&v2) {
        let usec: u64 = stat
            .lines()
            .find_map(|l| l.strip_prefix("usage_usec "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no usage_usec in {v2}: {stat}"));
        return usec as f64 / 1e6;
    }
    let ns: u64 = std::fs::read_to_string(&v1)
        .unwrap_or_else(|e| panic!("neither {v2} nor {v1}: {e}"))
        .trim()
        .parse()
        .unwrap();
    ns as f64 / 1e9
}

#[tokio::test]
async fn tmp_is_capped_at_its_size() {
    if !require_root("tmp_is_capped_at_its_size") {
        return;
    }
    let mut spec = SandboxSpec::default();
    spec.limits.tmp_bytes = 8 << 20;
    let sb = sandbox(spec).await;
    let out = sh(
        &sb,
        "head -c 20000000 /dev/zero > /tmp/fill; echo rc=$?; du -k /tmp/fill | cut -f1",
        30_000,
    )
    .await;
    let s = text(&out.stdout);
    assert!(
        s.contains("rc=1"),
        "filling /tmp beyond its size succeeded: {s} {}",
        text(&out.stderr)
    );
    assert!(
        text(&out.stderr).contains("No space left"),
        "{}",
        text(&out.stderr)
    );
    let kib: u64 = s.lines().last().unwrap().trim().parse().unwrap();
    assert!(kib <= 8 * 1024, "/tmp holds {kib} KiB with an 8 MiB cap");
    destroy_clean(sb).await;
}

// Issue 14, finding 3: the caller's open descriptors must not reach the code.
#[tokio::test]
async fn the_callers_open_descriptors_do_not_reach_the_code() {
    if !require_root("the_callers_open_descriptors_do_not_reach_the_code") {
        return;
    }
    let planted = stockade_testkit::fds::planted();
    // gVisor 2022's `ls` cannot list /proc/self/fd (see `probe_by_glob`): there the
    // shell's glob lists it, which still shows any inherited descriptor.
    let probe = if on_gvisor() {
        planted.probe_by_glob()
    } else {
        planted.probe()
    };
    let sb = sandbox(SandboxSpec::default()).await;
    let out = sh(&sb, &probe, 10_000).await;
    planted.assert_none_leaked(&text(&out.stdout));
    // Also with output streamed and stdin kept open (other paths through the agent).
    let mut req = ExecRequest::new(["/bin/sh", "-c", &probe]);
    req.timeout_ms = Some(10_000);
    let (tx, mut rx) = tokio::sync::mpsc::channel(64);
    let drain = tokio::spawn(async move { while rx.recv().await.is_some() {} });
    let out = sb.exec_streaming(req, tx).await.expect("exec");
    drain.await.unwrap();
    planted.assert_none_leaked(&text(&out.stdout));
    destroy_clean(sb).await;
}

/// Names (`comm`) of every process in the sandbox but the one listing them.
async fn processes_inside(sb: &stockade::Sandbox) -> String {
    let ps = sh(
        sb,
        "for p in /proc/[0-9]*; do [ $p = /proc/$$ ] || cat $p/comm; done 2>/dev/null",
        5_000,
    )
    .await;
    text(&ps.stdout)
}

// Issue 14, finding 7a: what an exec leaves in the background ends with it.
#[tokio::test]
async fn background_processes_end_with_their_exec() {
    if !require_root("background_processes_end_with_their_exec") {
        return;
    }
    let sb = sandbox(SandboxSpec::default()).await;
    let out = sh(
        &sb,
        "sleep 1000 & (setsid sleep 999 &) ; nohup sleep 998 >/dev/null 2>&1 & echo started",
        30_000,
    )
    .await;
    assert_eq!(text(&out.stdout), "started\n", "{out:?}");
    assert!(!out.timed_out);
    let comms = processes_inside(&sb).await;
    assert!(
        !comms.contains("sleep"),
        "processes outlived their exec's result: {comms}"
    );
    destroy_clean(sb).await;
}

// An exec that hands its stdout and stderr to a process outside its tree (one kept by
// an earlier background exec, over a unix socket) must still answer: the pipes never
// reach their end, and the agent stops waiting for them shortly after the exec ended.
#[tokio::test]
async fn an_exec_whose_output_pipes_are_handed_away_still_answers() {
    if !require_root("an_exec_whose_output_pipes_are_handed_away_still_answers") {
        return;
    }
    let sb = sandbox(SandboxSpec::default()).await;
    let holder = "import os, socket, time\n\
        s = socket.socket(socket.AF_UNIX)\n\
        s.bind('/tmp/holder.sock'); s.listen(1)\n\
        c, _ = s.accept()\n\
        msg, fds, _, _ = socket.recv_fds(c, 16, 8)\n\
        open('/tmp/holding', 'w').write(str(len(fds)))\n\
        time.sleep(60)\n";
    let mut req = ExecRequest::new(["python3", "-c", holder]);
    req.background = true;
    req.timeout_ms = Some(120_000);
    // It runs until the sandbox ends; its own exec answers once it is started.
    let bg = tokio::spawn({
        let sb = sb.clone();
        async move { sb.exec(req).await }
    });
    let mut ready = false;
    for _ in 0..100 {
        let out = sh(&sb, "test -S /tmp/holder.sock && echo yes", 10_000).await;
        if text(&out.stdout) == "yes\n" {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(ready, "the holder did not start");
    let give = "import socket, sys\n\
        c = socket.socket(socket.AF_UNIX); c.connect('/tmp/holder.sock')\n\
        socket.send_fds(c, [b'x'], [1, 2])\n\
        print('handed', flush=True)\n";
    let t = Instant::now();
    let out = tokio::time::timeout(Duration::from_secs(30), py(&sb, give, 20_000))
        .await
        .expect("the exec never answered: its handed-away pipes held it");
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    assert_eq!(
        (out.exit_code, text(&out.stdout)),
        (0, "handed\n".into()),
        "{out:?}"
    );
    let held = sh(&sb, "cat /tmp/holding", 10_000).await;
    assert_eq!(
        text(&held.stdout),
        "2",
        "the holder got no descriptors: {held:?}"
    );
    // The sandbox still serves.
    let again = sh(&sb, "echo fine", 10_000).await;
    assert_eq!(text(&again.stdout), "fine\n");
    bg.abort();
    destroy_clean(sb).await;
}

/// Host pid of the sandbox's PID 1 (native), from its state.
fn host_init_pid(id: &str) -> Option<u32> {
    let state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(state_root().join(id).join("state.json")).ok()?)
            .ok()?;
    Some(state["init_pid"].as_u64()? as u32)
}

/// Every host process: pid, parent pid, command line and name (`comm`).
fn host_processes() -> Vec<(u32, Option<u32>, Vec<u8>, String)> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .map(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let ppid = stat
                .rfind(')')
                .and_then(|i| stat[i + 2..].split(' ').nth(1))
                .and_then(|s| s.parse::<u32>().ok());
            (pid, ppid, cmdline, comm.trim().to_string())
        })
        .collect()
}

/// The host pid of the exec shim (a child of the sandbox's PID 1 named
/// `stockade-shim`) whose own child's command line starts with `child` (another
/// exec's shim may still be ending beside it), once one runs.
fn host_shim_pid(id: &str, child: &[u8]) -> u32 {
    let init = host_init_pid(id).expect("the sandbox's state");
    for _ in 0..2_000 {
        let procs = host_processes();
        let shim = procs.iter().find(|(pid, ppid, _, comm)| {
            comm == "stockade-shim"
                && *ppid == Some(init)
                && procs
                    .iter()
                    .any(|(_, pp, c, _)| *pp == Some(*pid) && c.starts_with(child))
        });
        if let Some((pid, _, _, _)) = shim {
            return *pid;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    panic!("no exec shim found below PID 1 (host pid {init}) of {id}");
}

// Issue 14, finding 7b: the shim is the least likely OOM victim, and when it dies
// anyway, the exec's processes die with it.
#[tokio::test]
async fn the_exec_tree_dies_with_its_shim_and_the_shim_is_the_last_oom_victim() {
    if !require_root("the_exec_tree_dies_with_its_shim_and_the_shim_is_the_last_oom_victim") {
        return;
    }
    let sb = sandbox(SandboxSpec::default()).await;
    // The shim lowers itself to -1000 where it may (CAP_SYS_RESOURCE; hosts whose
    // root lacks it keep the inherited value) and raises the code to 1000.
    let adj = sh(
        &sb,
        "cat /proc/$PPID/oom_score_adj /proc/self/oom_score_adj",
        5_000,
    )
    .await;
    let adj: Vec<i32> = text(&adj.stdout)
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    assert!(
        adj.len() == 2 && adj[0] < adj[1] && adj[1] == 1000,
        "the shim (the exec's parent) must be a less likely OOM victim than the code (1000): {adj:?}"
    );
    // Killing the shim (as the OOM killer would) must take the exec's tree with it.
    let sb = Arc::new(sb);
    let running = {
        let sb = sb.clone();
        tokio::spawn(async move {
            let mut req = ExecRequest::new([
                "/bin/sh",
                "-c",
                "sleep 1000 & (setsid sleep 999 &) ; sleep 997",
            ]);
            req.timeout_ms = Some(600_000);
            sb.exec(req).await
        })
    };
    let id = sb.id().to_string();
    // Let the script start its sleeps before the shim goes.
    loop {
        if processes_inside(&sb).await.matches("sleep").count() >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if on_gvisor() {
        // The shim runs in gVisor's kernel, not as a host process: found from inside
        // (its child runs the script) and killed through runsc, as gVisor would.
        let listing = sh(
            &sb,
            "for p in /proc/[0-9]*; do echo \"${p#/proc/} $(cut -d' ' -f4 $p/stat) $(tr '\\0' ' ' < $p/cmdline)\"; done 2>/dev/null",
            5_000,
        )
        .await;
        let listing = text(&listing.stdout);
        let shim = listing
            .lines()
            .find_map(|l| {
                let mut f = l.split_whitespace();
                let ppid = f.nth(1)?;
                (f.collect::<Vec<_>>().join(" ")
                    == "/bin/sh -c sleep 1000 & (setsid sleep 999 &) ; sleep 997")
                    .then(|| ppid.to_string())
            })
            .unwrap_or_else(|| panic!("no exec running the script inside:\n{listing}"));
        let st = std::process::Command::new(stockade_testkit::runsc().unwrap())
            .arg(format!(
                "--root={}/runsc",
                stockade::gvisor::DEFAULT_STATE_ROOT
            ))
            .args(["kill", "--pid", &shim, &id, "KILL"])
            .status()
            .unwrap();
        assert!(st.success(), "runsc kill --pid {shim}");
    } else {
        let shim =
            tokio::task::spawn_blocking(move || host_shim_pid(&id, b"/bin/sh\0-c\0sleep 1000"))
                .await
                .unwrap();
        std::process::Command::new("kill")
            .args(["-9", &shim.to_string()])
            .status()
            .unwrap();
    }
    let res = running.await.unwrap();
    let err = res.expect_err("the exec's shim was killed");
    assert!(err.to_string().contains("shim died"), "{err}");
    let comms = processes_inside(&sb).await;
    assert!(
        !comms.contains("sleep"),
        "the exec's processes outlived its dead shim: {comms}"
    );
    let sb = Arc::try_unwrap(sb).ok().unwrap();
    destroy_clean(sb).await;
}

/// Host pid of the exec zygote of the native sandbox `id` (a child of its PID 1 named
/// `stockade-zygote`).
fn host_zygote_pid(id: &str) -> Option<u32> {
    let init = host_init_pid(id)?;
    host_processes()
        .into_iter()
        .find(|(_, ppid, _, comm)| *ppid == Some(init) && comm == "stockade-zygote")
        .map(|(pid, ..)| pid)
}

/// The host pid of sandbox `id`'s exec zygote, waiting up to 5 s for it to appear.
async fn wait_for_zygote(id: &str) -> Option<u32> {
    for _ in 0..500 {
        if let Some(pid) = host_zygote_pid(id) {
            return Some(pid);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    None
}

// Issue 24: the exec zygote (PID 1's forking helper, with PID 1's privileges) is out
// of the code's reach: it cannot signal it, read its descriptors, environment or
// memory; and a zygote killed from outside (as the OOM killer might) is replaced, with
// execs and file operations working on.
#[tokio::test]
async fn the_exec_zygote_is_out_of_reach_and_comes_back_when_killed() {
    if !require_root("the_exec_zygote_is_out_of_reach_and_comes_back_when_killed") {
        return;
    }
    let sb = sandbox(SandboxSpec::default()).await;
    // Every pid the code could name (the low ones, where a sandbox's own agent
    // processes are, and every one it can see): signals and /proc reads of anything
    // not its own fail. Shell builtins where possible (a microVM under TCG is slow to
    // start processes).
    let probe = sh(
        &sb,
        "for p in $( (seq 1 64; ls /proc) | grep -E '^[0-9]+$' | sort -un); do \
           [ $p = $$ ] && continue; \
           kill -9 $p 2>/dev/null && echo \"killed $p\"; \
           for f in /proc/$p/fd/*; do [ -e \"$f\" ] && echo \"fds of $p\"; break; done; \
           [ -r /proc/$p/environ ] && [ -n \"$(head -c1 /proc/$p/environ 2>/dev/null)\" ] \
             && echo \"environ of $p\"; \
         done; echo done",
        120_000,
    )
    .await;
    let reached: Vec<String> = text(&probe.stdout)
        .lines()
        // gVisor 2022 gives every /proc/PID/environ mode 0444 and lists fds without a
        // ptrace check (a known gap, ARCHITECTURE.md: PID 1 is as readable there);
        // signals are refused there as everywhere.
        .filter(|l| !(on_gvisor() && (l.starts_with("fds of") || l.starts_with("environ of"))))
        .map(str::to_string)
        .collect();
    assert_eq!(
        reached,
        vec!["done".to_string()],
        "the code reached a process not its own: {probe:?}"
    );
    // The sandbox still works: execs (through the zygote) and file operations.
    let out = sh(&sb, "echo still", 5_000).await;
    assert_eq!(text(&out.stdout), "still\n", "{out:?}");
    if !on_gvisor() && !on_microvm() {
        let id = sb.id().to_string();
        let zygote = wait_for_zygote(&id)
            .await
            .expect("a native sandbox runs an exec zygote");
        std::process::Command::new("kill")
            .args(["-9", &zygote.to_string()])
            .status()
            .unwrap();
        // The exec right after its death may fall back to spawning its shim; every exec
        // and file operation works, and a new zygote serves them.
        for i in 0..5 {
            let out = sh(&sb, &format!("echo run {i}"), 5_000).await;
            assert_eq!(text(&out.stdout), format!("run {i}\n"), "{out:?}");
            sb.write("/tmp/z.txt", format!("file {i}"))
                .await
                .expect("write after the zygote died");
            let back = sb.read("/tmp/z.txt").await.expect("read back");
            assert_eq!(back, format!("file {i}").as_bytes());
        }
        let mut again = None;
        for _ in 0..500 {
            again = host_zygote_pid(&id).filter(|p| *p != zygote);
            if again.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(
            again.is_some(),
            "no new exec zygote after the first was killed"
        );
    }
    destroy_clean(sb).await;
}

// Issue 24: a sandbox warmed ahead of use (as pools do) has its exec zygote before
// its first exec, and that exec's shim is forked by it (its command line is the
// zygote's), under the same walls: the code still cannot reach it.
#[tokio::test]
async fn a_sandbox_serves_its_first_exec_from_its_zygote() {
    if !require_root("a_sandbox_serves_its_first_exec_from_its_zygote")
        || on_gvisor()
        || on_microvm()
    {
        return;
    }
    let sb = sandbox(SandboxSpec::default()).await;
    let id = sb.id().to_string();
    // PID 1 forks it as it starts serving, before any exec or warm.
    let zygote = wait_for_zygote(&id)
        .await
        .expect("a native sandbox starts with its exec zygote");
    let zygote_cmdline = std::fs::read(format!("/proc/{zygote}/cmdline")).unwrap();
    let init = host_init_pid(&id).unwrap();
    let run = {
        let sb = sb.clone();
        tokio::spawn(async move { sh(&sb, "kill -9 1 2>&1; sleep 2; echo ok", 10_000).await })
    };
    let mut shim = None;
    for _ in 0..300 {
        shim = host_processes()
            .into_iter()
            .find(|(_, ppid, _, comm)| *ppid == Some(init) && comm == "stockade-shim");
        if shim.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (_, _, cmdline, _) = shim.expect("the first exec's shim runs");
    // A spawned shim's command line is `stockade-shim shim`; a forked one has its
    // zygote's.
    assert!(
        cmdline == zygote_cmdline && !cmdline.starts_with(b"stockade-shim"),
        "the first exec's shim was spawned, not forked by the zygote: {:?}",
        String::from_utf8_lossy(&cmdline)
    );
    let out = run.await.unwrap();
    assert_eq!(text(&out.stdout).lines().last(), Some("ok"), "{out:?}");
    assert_eq!(
        host_zygote_pid(&id),
        Some(zygote),
        "the code killed the zygote"
    );
    // Warming (what a pool does) keeps the zygote that serves.
    sb.warm().await.expect("warm");
    assert_eq!(host_zygote_pid(&id), Some(zygote));
    destroy_clean(sb).await;
}

// Issue 14, finding 7: SysV and POSIX shared memory an exec leaves behind is removed
// when it ends, so the next exec has the sandbox's memory.
#[tokio::test]
async fn orphaned_shared_memory_is_removed_after_the_exec() {
    if !require_root("orphaned_shared_memory_is_removed_after_the_exec") {
        return;
    }
    let mut spec = SandboxSpec::default();
    spec.limits.memory_bytes = 256 << 20;
    let sb = sandbox(spec).await;
    let code = [
        "import ctypes",
        "libc = ctypes.CDLL(None, use_errno=True)",
        "libc.shmget.restype = ctypes.c_int",
        "libc.shmget.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_int]",
        "libc.shmat.restype = ctypes.c_void_p",
        "libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]",
        "libc.shmdt.argtypes = [ctypes.c_void_p]",
        "size = 160 << 20",
        "shm = libc.shmget(0, size, 0o1600)",
        "assert shm >= 0, ctypes.get_errno()",
        "addr = libc.shmat(shm, None, 0)",
        "ctypes.memset(addr, 1, size)",
        "libc.shmdt(addr)",
        "sem = libc.semget(0, 4, 0o1600)",
        "assert sem >= 0",
        "msg = libc.msgget(0, 0o1600)",
        "assert msg >= 0",
        "open('/dev/shm/leftover', 'wb').write(b'x' * (32 << 20))",
        "print('left', shm, sem, msg)",
    ]
    .join("\n");
    // Execs that leave nothing come first: where objects are found by id (gVisor),
    // the marks then move without a cleanup, and the leak below must still be found.
    for _ in 0..3 {
        assert_eq!(sh(&sb, "true", 5_000).await.exit_code, 0);
    }
    let out = py(&sb, &code, 60_000).await;
    assert!(
        text(&out.stdout).starts_with("left"),
        "{out:?} {}",
        text(&out.stderr)
    );
    let ids: Vec<String> = text(&out.stdout)
        .split_whitespace()
        .skip(1)
        .map(str::to_string)
        .collect();
    // gVisor has no /proc/sysvipc: there each object made above is looked up by its
    // id (IPC_STAT, which fails with EINVAL once it is removed).
    let left = py(
        &sb,
        &format!(
            "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\nbuf = ctypes.create_string_buffer(512)\n\
             ids = dict(zip(('shm', 'sem', 'msg'), ({})))\n\
             for k in ('shm', 'sem', 'msg'):\n\
             \x20   if os.path.exists('/proc/sysvipc/' + k):\n\
             \x20       print(*open('/proc/sysvipc/' + k).read().splitlines()[1:], sep='\\n')\n\
             \x20   elif (libc.shmctl(ids[k], 2, buf) if k == 'shm' else libc.semctl(ids[k], 0, 2, buf) if k == 'sem' else libc.msgctl(ids[k], 2, buf)) == 0:\n\
             \x20       print(k, ids[k], 'still exists')\n\
             print(*os.listdir('/dev/shm'), sep='\\n')",
            ids.join(", ")
        ),
        10_000,
    )
    .await;
    let s = text(&left.stdout);
    assert_eq!(left.exit_code, 0, "{}", text(&left.stderr));
    assert!(
        s.trim().is_empty(),
        "shared memory outlived the exec that made it:\n{s}{}",
        text(&left.stderr)
    );
    // The next exec has the memory.
    let out = py(
        &sb,
        "b = bytearray(180 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1\nprint('ok')",
        60_000,
    )
    .await;
    assert!(!out.oom_killed, "{out:?}");
    assert_eq!(text(&out.stdout), "ok\n", "{}", text(&out.stderr));
    destroy_clean(sb).await;
}

// Issue 14, finding 11: what the code can read of PID 1 names no host path.
#[tokio::test]
async fn pid1_reveals_no_host_path() {
    if !require_root("pid1_reveals_no_host_path") {
        return;
    }
    let sb = sandbox(SandboxSpec::default()).await;
    let out = sh(
        &sb,
        "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done",
        5_000,
    )
    .await;
    let s = text(&out.stdout);
    let root = state_root();
    let root = root.to_string_lossy();
    assert!(
        !s.contains(root.as_ref()) && !s.contains("/target/"),
        "process command lines inside reveal host paths:\n{s}"
    );
    // A microVM's PID 1 is the kernel-started `/init` of the guest's own initramfs:
    // a path of the guest, never the host's (checked above).
    let pid1 = s.lines().next().unwrap_or_default();
    if on_microvm() {
        assert_eq!(pid1.trim(), "/init vm-init", "{s}");
    } else {
        assert!(
            !pid1.contains('/'),
            "PID 1's command line names a path:\n{s}"
        );
    }
    destroy_clean(sb).await;
}
