//! The pool of host ids native sandboxes' user namespaces are made from: ranges of
//! 65536 ids (0 to 65535 inside) that belong to no host account, no subordinate id
//! range of `/etc/subuid` or `/etc/subgid`, and no other live sandbox (leases, see
//! `stockade-agent`'s `ids`).

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use stockade_agent_proto::launch::{ID_RANGE_SIZE, IdPoolPlan, UsernsPlan};
use stockade_core::Error;

/// Host ids `start..=end`, cut into ranges of [`ID_RANGE_SIZE`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdPool {
    start: u32,
    ranges: u32,
}

/// The variable that sets the pool of an embedded provider (`START-END`).
pub const ENV: &str = "STOCKADE_ID_RANGE";

impl Default for IdPool {
    /// Host ids 2^30 to 2^31-1: 16384 sandboxes at once, far above the ids `useradd`
    /// and `/etc/subuid` hand out.
    fn default() -> IdPool {
        IdPool {
            start: 1 << 30,
            ranges: 16_384,
        }
    }
}

impl fmt::Display for IdPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.start, self.end())
    }
}

impl FromStr for IdPool {
    type Err = String;

    /// `START-END` (inclusive): START a multiple of 65536, END+1-START one too.
    fn from_str(s: &str) -> Result<IdPool, String> {
        let (a, b) = s.split_once('-').ok_or_else(|| {
            format!("id range {s:?} is not START-END (e.g. 1073741824-2147483647)")
        })?;
        let num = |t: &str, what: &str| -> Result<u64, String> {
            t.trim()
                .parse::<u64>()
                .map_err(|_| format!("id range {s:?}: {what} {t:?} is not a number"))
        };
        let (start, end) = (num(a, "START")?, num(b, "END")?);
        let size = u64::from(ID_RANGE_SIZE);
        let mut problems = Vec::new();
        if start == 0 {
            problems.push("START 0 would map host root into sandboxes".to_string());
        }
        if start % size != 0 {
            problems.push(format!("START {start} is not a multiple of {size}"));
        }
        if end < start || (end + 1 - start) % size != 0 || end + 1 - start < size {
            problems.push(format!(
                "END {end} must end a whole number of {size}-id ranges after START (e.g. {})",
                start + size * 1024 - 1
            ));
        }
        if end >= u64::from(u32::MAX) {
            problems.push(format!(
                "END {end} is past the last usable id {}",
                u32::MAX - 1
            ));
        }
        if !problems.is_empty() {
            return Err(format!("id range {s:?}: {}", problems.join("; ")));
        }
        Ok(IdPool {
            start: start as u32,
            ranges: ((end + 1 - start) / size) as u32,
        })
    }
}

/// What a host id file (`/etc/passwd`, `/etc/subuid`, ...) says is taken.
fn taken(passwd: &str, group: &str, subuid: &str, subgid: &str) -> Vec<(String, u64, u64)> {
    let mut v = Vec::new();
    for (file, text) in [("/etc/passwd", passwd), ("/etc/group", group)] {
        for line in text.lines() {
            let f: Vec<&str> = line.split(':').collect();
            if let Some(id) = f.get(2).and_then(|s| s.parse::<u64>().ok()) {
                v.push((format!("{file}: {} (id {id})", f[0]), id, id));
            }
        }
    }
    for (file, text) in [("/etc/subuid", subuid), ("/etc/subgid", subgid)] {
        for line in text.lines() {
            let f: Vec<&str> = line.split(':').collect();
            if let (Some(a), Some(n)) = (
                f.get(1).and_then(|s| s.parse::<u64>().ok()),
                f.get(2).and_then(|s| s.parse::<u64>().ok()),
            ) && n > 0
            {
                v.push((
                    format!("{file}: {} ({a}-{})", f[0], a + n - 1),
                    a,
                    a + n - 1,
                ));
            }
        }
    }
    v
}

