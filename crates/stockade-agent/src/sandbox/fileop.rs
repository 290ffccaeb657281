//! `stockade-agent fileop`: one file operation, run by PID 1 in a fresh child that has
//! become the sandbox user (no capabilities, no_new_privs, landlock) inside the
//! sandbox's root. Every path, `..` and symlink resolves in the sandbox's own view of
//! the filesystem; the host's files are not reachable from here at all.

use std::fs;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use stockade_agent_proto::codec::{read_msg, write_msg};
use stockade_agent_proto::files::{
    DEFAULT_GREP_MATCHES, FileOp, FileResult, GrepMatch, MAX_ENTRIES, MAX_FILE_BYTES,
    MAX_TRANSFER_BYTES, safe_entry_path,
};

use super::entries::{entry, link_target, user_xattrs};
use stockade_agent_proto::launch::ExecPolicy;
use stockade_agent_proto::{AgentMsg, ErrorCode};

/// What the agent sends the fileop child: the operation and the policy to apply.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct FileJob {
    pub op: FileOp,
    pub policy: ExecPolicy,
}

/// An error with its code and a message naming the path.
pub struct OpError(pub ErrorCode, pub String);

type R<T> = Result<T, OpError>;

pub(super) fn io_err(what: &str, path: &Path, e: io::Error) -> OpError {
    let code = match e.kind() {
        io::ErrorKind::NotFound => ErrorCode::NotFound,
        io::ErrorKind::PermissionDenied | io::ErrorKind::ReadOnlyFilesystem => {
            ErrorCode::PolicyDenied
        }
        io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded | io::ErrorKind::FileTooLarge => {
            ErrorCode::LimitExceeded
        }
        // The caller asked for something the tree does not allow.
        io::ErrorKind::AlreadyExists
        | io::ErrorKind::IsADirectory
        | io::ErrorKind::NotADirectory
        | io::ErrorKind::DirectoryNotEmpty
        | io::ErrorKind::InvalidInput
        | io::ErrorKind::InvalidFilename
        | io::ErrorKind::CrossesDevices => ErrorCode::InvalidSpec,
        _ if e.raw_os_error() == Some(libc::ELOOP) => ErrorCode::InvalidSpec,
        _ => ErrorCode::Internal,
    };
    // Fixed forms that the SDKs map to their language's own errors (Python:
    // FileNotFoundError, IsADirectoryError, FileExistsError): the code, then a
    // message `path {p} not found` / `path {p} is a directory; ...` /
    // `path {p} already exists; ...`.
    match e.kind() {
        io::ErrorKind::NotFound => {
            return OpError(code, format!("path {} not found", path.display()));
        }
        io::ErrorKind::IsADirectory => {
            return OpError(
                code,
                format!(
                    "path {} is a directory; cannot {what} there",
                    path.display()
                ),
            );
        }
        io::ErrorKind::AlreadyExists => {
            return OpError(
                code,
                format!(
                    "path {} already exists; cannot {what} there",
                    path.display()
                ),
            );
        }
        _ => {}
    }
    OpError(code, format!("cannot {what} {}: {e}", path.display()))
}

fn invalid(msg: String) -> OpError {
    OpError(ErrorCode::InvalidSpec, msg)
}

fn limit(msg: String) -> OpError {
    OpError(ErrorCode::LimitExceeded, msg)
}

/// Entry point of `stockade-agent fileop` (fd 3: the control socket).
pub fn main() -> i32 {
    let _ = nix::sys::prctl::set_name(c"stockade-fileop");
    let Some(fd) = stockade_sys::process::take_inherited_fd(3) else {
        eprintln!("stockade-fileop: no control socket on fd 3; this command is run by the agent");
        return 2;
    };
    let mut sock = UnixStream::from(fd);
    let job: FileJob = match read_msg(&mut sock) {
        Ok(Some(j)) => j,
        _ => return 2,
    };
    let result = crate::shim::become_sandbox_user(&job.policy)
        .and_then(|_| crate::shim::enter_landlock(&job.policy))
        .map_err(|m| OpError(ErrorCode::Internal, m))
        .and_then(|_| {
            let _ = std::env::set_current_dir(&job.policy.workdir);
            run(&job.op)
        });
    let msg = match result {
        Ok(r) => AgentMsg::FileDone(r),
        Err(OpError(code, message)) => AgentMsg::Error { code, message },
    };
    let _ = write_msg(&mut sock, &msg);
    0
}

