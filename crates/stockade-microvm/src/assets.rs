//! What a VM boots from, made once and cached under the provider's cache directory:
//!
//! - the guest kernel: Debian's cloud kernel (`linux-image-cloud-amd64`), found in
//!   `/boot` (its virtio drivers are modules);
//! - the initramfs: the static agent as `/init` and the modules it loads (virtio-mmio,
//!   block, serial, rng, erofs, overlay), keyed by the agent and the kernel; each VM
//!   appends a small archive with its own `/config.json`;
//! - the root image: an erofs image of the host-rootfs view (`/usr` and its
//!   compatibility links, the `/etc` files programs need, a synthetic passwd and
//!   group), keyed by the host's package database, built with `mkfs.erofs`; or, for
//!   `--image`, an erofs image of the image's flattened rootfs, keyed by its digest.

use std::collections::BTreeSet;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use stockade_core::host::hex;
use stockade_core::{Error, Result};

/// The kernel modules the guest needs, by name (their dependencies come first).
pub const MODULES: &[&str] = &[
    "virtio_mmio",
    "virtio_blk",
    "virtio_console",
    "virtio_rng",
    "erofs",
    "overlay",
    "virtiofs",
    "virtio_net",
];

/// The `/etc` entries of the host-rootfs view (the native provider's list).
const ETC: &[&str] = &[
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "alternatives",
    "ssl",
    "ca-certificates",
    "localtime",
    "protocols",
    "services",
    "mime.types",
    "bash.bashrc",
    "inputrc",
    "python3",
    "python3.11",
];

/// Paths under `/usr` left out of the root image: documentation only.
const EXCLUDE: &str = "^usr/share/(doc|man|info|locale)(/|$)";

/// The guest kernel.
#[derive(Clone, Debug)]
pub struct Kernel {
    pub image: PathBuf,
    pub release: String,
}

/// The newest `/boot/vmlinuz-*-cloud-amd64` whose modules are installed (the
/// distribution's own before a backport), or
/// `$STOCKADE_MICROVM_KERNEL` (a vmlinuz whose release is in its name).
pub fn find_kernel() -> Result<Kernel> {
    let missing = |detail: String| Error::Unavailable {
        what: "a guest kernel for the microvm provider".into(),
        reason: detail,
        fix: "apt-get install linux-image-cloud-amd64 (or run crates/stockade-microvm/ci-setup.sh)"
            .into(),
    };
    let mut found: Vec<(String, PathBuf)> = Vec::new();
    if let Some(k) = std::env::var_os("STOCKADE_MICROVM_KERNEL") {
        let k = PathBuf::from(k);
        let name = k
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .to_string();
        let release = name.trim_start_matches("vmlinuz-").to_string();
        return Ok(Kernel { image: k, release });
    }
    for e in std::fs::read_dir("/boot").map_err(|e| missing(format!("/boot: {e}")))? {
        let Ok(e) = e else { continue };
        let name = e.file_name().to_string_lossy().to_string();
        if let Some(release) = name.strip_prefix("vmlinuz-")
            && release.ends_with("-cloud-amd64")
            && Path::new("/lib/modules")
                .join(release)
                .join("modules.dep")
                .exists()
        {
            found.push((release.to_string(), e.path()));
        }
    }
    found.sort_by_key(|a| version_key(&a.0));
    // The distribution's own kernel before a backport (`+debNN` in the release):
    // Debian 12's backported 6.12 double-faults in about one boot in three under
    // QEMU 7.2's TCG, its own 6.1 does not.
    if found.iter().any(|(r, _)| !r.contains('+')) {
        found.retain(|(r, _)| !r.contains('+'));
    }
    let (release, image) = found
        .pop()
        .ok_or_else(|| missing("no /boot/vmlinuz-*-cloud-amd64 with its modules".into()))?;
    Ok(Kernel { image, release })
}

/// A module's name from its path (`kernel/drivers/char/hw_random/virtio-rng.ko.xz`
/// is `virtio_rng`).
fn module_name(path: &str) -> String {
    let file = Path::new(path.trim())
        .file_name()
        .and_then(|f| f.to_str())
        .unwrap_or_default();
    let stem = file.split(".ko").next().unwrap_or_default();
    stem.replace('-', "_")
}

