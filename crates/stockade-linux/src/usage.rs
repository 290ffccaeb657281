//! A sandbox's CPU time and memory, read from its host cgroups
//! ([`stockade_cgroup::usage`]: v2's `cpu.stat` and memory files, or v1's `cpuacct`
//! and `memory` groups) as a [`Usage`], or the reason a counter is missing.

use std::path::PathBuf;

use stockade_core::{Error, Result, Usage};

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
    let read = stockade_cgroup::usage(cgroups);
    let cpu = read.cpu_us.ok_or_else(|| missing("CPU"))?;
    let (used, cache, limit) = read.memory.ok_or_else(|| missing("memory"))?;
    Ok(Usage {
        cpu_usage_us: cpu,
        memory_bytes: used,
        memory_cache_bytes: cache,
        memory_limit_bytes: limit,
    })
}

#[cfg(test)]
mod tests {
    use std::fs;

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
