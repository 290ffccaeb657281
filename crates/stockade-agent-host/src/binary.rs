//! Finding the `stockade-agent` binary: the one the host runs (native monitors,
//! docker-watch), and the statically linked one that runs inside images that may have
//! no (or another) libc (docker's PID 1).

use std::io::Read;
use std::path::{Path, PathBuf};

use stockade_core::{Error, Result};

/// How to build the static agent.
pub const BUILD_STATIC_AGENT: &str = "build the agent statically linked with scripts/build-agent.sh \
     (scripts/setup.sh and run.sh do; a plain cargo build links it dynamically), or point \
     STOCKADE_DOCKER_AGENT at a statically linked stockade-agent";

/// Finds the `stockade-agent` binary: `$STOCKADE_AGENT`, next to the running program
/// (or its parent directory, for test binaries in `target/*/deps`), in
/// `../libexec/stockade/` from it (where `run.sh install` puts it: `PREFIX/bin/stockade`
/// and `PREFIX/libexec/stockade/stockade-agent`), then `PATH`.
pub fn find_agent() -> Result<PathBuf> {
    find_helper(
        "stockade-agent",
        "STOCKADE_AGENT",
        "the stockade agent",
        "install stockade with its agent (./run.sh install [--prefix DIR] in the source \
         tree) or set STOCKADE_AGENT to the stockade-agent binary",
    )
}

/// Finds the helper program `name` that Stockade runs beside itself (the agent, the
/// wasm runner): `$env` when set, next to the running program (or its parent
/// directory, for test binaries in `target/*/deps`), in `../libexec/stockade/` from
/// it, in `PATH`, then in `/usr/local/libexec/stockade/` and
/// `~/.local/libexec/stockade/` (`run.sh install`'s two prefixes). `what` names it in
/// errors, `fix` says how to get it.
pub fn find_helper(name: &str, env: &str, what: &str, fix: &str) -> Result<PathBuf> {
    if let Some(p) = std::env::var_os(env) {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(Error::Unavailable {
                what: what.into(),
                reason: format!("{env}={} does not exist", p.display()),
                fix: format!("point {env} at the {name} binary"),
            })
        };
    }
    let mut candidates = Vec::new();
    if let Ok(exe) = std::env::current_exe()
        && let Some(dir) = exe.parent()
    {
        candidates.push(dir.join(name));
        if let Some(up) = dir.parent() {
            candidates.push(up.join(name));
            candidates.push(up.join("libexec/stockade").join(name));
        }
    }
    if let Some(path) = std::env::var_os("PATH") {
        candidates.extend(std::env::split_paths(&path).map(|d| d.join(name)));
    }
    // Where `run.sh install` puts it (as root, and as a user), for programs that embed
    // Stockade (the SDKs in Python or Node) and are not installed beside it.
    candidates.push(Path::new("/usr/local/libexec/stockade").join(name));
    if let Some(home) = std::env::var_os("HOME") {
        candidates.push(Path::new(&home).join(".local/libexec/stockade").join(name));
    }
    candidates
        .into_iter()
        .find(|p| p.is_file())
        .ok_or_else(|| Error::Unavailable {
            what: what.into(),
            reason: format!(
                "{name} was not found next to this program, in ../libexec/stockade from it, \
                 in PATH, or where `run.sh install` puts it"
            ),
            fix: fix.into(),
        })
}

/// Finds the statically linked agent: `$STOCKADE_DOCKER_AGENT`, else the one
/// [`find_agent`] finds (the same binary native sandboxes run: `scripts/build-agent.sh`
/// builds it static), when it is static.
pub fn find_static_agent() -> Result<PathBuf> {
    let unavailable = |reason: String| Error::Unavailable {
        what: "the docker provider's agent".into(),
        reason,
        fix: BUILD_STATIC_AGENT.into(),
    };
    let (path, named) = match std::env::var_os("STOCKADE_DOCKER_AGENT") {
        Some(p) => (PathBuf::from(p), "STOCKADE_DOCKER_AGENT="),
        None => (find_agent()?, ""),
    };
    match is_static(&path) {
        Ok(true) => Ok(path),
        Ok(false) => Err(unavailable(format!(
            "{named}{} is dynamically linked",
            path.display()
        ))),
        Err(e) => Err(unavailable(format!(
            "{named}{} cannot be read: {e}",
            path.display()
        ))),
    }
}

/// True when `path` is an ELF executable without an interpreter (`PT_INTERP`), i.e.
/// it needs no dynamic loader and no libc from the image.
pub fn is_static(path: &Path) -> std::io::Result<bool> {
    let mut head = vec![0u8; 64];
    let mut f = std::fs::File::open(path)?;
    f.read_exact(&mut head)?;
    if &head[..4] != b"\x7fELF" || head[4] != 2 {
        return Ok(false);
    }
    let u16_at = |o: usize| u16::from_le_bytes([head[o], head[o + 1]]) as u64;
    let phoff = u64::from_le_bytes(head[0x20..0x28].try_into().unwrap_or_default());
    let (phentsize, phnum) = (u16_at(0x36), u16_at(0x38));
    let mut table = vec![0u8; (phentsize * phnum) as usize];
    std::io::Seek::seek(&mut f, std::io::SeekFrom::Start(phoff))?;
    f.read_exact(&mut table)?;
    const PT_INTERP: u32 = 3;
    Ok(!table
        .chunks(phentsize.max(4) as usize)
        .any(|ph| ph.len() >= 4 && u32::from_le_bytes([ph[0], ph[1], ph[2], ph[3]]) == PT_INTERP))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tells_static_from_dynamic() {
        // Test binaries are dynamically linked; /bin/sh too.
        let me = std::env::current_exe().unwrap();
        assert!(!is_static(&me).unwrap());
        assert!(!is_static(Path::new("/bin/sh")).unwrap());
        let dir = tempfile::tempdir().unwrap();
        let text = dir.path().join("script");
        std::fs::write(&text, "#!/bin/sh\necho hi\n".repeat(8)).unwrap();
        assert!(!is_static(&text).unwrap(), "not an ELF file");
    }
}