/// A module file's contents, decompressed (Debian compresses them with xz since
/// 6.x kernels).
fn read_module(path: &Path) -> Result<Vec<u8>> {
    let name = path.display().to_string();
    if name.ends_with(".ko") {
        return std::fs::read(path).map_err(io(format!("cannot read {name}")));
    }
    let tool = match name.rsplit('.').next() {
        Some("xz") => "xz",
        Some("zst") => "zstd",
        Some("gz") => "gzip",
        _ => {
            return Err(Error::Internal(format!(
                "module {name} is compressed in a way stockade does not know"
            )));
        }
    };
    let out = std::process::Command::new(tool)
        .arg("-dc")
        .arg(path)
        .output()
        .map_err(|e| Error::Unavailable {
            what: format!("decompressing {name}"),
            reason: format!("cannot run {tool}: {e}"),
            fix: format!("install {tool}"),
        })?;
    if !out.status.success() {
        return Err(Error::Internal(format!(
            "{tool} -dc {name} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(out.stdout)
}

fn version_key(release: &str) -> Vec<u64> {
    release
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|s| s.parse().ok())
        .collect()
}

/// The module files (paths relative to the modules dir) for `wanted`, each after
/// its dependencies, from the text of `modules.dep`.
pub fn module_order(
    modules_dep: &str,
    builtin: &str,
    wanted: &[&str],
) -> std::result::Result<Vec<String>, String> {
    let deps: std::collections::HashMap<&str, Vec<&str>> = modules_dep
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(m, d)| (m.trim(), d.split_whitespace().collect()))
        .collect();
    let by_name = |name: &str| {
        deps.keys()
            .find(|p| module_name(p) == name)
            .map(ToString::to_string)
    };
    let builtin: BTreeSet<String> = builtin.lines().map(module_name).collect();
    let mut order = Vec::new();
    let mut seen = BTreeSet::new();
    fn visit(
        m: &str,
        deps: &std::collections::HashMap<&str, Vec<&str>>,
        seen: &mut BTreeSet<String>,
        order: &mut Vec<String>,
    ) {
        if !seen.insert(m.to_string()) {
            return;
        }
        // modules.dep lists what `m` needs, the one loaded last first.
        for d in deps.get(m).into_iter().flatten().rev() {
            visit(d, deps, seen, order);
        }
        order.push(m.to_string());
    }
    for w in wanted {
        if builtin.contains(*w) {
            continue;
        }
        let m = by_name(w).ok_or_else(|| format!("module {w} is not in modules.dep"))?;
        visit(&m, &deps, &mut seen, &mut order);
    }
    Ok(order)
}

/// Appends one file or directory to a cpio archive in the kernel's `newc` format
/// (written by hand: the format is a fixed ASCII header per entry, and the initramfs
/// is the only place it is needed).
pub fn cpio_entry(out: &mut Vec<u8>, name: &str, mode: u32, data: &[u8], ino: u32) {
    let header = format!(
        "070701{ino:08x}{mode:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}",
        0,
        0,
        1,
        0,
        data.len(),
        0,
        0,
        0,
        0,
        name.len() + 1,
        0
    );
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(name.as_bytes());
    out.push(0);
    pad4(out);
    out.extend_from_slice(data);
    pad4(out);
}

/// Ends a cpio archive.
pub fn cpio_trailer(out: &mut Vec<u8>) {
    cpio_entry(out, "TRAILER!!!", 0, &[], 0);
}

fn pad4(out: &mut Vec<u8>) {
    while !out.len().is_multiple_of(4) {
        out.push(0);
    }
}

fn io(what: String) -> impl FnOnce(std::io::Error) -> Error {
    move |e| Error::io(what, e)
}

/// Writes `data` to `path` through a temporary file and a rename, so concurrent
/// builders and a crash never leave a half-written file under the final name.
fn write_atomic(path: &Path, data: &[u8]) -> Result<()> {
    let tmp = path.with_extension(format!("tmp-{}", stockade_core::host::random_hex(6)));
    let mut f =
        std::fs::File::create(&tmp).map_err(io(format!("cannot create {}", tmp.display())))?;
    f.write_all(data)
        .map_err(io(format!("cannot write {}", tmp.display())))?;
    std::fs::rename(&tmp, path).map_err(io(format!("cannot rename {}", tmp.display())))
}

/// The initramfs for `agent` and `kernel` (cached), and the module files the guest
/// loads from its `/modules`, in order.
pub fn base_initramfs(
    cache: &Path,
    agent: &Path,
    kernel: &Kernel,
) -> Result<(PathBuf, Vec<String>)> {
    let moddir = Path::new("/lib/modules").join(&kernel.release);
    let dep_path = moddir.join("modules.dep");
    let dep = std::fs::read_to_string(&dep_path)
        .map_err(io(format!("cannot read {}", dep_path.display())))?;
    let builtin = std::fs::read_to_string(moddir.join("modules.builtin")).unwrap_or_default();
    let order = module_order(&dep, &builtin, MODULES).map_err(|e| Error::Unavailable {
        what: format!("the guest kernel {}", kernel.release),
        reason: e,
        fix: "install a Debian cloud kernel (linux-image-cloud-amd64)".into(),
    })?;
    let names: Vec<String> = order
        .iter()
        .map(|m| format!("{}.ko", module_name(m)))
        .collect();
    let meta = std::fs::metadata(agent).map_err(io(format!("cannot read {}", agent.display())))?;
    let mut h = Sha256::new();
    h.update(format!(
        "v2 {MODULES:?} {} {} {} {}",
        agent.display(),
        meta.len(),
        meta.mtime_nsec() + meta.mtime() * 1_000_000_000,
        kernel.release
    ));
    let key = hex(&h.finalize()[..8]);
    let path = cache.join(format!("initramfs-{key}.cpio"));
    if path.exists() {
        return Ok((path, names));
    }
    let mut out = Vec::new();
    let agent_bytes = stripped(agent, cache)?;
    let mut ino = 1;
    cpio_entry(&mut out, "init", 0o100755, &agent_bytes, ino);
    ino += 1;
    cpio_entry(&mut out, "modules", 0o040755, &[], ino);
    for (m, name) in order.iter().zip(&names) {
        ino += 1;
        let p = moddir.join(m);
        let data = read_module(&p)?;
        cpio_entry(&mut out, &format!("modules/{name}"), 0o100644, &data, ino);
    }
    // No trailer: the VM's own archive (its config) follows and ends it.
    write_atomic(&path, &out)?;
    // A new agent or kernel made this one: the earlier ones are never used again.
    prune_stale(cache, "initramfs-", ".cpio", &path);
    Ok((path, names))
}

/// Removes the cached assets `PREFIX*SUFFIX` in `cache` other than `keep` that no
/// process has open (a running VM's QEMU holds its root image open), and staging
/// directories of builds that died more than an hour ago. Called after a new asset
/// was made, so a changed host or agent does not leave gigabytes behind. What it
/// removed, for the caller to report.
pub fn prune_stale(cache: &Path, prefix: &str, suffix: &str, keep: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(cache) else {
        return Vec::new();
    };
    let candidates: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p != keep)
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            (name.starts_with(prefix) && name.ends_with(suffix))
                || (name.starts_with("stage-")
                    && p.metadata()
                        .and_then(|m| m.modified())
                        .ok()
                        .and_then(|t| t.elapsed().ok())
                        .is_some_and(|age| age.as_secs() > 3600))
        })
        .collect();
    if candidates.is_empty() {
        return Vec::new();
    }
    let open = open_files();
    let mut removed = Vec::new();
    for p in candidates {
        if open.contains(&p) {
            continue;
        }
        let gone = if p.is_dir() {
            std::fs::remove_dir_all(&p)
        } else {
            std::fs::remove_file(&p)
        };
        if gone.is_ok() {
            removed.push(p);
        }
    }
    removed
}

