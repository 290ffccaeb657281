//! The second wall: what the code sees is gVisor's kernel, not the host's, and the
//! escape probes that namespaces block are blocked here too. Each attack fails its
//! test when it succeeds.

use std::os::unix::net::UnixListener;

use stockade_core::spec::Mount;
use stockade_core::{ExecRequest, SandboxSpec};

use crate::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kernel_is_gvisors_and_host_kernel_interfaces_are_absent() {
    if !ready() {
        return;
    }
    let host_release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let host_version = std::fs::read_to_string("/proc/version").unwrap();
    let sb = sandbox(SandboxSpec::default()).await;
    let out = sh(&sb, "uname -r; cat /proc/version", 10_000).await;
    let s = text(&out.stdout);
    let mut lines = s.lines();
    let release = lines.next().unwrap_or_default();
    assert_ne!(release, host_release.trim(), "uname -r is the host's: {s}");
    assert!(!release.is_empty(), "{s} {}", text(&out.stderr));
    let version = lines.next().unwrap_or_default();
    assert!(
        !version.is_empty() && version.trim() != host_version.trim(),
        "/proc/version is the host's: {s}"
    );
    assert!(
        !s.contains(host_release.trim()),
        "the host's kernel release shows inside: {s}"
    );
    // The host's kernel knobs and sysfs are not there: /proc/sys/kernel holds only
    // what gVisor emulates, /sys/kernel nothing. gVisor 2024 emulates
    // /proc/sysrq-trigger (2022 had none): it may be there, but a write must fail
    // and never reach the host's kernel log.
    let sysrq_lines = || {
        std::process::Command::new("dmesg")
            .output()
            .map(|o| text(&o.stdout).matches("sysrq").count())
            .unwrap_or(0)
    };
    let sysrq_before = sysrq_lines();
    let probe = py(
        &sb,
        "import os\n\
         for p in ['/proc/sys/kernel/core_pattern', '/proc/sys/kernel/modprobe', '/proc/sys/kernel/sysrq',\n\
                   '/proc/sys/kernel/randomize_va_space', '/proc/kcore', '/proc/kallsyms',\n\
                   '/sys/kernel/security', '/sys/kernel/debug', '/sys/kernel/mm', '/sys/fs/cgroup/memory',\n\
                   '/sys/firmware/efi', '/sys/module/kvm']:\n\
         \x20   print('PRESENT' if os.path.exists(p) else 'absent', p)\n\
         try:\n\
         \x20   open('/proc/sysrq-trigger', 'w').write('m')\n\
         \x20   print('SYSRQ WRITTEN')\n\
         except OSError as e:\n\
         \x20   print('sysrq refused', e.errno)\n\
         print('sys/kernel', os.listdir('/sys/kernel') if os.path.isdir('/sys/kernel') else 'none')",
        10_000,
    )
    .await;
    let p = text(&probe.stdout);
    assert!(!p.contains("PRESENT"), "host kernel interfaces inside: {p}");
    assert!(p.contains("sysrq refused"), "{p} {}", text(&probe.stderr));
    assert_eq!(
        sysrq_lines(),
        sysrq_before,
        "a sysrq reached the host's kernel"
    );
    assert!(
        p.contains("sys/kernel [] ")
            || p.contains("sys/kernel []\n")
            || p.contains("sys/kernel none"),
        "{p} {}",
        text(&probe.stderr)
    );
    // The applied list names the platform.
    let info = provider().inspect(sb.id()).await.unwrap();
    assert!(
        info.applied
            .iter()
            .any(|w| w.kind == stockade_core::WallKind::Platform && !w.detail.is_empty()),
        "{:?}",
        info.applied
    );
    assert!(
        info.applied
            .iter()
            .any(|w| w.kind == stockade_core::WallKind::Isolation && w.detail.starts_with("gVisor")),
        "{:?}",
        info.applied
    );
    sb.destroy().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn escape_probes_are_blocked() {
    if !ready() {
        return;
    }
    let host = tempfile::tempdir().unwrap();
    // A host service listening on a unix socket in a directory the sandbox mounts:
    // runsc may create host sockets (the agent's) but never connect to one.
    let host_sock = host.path().join("host.sock");
    let listener = UnixListener::bind(&host_sock).unwrap();
    listener.set_nonblocking(true).unwrap();
    std::fs::set_permissions(
        host.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let sb = sandbox(SandboxSpec {
        mounts: vec![Mount {
            host: host.path().to_path_buf(),
            target: "/data".into(),
            writable: true,
        }],
        ..Default::default()
    })
    .await;
    let code = r#"
import ctypes, errno, os, socket
libc = ctypes.CDLL(None, use_errno=True)
def show(name, ok):
    print(("ESCAPED " if ok else "blocked ") + name)
def sys_ok(name, r):
    show(name, r == 0)
show('mount', libc.mount(b'none', b'/tmp', b'tmpfs', 0, None) == 0)
show('unshare user+mount', libc.unshare(0x10000000 | 0x00020000) == 0)
show('setuid 0', libc.setuid(0) == 0)
show('chroot', libc.chroot(b'/tmp') == 0)
PTRACE_ATTACH = 16
show('ptrace pid 1', libc.ptrace(PTRACE_ATTACH, 1, None, None) == 0)
try:
    os.kill(1, 9); show('kill pid 1', True)
except OSError: show('kill pid 1', False)
print('environ of pid 1:', repr(open('/proc/1/environ', 'rb').read()) if os.access('/proc/1/environ', os.R_OK) else 'unreadable')
for path in ['/.stockade', '/.stockade/agent.sock', '/.stockade/config.json', '/proc/1/root/.stockade', '/proc/1/mem', '/proc/1/cwd/.stockade', '/proc/1/fd/3', '/proc/1/fd/4', '/proc/1/fd/5']:
    try:
        if os.path.isdir(path): os.listdir(path)
        else: open(path, 'rb').read(1)
        show('read ' + path, True)
    except OSError: show('read ' + path, False)
s = socket.socket(socket.AF_UNIX)
try:
    s.connect('/.stockade/agent.sock'); show('connect agent socket', True)
except OSError: show('connect agent socket', False)
s = socket.socket(socket.AF_UNIX)
try:
    s.connect('/data/host.sock'); show('connect host socket', True)
except OSError: show('connect host socket', False)
for path in ['/usr/pwned', '/etc/pwned', '/pwned', '/proc/sys/kernel/hostname']:
    try:
        open(path, 'w').write('x'); show('write ' + path, True)
    except OSError: show('write ' + path, False)
try:
    open('/data/ok', 'w').write('x'); print('allowed /data')
except OSError as e: print('FAILED /data', e)
print('uid', os.getuid(), os.geteuid(), 'caps', [l for l in open('/proc/self/status') if l.startswith('CapEff')][0].split()[1])
"#;
    let out = py(&sb, code, 20_000).await;
    let s = text(&out.stdout);
    assert!(!s.contains("ESCAPED"), "{s} {}", text(&out.stderr));
    // gVisor (2022) lets another uid read PID 1's environ, maps and fd names, where
    // Linux asks for ptrace access: the agent's environment is empty by design (only
    // what gVisor adds), and its descriptors cannot be opened (probed above).
    // Besides gVisor's HOME, only the PATH through which the bundle starts the agent
    // by name (`/.stockade`, a path of the sandbox, so its command line names none).
    assert!(
        s.contains("environ of pid 1: b'HOME=/root\\x00'")
            || s.contains("environ of pid 1: b'PATH=/.stockade\\x00HOME=/root\\x00'")
            || s.contains("environ of pid 1: b'HOME=/root\\x00PATH=/.stockade\\x00'")
            || s.contains("environ of pid 1: unreadable")
            || s.contains("environ of pid 1: b''"),
        "PID 1's environment holds more than gVisor's HOME and the agent's PATH: {s}"
    );
    assert_eq!(
        s.lines().filter(|l| l.starts_with("blocked")).count(),
        21,
        "every probe ran: {s} {}",
        text(&out.stderr)
    );
    assert!(s.contains("allowed /data"), "{s}");
    assert!(s.contains("uid 1000 1000 caps 0000000000000000"), "{s}");
    assert!(
        listener.accept().is_err(),
        "the host socket got a connection"
    );
    assert!(!std::path::Path::new("/pwned").exists());
    assert!(!std::path::Path::new("/usr/pwned").exists());
    sb.destroy().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_hold_inside_gvisor() {
    if !ready() {
        return;
    }
    let mut spec = SandboxSpec::default();
    spec.limits.pids = 16;
    spec.limits.memory_bytes = 128 << 20;
    spec.limits.tmp_bytes = 4 << 20;
    let sb = sandbox(spec).await;
    // A fork bomb stops at the pids cap; the sandbox stays usable.
    let bomb = py(
        &sb,
        "import os, time\nn = 0\ntry:\n    while True:\n        if os.fork() == 0:\n            time.sleep(30); os._exit(0)\n        n += 1\nexcept OSError as e:\n    mine = [p for p in os.listdir('/proc') if p.isdigit() and os.stat('/proc/' + p).st_uid == os.getuid()]\n    print('stopped', len(mine), e.errno)",
        20_000,
    )
    .await;
    let s = text(&bomb.stdout);
    let n: u32 = s
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{s} {}", text(&bomb.stderr)));
    assert!(
        n <= 16,
        "{n} processes of the code's uid past a cap of 16: {s}"
    );
    // Memory: an allocation past the cap fails inside; the sandbox lives on.
    let mem = py(
        &sb,
        "a = []\nwhile True: a.append(bytearray(8 << 20))",
        30_000,
    )
    .await;
    assert!(text(&mem.stderr).contains("MemoryError"), "{mem:?}");
    // /tmp is capped at its size.
    let tmp = sh(
        &sb,
        "head -c 8000000 /dev/zero > /tmp/big; echo rc=$?",
        10_000,
    )
    .await;
    assert!(text(&tmp.stdout).contains("rc=1"), "{tmp:?}");
    let mut req = ExecRequest::new(["/bin/echo", "alive"]);
    req.timeout_ms = Some(10_000);
    assert_eq!(sb.exec(req).await.unwrap().stdout, b"alive\n");
    sb.destroy().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn root_inside_cannot_replace_the_agents_socket() {
    if !ready() {
        return;
    }
    let mut spec = SandboxSpec::default();
    spec.user = stockade_core::spec::User { uid: 0, gid: 0 };
    let sb = sandbox(spec).await;
    stockade_testkit::assert_agent_socket_cannot_be_replaced(&sb).await;
    sb.destroy().await.unwrap();
}
