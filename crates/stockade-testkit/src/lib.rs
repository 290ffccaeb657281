//! Test support shared by Stockade's crates (a dev-dependency only).
//!
//! - [`require`]: a part a test needs (root, a tool, an image). In CI (`CI` set) a
//!   missing part fails the test with how to fix it; elsewhere the test prints a loud
//!   SKIPPED line and returns.
//! - [`Registry`]: Debian's `docker-registry` on loopback or on a [`peer::Peer`] (a
//!   network namespace standing in for another host), one per test, images pushed
//!   with `skopeo`.
//! - [`debian_test_image`]: the Debian rootfs tar `crates/stockade-image/ci-setup.sh`
//!   builds with mmdebstrap.
//! - [`fds::planted`]: descriptors leaked by a careless caller, and the probe that
//!   looks for them inside.
//! - [`require_root`], and [`sh`]/[`py`]/[`text`] to run code in a sandbox.

pub mod egress;
pub mod fds;
pub mod peer;
mod sandbox;

pub use sandbox::{assert_agent_socket_cannot_be_replaced, py, sh, text};

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

static SKIPPED: AtomicUsize = AtomicUsize::new(0);

/// A part a test needs. In CI (`CI` set) a missing part fails the test with how to
/// fix it; elsewhere the test prints SKIPPED, loudly, and gets `None`.
pub fn require<T>(part: &str, found: Result<T, String>, fix: &str) -> Option<T> {
    match found {
        Ok(v) => Some(v),
        Err(why) if std::env::var_os("CI").is_some() => {
            panic!("{part} is missing: {why}\nfix: {fix}")
        }
        Err(why) => {
            let n = SKIPPED.fetch_add(1, Ordering::SeqCst) + 1;
            let test = std::thread::current()
                .name()
                .unwrap_or("this test")
                .to_string();
            let _ = writeln!(
                std::io::stderr(),
                "\n*** SKIPPED #{n}: {test}: {part} is missing: {why}\n*** fix: {fix} (in CI this fails)\n"
            );
            None
        }
    }
}

/// `Ok` when this process runs as root.
pub fn root() -> Result<(), String> {
    let out = Command::new("id")
        .arg("-u")
        .output()
        .map_err(|e| e.to_string())?;
    if String::from_utf8_lossy(&out.stdout).trim() == "0" {
        Ok(())
    } else {
        Err("not running as root".into())
    }
}

/// Whether the test can run as root: in CI a test that is not root fails (with how to
/// fix it); elsewhere it is skipped loudly. `test` names what needs root.
pub fn require_root(test: &str) -> bool {
    if rootless() {
        return true;
    }
    require(
        &format!("root (for {test}: native sandboxes need cgroups and namespaces)"),
        root(),
        "run the tests as root (./test.sh as root)",
    )
    .is_some()
}

/// Whether this run tests rootless mode on purpose (`STOCKADE_TEST_ROOTLESS=1`, set by
/// `test.sh` when it runs the suites again as an unprivileged user): native sandboxes
/// then need no root, only a delegated cgroup (`stockade setup rootless`).
pub fn rootless() -> bool {
    std::env::var("STOCKADE_TEST_ROOTLESS").as_deref() == Ok("1") && root().is_err()
}

/// The cgroup directory (below each hierarchy's root) holding this process's native
/// sandboxes: `stockade`, or rootless the one delegated to the caller.
pub fn cgroup_parent() -> String {
    if root().is_ok() {
        "stockade".into()
    } else {
        format!("stockade-user-{}", effective_uid())
    }
}

fn effective_uid() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2))
                .and_then(|u| u.parse().ok())
        })
        .unwrap_or(0)
}

/// A host directory the sandbox must never see, where attack tests plant secrets:
/// `/root` as root, the caller's home rootless (a rootless user's secrets live there).
pub fn secret_dir() -> std::path::PathBuf {
    if root().is_ok() {
        return "/root".into();
    }
    std::env::var_os("HOME")
        .map(std::path::PathBuf::from)
        .filter(|h| h.is_absolute() && h.is_dir())
        .unwrap_or_else(|| "/root".into())
}