/// Every file some process of the host has open (what `/proc/*/fd` links to).
fn open_files() -> std::collections::HashSet<PathBuf> {
    let mut out = std::collections::HashSet::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return out;
    };
    for p in procs.flatten() {
        if !p
            .file_name()
            .to_string_lossy()
            .bytes()
            .all(|b| b.is_ascii_digit())
        {
            continue;
        }
        if let Ok(fds) = std::fs::read_dir(p.path().join("fd")) {
            for fd in fds.flatten() {
                if let Ok(target) = std::fs::read_link(fd.path()) {
                    out.insert(target);
                }
            }
        }
    }
    out
}

/// The agent without debug sections (a debug build is mostly those; the guest keeps
/// `/init` in RAM), or as is when `strip` is missing.
fn stripped(agent: &Path, cache: &Path) -> Result<Vec<u8>> {
    let tmp = cache.join(format!(
        "agent-strip-{}",
        stockade_core::host::random_hex(6)
    ));
    let ok = std::process::Command::new("strip")
        .arg("--strip-debug")
        .arg("-o")
        .arg(&tmp)
        .arg(agent)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let from = if ok { tmp.as_path() } else { agent };
    let data = std::fs::read(from).map_err(io(format!("cannot read {}", from.display())));
    let _ = std::fs::remove_file(&tmp);
    data
}

