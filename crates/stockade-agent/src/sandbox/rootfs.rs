//! Executes the mount operations of a launch plan and pivots into the new root.
//! Runs in the sandbox's fresh mount namespace, as PID 1, before serving.
//!
//! Every path is resolved with `openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)`:
//! targets inside the new root (whose symlinks, from an image, resolve as they will
//! inside the sandbox, never on the host), image sources inside the image's rootfs.
//! Mounts and chmods then go through `/proc/self/fd/N` of the opened file, so no
//! later path walk can be redirected.

use std::ffi::OsStr;
use std::fs;
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use nix::mount::{MntFlags, MsFlags, mount, umount2};
use rustix::fs::{FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;
use stockade_agent_proto::launch::{MountFlags, MountOp};

use crate::ids::Ids;

/// The largest file a [`MountOp::Copy`] copies.
const COPY_MAX_BYTES: i64 = 16 << 20;

/// Directory (inside the new root) holding overlay upper and work dirs; masked at the end.
pub const SCRATCH: &str = ".stockade";

/// How paths resolve: `/`, `..` and absolute symlinks stop at the root given; `/proc`
/// magic links (which jump anywhere) are refused.
const IN_ROOT: ResolveFlags = ResolveFlags::IN_ROOT.union(ResolveFlags::NO_MAGICLINKS);

fn ms(flags: MountFlags) -> MsFlags {
    let mut f = MsFlags::empty();
    f.set(MsFlags::MS_RDONLY, flags.readonly);
    f.set(MsFlags::MS_NOSUID, flags.nosuid);
    f.set(MsFlags::MS_NODEV, flags.nodev);
    f.set(MsFlags::MS_NOEXEC, flags.noexec);
    f
}

fn err(what: &str, path: &Path, e: impl std::fmt::Display) -> String {
    format!("cannot {what} {}: {e}", path.display())
}

/// The path through which the kernel reaches exactly what `fd` is.
fn fd_path(fd: &OwnedFd) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

/// `path` relative to the root it is resolved in (`/usr` -> `usr`, `/` -> `.`).
fn relative(path: &Path) -> PathBuf {
    let rel: PathBuf = path
        .components()
        .filter(|c| !matches!(c, Component::RootDir | Component::CurDir))
        .collect();
    if rel.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        rel
    }
}

fn open_dir(path: &Path) -> Result<OwnedFd, String> {
    rustix::fs::open(
        path,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| err("open", path, e))
}

/// Opens `path` inside the directory `root` (`O_PATH`), resolved as if `root` were `/`.
fn open_in(root: &OwnedFd, path: &Path, flags: OFlags) -> Result<OwnedFd, Errno> {
    rustix::fs::openat2(
        root,
        relative(path),
        flags | OFlags::PATH | OFlags::CLOEXEC,
        Mode::empty(),
        IN_ROOT,
    )
}

/// The directory `target` of the new root at `root` (opened afresh, so it is the
/// topmost mount there), creating missing directories (0755) inside the root, also
/// where a dangling symlink points (as `mkdir -p` would, but inside the root).
fn target_dir(root: &Path, target: &Path) -> Result<OwnedFd, String> {
    let rootfd = open_dir(root)?;
    let mut want = relative(target);
    let shown = |p: &Path| Path::new("/").join(p);
    // Each restart follows one dangling symlink; 40 is the kernel's own hop limit.
    'walk: for _ in 0..40 {
        let comps: Vec<Component> = want.components().collect();
        let mut cur = PathBuf::new();
        let mut fd = open_in(&rootfd, Path::new("."), OFlags::DIRECTORY)
            .map_err(|e| err("open", root, e))?;
        for (i, c) in comps.iter().enumerate() {
            let parent = cur.clone();
            cur.push(c);
            fd = match open_in(&rootfd, &cur, OFlags::DIRECTORY) {
                Ok(f) => f,
                Err(Errno::NOENT) => {
                    let name = c.as_os_str();
                    match rustix::fs::mkdirat(&fd, name, Mode::from_raw_mode(0o755)) {
                        Ok(()) | Err(Errno::EXIST) => {}
                        Err(e) => return Err(err("create directory", &shown(&cur), e)),
                    }
                    match open_in(&rootfd, &cur, OFlags::DIRECTORY) {
                        Ok(f) => f,
                        Err(Errno::NOENT) => {
                            // A symlink to a missing directory: go on from its target.
                            let link = rustix::fs::readlinkat(&fd, name, Vec::new())
                                .map_err(|e| err("read the link", &shown(&cur), e))?;
                            let link = PathBuf::from(OsStr::from_bytes(link.as_bytes()));
                            let mut next = if link.is_absolute() {
                                PathBuf::new()
                            } else {
                                parent
                            };
                            next.push(link);
                            next.extend(&comps[i + 1..]);
                            want = relative(&next);
                            continue 'walk;
                        }
                        Err(e) => return Err(err("open", &shown(&cur), e)),
                    }
                }
                Err(e) => return Err(err("open", &shown(&cur), e)),
            };
        }
        return Ok(fd);
    }
    Err(err(
        "create directory",
        target,
        "too many levels of symbolic links",
    ))
}

