//! Executes the mount operations of a launch plan and pivots into the new root.
//! Runs in the sandbox's fresh mount namespace, as PID 1, before serving.

use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};

use nix::mount::{MntFlags, MsFlags, mount, umount2};
use stockade_agent_proto::launch::{MountFlags, MountOp};

/// Directory (inside the new root) holding overlay upper and work dirs; masked at the end.
pub const SCRATCH: &str = ".stockade";

fn inside(root: &Path, target: &Path) -> PathBuf {
    root.join(target.strip_prefix("/").unwrap_or(target))
}

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

fn bind(src: &Path, dst: &Path, flags: MountFlags) -> Result<(), String> {
    // Non-recursive: submounts of the host path are not carried into the sandbox.
    do_mount(Some(src), dst, None, MsFlags::MS_BIND, None)?;
    do_mount(
        None,
        dst,
        None,
        MsFlags::MS_BIND | MsFlags::MS_REMOUNT | ms(flags),
        None,
    )
}

fn mkdir(path: &Path, mode: u32) -> Result<(), String> {
    fs::create_dir_all(path).map_err(|e| err("create directory", path, e))?;
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).map_err(|e| err("chmod", path, e))
}

fn touch(path: &Path) -> Result<(), String> {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).map_err(|e| err("create directory", parent, e))?;
    }
    fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map(drop)
        .map_err(|e| err("create", path, e))
}

/// Applies one operation below `root`. `overlays` numbers overlay scratch dirs.
fn apply(root: &Path, op: &MountOp, overlays: &mut usize) -> Result<(), String> {
    match op {
        MountOp::Tmpfs {
            target,
            size_bytes,
            mode,
            flags,
        } => {
            let dst = inside(root, target);
            fs::create_dir_all(&dst).map_err(|e| err("create directory", &dst, e))?;
            let data = format!("size={size_bytes},mode={mode:o}");
            do_mount(None, &dst, Some("tmpfs"), ms(*flags), Some(&data))
                .map_err(|e| format!("{e} [tmpfs]"))?;
            // tmpfs named as source "tmpfs" would read better in mountinfo; nix takes None.
            Ok(())
        }
        MountOp::Bind {
            source,
            target,
            flags,
            file,
        } => {
            let dst = inside(root, target);
            if *file {
                touch(&dst)?
            } else {
                fs::create_dir_all(&dst).map_err(|e| err("create directory", &dst, e))?
            }
            bind(source, &dst, *flags)
        }
        MountOp::Overlay {
            lower,
            target,
            flags,
        } => {
            let dst = inside(root, target);
            fs::create_dir_all(&dst).map_err(|e| err("create directory", &dst, e))?;
            *overlays += 1;
            let base = root.join(SCRATCH).join(format!("overlay{overlays}"));
            let (upper, work) = (base.join("upper"), base.join("work"));
            for d in [&upper, &work] {
                mkdir(d, 0o755)?;
            }
            let data = format!(
                "lowerdir={},upperdir={},workdir={}",
                lower.display(),
                upper.display(),
                work.display()
            );
            do_mount(
                Some(Path::new("overlay")),
                &dst,
                Some("overlay"),
                ms(*flags),
                Some(&data),
            )
        }
        MountOp::Proc { target } => {
            let dst = inside(root, target);
            mkdir(&dst, 0o555)?;
            let f = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
            do_mount(Some(Path::new("proc")), &dst, Some("proc"), f, None)
        }
        MountOp::Sysfs { target } => {
            let dst = inside(root, target);
            mkdir(&dst, 0o555)?;
            let f =
                MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
            do_mount(Some(Path::new("sysfs")), &dst, Some("sysfs"), f, None)
        }
        MountOp::Devpts { target } => {
            let dst = inside(root, target);
            mkdir(&dst, 0o755)?;
            let f = MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC;
            do_mount(
                Some(Path::new("devpts")),
                &dst,
                Some("devpts"),
                f,
                Some("newinstance,ptmxmode=0666,mode=0620"),
            )
        }
        MountOp::Device { source, target } => {
            let dst = inside(root, target);
            touch(&dst)?;
            do_mount(Some(source), &dst, None, MsFlags::MS_BIND, None)?;
            let f =
                MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC;
            do_mount(None, &dst, None, f, None)
        }
        MountOp::Mkdir { path, mode } => mkdir(&inside(root, path), *mode),
        MountOp::Symlink { to, path } => {
            let dst = inside(root, path);
            if let Some(parent) = dst.parent() {
                fs::create_dir_all(parent).map_err(|e| err("create directory", parent, e))?;
            }
            symlink(to, &dst).map_err(|e| err("create symlink", &dst, e))
        }
        MountOp::File {
            path,
            contents,
            mode,
        } => {
            let dst = inside(root, path);
            if let Some(parent) = dst.parent() {
                fs::create_dir_all(parent).map_err(|e| err("create directory", parent, e))?;
            }
            fs::write(&dst, contents).map_err(|e| err("write", &dst, e))?;
            fs::set_permissions(&dst, fs::Permissions::from_mode(*mode))
                .map_err(|e| err("chmod", &dst, e))
        }
        MountOp::ReadOnly { target } => {
            let dst = inside(root, target);
            if !dst.exists() {
                return Ok(());
            }
            do_mount(
                Some(&dst),
                &dst,
                None,
                MsFlags::MS_BIND | MsFlags::MS_REC,
                None,
            )?;
            let f = MsFlags::MS_BIND
                | MsFlags::MS_REMOUNT
                | MsFlags::MS_RDONLY
                | MsFlags::MS_NOSUID
                | MsFlags::MS_NODEV;
            do_mount(None, &dst, None, f, None)
        }
        MountOp::Mask { target } => {
            let dst = inside(root, target);
            match fs::symlink_metadata(&dst) {
                Err(_) => Ok(()),
                Ok(m) if m.is_dir() => {
                    let f = MsFlags::MS_RDONLY
                        | MsFlags::MS_NOSUID
                        | MsFlags::MS_NODEV
                        | MsFlags::MS_NOEXEC;
                    do_mount(
                        Some(Path::new("tmpfs")),
                        &dst,
                        Some("tmpfs"),
                        f,
                        Some("size=0,mode=000"),
                    )
                }
                Ok(_) => do_mount(
                    Some(Path::new("/dev/null")),
                    &dst,
                    None,
                    MsFlags::MS_BIND,
                    None,
                ),
            }
        }
    }
}

/// Builds the root at `root` from `ops`, pivots into it, and makes it read-only when
/// asked. On return the process's root and cwd are the new root.
pub fn build_and_pivot(root: &Path, ops: &[MountOp], readonly_root: bool) -> Result<(), String> {
    // Nothing we mount may propagate back to the host.
    do_mount(
        None,
        Path::new("/"),
        None,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None,
    )?;
    let mut overlays = 0;
    for op in ops {
        apply(root, op, &mut overlays)?;
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