/// What a non-regular file is, for messages.
fn describe_kind(ft: fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if ft.is_dir() {
        "a directory"
    } else if ft.is_fifo() {
        "a fifo"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_char_device() || ft.is_block_device() {
        "a device"
    } else if ft.is_symlink() {
        "a symlink"
    } else {
        "not a file"
    }
}

fn not_regular(path: &Path, ft: fs::FileType) -> OpError {
    if ft.is_dir() {
        // The fixed form of `io_err`.
        return invalid(format!(
            "path {} is a directory; list it with ls",
            path.display()
        ));
    }
    OpError(
        ErrorCode::InvalidSpec,
        format!(
            "{} is not a regular file ({}); only regular files are read and written",
            path.display(),
            describe_kind(ft)
        ),
    )
}

/// The error of an `open` that failed: ENXIO is what a socket (or a FIFO without a
/// reader, for writing) answers; say what the path is instead.
fn open_err(what: &str, path: &Path, e: io::Error) -> OpError {
    if e.raw_os_error() == Some(libc::ENXIO)
        && let Ok(md) = fs::symlink_metadata(path)
    {
        return not_regular(path, md.file_type());
    }
    io_err(what, path, e)
}

/// Opens a regular file for reading. Never blocks (`O_NONBLOCK`: a FIFO without a
/// writer would wait forever) and refuses anything else after `fstat`, on the open
/// file itself, so nothing can be swapped in between. `nofollow` for walks, where
/// the entry was seen as a file and must still be one.
fn open_regular(path: &Path, nofollow: bool) -> R<(fs::File, fs::Metadata)> {
    use std::os::unix::fs::OpenOptionsExt;
    let flags = libc::O_NONBLOCK | if nofollow { libc::O_NOFOLLOW } else { 0 };
    let f = fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(path)
        .map_err(|e| open_err("read", path, e))?;
    let md = f.metadata().map_err(|e| io_err("stat", path, e))?;
    if !md.is_file() {
        return Err(not_regular(path, md.file_type()));
    }
    Ok((f, md))
}

/// Replaces the contents of a regular file (created if missing). Refuses FIFOs,
/// sockets and devices without blocking on them: a FIFO without a reader fails the
/// non-blocking open with ENXIO, one with a reader fails the `fstat` check, and
/// nothing is written in either case.
fn write_regular(path: &Path, data: &[u8]) -> R<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| open_err("write", path, e))?;
    let md = f.metadata().map_err(|e| io_err("stat", path, e))?;
    if !md.is_file() {
        return Err(not_regular(path, md.file_type()));
    }
    f.set_len(0).map_err(|e| io_err("truncate", path, e))?;
    f.write_all(data).map_err(|e| io_err("write", path, e))
}

fn p(path: &str) -> R<PathBuf> {
    if path.is_empty() || path.contains('\0') {
        return Err(invalid(format!("path {path:?} is empty or contains NUL")));
    }
    Ok(PathBuf::from(path))
}