/// How to get the registry tools.
pub const REGISTRY_FIX: &str =
    "apt-get install docker-registry skopeo (crates/stockade-image/ci-setup.sh does)";

/// A registry process on loopback, killed on drop.
pub struct Registry {
    child: Child,
    /// `HOST:PORT`.
    pub addr: String,
    dir: tempfile::TempDir,
    creds: Option<(String, String)>,
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Registry {
    /// `Ok` when `docker-registry` and `skopeo` are installed.
    pub fn available() -> Result<(), String> {
        registry_tools()
    }
}

fn registry_tools() -> Result<(), String> {
    for tool in ["/usr/bin/docker-registry", "/usr/bin/skopeo"] {
        if !Path::new(tool).exists() {
            return Err(format!("{tool} not found"));
        }
    }
    Ok(())
}

impl Registry {
    /// Starts a registry on `host` (a loopback address), with basic auth when asked.
    /// `None` (after a SKIPPED line) when the tools are missing outside CI.
    pub fn start(host: &str, basic: Option<(&str, &str)>) -> Option<Registry> {
        require("a registry and skopeo", registry_tools(), REGISTRY_FIX)?;
        let mut extra = String::new();
        let dir = tempfile::tempdir().unwrap();
        if let Some((user, password)) = basic {
            let hash = Command::new("/usr/bin/python3")
                .args([
                    "-W",
                    "ignore",
                    "-c",
                    "import crypt,sys; print(crypt.crypt(sys.argv[1], crypt.mksalt(crypt.METHOD_BLOWFISH)))",
                    password,
                ])
                .output()
                .unwrap();
            assert!(
                hash.status.success(),
                "bcrypt: {}",
                String::from_utf8_lossy(&hash.stderr)
            );
            let htpasswd = dir.path().join("htpasswd");
            std::fs::write(
                &htpasswd,
                format!("{user}:{}", String::from_utf8_lossy(&hash.stdout).trim()),
            )
            .unwrap();
            extra = format!(
                "auth:\n  htpasswd:\n    realm: stockade-test\n    path: {}\n",
                htpasswd.display()
            );
        }
        let creds = basic.map(|(u, p)| (u.to_string(), p.to_string()));
        Some(Registry::start_with(host, dir, &extra, creds))
    }

    /// Starts a registry inside `peer` (port 5000 of its address): reached as a
    /// registry on another host is. `None` (after a SKIPPED line) when the tools are
    /// missing outside CI.
    pub fn start_on(peer: &peer::Peer) -> Option<Registry> {
        require("a registry and skopeo", registry_tools(), REGISTRY_FIX)?;
        let dir = tempfile::tempdir().unwrap();
        let addr = format!("{}:5000", peer.addr);
        Some(Registry::spawn(addr, dir, "", None, Some(peer)))
    }

    /// Starts a registry with `extra` appended to its YAML config (an `auth:`
    /// section, say); `creds` are what `push` presents.
    pub fn start_with(
        host: &str,
        dir: tempfile::TempDir,
        extra: &str,
        creds: Option<(String, String)>,
    ) -> Registry {
        let port = TcpListener::bind((host, 0))
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        Registry::spawn(format!("{host}:{port}"), dir, extra, creds, None)
    }