/// The parent directory of `path` in the new root (created) and its last component.
fn target_parent<'a>(root: &Path, path: &'a Path) -> Result<(OwnedFd, &'a OsStr), String> {
    let name = path
        .file_name()
        .ok_or_else(|| format!("cannot use {} as a file: it names no entry", path.display()))?;
    let parent = target_dir(root, path.parent().unwrap_or(Path::new("/")))?;
    Ok((parent, name))
}

/// The file `path` of the new root, created empty (0644) when missing; never
/// through a symlink at its last component.
fn target_file(root: &Path, path: &Path) -> Result<OwnedFd, String> {
    let (parent, name) = target_parent(root, path)?;
    rustix::fs::openat(
        &parent,
        name,
        OFlags::CREATE | OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o644),
    )
    .map_err(|e| err("create", path, e))
}

/// An existing `target` of the new root (symlinks followed inside it), or `None`.
fn existing(root: &Path, target: &Path) -> Result<Option<OwnedFd>, String> {
    let rootfd = open_dir(root)?;
    match open_in(&rootfd, target, OFlags::empty()) {
        Ok(f) => Ok(Some(f)),
        Err(Errno::NOENT) => Ok(None),
        Err(e) => Err(err("open", target, e)),
    }
}

/// Opens a mount source: a host path of the plan as is, or (`within`) a path inside
/// an image's rootfs resolved inside it. It must be a directory, or a file when
/// `file`.
fn open_source(source: &Path, within: Option<&Path>, file: bool) -> Result<OwnedFd, String> {
    let (fd, shown) = match within {
        Some(rootfs) => {
            let root = open_dir(rootfs)?;
            let fd = open_in(&root, source, OFlags::empty()).map_err(|e| {
                err(
                    "open",
                    &rootfs.join(source),
                    format!("{e} (resolved inside the image)"),
                )
            })?;
            (fd, rootfs.join(source))
        }
        None => {
            let fd = rustix::fs::open(source, OFlags::PATH | OFlags::CLOEXEC, Mode::empty())
                .map_err(|e| err("open", source, e))?;
            (fd, source.to_path_buf())
        }
    };
    let st = rustix::fs::fstat(&fd).map_err(|e| err("inspect", &shown, e))?;
    let is_dir = FileType::from_raw_mode(st.st_mode) == FileType::Directory;
    if is_dir == file {
        let want = if file { "a file" } else { "a directory" };
        return Err(format!(
            "cannot mount {}: it is not {want}",
            shown.display()
        ));
    }
    Ok(fd)
}

/// Creates `dir` (a sandbox path) and sets its mode.
fn mkdir(root: &Path, dir: &Path, mode: u32) -> Result<OwnedFd, String> {
    let fd = target_dir(root, dir)?;
    fs::set_permissions(fd_path(&fd), fs::Permissions::from_mode(mode))
        .map_err(|e| err("chmod", dir, e))?;
    Ok(fd)
}

fn do_mount(
    src: Option<&Path>,
    dst: &Path,
    fstype: Option<&str>,
    flags: MsFlags,
    data: Option<&str>,
) -> Result<(), String> {
    mount(src, dst, fstype, flags, data).map_err(|e| {
        format!(
            "cannot mount {} on {} ({}): {e}",
            src.map(|s| s.display().to_string())
                .unwrap_or_else(|| fstype.unwrap_or("none").to_string()),
            dst.display(),
            fstype.unwrap_or("bind")
        )
    })
}