/// Runs one operation (also used by tests on a plain directory).
pub fn run(op: &FileOp) -> R<FileResult> {
    match op {
        FileOp::Write { path, data, mode } => {
            let path = p(path)?;
            if data.len() as u64 > MAX_FILE_BYTES {
                return Err(limit(format!(
                    "{} bytes for {} exceed the {MAX_FILE_BYTES}-byte file limit",
                    data.len(),
                    path.display()
                )));
            }
            if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                fs::create_dir_all(parent).map_err(|e| io_err("create directory", parent, e))?;
            }
            write_regular(&path, data)?;
            if let Some(m) = mode {
                // Never setuid/setgid bits from a caller.
                fs::set_permissions(&path, fs::Permissions::from_mode(m & 0o1777))
                    .map_err(|e| io_err("chmod", &path, e))?;
            }
            Ok(FileResult::Done)
        }
        FileOp::Read {
            path,
            offset,
            limit: want,
        } => {
            let path = p(path)?;
            let (mut f, md) = open_regular(&path, false)?;
            let want = (*want).min(MAX_FILE_BYTES);
            f.seek(SeekFrom::Start(*offset))
                .map_err(|e| io_err("seek in", &path, e))?;
            let mut data = Vec::new();
            f.take(want)
                .read_to_end(&mut data)
                .map_err(|e| io_err("read", &path, e))?;
            let size = md.len();
            Ok(FileResult::Data {
                eof: offset + data.len() as u64 >= size,
                data,
                size,
            })
        }
        FileOp::Edit {
            path,
            old,
            new,
            replace_all,
        } => {
            let path = p(path)?;
            if old.is_empty() {
                return Err(invalid("edit needs a non-empty old text".into()));
            }
            let (f, md) = open_regular(&path, false)?;
            if md.len() > MAX_FILE_BYTES {
                return Err(limit(format!(
                    "{} is larger than the {MAX_FILE_BYTES}-byte file limit",
                    path.display()
                )));
            }
            let mut text = String::new();
            f.take(MAX_FILE_BYTES)
                .read_to_string(&mut text)
                .map_err(|e| io_err("edit", &path, e))?;
            let n = text.matches(old.as_str()).count() as u64;
            if n == 0 {
                return Err(invalid(format!(
                    "the old text was not found in {}",
                    path.display()
                )));
            }
            if n > 1 && !replace_all {
                return Err(invalid(format!(
                    "the old text occurs {n} times in {}; add context to make it unique or set replace_all",
                    path.display()
                )));
            }
            let out = if *replace_all {
                text.replace(old.as_str(), new)
            } else {
                text.replacen(old.as_str(), new, 1)
            };
            write_regular(&path, out.as_bytes())?;
            Ok(FileResult::Edited { replacements: n })
        }
        FileOp::Ls { path } => {
            let path = p(path)?;
            let md = fs::symlink_metadata(&path).map_err(|e| io_err("list", &path, e))?;
            if !md.is_dir() {
                let name = path
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                let target = link_target(&path, &md);
                let xattrs = user_xattrs(&path, false);
                return Ok(FileResult::Entries(vec![entry(name, &md, target, xattrs)]));
            }
            let mut out = Vec::new();
            for e in fs::read_dir(&path).map_err(|e| io_err("list", &path, e))? {
                let e = e.map_err(|e| io_err("list", &path, e))?;
                if out.len() as u32 >= MAX_ENTRIES {
                    return Err(limit(format!(
                        "{} has more than {MAX_ENTRIES} entries; use glob",
                        path.display()
                    )));
                }
                if let Ok(m) = e.metadata() {
                    let target = link_target(&e.path(), &m);
                    let xattrs = user_xattrs(&e.path(), false);
                    out.push(entry(
                        e.file_name().to_string_lossy().into_owned(),
                        &m,
                        target,
                        xattrs,
                    ));
                }
            }
            out.sort_by(|a, b| a.name.cmp(&b.name));
            Ok(FileResult::Entries(out))
        }
        FileOp::Stat { path } => {
            let path = p(path)?;
            let md = fs::metadata(&path).map_err(|e| io_err("stat", &path, e))?;
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| "/".into());
            let target = fs::symlink_metadata(&path)
                .ok()
                .and_then(|l| link_target(&path, &l));
            let xattrs = user_xattrs(&path, true);
            Ok(FileResult::Entries(vec![entry(name, &md, target, xattrs)]))
        }
        FileOp::Glob { pattern, root } => {
            let root = p(root)?;
            let m = globset::Glob::new(pattern)
                .map_err(|e| invalid(format!("bad glob {pattern:?}: {e}")))?
                .compile_matcher();
            let mut paths = Vec::new();
            let mut truncated = false;
            for e in walkdir::WalkDir::new(&root)
                .min_depth(1)
                .follow_links(false)
                .into_iter()
                .flatten()
            {
                let rel = e.path().strip_prefix(&root).unwrap_or(e.path());
                if m.is_match(rel) {
                    if paths.len() as u32 >= MAX_ENTRIES {
                        truncated = true;
                        break;
                    }
                    paths.push(rel.to_string_lossy().into_owned());
                }
            }
            if !root.exists() {
                return Err(io_err("glob in", &root, io::ErrorKind::NotFound.into()));
            }
            paths.sort();
            Ok(FileResult::Paths { paths, truncated })
        }
        FileOp::Grep {
            regex,
            root,
            include,
            max_matches,
        } => grep(regex, &p(root)?, include.as_deref(), *max_matches),
        FileOp::Mkdir { path, parents } => {
            let path = p(path)?;
            let r = if *parents {
                fs::create_dir_all(&path)
            } else {
                fs::create_dir(&path)
            };
            r.map_err(|e| io_err("create directory", &path, e))?;
            Ok(FileResult::Done)
        }
        FileOp::Rm { path, recursive } => {
            let path = p(path)?;
            let md = fs::symlink_metadata(&path).map_err(|e| io_err("remove", &path, e))?;
            let r = match (md.is_dir(), recursive) {
                (true, true) => fs::remove_dir_all(&path),
                (true, false) => fs::remove_dir(&path),
                (false, _) => fs::remove_file(&path),
            };
            r.map_err(|e| io_err("remove", &path, e))?;
            Ok(FileResult::Done)
        }
        FileOp::Upload { dest, archive } => upload(&p(dest)?, archive),
        FileOp::Download { path } => download(&p(path)?),
        FileOp::Changes {
            base,
            out,
            exclude,
            max_bytes,
        } => super::changes::run(base, out, exclude, *max_bytes),
        FileOp::SetXattrs { path, xattrs } => super::entries::set_xattrs(&p(path)?, xattrs),
    }
}