/// Writes `base` followed by an archive holding `config.json` to `to`: the VM's
/// initramfs.
pub fn vm_initramfs(base: &Path, config_json: &[u8], to: &Path) -> Result<()> {
    let mut out = std::fs::read(base).map_err(io(format!("cannot read {}", base.display())))?;
    cpio_entry(&mut out, "config.json", 0o100600, config_json, 9999);
    cpio_trailer(&mut out);
    std::fs::write(to, out).map_err(io(format!("cannot write {}", to.display())))
}

/// The synthetic `/etc/passwd` and `/etc/group` of the guest.
const PASSWD: &str = "root:x:0:0:root:/root:/bin/sh\nsandbox:x:1000:1000:sandbox:/tmp:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n";
const GROUP: &str = "root:x:0:\nsandbox:x:1000:\nnogroup:x:65534:\n";

/// The root image of the host-rootfs view (built when the host's packages changed).
pub fn root_image(cache: &Path, progress: &mut (dyn FnMut(&str) + Send)) -> Result<PathBuf> {
    let mut h = Sha256::new();
    for p in [
        "/var/lib/dpkg/status",
        "/usr",
        "/usr/local/bin",
        "/etc/ld.so.cache",
    ] {
        if let Ok(m) = std::fs::metadata(p) {
            h.update(format!(
                "{p} {} {} {}\n",
                m.len(),
                m.mtime(),
                m.mtime_nsec()
            ));
        }
    }
    h.update(format!("v1 {EXCLUDE} {ETC:?} {PASSWD} {GROUP}"));
    let key = hex(&h.finalize()[..8]);
    let path = cache.join(format!("rootfs-{key}.erofs"));
    if path.exists() {
        return Ok(path);
    }
    progress("building the VM root image from the host's /usr (once; mkfs.erofs)");
    let stage = cache.join(format!("stage-{}", stockade_core::host::random_hex(6)));
    let _ = std::fs::remove_dir_all(&stage);
    let r = build_root_image(&stage, &path);
    let _ = std::fs::remove_dir_all(&stage);
    r?;
    // The host's packages changed: earlier images (gigabytes each) not in use go.
    for old in prune_stale(cache, "rootfs-", ".erofs", &path) {
        progress(&format!(
            "removed the stale VM root image {}",
            old.display()
        ));
    }
    Ok(path)
}

/// What an image's root image takes from its rootfs: not the contents of the mount
/// points the guest fills (`/proc`, `/sys`, `/dev`, `/tmp`) nor `/.stockade`.
const IMAGE_EXCLUDE: &str = "^(proc|sys|dev|tmp|\\.stockade)/";

/// The `/etc` files of an image's root image that Stockade writes, as on native (the
/// image's `shadow`/`gshadow` are hidden by empty ones).
const IMAGE_ETC: &[(&str, &str)] = &[
    ("passwd", PASSWD),
    ("group", GROUP),
    ("shadow", ""),
    ("gshadow", ""),
    ("hosts", "127.0.0.1 localhost\n"),
    (
        "nsswitch.conf",
        "passwd: files\ngroup: files\nhosts: files dns\n",
    ),
    ("resolv.conf", ""),
];