/// Binds a copy of the mount at `src` (not its submounts) onto `dst`, with `flags`
/// (the new mount API: only the attributes asked for are set, so a rootless sandbox
/// can bind host mounts whose other attributes are locked).
fn bind(src: &OwnedFd, dst: &OwnedFd, target: &Path, flags: MountFlags) -> Result<(), String> {
    let mnt = stockade_sys::idmap::clone_mount(src.as_fd(), None, attrs(flags))
        .map_err(|e| format!("cannot bind {}: {e}", target.display()))?;
    stockade_sys::idmap::attach(mnt.as_fd(), dst.as_fd())
        .map_err(|e| format!("cannot mount {}: {e}", target.display()))
}

fn attrs(flags: MountFlags) -> stockade_sys::idmap::Attrs {
    stockade_sys::idmap::Attrs {
        readonly: flags.readonly,
        nosuid: flags.nosuid,
        nodev: flags.nodev,
        noexec: flags.noexec,
    }
}

/// Mounts a copy of `src` on `dst` whose owners are mapped through `mapping`.
fn idmapped_bind(
    src: &OwnedFd,
    dst: &OwnedFd,
    mapping: std::os::fd::BorrowedFd<'_>,
    flags: MountFlags,
    shown: &Path,
) -> Result<(), String> {
    let mnt = stockade_sys::idmap::clone_mount(src.as_fd(), Some(mapping), attrs(flags))
        .map_err(|e| {
            let fs = stockade_sys::idmap::filesystem_name(src);
            if e.source.raw_os_error() == Some(libc::EINVAL) {
                format!(
                    "cannot mount {} with its owners mapped into the sandbox: {fs} does not support idmapped mounts here; use a directory on a filesystem that does (ext4, xfs, btrfs, tmpfs) ({e})",
                    shown.display()
                )
            } else {
                format!("cannot mount {} ({fs}) idmapped: {e}", shown.display())
            }
        })?;
    stockade_sys::idmap::attach(mnt.as_fd(), dst.as_fd())
        .map_err(|e| format!("cannot attach {}: {e}", shown.display()))
}

/// Gives what setup made in the root's own tmpfs (the directories of `/etc`, its
/// synthetic files, symlinks and mount points) to root inside, without crossing into
/// mounts.
fn own_root_tmpfs(root: &Path, owner: u32) -> Result<(), String> {
    let top = open_dir(root)?;
    let dev = rustix::fs::fstat(&top)
        .map_err(|e| err("inspect", root, e))?
        .st_dev;
    let mut stack = vec![(top, root.to_path_buf())];
    let id = Some(rustix::fs::Uid::from_raw(owner));
    let gid = Some(rustix::fs::Gid::from_raw(owner));
    let flags = rustix::fs::AtFlags::EMPTY_PATH;
    while let Some((dir, path)) = stack.pop() {
        rustix::fs::chownat(&dir, "", id, gid, flags).map_err(|e| err("chown", &path, e))?;
        let listing = rustix::fs::open(
            fd_path(&dir),
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| err("list", &path, e))?;
        let mut entries =
            rustix::fs::Dir::read_from(&listing).map_err(|e| err("list", &path, e))?;
        while let Some(Ok(entry)) = entries.next() {
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            let name = OsStr::from_bytes(name);
            let child = path.join(name);
            let fd = rustix::fs::openat(
                &dir,
                name,
                OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(|e| err("open", &child, e))?;
            let st = rustix::fs::fstat(&fd).map_err(|e| err("inspect", &child, e))?;
            if st.st_dev != dev {
                continue; // a mount: not ours to change
            }
            if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
                stack.push((fd, child));
            } else {
                rustix::fs::chownat(&fd, "", id, gid, flags)
                    .map_err(|e| err("chown", &child, e))?;
            }
        }
    }
    Ok(())
}

/// A file at `path` below `root` (never through a link) holding `data`, with `mode`.
fn new_file(root: &Path, path: &Path, data: &[u8], mode: u32) -> Result<(), String> {
    let (parent, name) = target_parent(root, path)?;
    let fd = rustix::fs::openat(
        &parent,
        name,
        OFlags::CREATE | OFlags::WRONLY | OFlags::TRUNC | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )
    .map_err(|e| err("create", path, e))?;
    let mut f = fs::File::from(fd);
    f.write_all(data).map_err(|e| err("write", path, e))?;
    f.set_permissions(fs::Permissions::from_mode(mode))
        .map_err(|e| err("chmod", path, e))
}

