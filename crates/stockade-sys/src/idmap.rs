//! User namespaces made as id mappings, and idmapped mounts.
//!
//! A sandbox's user namespace is made by a short-lived child that unshares it and
//! waits while the parent writes the maps; the parent keeps the namespace by a file
//! descriptor and the child exits. The same kind of namespace serves as the mapping
//! of an idmapped mount (`mount_setattr` with `MOUNT_ATTR_IDMAP`).

use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use nix::sched::CloneFlags;
use nix::sys::wait::waitpid;
use nix::unistd::Pid;
use rustix::mount::{MoveMountFlags, OpenTreeFlags};

use crate::process::{Forked, exit_now, fork_into};
use crate::{Result, SysError};

/// Makes a user namespace whose maps `write_maps` writes (given the pid of a process
/// inside it, e.g. to `/proc/PID/uid_map` or through `newuidmap`), and returns it as
/// an fd (`/proc/PID/ns/user`) with the pid of the short-lived child that made it. The
/// child exits by itself at once; the caller reaps it ([`reap`]), off its critical
/// path. The caller must be single-threaded.
pub fn make_userns(
    write_maps: impl FnOnce(Pid) -> std::result::Result<(), String>,
) -> std::result::Result<(OwnedFd, Pid), String> {
    make_userns_owned_by(None, write_maps)
}

/// [`make_userns`], with the namespace owned by host `owner` (uid, gid) instead of the
/// caller. The kernel charges the per-user counts of everything inside a user
/// namespace (inotify instances and watches, keys, namespaces, mqueues) to its owner
/// in the parent namespace, so a sandbox whose namespace a root caller owns spends
/// root's. The child drops to `owner` before it unshares; the caller (root) still
/// writes the maps, having CAP_SETUID over every namespace below its own.
pub fn make_userns_owned_by(
    owner: Option<(u32, u32)>,
    write_maps: impl FnOnce(Pid) -> std::result::Result<(), String>,
) -> std::result::Result<(OwnedFd, Pid), String> {
    let (go_r, go_w) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| format!("pipe: {e}"))?;
    let (made_r, made_w) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| format!("pipe: {e}"))?;
    let flags = if owner.is_some() {
        CloneFlags::empty()
    } else {
        CloneFlags::CLONE_NEWUSER
    };
    let child =
        match fork_into(flags).map_err(|e| format!("cannot create a user namespace: {e}"))? {
            Forked::Child => {
                drop(go_w);
                drop(made_r);
                let made = match owner {
                    None => Ok(()),
                    Some((uid, gid)) => become_and_unshare(uid, gid),
                };
                let mut w = std::fs::File::from(made_w);
                match made {
                    Ok(()) => {
                        let _ = w.write_all(b"k");
                    }
                    Err(e) => {
                        let _ = w.write_all(e.as_bytes());
                        exit_now(1)
                    }
                }
                drop(w);
                // Wait until the parent has what it needs (EOF), then go.
                let mut b = [0u8; 1];
                let _ = std::fs::File::from(go_r).read(&mut b);
                exit_now(0)
            }
            Forked::Parent(pid) => pid,
        };
    drop(go_r);
    drop(made_w);
    let mut said = String::new();
    let _ = std::fs::File::from(made_r).read_to_string(&mut said);
    if said != "k" {
        reap(child);
        return Err(if said.is_empty() {
            "cannot create a user namespace: its maker died".to_string()
        } else {
            format!("cannot create a user namespace: {said}")
        });
    }
    let result = write_maps(child).and_then(|()| {
        rustix::fs::open(
            format!("/proc/{}/ns/user", child.as_raw()),
            rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .map_err(|e| format!("cannot open the new user namespace: {e}"))
    });
    drop(go_w);
    match result {
        Ok(fd) => Ok((fd, child)),
        Err(e) => {
            reap(child);
            Err(e)
        }
    }
}

/// In a fresh fork: takes host ids `uid`/`gid` (no supplementary groups) and unshares
/// a user namespace, which `uid` then owns.
fn become_and_unshare(uid: u32, gid: u32) -> std::result::Result<(), String> {
    let g = nix::unistd::Gid::from_raw(gid);
    let u = nix::unistd::Uid::from_raw(uid);
    nix::unistd::setgroups(&[]).map_err(|e| format!("setgroups: {e}"))?;
    nix::unistd::setresgid(g, g, g).map_err(|e| format!("setresgid {gid}: {e}"))?;
    nix::unistd::setresuid(u, u, u).map_err(|e| format!("setresuid {uid}: {e}"))?;
    nix::sched::unshare(CloneFlags::CLONE_NEWUSER)
        .map_err(|e| format!("unshare(CLONE_NEWUSER) as uid {uid}: {e}"))
}