fn grep(regex: &str, root: &Path, include: Option<&str>, max: u32) -> R<FileResult> {
    let re = regex::Regex::new(regex).map_err(|e| invalid(format!("bad regex {regex:?}: {e}")))?;
    let inc = match include {
        Some(g) => Some(
            globset::Glob::new(g)
                .map_err(|e| invalid(format!("bad glob {g:?}: {e}")))?
                .compile_matcher(),
        ),
        None => None,
    };
    let max = if max == 0 {
        DEFAULT_GREP_MATCHES
    } else {
        max.min(10 * DEFAULT_GREP_MATCHES)
    };
    if !root.exists() {
        return Err(io_err("grep in", root, io::ErrorKind::NotFound.into()));
    }
    let mut matches = Vec::new();
    for e in walkdir::WalkDir::new(root)
        .follow_links(false)
        .into_iter()
        .flatten()
    {
        if !e.file_type().is_file()
            || e.metadata()
                .map(|m| m.len() > MAX_FILE_BYTES)
                .unwrap_or(true)
        {
            continue;
        }
        let rel = e.path().strip_prefix(root).unwrap_or(e.path());
        if let Some(m) = &inc
            && !m.is_match(rel)
            && !m.is_match(e.file_name())
        {
            continue;
        }
        // Checked again on the open file: the entry may have been swapped for a FIFO.
        let Ok((f, _)) = open_regular(e.path(), true) else {
            continue;
        };
        let mut bytes = Vec::new();
        if f.take(MAX_FILE_BYTES).read_to_end(&mut bytes).is_err() {
            continue;
        }
        if bytes.iter().take(8192).any(|b| *b == 0) {
            continue; // binary
        }
        for (i, line) in String::from_utf8_lossy(&bytes).lines().enumerate() {
            if re.is_match(line) {
                if matches.len() as u32 >= max {
                    return Ok(FileResult::Matches {
                        matches,
                        truncated: true,
                    });
                }
                matches.push(GrepMatch {
                    path: e.path().to_string_lossy().into_owned(),
                    line_number: i as u64 + 1,
                    line: line.to_string(),
                });
            }
        }
    }
    Ok(FileResult::Matches {
        matches,
        truncated: false,
    })
}