/// Applies operation `index` below `root`. `overlays` numbers overlay scratch dirs.
fn apply(
    root: &Path,
    index: usize,
    op: &MountOp,
    overlays: &mut usize,
    ids: Option<&Ids>,
) -> Result<(), String> {
    match op {
        MountOp::Tmpfs {
            target,
            size_bytes,
            mode,
            flags,
        } => {
            let dst = target_dir(root, target)?;
            let mut data = format!("size={size_bytes},mode={mode:o}");
            if let Some(ids) = ids {
                let first = ids.range.first;
                data.push_str(&format!(",uid={first},gid={first}"));
            }
            do_mount(
                Some(Path::new("tmpfs")),
                &fd_path(&dst),
                Some("tmpfs"),
                ms(*flags),
                Some(&data),
            )
            .map_err(|e| format!("{e} [tmpfs {}]", target.display()))
        }
        MountOp::Bind {
            source,
            target,
            flags,
            file,
            within,
            idmap,
        } => {
            let src = open_source(source, within.as_deref(), *file)?;
            let dst = if *file {
                target_file(root, target)?
            } else {
                target_dir(root, target)?
            };
            match ids.and_then(|i| i.mapping(index, *idmap)) {
                Some(mapping) => idmapped_bind(&src, &dst, mapping, *flags, source),
                None => bind(&src, &dst, target, *flags),
            }
        }
        MountOp::Overlay {
            lower,
            target,
            flags,
            within,
        } => {
            let shown = lower;
            let mut lower = open_source(lower, within.as_deref(), false)?;
            let lower_st = rustix::fs::fstat(&lower).map_err(|e| err("inspect", shown, e))?;
            let dst = target_dir(root, target)?;
            *overlays += 1;
            let base = Path::new("/")
                .join(SCRATCH)
                .join(format!("overlay{overlays}"));
            if let Some(ids) = ids {
                // The lower layer with its owners mapped (host root's files owned by
                // root inside), so that root inside may change them in the overlay.
                let at = mkdir(root, &base.join("lower"), 0o755)?;
                idmapped_bind(&lower, &at, ids.userns.as_fd(), MountFlags::RO_HOST, shown)?;
                lower = existing(root, &base.join("lower"))?
                    .ok_or_else(|| format!("{} vanished after mounting it", shown.display()))?;
            }
            let upper = mkdir(root, &base.join("upper"), 0o755)?;
            // The overlay's top directory takes its upper's owner and mode: those of
            // the lower as the sandbox sees it (else host root's, which the sandbox's
            // user namespace does not map, and root inside could not write there).
            if let Some(ids) = ids {
                let inside = |id: u32| (id < ids.range.count).then(|| ids.range.first + id);
                if let (Some(uid), Some(gid)) = (inside(lower_st.st_uid), inside(lower_st.st_gid)) {
                    std::os::unix::fs::chown(fd_path(&upper), Some(uid), Some(gid))
                        .map_err(|e| err("chown", &base.join("upper"), e))?;
                }
                fs::set_permissions(
                    fd_path(&upper),
                    fs::Permissions::from_mode(lower_st.st_mode & 0o7777),
                )
                .map_err(|e| err("chmod", &base.join("upper"), e))?;
            }
            let work = mkdir(root, &base.join("work"), 0o755)?;
            let data = format!(
                "lowerdir={},upperdir={},workdir={}",
                fd_path(&lower).display(),
                fd_path(&upper).display(),
                fd_path(&work).display()
            );
            do_mount(
                Some(Path::new("overlay")),
                &fd_path(&dst),
                Some("overlay"),
                ms(*flags),
                Some(&data),
            )
            .map_err(|e| format!("{e} [overlay {}]", target.display()))
        }
        MountOp::Proc { target } => {
            let dst = mkdir(root, target, 0o555)?;
            let f = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
            do_mount(
                Some(Path::new("proc")),
                &fd_path(&dst),
                Some("proc"),
                f,
                None,
            )
        }
        MountOp::Sysfs { target } => {
            let dst = mkdir(root, target, 0o555)?;
            let f =
                MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
            do_mount(
                Some(Path::new("sysfs")),
                &fd_path(&dst),
                Some("sysfs"),
                f,
                None,
            )
        }
        MountOp::Devpts { target } => {
            let dst = mkdir(root, target, 0o755)?;
            let f = MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC;
            do_mount(
                Some(Path::new("devpts")),
                &fd_path(&dst),
                Some("devpts"),
                f,
                Some("newinstance,ptmxmode=0666,mode=0620"),
            )
        }
        MountOp::Device { source, target } => {
            let src = rustix::fs::open(source, OFlags::PATH | OFlags::CLOEXEC, Mode::empty())
                .map_err(|e| err("open", source, e))?;
            let dst = target_file(root, target)?;
            let f = MountFlags {
                readonly: false,
                nosuid: true,
                nodev: false,
                noexec: true,
            };
            bind(&src, &dst, target, f)
        }
        MountOp::Mkdir { path, mode } => mkdir(root, path, *mode).map(drop),
        MountOp::Symlink { to, path } => {
            let (parent, name) = target_parent(root, path)?;
            rustix::fs::symlinkat(to.as_str(), &parent, name)
                .map_err(|e| err("create symlink", path, e))
        }
        MountOp::File {
            path,
            contents,
            mode,
        } => new_file(root, path, contents.as_bytes(), *mode),
        MountOp::Copy {
            source,
            path,
            within,
        } => {
            let src = open_source(source, within.as_deref(), true)?;
            let st = rustix::fs::fstat(&src).map_err(|e| err("inspect", source, e))?;
            if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
                return Err(format!(
                    "cannot copy {}: it is not a regular file",
                    source.display()
                ));
            }
            if st.st_size > COPY_MAX_BYTES {
                return Err(format!(
                    "cannot copy {}: it is over {COPY_MAX_BYTES} bytes",
                    source.display()
                ));
            }
            let data = fs::read(fd_path(&src)).map_err(|e| err("read", source, e))?;
            new_file(root, path, &data, st.st_mode & 0o1777)
        }
        MountOp::ReadOnly { target } => {
            let Some(dst) = existing(root, target)? else {
                return Ok(());
            };
            do_mount(
                Some(&fd_path(&dst)),
                &fd_path(&dst),
                None,
                MsFlags::MS_BIND | MsFlags::MS_REC,
                None,
            )?;
            let mounted = existing(root, target)?
                .ok_or_else(|| format!("{} vanished after mounting it", target.display()))?;
            let f = MsFlags::MS_BIND
                | MsFlags::MS_REMOUNT
                | MsFlags::MS_RDONLY
                | MsFlags::MS_NOSUID
                | MsFlags::MS_NODEV;
            do_mount(None, &fd_path(&mounted), None, f, None)
        }
        MountOp::Mask { target } => {
            let Some(dst) = existing(root, target)? else {
                return Ok(());
            };
            let st = rustix::fs::fstat(&dst).map_err(|e| err("inspect", target, e))?;
            if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
                let f = MsFlags::MS_RDONLY
                    | MsFlags::MS_NOSUID
                    | MsFlags::MS_NODEV
                    | MsFlags::MS_NOEXEC;
                do_mount(
                    Some(Path::new("tmpfs")),
                    &fd_path(&dst),
                    Some("tmpfs"),
                    f,
                    Some("size=0,mode=000"),
                )
            } else {
                do_mount(
                    Some(Path::new("/dev/null")),
                    &fd_path(&dst),
                    None,
                    MsFlags::MS_BIND,
                    None,
                )
            }
        }
    }
}

