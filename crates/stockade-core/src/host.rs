//! Facts about the host process every crate needs, kept once: who we run as, where
//! Stockade keeps its data and its runtime state, fresh random ids, secret keys, the
//! clock.

use std::path::{Path, PathBuf};

use crate::{Error, Result};

pub use stockade_agent_proto::now_ms;

/// The effective uid of this process.
pub fn euid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// The spec label recording the uid that created a sandbox in-process (the CLI and
/// sessions set it), so `stockade rm --all` run by root removes only root's own.
pub const OWNER_UID_LABEL: &str = "stockade.uid";

/// Whether this process runs as root (effective uid 0).
pub fn is_root() -> bool {
    euid() == 0
}

fn env_dir(var: &str) -> Option<PathBuf> {
    std::env::var_os(var)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// The name of the host account with uid `uid` in `/etc/passwd`, if there is one.
pub fn account_of(uid: u32) -> Option<String> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|l| {
        let mut f = l.split(':');
        let name = f.next()?;
        (f.nth(1)?.parse::<u32>().ok()? == uid).then(|| name.to_string())
    })
}

/// Stockade's data directory (images, runtimes, caches, keys): `$STOCKADE_HOME` when
/// set; `/var/lib/stockade` for root; else `$XDG_DATA_HOME/stockade` or
/// `~/.local/share/stockade`; `/tmp/stockade-home-UID` when there is no home.
pub fn stockade_home() -> PathBuf {
    if let Some(h) = env_dir("STOCKADE_HOME") {
        return h;
    }
    if is_root() {
        return PathBuf::from("/var/lib/stockade");
    }
    if let Some(x) = env_dir("XDG_DATA_HOME") {
        return x.join("stockade");
    }
    match env_dir("HOME") {
        Some(h) => h.join(".local/share/stockade"),
        None => PathBuf::from(format!("/tmp/stockade-home-{}", euid())),
    }
}

/// The runtime directory named `name` (state that dies with the machine: sandboxes'
/// sockets and records): `/run/NAME` for root, else `$XDG_RUNTIME_DIR/NAME`, else
/// `/tmp/NAME-UID`.
pub fn runtime_dir(name: &str) -> PathBuf {
    if is_root() {
        return PathBuf::from("/run").join(name);
    }
    match env_dir("XDG_RUNTIME_DIR") {
        Some(d) => d.join(name),
        None => PathBuf::from(format!("/tmp/{name}-{}", euid())),
    }
}

/// Where the native provider keeps its sandboxes: `$STOCKADE_STATE_DIR`, else
/// [`runtime_dir`]`("stockade")`.
pub fn sandbox_state_dir() -> PathBuf {
    env_dir("STOCKADE_STATE_DIR").unwrap_or_else(|| runtime_dir("stockade"))
}

/// Where the daemon keeps its state: [`runtime_dir`]`("stockaded")`.
pub fn daemon_state_dir() -> PathBuf {
    runtime_dir("stockaded")
}

/// `n` bytes from the kernel's random source, as lowercase hex.
///
/// Panics only if the kernel's random source fails, which no supported host does: an
/// id that might repeat is worse than no id.
pub fn random_hex(n: usize) -> String {
    let mut b = vec![0u8; n];
    getrandom::getrandom(&mut b).expect("the kernel's random source (getrandom) failed");
    hex(&b)
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// A fresh sandbox id: `sb-` and 12 hex digits.
pub fn new_sandbox_id() -> String {
    format!("sb-{}", random_hex(6))
}

/// Refuses a string that is not a sandbox id as [`new_sandbox_id`] makes them (`sb-`
/// and 12 hex digits): every provider checks an id with this before it names a path,
/// a container or a cgroup, so no id can point outside what the provider owns. A
/// plain name of another form is `not_found` (no sandbox has it); anything that could
/// name a path (`/`, a leading `.`, other characters) is `invalid_request`.
pub fn check_sandbox_id(id: &str) -> Result<()> {
    let ok = id.len() == 15
        && id.starts_with("sb-")
        && id.as_bytes()[3..].iter().all(u8::is_ascii_hexdigit);
    let plain = !id.is_empty()
        && id.len() <= 64
        && !id.starts_with('.')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else if plain {
        Err(Error::NotFound {
            kind: "sandbox",
            id: id.to_string(),
        })
    } else {
        Err(Error::InvalidRequest(format!(
            "sandbox id {id:?} is not valid (sb- and 12 hex digits)"
        )))
    }
}

/// Creates `dir` and its parents, new directories with mode 0700.
pub fn make_private_dir(dir: &Path) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| Error::io(format!("cannot create {}", dir.display()), e))
}

/// Length of a [`secret_key`].
pub const SECRET_KEY_LEN: usize = 32;

