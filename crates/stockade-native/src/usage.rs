//! A native sandbox's CPU time and memory, read from its cgroups: cgroup v2's
//! `cpu.stat` (`usage_usec`, kept by every v2 group, so the hybrid host's cgroup2
//! group has it too) or v1 `cpuacct.usage`; v2 `memory.current`/`memory.stat`
//! (`file`)/`memory.max`, or v1 `memory.usage_in_bytes`/`memory.stat`
//! (`total_cache`)/`memory.limit_in_bytes`.

use std::fs;
use std::path::{Path, PathBuf};

use stockade_core::{Error, Result, Usage};

/// The value of `key` in a `key value` file.
fn field(text: &str, key: &str) -> Option<u64> {
    text.lines()
        .filter_map(|l| l.split_once(' '))
        .find(|(k, _)| *k == key)
        .and_then(|(_, v)| v.trim().parse().ok())
}

fn num(p: &Path) -> Option<u64> {
    fs::read_to_string(p).ok()?.trim().parse().ok()
}

fn cpu_us(d: &Path) -> Option<u64> {
    if let Ok(t) = fs::read_to_string(d.join("cpu.stat"))
        && let Some(v) = field(&t, "usage_usec")
    {
        return Some(v);
    }
    num(&d.join("cpuacct.usage")).map(|ns| ns / 1000)
}

/// `(used, cache, limit)` bytes.
fn memory(d: &Path) -> Option<(u64, u64, u64)> {
    if let Some(cur) = num(&d.join("memory.current")) {
        let stat = fs::read_to_string(d.join("memory.stat")).unwrap_or_default();
        // "max" (no cap) reads as 0: unknown.
        let max = num(&d.join("memory.max")).unwrap_or(0);
        return Some((cur, field(&stat, "file").unwrap_or(0), max));
    }
    let used = num(&d.join("memory.usage_in_bytes"))?;
    let stat = fs::read_to_string(d.join("memory.stat")).unwrap_or_default();
    let cache = field(&stat, "total_cache")
        .or_else(|| field(&stat, "cache"))
        .unwrap_or(0);
    Some((
        used,
        cache,
        num(&d.join("memory.limit_in_bytes")).unwrap_or(0),
    ))
}

/// The usage of sandbox `id` whose cgroups are `cgroups`.
pub fn read(id: &str, cgroups: &[PathBuf]) -> Result<Usage> {
    let missing = |what: &str| Error::Unavailable {
        what: format!("the {what} use of sandbox {id}"),
        reason: format!(
            "none of its cgroups ({}) keeps that counter",
            cgroups
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        fix: "create the sandbox as root (a rootless sandbox on a host with v1 cgroups has no \
              CPU time counter)"
            .into(),
    };
    let cpu = cgroups
        .iter()
        .find_map(|d| cpu_us(d))
        .ok_or_else(|| missing("CPU"))?;
    let (used, cache, limit) = cgroups
        .iter()
        .find_map(|d| memory(d))
        .ok_or_else(|| missing("memory"))?;
    Ok(Usage {
        cpu_usage_us: cpu,
        memory_bytes: used,
        memory_cache_bytes: cache,
        memory_limit_bytes: limit,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v2_and_v1_counters_are_read() {
        let t = tempfile::tempdir().unwrap();
        let (v2, mem1) = (t.path().join("u"), t.path().join("m"));
        fs::create_dir(&v2).unwrap();
        fs::create_dir(&mem1).unwrap();
        fs::write(v2.join("cpu.stat"), "usage_usec 1234\nuser_usec 1000\n").unwrap();
        fs::write(mem1.join("memory.usage_in_bytes"), "4096\n").unwrap();
        fs::write(mem1.join("memory.stat"), "cache 10\ntotal_cache 1024\n").unwrap();
        fs::write(mem1.join("memory.limit_in_bytes"), "8192\n").unwrap();
        let u = read("sb", &[mem1.clone(), v2.clone()]).unwrap();
        assert_eq!(
            u,
            Usage {
                cpu_usage_us: 1234,
                memory_bytes: 4096,
                memory_cache_bytes: 1024,
                memory_limit_bytes: 8192
            }
        );
        fs::write(v2.join("memory.current"), "100\n").unwrap();
        fs::write(v2.join("memory.stat"), "anon 50\nfile 40\n").unwrap();
        fs::write(v2.join("memory.max"), "max\n").unwrap();
        let u = read("sb", std::slice::from_ref(&v2)).unwrap();
        assert_eq!(
            (u.memory_bytes, u.memory_cache_bytes, u.memory_limit_bytes),
            (100, 40, 0)
        );
        let e = read("sb", &[mem1]).unwrap_err();
        assert!(e.to_string().contains("CPU use of sandbox sb"), "{e}");
    }
}