/// Builds the root at `root` from `ops`, pivots into it, and makes it read-only when
/// asked. On return the process's root and cwd are the new root.
pub fn build_and_pivot(
    root: &Path,
    ops: &[MountOp],
    readonly_root: bool,
    ids: Option<&Ids>,
) -> Result<(), String> {
    // Nothing we mount may propagate back to the host.
    do_mount(
        None,
        Path::new("/"),
        None,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None,
    )?;
    let mut overlays = 0;
    for (index, op) in ops.iter().enumerate() {
        apply(root, index, op, &mut overlays, ids)?;
    }
    if let Some(ids) = ids {
        own_root_tmpfs(root, ids.range.first)?;
    }
    nix::unistd::chdir(root).map_err(|e| err("chdir to", root, e))?;
    nix::unistd::pivot_root(".", ".").map_err(|e| err("pivot_root into", root, e))?;
    // The old root is now stacked under the new one at "."; detach it.
    umount2(".", MntFlags::MNT_DETACH).map_err(|e| format!("cannot detach the host root: {e}"))?;
    nix::unistd::chdir("/").map_err(|e| format!("cannot chdir to /: {e}"))?;
    if readonly_root {
        let f = MsFlags::MS_BIND
            | MsFlags::MS_REMOUNT
            | MsFlags::MS_RDONLY
            | MsFlags::MS_NOSUID
            | MsFlags::MS_NODEV;
        do_mount(None, Path::new("/"), None, f, None)?;
    }
    Ok(())
}