/// A reader that fails once more than `left` bytes went through it.
struct Capped<R> {
    inner: R,
    left: u64,
}

impl<R: Read> Read for Capped<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.left = self
            .left
            .checked_sub(n as u64)
            .ok_or_else(|| io::Error::other("archive exceeds the transfer limit"))?;
        Ok(n)
    }
}

/// Decompresses (if gzip) within the transfer limit: a bomb stops at the limit.
fn plain_tar(archive: &[u8]) -> R<Vec<u8>> {
    if archive.len() as u64 > MAX_TRANSFER_BYTES {
        return Err(limit(format!(
            "archive of {} bytes exceeds the {MAX_TRANSFER_BYTES}-byte transfer limit",
            archive.len()
        )));
    }
    if archive.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        Capped {
            inner: flate2::read::GzDecoder::new(archive),
            left: MAX_TRANSFER_BYTES,
        }
        .read_to_end(&mut out)
        .map_err(|e| {
            limit(format!(
                "cannot decompress the archive: {e} (limit {MAX_TRANSFER_BYTES} bytes)"
            ))
        })?;
        Ok(out)
    } else {
        Ok(archive.to_vec())
    }
}

fn upload(dest: &Path, archive: &[u8]) -> R<FileResult> {
    let tar = plain_tar(archive)?;
    // Pass 1: check every entry before writing anything.
    let mut count = 0u32;
    let mut links = std::collections::HashSet::new();
    let mut a = tar::Archive::new(&tar[..]);
    for e in a
        .entries()
        .map_err(|e| invalid(format!("not a tar archive: {e}")))?
    {
        let e = e.map_err(|e| invalid(format!("corrupt tar archive: {e}")))?;
        count += 1;
        if count > MAX_ENTRIES {
            return Err(limit(format!(
                "archive has more than {MAX_ENTRIES} entries"
            )));
        }
        let path = e
            .path()
            .map_err(|e| invalid(format!("tar entry with a bad path: {e}")))?
            .into_owned();
        safe_entry_path(&path).map_err(invalid)?;
        let t = e.header().entry_type();
        if !(t.is_file() || t.is_dir() || t.is_symlink()) {
            return Err(OpError(
                ErrorCode::PolicyDenied,
                format!(
                    "tar entry {} is a {:?}; only files, directories and symlinks are accepted",
                    path.display(),
                    t
                ),
            ));
        }
        if let Some(link) = path.ancestors().skip(1).find(|a| links.contains(*a)) {
            return Err(OpError(
                ErrorCode::PolicyDenied,
                format!(
                    "tar entry {} goes through the symlink {} of the same archive",
                    path.display(),
                    link.display()
                ),
            ));
        }
        if t.is_symlink() {
            links.insert(path);
        }
    }
    // Pass 2: unpack; unpack_in also refuses writing through symlinks that leave dest.
    fs::create_dir_all(dest).map_err(|e| io_err("create directory", dest, e))?;
    let mut a = tar::Archive::new(&tar[..]);
    a.set_preserve_permissions(false);
    a.set_preserve_ownerships(false);
    a.set_unpack_xattrs(false);
    for e in a.entries().map_err(|e| invalid(e.to_string()))? {
        let mut e = e.map_err(|e| invalid(e.to_string()))?;
        let path = e
            .path()
            .map(std::borrow::Cow::into_owned)
            .unwrap_or_default();
        match e.unpack_in(dest) {
            Ok(true) => {}
            Ok(false) => {
                return Err(OpError(
                    ErrorCode::PolicyDenied,
                    format!("tar entry {} leaves the target directory", path.display()),
                ));
            }
            Err(err) => return Err(io_err("unpack", &dest.join(&path), err)),
        }
    }
    Ok(FileResult::Done)
}