/// Waits for a child of [`make_userns`] (which exits as soon as it is made).
pub fn reap(child: Pid) {
    let _ = waitpid(child, None);
}

/// Writes `uid_map` and `gid_map` of `pid` directly (needs CAP_SETUID and CAP_SETGID
/// over the parent namespace: root). Each map is lines of `inside host count`.
pub fn write_maps(pid: Pid, uid_map: &str, gid_map: &str) -> std::result::Result<(), String> {
    for (file, map) in [("uid_map", uid_map), ("gid_map", gid_map)] {
        let path = format!("/proc/{}/{file}", pid.as_raw());
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .and_then(|mut f| f.write_all(map.as_bytes()))
            .map_err(|e| format!("cannot write {path} ({}): {e}", map.trim()))?;
    }
    Ok(())
}

/// Mount attributes of [`clone_mount`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Attrs {
    pub readonly: bool,
    pub nosuid: bool,
    pub nodev: bool,
    pub noexec: bool,
}

/// A detached copy of the mount at `src` (not its submounts), with `attrs` and, when
/// `userns` is given, file owners mapped through that user namespace. Attach it with
/// [`attach`]. Fails with `EINVAL` where the filesystem cannot be idmapped.
pub fn clone_mount(
    src: BorrowedFd<'_>,
    userns: Option<BorrowedFd<'_>>,
    attrs: Attrs,
) -> Result<OwnedFd> {
    let tree = rustix::mount::open_tree(
        src,
        "",
        OpenTreeFlags::OPEN_TREE_CLONE
            | OpenTreeFlags::OPEN_TREE_CLOEXEC
            | OpenTreeFlags::AT_EMPTY_PATH,
    )
    .map_err(|e| SysError {
        call: "open_tree",
        args: "OPEN_TREE_CLONE".into(),
        source: e.into(),
    })?;
    let mut set = 0u64;
    for (on, bit) in [
        (attrs.readonly, libc::MOUNT_ATTR_RDONLY),
        (attrs.nosuid, libc::MOUNT_ATTR_NOSUID),
        (attrs.nodev, libc::MOUNT_ATTR_NODEV),
        (attrs.noexec, libc::MOUNT_ATTR_NOEXEC),
    ] {
        if on {
            set |= bit;
        }
    }
    let mut attr = libc::mount_attr {
        attr_set: set,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    if let Some(ns) = userns {
        attr.attr_set |= libc::MOUNT_ATTR_IDMAP;
        attr.userns_fd = ns.as_raw_fd() as u64;
    }
    // SAFETY: mount_setattr(2) reads `size` bytes from the pointer, which points to a
    // live, initialised `mount_attr` of exactly that size; the path is a valid
    // NUL-terminated empty string; both fds are open for the duration of the call.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            &raw const attr,
            std::mem::size_of::<libc::mount_attr>(),
        )
    };
    if ret != 0 {
        return Err(SysError::last(
            "mount_setattr",
            if userns.is_some() {
                "MOUNT_ATTR_IDMAP"
            } else {
                "attributes"
            },
        ));
    }
    Ok(tree)
}

/// Attaches a detached mount (from [`clone_mount`]) onto the file or directory `target`.
pub fn attach(mount: BorrowedFd<'_>, target: BorrowedFd<'_>) -> Result<()> {
    rustix::mount::move_mount(
        mount,
        "",
        target,
        "",
        MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH | MoveMountFlags::MOVE_MOUNT_T_EMPTY_PATH,
    )
    .map_err(|e| SysError {
        call: "move_mount",
        args: String::new(),
        source: e.into(),
    })
}

/// The name of the filesystem `fd` is on, for error messages (`ext4`, `nfs`, ...).
pub fn filesystem_name(fd: impl AsFd) -> String {
    let Ok(st) = rustix::fs::fstatfs(fd) else {
        return "an unknown filesystem".into();
    };
    #[allow(clippy::unnecessary_cast)] // f_type's width differs between libcs
    let magic = st.f_type as u64;
    let name = match magic {
        0xEF53 => "ext4",
        0x5846_5342 => "xfs",
        0x9123_683E => "btrfs",
        0x0102_1994 => "tmpfs",
        0x794C_7630 => "overlayfs",
        0x6969 => "nfs",
        0x6573_5546 => "fuse",
        0x0102_1997 => "9p (v9fs)",
        0xFF53_4D42 | 0xFE53_4D42 => "cifs/smb",
        0x2FC1_2FC1 => "zfs",
        0x4D44 => "vfat",
        0x5346_544E => "ntfs",
        0xF2F5_2010 => "f2fs",
        0x7366_6673 => "virtiofs",
        0x6165_676C => "pstorefs",
        0x6265_6572 => "sysfs",
        0x9FA0 => "proc",
        _ => return format!("a filesystem of type {magic:#x}"),
    };
    name.into()
}