impl IdPool {
    /// The pool from `$STOCKADE_ID_RANGE`, else the default.
    pub fn from_env() -> Result<IdPool, Error> {
        match std::env::var(ENV) {
            Ok(s) if !s.trim().is_empty() => s
                .parse()
                .map_err(|e| Error::InvalidRequest(format!("${ENV}: {e}"))),
            _ => Ok(IdPool::default()),
        }
    }

    pub fn start(&self) -> u32 {
        self.start
    }

    /// The last id of the pool.
    pub fn end(&self) -> u64 {
        u64::from(self.start) + u64::from(self.ranges) * u64::from(ID_RANGE_SIZE) - 1
    }

    /// Refuses a pool that holds ids of host accounts or subordinate ranges (given the
    /// files' contents), naming every one.
    pub fn check_against(
        &self,
        passwd: &str,
        group: &str,
        subuid: &str,
        subgid: &str,
    ) -> Result<(), Error> {
        let (lo, hi) = (u64::from(self.start), self.end());
        let clashes: Vec<String> = taken(passwd, group, subuid, subgid)
            .into_iter()
            .filter(|(_, a, b)| *a <= hi && *b >= lo)
            .map(|(what, _, _)| what)
            .collect();
        if clashes.is_empty() {
            return Ok(());
        }
        Err(Error::InvalidRequest(format!(
            "the id range {self} for sandboxes holds ids the host already uses: {}; choose a range clear of them (--id-range or ${ENV})",
            clashes.join(", ")
        )))
    }

    /// [`IdPool::check_against`] this host's files.
    pub fn check_host(&self) -> Result<(), Error> {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        self.check_against(
            &read("/etc/passwd"),
            &read("/etc/group"),
            &read("/etc/subuid"),
            &read("/etc/subgid"),
        )
    }

    /// The launch plan's part: where leases are kept and what the pool is.
    pub fn plan(&self) -> UsernsPlan {
        UsernsPlan::Pool(IdPoolPlan {
            lease_dir: lease_dir(),
            pool_start: self.start,
            pool_ranges: self.ranges,
        })
    }
}

/// Where leases of id ranges are kept: one directory per host, whatever the state root.
pub fn lease_dir() -> PathBuf {
    stockade_core::host::runtime_dir("stockade-ids")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_refuses_with_every_reason() {
        let p: IdPool = "1073741824-2147483647".parse().unwrap();
        assert_eq!(p, IdPool::default());
        assert_eq!(p.to_string(), "1073741824-2147483647");
        let e = "100-50".parse::<IdPool>().unwrap_err();
        assert!(
            e.contains("START 100 is not a multiple") && e.contains("END 50"),
            "{e}"
        );
        let e = "0-65535".parse::<IdPool>().unwrap_err();
        assert!(e.contains("map host root"), "{e}");
        let e = "65536-4294967295".parse::<IdPool>().unwrap_err();
        assert!(e.contains("past the last usable id"), "{e}");
        assert!("abc".parse::<IdPool>().unwrap_err().contains("START-END"));
    }

    #[test]
    fn a_range_holding_host_accounts_is_refused() {
        let p: IdPool = "65536-196607".parse().unwrap();
        let passwd = "root:x:0:0::/root:/bin/sh\nalice:x:100000:100000::/home/a:/bin/sh\n";
        let subuid = "bob:200000:65536\n";
        let e = p
            .check_against(passwd, "", subuid, "")
            .unwrap_err()
            .to_string();
        assert!(e.contains("alice (id 100000)"), "{e}");
        assert!(!e.contains("bob"), "{e}");
        let p: IdPool = "196608-262143".parse().unwrap();
        let e = p
            .check_against(passwd, "", subuid, "")
            .unwrap_err()
            .to_string();
        assert!(e.contains("/etc/subuid: bob (200000-265535)"), "{e}");
        IdPool::default()
            .check_against(passwd, "", subuid, "")
            .unwrap();
    }
}