fn download(path: &Path) -> R<FileResult> {
    let md = fs::metadata(path).map_err(|e| io_err("read", path, e))?;
    if !md.is_file() && !md.is_dir() {
        return Err(not_regular(path, md.file_type()));
    }
    let mut b = tar::Builder::new(Vec::new());
    b.follow_symlinks(false);
    let mut total = 0u64;
    let mut count = 0u32;
    let mut add = |b: &mut tar::Builder<Vec<u8>>, full: &Path, name: &Path| -> R<()> {
        count += 1;
        if count > MAX_ENTRIES {
            return Err(limit(format!(
                "{} has more than {MAX_ENTRIES} entries",
                path.display()
            )));
        }
        let m = fs::symlink_metadata(full).map_err(|e| io_err("read", full, e))?;
        total += m.len();
        if total > MAX_TRANSFER_BYTES {
            return Err(limit(format!(
                "{} exceeds the {MAX_TRANSFER_BYTES}-byte transfer limit",
                path.display()
            )));
        }
        if m.file_type().is_file() {
            // Opened without following or blocking and checked on the open file: an
            // entry swapped for a FIFO (or a link) is skipped, never waited on.
            if let Ok((mut f, _)) = open_regular(full, true) {
                b.append_file(name, &mut f)
                    .map_err(|e| io_err("pack", full, e))?;
            }
        } else if m.is_dir() || m.file_type().is_symlink() {
            b.append_path_with_name(full, name)
                .map_err(|e| io_err("pack", full, e))?;
        }
        // FIFOs, sockets and devices inside a directory are left out of the archive.
        Ok(())
    };
    if md.is_dir() {
        for e in walkdir::WalkDir::new(path)
            .min_depth(1)
            .follow_links(false)
            .sort_by_file_name()
        {
            let e = e.map_err(|e| invalid(format!("cannot walk {}: {e}", path.display())))?;
            let rel = e
                .path()
                .strip_prefix(path)
                .unwrap_or(e.path())
                .to_path_buf();
            add(&mut b, e.path(), &rel)?;
        }
    } else {
        let name = PathBuf::from(path.file_name().unwrap_or_default());
        add(&mut b, path, &name)?;
    }
    let bytes = b.into_inner().map_err(|e| io_err("pack", path, e))?;
    Ok(FileResult::Archive(bytes))
}

/// How long one file operation may take; then its child is killed.
pub const FILE_OP_DEADLINE: std::time::Duration = std::time::Duration::from_secs(120);

/// Runs a file job through a fresh `fileop` child (called by PID 1), within
/// [`FILE_OP_DEADLINE`]; a child past it is killed, and waited for, before the error
/// is returned.
pub fn spawn(op: FileOp, policy: &ExecPolicy, helpers: &crate::cleanup::Helpers) -> AgentMsg {
    let fail = |m: String| AgentMsg::Error {
        code: ErrorCode::Internal,
        message: m,
    };
    let (mut ours, theirs) = match UnixStream::pair() {
        Ok(p) => p,
        Err(e) => return fail(format!("socketpair: {e}")),
    };
    // Forked by the zygote where it can (no `exec` of our binary), else spawned.
    let forked = helpers.fork(
        crate::zygote::Role::FileOp,
        &[std::os::fd::AsFd::as_fd(&theirs)],
    );
    drop(theirs);
    let child = match forked {
        Ok(pid) => pid,
        Err(_) => match spawn_child(helpers, &mut ours) {
            Ok(pid) => pid,
            Err(e) => return fail(format!("cannot start the file operation: {e}")),
        },
    };
    let until = std::time::Instant::now() + FILE_OP_DEADLINE;
    let answer = talk(&mut ours, op, policy, until);
    if answer.is_none() {
        // Out of time, or gone: either way nothing of it may stay behind.
        let grace = until.saturating_duration_since(std::time::Instant::now());
        crate::cleanup::wait_or_kill(child, grace.min(std::time::Duration::from_secs(1)));
    }
    helpers.forget(child);
    match answer {
        Some(m) => m,
        None if std::time::Instant::now() >= until => AgentMsg::Error {
            code: ErrorCode::Timeout,
            message: format!(
                "the file operation did not finish within {} s and was stopped",
                FILE_OP_DEADLINE.as_secs()
            ),
        },
        None => fail("the file operation died (out of memory or killed)".into()),
    }
}