/// The secret key in the file `path` (32 random bytes, mode 0600, owned by this uid),
/// made on first use; `what` names it in errors, `remade` says what a new key costs.
/// Processes that start at once agree on one key: each writes a candidate to a file of
/// its own beside it and links that into place, which fails for all but the first;
/// then every one reads the file. A key file that others could read or change, or a
/// symlink, is refused, not used.
pub fn secret_key(path: &Path, what: &str, remade: &str) -> Result<[u8; SECRET_KEY_LEN]> {
    for _ in 0..3 {
        if let Some(key) = read_key(path, what, remade)? {
            return Ok(key);
        }
        create_key(path, what)?;
    }
    Err(Error::Internal(format!(
        "{what} {} keeps disappearing after it is made",
        path.display()
    )))
}

/// Opens `path` for reading without following it when it is a symlink (that fails
/// with `ELOOP`), so a link planted beside a key or a cache is never read.
pub fn open_nofollow(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
}

fn read_key(path: &Path, what: &str, remade: &str) -> Result<Option<[u8; SECRET_KEY_LEN]>> {
    use std::io::Read;
    use std::os::unix::fs::MetadataExt;
    let mut file = match open_nofollow(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(Error::io(
                format!("cannot open {what} {}", path.display()),
                e,
            ));
        }
    };
    let md = file
        .metadata()
        .map_err(|e| Error::io(format!("cannot stat {}", path.display()), e))?;
    let me = euid();
    if !md.is_file()
        || md.uid() != me
        || md.mode() & 0o077 != 0
        || md.len() != SECRET_KEY_LEN as u64
    {
        return Err(Error::PolicyDenied(format!(
            "{what} {} is not a {SECRET_KEY_LEN}-byte file owned by uid {me} with mode 0600 \
             (it is owned by uid {}, mode {:o}, {} bytes); remove it: a new key is made on \
             next use ({remade})",
            path.display(),
            md.uid(),
            md.mode() & 0o7777,
            md.len()
        )));
    }
    let mut bytes = [0u8; SECRET_KEY_LEN];
    file.read_exact(&mut bytes)
        .map_err(|e| Error::io(format!("cannot read {}", path.display()), e))?;
    Ok(Some(bytes))
}

/// Makes a key at `path` unless one is there (another process may win the race: fine).
fn create_key(path: &Path, what: &str) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let dir = path.parent().unwrap_or(Path::new("."));
    make_private_dir(dir)?;
    let mut bytes = [0u8; SECRET_KEY_LEN];
    getrandom::getrandom(&mut bytes)
        .map_err(|e| Error::Internal(format!("cannot draw {what}: {e}")))?;
    let tmp = dir.join(format!(".key.{}", random_hex(8)));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut f| f.write_all(&bytes).and_then(|()| f.sync_all()));
    let linked = written.and_then(|()| std::fs::hard_link(&tmp, path));
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(Error::io(
            format!("cannot create {what} {}", path.display()),
            e,
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_fresh_and_plain() {
        let a = new_sandbox_id();
        let b = new_sandbox_id();
        assert_ne!(a, b);
        assert_eq!(a.len(), 15);
        assert!(a[3..].bytes().all(|c| c.is_ascii_hexdigit()), "{a}");
        assert_eq!(random_hex(8).len(), 16);
    }

    #[test]
    fn runtime_dirs_follow_the_user() {
        let d = runtime_dir("x");
        if is_root() {
            assert_eq!(d, PathBuf::from("/run/x"));
        } else {
            assert!(
                d.ends_with("x") || d.ends_with(format!("x-{}", euid())),
                "{d:?}"
            );
        }
    }
}

#[cfg(test)]
mod sandbox_id_tests {
    use super::*;

    #[test]
    fn only_ids_of_the_one_form_pass() {
        for bad in [
            "",
            "..",
            "../etc",
            "a/b",
            ".hidden",
            "x y",
            "sb-",
            "sb-0123456789a",
            "sb-0123456789abc",
            "sb-0123456789ag",
            "SB-0123456789ab",
            "sb-01234567/9ab",
            "sb-0123456789\u{e9}",
        ] {
            assert!(check_sandbox_id(bad).is_err(), "{bad:?}");
        }
        check_sandbox_id("sb-0123456789ab").unwrap();
        check_sandbox_id(&new_sandbox_id()).unwrap();
        // A plain name no sandbox can have is not found; one that could be a path is
        // the caller's mistake.
        for (id, code) in [
            ("sb-doesnotexist", crate::ErrorCode::NotFound),
            ("nope", crate::ErrorCode::NotFound),
            ("../etc", crate::ErrorCode::InvalidSpec),
            (".hidden", crate::ErrorCode::InvalidSpec),
            ("", crate::ErrorCode::InvalidSpec),
        ] {
            assert_eq!(check_sandbox_id(id).unwrap_err().code(), code, "{id:?}");
        }
    }
}