    fn spawn(
        addr: String,
        dir: tempfile::TempDir,
        extra: &str,
        creds: Option<(String, String)>,
        on: Option<&peer::Peer>,
    ) -> Registry {
        let config = format!(
            "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {}\n\
             http:\n  addr: {addr}\n{extra}",
            dir.path().join("data").display()
        );
        let config_path = dir.path().join("config.yml");
        std::fs::write(&config_path, config).unwrap();
        let child = match on {
            Some(p) => p.command("/usr/bin/docker-registry"),
            None => Command::new("/usr/bin/docker-registry"),
        }
        .arg("serve")
        .arg(&config_path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
        let started = Instant::now();
        while TcpStream::connect(&addr).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "registry on {addr} never listened"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Registry {
            child,
            addr,
            dir,
            creds,
        }
    }

    /// Pushes an OCI layout (its index entry named `ref_name`) as `dest`
    /// (`name:tag`), all platforms of an index when `all`.
    pub fn push(&self, layout: &Path, ref_name: &str, dest: &str, all: bool) {
        let mut cmd = Command::new("/usr/bin/skopeo");
        cmd.args([
            "--insecure-policy",
            "copy",
            "--quiet",
            "--dest-tls-verify=false",
        ]);
        if all {
            cmd.arg("--all");
        }
        if let Some((u, p)) = &self.creds {
            cmd.arg(format!("--dest-creds={u}:{p}"));
        }
        let out = cmd
            .arg(format!("oci:{}:{ref_name}", layout.display()))
            .arg(format!("docker://{}/{dest}", self.addr))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "skopeo: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The registry's own copy of a blob given by its hex digest (to corrupt it).
    pub fn blob_file(&self, hex: &str) -> PathBuf {
        self.dir
            .path()
            .join("data/docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }
}

/// The Debian bookworm rootfs tar (python3-minimal) that
/// `crates/stockade-image/ci-setup.sh` builds with mmdebstrap, cached under
/// `/var/cache/stockade/test-images/<hash of that script>/`.
pub fn debian_test_image() -> Result<PathBuf, String> {
    use sha2::Digest as _;
    let script = include_bytes!("../../stockade-image/ci-setup.sh");
    let hex = format!("{:x}", sha2::Sha256::digest(script));
    let p = Path::new("/var/cache/stockade/test-images")
        .join(&hex[..16])
        .join("debian-python.tar");
    p.is_file()
        .then_some(p.clone())
        .ok_or_else(|| format!("{} does not exist", p.display()))
}

/// How to get the Debian test image.
pub const DEBIAN_FIX: &str = "run crates/stockade-image/ci-setup.sh as root";

/// Writes an OCI image layout into `dir`: `base` (a rootfs tar, e.g. the Debian
/// test image) as the first layer, a second layer with `files` (path, contents), the
/// image config's `config` section as given (`Env`, `User`, `Cmd`...), the index
/// entry named `ref_name`.
pub fn oci_layout(
    dir: &Path,
    base: &Path,
    files: &[(&str, &[u8])],
    config: serde_json::Value,
    ref_name: &str,
) {
    let entries: Vec<LayerEntry> = files.iter().map(|(p, b)| LayerEntry::File(p, b)).collect();
    oci_layout_entries(dir, base, &entries, config, ref_name);
}

/// One entry of the second layer [`oci_layout_entries`] writes.
#[derive(Clone, Copy, Debug)]
pub enum LayerEntry<'a> {
    /// A file (mode 0755) with these contents.
    File(&'a str, &'a [u8]),
    /// A directory (mode 0755).
    Dir(&'a str),
    /// A symlink (path, target), the target written as given (`/`, `../../..`).
    Symlink(&'a str, &'a str),
}

/// Like [`oci_layout`], the second layer made of any [`LayerEntry`]s: images with
/// symlinks such as `etc -> /` for the attack tests.
pub fn oci_layout_entries(
    dir: &Path,
    base: &Path,
    entries: &[LayerEntry],
    config: serde_json::Value,
    ref_name: &str,
) {
    use sha2::Digest as _;
    let blobs = dir.join("blobs/sha256");
    std::fs::create_dir_all(&blobs).unwrap();
    let put = |data: &[u8]| {
        let hex = format!("{:x}", sha2::Sha256::digest(data));
        std::fs::write(blobs.join(&hex), data).unwrap();
        (format!("sha256:{hex}"), data.len())
    };
    let mut b = tar::Builder::new(Vec::new());
    for e in entries {
        let mut h = tar::Header::new_gnu();
        h.set_mode(0o755);
        match *e {
            LayerEntry::File(path, body) => {
                h.set_size(body.len() as u64);
                h.set_cksum();
                b.append_data(&mut h, path, body).unwrap();
            }
            LayerEntry::Dir(path) => {
                h.set_entry_type(tar::EntryType::Directory);
                h.set_size(0);
                h.set_cksum();
                b.append_data(&mut h, path, std::io::empty()).unwrap();
            }
            LayerEntry::Symlink(path, target) => {
                h.set_entry_type(tar::EntryType::Symlink);
                h.set_size(0);
                b.append_link(&mut h, path, target).unwrap();
            }
        }
    }
    let extra = b.into_inner().unwrap();
    let base = std::fs::read(base).unwrap();
    let layers = [put(&base), put(&extra)];
    let config = serde_json::to_vec(&serde_json::json!({
        "architecture": "amd64", "os": "linux", "config": config,
        "rootfs": {"type": "layers", "diff_ids": layers.iter().map(|l| l.0.clone()).collect::<Vec<_>>()},
    }))
    .unwrap();
    let (cd, cs) = put(&config);
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cd, "size": cs},
        "layers": layers.iter().map(|(d, n)| serde_json::json!({
            "mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": d, "size": n})).collect::<Vec<_>>(),
    }))
    .unwrap();
    let (md, ms) = put(&manifest);
    std::fs::write(dir.join("oci-layout"), br#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
    let index = serde_json::json!({"schemaVersion": 2, "manifests": [{
        "mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": md, "size": ms,
        "annotations": {"org.opencontainers.image.ref.name": ref_name}}]});
    std::fs::write(dir.join("index.json"), serde_json::to_vec(&index).unwrap()).unwrap();
}

/// How to get runsc for the gvisor provider.
pub const GVISOR_FIX: &str = "run crates/stockade-gvisor/ci-setup.sh as root (installs Debian's runsc \
     from bookworm-backports, builds the static agent)";

/// The runsc the gvisor provider will use (`$STOCKADE_RUNSC`, else `runsc` in `PATH`
/// or `/usr/bin`), when it answers `--version`.
pub fn runsc() -> Result<std::path::PathBuf, String> {
    let path = match std::env::var_os("STOCKADE_RUNSC") {
        Some(p) => std::path::PathBuf::from(p),
        None => std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
            .unwrap_or_default()
            .into_iter()
            .chain([std::path::PathBuf::from("/usr/bin")])
            .map(|d| d.join("runsc"))
            .find(|p| p.is_file())
            .ok_or("runsc is not in PATH")?,
    };
    let out = Command::new(&path)
        .arg("--version")
        .output()
        .map_err(|e| format!("cannot run {}: {e}", path.display()))?;
    if out.status.success() {
        Ok(path)
    } else {
        Err(format!("{} --version failed", path.display()))
    }
}

/// How to get dockerd and the docker test image.
pub const DOCKER_FIX: &str = "run crates/stockade-docker/ci-setup.sh as root (installs docker.io, \
     starts dockerd, builds the static agent, imports the test image)";

/// The Debian python image `crates/stockade-docker/ci-setup.sh` imports into dockerd
/// (`stockade-test/debian-python:<first 16 hex of the sha256 of that script followed
/// by crates/stockade-image/ci-setup.sh>`), once dockerd answers and has it.
pub fn docker_test_image() -> Result<String, String> {
    use sha2::Digest as _;
    let mut h = sha2::Sha256::new();
    h.update(include_bytes!("../../stockade-docker/ci-setup.sh"));
    h.update(include_bytes!("../../stockade-image/ci-setup.sh"));
    let hex = format!("{:x}", h.finalize());
    let name = format!("stockade-test/debian-python:{}", &hex[..16]);
    let out = Command::new("/usr/bin/docker")
        .args(["image", "inspect", "--format", "{{.Id}}", &name])
        .output()
        .map_err(|e| format!("cannot run /usr/bin/docker: {e}"))?;
    if out.status.success() {
        Ok(name)
    } else {
        Err(format!(
            "dockerd does not answer or lacks {name}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Python code that tries every socket address family a sandbox must not have, and the
/// kernel resources shared across sandboxes (native AIO, POSIX message queues, tried
/// with perl's `syscall`, since slim images' python lacks ctypes). It prints one line
/// per probe: `blocked NAME` when seccomp refused it (`EPERM` for a
/// socket family, `ENOSYS` for the shared resources), `OPEN NAME` or `OTHER NAME errno`
/// otherwise; then `allowed NAME ok|FAILED ...` for what must keep working (unix,
/// inet and inet6 sockets, `NETLINK_ROUTE`, a server on the sandbox's own loopback).
/// Shared by the native and docker attack suites.
pub const KERNEL_SURFACE_PROBE: &str = r#"
import errno, os, socket, subprocess
denied = [
    ("vsock", 40, socket.SOCK_STREAM, 0), ("packet", 17, socket.SOCK_RAW, 0),
    ("packet-dgram", 17, socket.SOCK_DGRAM, 0), ("bluetooth", 31, socket.SOCK_STREAM, 0),
    ("alg", 38, socket.SOCK_SEQPACKET, 0), ("rds", 21, socket.SOCK_SEQPACKET, 0),
    ("tipc", 30, socket.SOCK_RDM, 0), ("xdp", 44, socket.SOCK_RAW, 0),
    ("can", 29, socket.SOCK_RAW, 1), ("key", 15, socket.SOCK_RAW, 2),
    ("x25", 9, socket.SOCK_SEQPACKET, 0), ("ax25", 3, socket.SOCK_SEQPACKET, 0),
    ("appletalk", 5, socket.SOCK_DGRAM, 0), ("llc", 26, socket.SOCK_DGRAM, 0),
    ("pppox", 24, socket.SOCK_STREAM, 0), ("kcm", 41, socket.SOCK_DGRAM, 0),
    ("qipcrtr", 42, socket.SOCK_DGRAM, 0), ("smc", 43, socket.SOCK_STREAM, 0),
    ("mctp", 45, socket.SOCK_DGRAM, 0), ("ieee802154", 36, socket.SOCK_DGRAM, 0),
    ("nfc", 39, socket.SOCK_SEQPACKET, 0), ("caif", 37, socket.SOCK_SEQPACKET, 0),
    ("netlink-audit", 16, socket.SOCK_RAW, 9), ("netlink-uevent", 16, socket.SOCK_RAW, 15),
    ("netlink-netfilter", 16, socket.SOCK_RAW, 12), ("netlink-sock-diag", 16, socket.SOCK_RAW, 4),
    ("netlink-xfrm", 16, socket.SOCK_RAW, 6), ("netlink-generic", 16, socket.SOCK_RAW, 16),
    ("netlink-connector", 16, socket.SOCK_DGRAM, 11), ("netlink-crypto", 16, socket.SOCK_RAW, 21),
    ("inet-raw", 2, socket.SOCK_RAW, 1),
]
def verdict(name, f, want):
    try:
        f(); print("OPEN", name)
    except OSError as e:
        print("blocked" if e.errno == want else "OTHER", name, errno.errorcode.get(e.errno, e.errno))
for name, fam, typ, proto in denied:
    verdict(name, lambda: socket.socket(fam, typ, proto).close(), errno.EPERM)
verdict("socketpair-inet", lambda: socket.socketpair(socket.AF_INET, socket.SOCK_STREAM), errno.EPERM)
verdict("socketpair-netlink", lambda: socket.socketpair(16, socket.SOCK_RAW), errno.EPERM)
# Raw syscalls through perl (in every Debian image, unlike python's ctypes): the errno
# of io_setup(65536, &ctx) (all of fs.aio-max-nr) and of mq_open.
def perl_errno(code):
    out = subprocess.run(["perl", "-e", code], capture_output=True, text=True)
    return int(out.stdout.strip() or -1)
for name, code in (
    ("io_setup", 'my $c = pack("Q", 0); print syscall(206, 65536, $c) < 0 ? 0 + $! : 0'),
    ("mq_open", 'my $n = "stockade-probe"; print syscall(240, $n, 66, 384, 0) < 0 ? 0 + $! : 0'),
):
    e = perl_errno(code)
    print("blocked" if e == errno.ENOSYS else "OTHER", name, errno.errorcode.get(e, e))
def check(name, f):
    try:
        f(); print("allowed", name, "ok")
    except (OSError, ValueError) as ex:
        print("allowed", name, "FAILED", ex)
check("unix", lambda: socket.socketpair(socket.AF_UNIX))
check("inet6", lambda: socket.socket(socket.AF_INET6).close())
check("netlink-route", lambda: socket.socket(16, socket.SOCK_RAW, 0).close())
check("if_nameindex", lambda: [n for _, n in socket.if_nameindex()].index("lo"))
def loopback_server():
    srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(1)
    c = socket.create_connection(srv.getsockname(), timeout=5); s, _ = srv.accept()
    c.sendall(b"x"); assert s.recv(1) == b"x"
check("loopback-server", loopback_server)
"#;

/// Checks the output of [`KERNEL_SURFACE_PROBE`]: every probe blocked, every allowed
/// use working. Panics with the whole output otherwise.
pub fn assert_kernel_surface_blocked(stdout: &str, stderr: &str) {
    let bad: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("OPEN") || l.starts_with("OTHER") || l.contains("FAILED"))
        .collect();
    assert!(
        bad.is_empty(),
        "seccomp let these through (or broke an allowed use): {bad:?}\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    let blocked = stdout.lines().filter(|l| l.starts_with("blocked")).count();
    let allowed = stdout.lines().filter(|l| l.starts_with("allowed")).count();
    assert_eq!(
        (blocked, allowed),
        (35, 5),
        "the probe did not run to the end\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
}

/// One of the host's own addresses, not loopback: what an egress test checks a
/// sandbox cannot reach. The source address of the default route when there is one
/// (a UDP socket's `connect` sends nothing), never a sandbox's veth address, which
/// goes when that sandbox does; else the first in `/proc/net/fib_trie`.
pub fn host_address() -> String {
    let routed = std::net::UdpSocket::bind("0.0.0.0:0")
        .and_then(|s| s.connect("1.1.1.1:9").map(|()| s))
        .and_then(|s| s.local_addr())
        .ok()
        .map(|a| a.ip())
        .filter(|ip| !ip.is_loopback() && !ip.is_unspecified());
    if let Some(ip) = routed {
        return ip.to_string();
    }
    let fib = std::fs::read_to_string("/proc/net/fib_trie").unwrap();
    fib.lines()
        .zip(fib.lines().skip(1))
        .filter(|(_, b)| b.contains("/32 host LOCAL"))
        .map(|(a, _)| a.trim().trim_start_matches("|-- ").to_string())
        .find(|a| !a.starts_with("127."))
        .expect("the host has an address besides loopback")
}

/// Detaches every mount at or below `dir`, deepest first: what a daemon that was
/// stopped before its sandboxes were destroyed leaves in its state directory (its
/// reaper unmounts a gone sandbox's staged mounts, but only while it runs), so a
/// test that removes that directory leaves no mount on the host.
pub fn detach_mounts_under(dir: &std::path::Path) {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return;
    };
    // The mount point is the fifth field, with space, tab, newline and backslash
    // written as octal escapes.
    let unescape = |p: &str| {
        p.replace("\\040", " ")
            .replace("\\011", "\t")
            .replace("\\012", "\n")
            .replace("\\134", "\\")
    };
    let mut points: Vec<std::path::PathBuf> = info
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|p| std::path::PathBuf::from(unescape(p)))
        .filter(|p| p.starts_with(dir))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    for p in points {
        let _ = nix::mount::umount2(&p, nix::mount::MntFlags::MNT_DETACH);
    }
}

/// A tmpfs of a given size mounted on a directory for the guard's life (lazily
/// unmounted when dropped): a small disk to fill, for fault tests. Needs root.
pub struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    /// Mounts a tmpfs of `size` (`4k`, `2m`) on `dir`, made if missing; panics if it
    /// cannot.
    pub fn mount(dir: &std::path::Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(dir).unwrap();
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0700")])
            .arg("stockade-test")
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "cannot mount a tmpfs of {size} on {}", dir.display());
        Tmpfs(dir.to_path_buf())
    }

    /// Fills it with the file `name` until a write fails (down to 512-byte writes);
    /// the file's path.
    pub fn fill(&self, name: &str) -> std::path::PathBuf {
        let path = self.0.join(name);
        let mut f = std::fs::File::create(&path).unwrap();
        for size in [1 << 20, 64 << 10, 4 << 10, 512] {
            let block = vec![0u8; size];
            while std::io::Write::write_all(&mut f, &block).is_ok() {}
        }
        path
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}