/// Spawns `stockade-agent fileop` from our binary, with a fresh control socket
/// (replacing `ours`). Its pid.
fn spawn_child(helpers: &crate::cleanup::Helpers, ours: &mut UnixStream) -> io::Result<u32> {
    let (mine, theirs) = UnixStream::pair()?;
    let mut cmd = std::process::Command::new("/proc/self/exe");
    std::os::unix::process::CommandExt::arg0(&mut cmd, "stockade-fileop");
    cmd.arg("fileop")
        .env_clear()
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    stockade_sys::process::spawn_with_stdio_only(&mut cmd);
    stockade_sys::process::pass_fd(&mut cmd, theirs.into(), 3);
    let child = helpers.spawn(&mut cmd)?;
    *ours = mine;
    Ok(child.id())
}

/// Sends the job and reads the answer, within the deadline. `None` when the child
/// went away or ran out of time.
fn talk(
    ours: &mut UnixStream,
    op: FileOp,
    policy: &ExecPolicy,
    until: std::time::Instant,
) -> Option<AgentMsg> {
    let left = || {
        Some(until.saturating_duration_since(std::time::Instant::now()))
            .filter(|d| !d.is_zero())
            .or(Some(std::time::Duration::from_millis(1)))
    };
    let _ = ours.set_write_timeout(left());
    let fail = |m: String| {
        Some(AgentMsg::Error {
            code: ErrorCode::Internal,
            message: m,
        })
    };
    if let Err(e) = write_msg(
        ours,
        &FileJob {
            op,
            policy: policy.clone(),
        },
    ) {
        return match e {
            stockade_agent_proto::codec::CodecError::Io(_) => None,
            e => fail(format!("cannot send the file operation: {e}")),
        };
    }
    let _ = ours.flush();
    let _ = ours.set_read_timeout(left());
    match read_msg::<_, AgentMsg>(ours) {
        Ok(Some(m)) => Some(m),
        Ok(None) | Err(stockade_agent_proto::codec::CodecError::Io(_)) => None,
        Err(e) => fail(format!("bad answer from the file operation: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use stockade_agent_proto::files::FileKind;

    use super::*;

    #[test]
    fn entry_paths_must_stay_inside() {
        for bad in ["../x", "/etc/passwd", "a/../../b", ""] {
            assert!(safe_entry_path(Path::new(bad)).is_err(), "{bad}");
        }
        for good in ["a", "a/b/c.txt", "./a"] {
            safe_entry_path(Path::new(good)).unwrap();
        }
    }

    #[test]
    fn edit_needs_a_unique_match() {
        let d = std::env::temp_dir().join(format!("stockade-fileop-{}", std::process::id()));
        fs::create_dir_all(&d).unwrap();
        let f = d.join("a.txt").to_string_lossy().into_owned();
        run(&FileOp::Write {
            path: f.clone(),
            data: b"one two one".to_vec(),
            mode: None,
        })
        .ok()
        .unwrap();
        let e = |old: &str, all: bool| {
            run(&FileOp::Edit {
                path: f.clone(),
                old: old.into(),
                new: "X".into(),
                replace_all: all,
            })
        };
        assert!(e("three", false).err().unwrap().1.contains("not found"));
        assert!(e("one", false).err().unwrap().1.contains("occurs 2 times"));
        assert!(matches!(
            e("one", true).ok().unwrap(),
            FileResult::Edited { replacements: 2 }
        ));
        assert_eq!(fs::read_to_string(&f).unwrap(), "X two X");
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn user_xattrs_are_set_and_listed_and_others_refused() {
        let d = std::env::temp_dir().join(format!("stockade-fileop-xattr-{}", std::process::id()));
        fs::create_dir_all(&d).unwrap();
        let f = d.join("a.txt").to_string_lossy().into_owned();
        fs::write(&f, "a").unwrap();
        let set = |pairs: &[(&str, &str)]| {
            run(&FileOp::SetXattrs {
                path: f.clone(),
                xattrs: pairs
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            })
        };
        set(&[("user.e2b.owner", "team-a"), ("user.e2b.k", "v w")])
            .ok()
            .unwrap();
        // A later call adds and replaces; the rest stays.
        set(&[("user.e2b.k", "v2")]).ok().unwrap();
        let e = set(&[("trusted.x", "1")]).err().unwrap();
        assert_eq!(e.0, ErrorCode::InvalidSpec, "{}", e.1);
        let FileResult::Entries(st) = run(&FileOp::Stat { path: f.clone() }).ok().unwrap() else {
            panic!("stat gave no entry");
        };
        let want = BTreeMap::from([
            ("user.e2b.k".to_string(), "v2".to_string()),
            ("user.e2b.owner".to_string(), "team-a".to_string()),
        ]);
        assert_eq!(st[0].xattrs, want);
        let FileResult::Entries(ls) = run(&FileOp::Ls {
            path: d.to_string_lossy().into_owned(),
        })
        .ok()
        .unwrap() else {
            panic!("ls gave no entries");
        };
        assert_eq!(ls[0].xattrs, want);
        let missing = run(&FileOp::SetXattrs {
            path: d.join("nope").to_string_lossy().into_owned(),
            xattrs: want.clone(),
        })
        .err()
        .unwrap();
        assert_eq!(missing.0, ErrorCode::NotFound, "{}", missing.1);
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn links_say_where_they_point() {
        let d = std::env::temp_dir().join(format!("stockade-fileop-links-{}", std::process::id()));
        fs::create_dir_all(&d).unwrap();
        fs::write(d.join("real"), "r").unwrap();
        let _ = fs::remove_file(d.join("link"));
        std::os::unix::fs::symlink("real", d.join("link")).unwrap();
        let path = |n: &str| d.join(n).to_string_lossy().into_owned();
        let FileResult::Entries(listed) = run(&FileOp::Ls { path: path("") }).ok().unwrap() else {
            panic!("ls gave no entries");
        };
        let link = listed.iter().find(|e| e.name == "link").unwrap();
        assert_eq!(
            (link.kind, link.link_target.as_deref()),
            (FileKind::Symlink, Some("real"))
        );
        let real = listed.iter().find(|e| e.name == "real").unwrap();
        assert_eq!(real.link_target, None);
        // A stat follows the link and says it was one.
        let FileResult::Entries(st) = run(&FileOp::Stat { path: path("link") }).ok().unwrap()
        else {
            panic!("stat gave no entry");
        };
        assert_eq!(
            (st[0].kind, st[0].size, st[0].link_target.as_deref()),
            (FileKind::File, 1, Some("real"))
        );
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn gzip_bombs_stop_at_the_limit() {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        let zeros = vec![0u8; 1 << 20];
        for _ in 0..(MAX_TRANSFER_BYTES >> 20) + 4 {
            enc.write_all(&zeros).unwrap();
        }
        let bomb = enc.finish().unwrap();
        assert!(bomb.len() < 1 << 20, "the bomb is small: {}", bomb.len());
        let err = plain_tar(&bomb).err().unwrap();
        assert_eq!(err.0, ErrorCode::LimitExceeded, "{}", err.1);
    }
}