/// The root image of an OCI image whose flattened rootfs is `rootfs` (the store's
/// `rootfs/<digest>`, so its name is the key): made once per image, with Stockade's
/// `/etc` files over the image's, under the image's own ownership and modes.
pub fn image_root_image(
    cache: &Path,
    rootfs: &Path,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<PathBuf> {
    let digest = rootfs
        .file_name()
        .and_then(|n| n.to_str())
        .filter(|n| n.len() >= 16 && n.bytes().all(|b| b.is_ascii_hexdigit()))
        .ok_or_else(|| {
            Error::Internal(format!(
                "{} is not an image store's rootfs directory",
                rootfs.display()
            ))
        })?;
    let mut h = Sha256::new();
    h.update(format!("v1 {IMAGE_EXCLUDE} {IMAGE_ETC:?} {digest}"));
    let path = cache.join(format!("image-{}.erofs", hex(&h.finalize()[..8])));
    if path.exists() {
        return Ok(path);
    }
    progress("building the VM root image of the image (once; mkfs.erofs)");
    let stage = cache.join(format!("stage-{}", stockade_core::host::random_hex(6)));
    let _ = std::fs::remove_dir_all(&stage);
    let r = build_image_root_image(&stage, rootfs, &path);
    let _ = std::fs::remove_dir_all(&stage);
    r.map(|()| path)
}

fn build_image_root_image(stage: &Path, rootfs: &Path, out: &Path) -> Result<()> {
    let etc = stage.join("layer/etc");
    std::fs::create_dir_all(&etc).map_err(io(format!("cannot create {}", etc.display())))?;
    std::fs::create_dir_all(stage.join("merged"))
        .map_err(io(format!("cannot create {}", stage.display())))?;
    for (name, text) in IMAGE_ETC {
        std::fs::write(etc.join(name), text).map_err(io(format!("cannot write etc/{name}")))?;
    }
    // The image's rootfs with our /etc files over it, as a read-only overlay;
    // mkfs.erofs stores symlinks as symlinks, so an image's `etc -> /` points nowhere
    // on the host.
    let script = r#"set -e
mount -t overlay overlay -o ro,lowerdir="$1/layer:$2" "$1/merged"
exec mkfs.erofs --quiet -T0 --exclude-regex="$3" "$4" "$1/merged"
"#;
    mkfs_in_private_ns(
        script,
        &[
            stage.as_os_str(),
            rootfs.as_os_str(),
            IMAGE_EXCLUDE.as_ref(),
        ],
        out,
        "the microvm root image of an image",
    )
}

/// Runs `script` (`sh -c`) in a private mount namespace, so nothing it mounts stays
/// mounted if it is killed, with `args` and then a temporary output path as its
/// positional arguments; renames that output to `out` once the script succeeded.
fn mkfs_in_private_ns(
    script: &str,
    args: &[&std::ffi::OsStr],
    out: &Path,
    what: &str,
) -> Result<()> {
    let tmp = out.with_extension(format!("tmp-{}", stockade_core::host::random_hex(6)));
    let output = std::process::Command::new("unshare")
        .args([
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            script,
            "sh",
        ])
        .args(args)
        .arg(&tmp)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .output()
        .map_err(|e| Error::Unavailable {
            what: format!("building {what}"),
            reason: format!("cannot run unshare: {e}"),
            fix: "run as root on Linux with util-linux installed".into(),
        })?;
    if !output.status.success() {
        let _ = std::fs::remove_file(&tmp);
        return Err(Error::Unavailable {
            what: format!("building {what}"),
            reason: format!(
                "mkfs.erofs (or a mount before it) failed: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            ),
            fix: "apt-get install erofs-utils (or run crates/stockade-microvm/ci-setup.sh)".into(),
        });
    }
    std::fs::rename(&tmp, out).map_err(io(format!("cannot rename {}", tmp.display())))
}

fn build_root_image(stage: &Path, out: &Path) -> Result<()> {
    let mk =
        |p: &Path| std::fs::create_dir_all(p).map_err(io(format!("cannot create {}", p.display())));
    for d in [
        "usr", "etc", "tmp", "proc", "sys", "dev", "root", "home", "run", "var/tmp", "mnt",
    ] {
        mk(&stage.join(d))?;
    }
    for l in ["bin", "sbin", "lib", "lib32", "lib64", "libx32"] {
        let host = Path::new("/").join(l);
        if let Ok(target) = std::fs::read_link(&host) {
            std::os::unix::fs::symlink(&target, stage.join(l))
                .map_err(io(format!("cannot link {l}")))?;
        }
    }
    for e in ETC {
        let from = Path::new("/etc").join(e);
        if from.symlink_metadata().is_ok() {
            let status = std::process::Command::new("cp")
                .args(["-a", "--"])
                .arg(&from)
                .arg(stage.join("etc"))
                .status()
                .map_err(io("cannot run cp".into()))?;
            if !status.success() {
                return Err(Error::Internal(format!("cannot copy {}", from.display())));
            }
        }
    }
    std::fs::write(stage.join("etc/passwd"), PASSWD).map_err(io("cannot write passwd".into()))?;
    std::fs::write(stage.join("etc/group"), GROUP).map_err(io("cannot write group".into()))?;
    std::fs::write(stage.join("etc/hosts"), "127.0.0.1 localhost\n")
        .map_err(io("cannot write hosts".into()))?;
    // /usr is bind-mounted into the staging tree.
    let script = r#"set -e
mount --bind -o ro /usr "$1/usr"
for l in bin sbin lib lib32 lib64 libx32; do
  if [ -d "/$l" ] && [ ! -L "/$l" ]; then mkdir -p "$1/$l"; mount --bind -o ro "/$l" "$1/$l"; fi
done
exec mkfs.erofs --quiet --all-root -T0 --exclude-regex="$2" "$3" "$1"
"#;
    mkfs_in_private_ns(
        script,
        &[stage.as_os_str(), EXCLUDE.as_ref()],
        out,
        "the microvm root image",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modules_come_after_their_dependencies_once_each() {
        let dep = "kernel/drivers/virtio/virtio.ko:\n\
                   kernel/drivers/virtio/virtio_ring.ko:\n\
                   kernel/drivers/virtio/virtio_mmio.ko: kernel/drivers/virtio/virtio_ring.ko kernel/drivers/virtio/virtio.ko\n\
                   kernel/drivers/block/virtio_blk.ko: kernel/drivers/virtio/virtio_ring.ko kernel/drivers/virtio/virtio.ko\n\
                   kernel/fs/overlayfs/overlay.ko:\n";
        let order = module_order(
            dep,
            "kernel/drivers/char/virtio_console.ko\n",
            &["virtio_mmio", "virtio_blk", "overlay", "virtio_console"],
        )
        .unwrap();
        assert_eq!(
            order,
            [
                "kernel/drivers/virtio/virtio.ko",
                "kernel/drivers/virtio/virtio_ring.ko",
                "kernel/drivers/virtio/virtio_mmio.ko",
                "kernel/drivers/block/virtio_blk.ko",
                "kernel/fs/overlayfs/overlay.ko",
            ]
        );
        let e = module_order(dep, "", &["erofs"]).unwrap_err();
        assert_eq!(
            module_name("kernel/drivers/char/hw_random/virtio-rng.ko.xz"),
            "virtio_rng"
        );
        assert!(e.contains("module erofs is not in modules.dep"), "{e}");
    }

    #[test]
    fn cpio_entries_are_aligned_newc() {
        let mut out = Vec::new();
        cpio_entry(&mut out, "init", 0o100755, b"abc", 1);
        cpio_trailer(&mut out);
        assert!(out.starts_with(b"070701"));
        assert_eq!(out.len() % 4, 0);
        let text = String::from_utf8_lossy(&out);
        assert!(text.contains("init\0"));
        assert!(text.contains("TRAILER!!!"));
    }

    #[test]
    fn kernel_versions_sort_numerically() {
        let mut v = [
            "6.1.0-9-cloud-amd64",
            "6.1.0-56-cloud-amd64",
            "6.1.0-10-cloud-amd64",
        ];
        v.sort_by_key(|r| version_key(r));
        assert_eq!(v[2], "6.1.0-56-cloud-amd64");
    }

    #[test]
    fn stale_assets_go_unless_open_or_kept() {
        let dir = tempfile::tempdir().unwrap();
        let p = |n: &str| dir.path().join(n);
        for n in [
            "rootfs-old.erofs",
            "rootfs-busy.erofs",
            "rootfs-new.erofs",
            "initramfs-x.cpio",
        ] {
            std::fs::write(p(n), b"x").unwrap();
        }
        std::fs::create_dir(p("stage-fresh")).unwrap();
        let _busy = std::fs::File::open(p("rootfs-busy.erofs")).unwrap();
        let removed = prune_stale(dir.path(), "rootfs-", ".erofs", &p("rootfs-new.erofs"));
        assert_eq!(removed, vec![p("rootfs-old.erofs")]);
        for kept in [
            "rootfs-busy.erofs",
            "rootfs-new.erofs",
            "initramfs-x.cpio",
            "stage-fresh",
        ] {
            assert!(p(kept).exists(), "{kept} was removed");
        }
    }
}
