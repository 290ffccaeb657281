//! How the host's cgroup hierarchies are mounted, read from a mountinfo text.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Serialize;

/// The v1 controllers a sandbox's limits and counters use.
const CONTROLLERS: [&str; 6] = ["memory", "pids", "cpu", "cpuacct", "cpuset", "freezer"];

/// How cgroups are mounted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum Layout {
    /// Pure cgroup v2 at this mountpoint.
    V2 { root: PathBuf },
    /// v1 controllers (name -> mountpoint), maybe with a v2 hierarchy (for cgroup.kill).
    Hybrid {
        v1: BTreeMap<String, PathBuf>,
        unified: Option<PathBuf>,
    },
    /// No usable cgroups.
    None,
}

impl Layout {
    /// The layout a `/proc/self/mountinfo` text describes.
    pub fn parse(mountinfo: &str) -> Layout {
        let mut v1 = BTreeMap::new();
        let mut v2: Option<PathBuf> = None;
        for (mountpoint, fstype, opts) in mounts(mountinfo) {
            match fstype {
                "cgroup2" => v2 = Some(PathBuf::from(mountpoint)),
                "cgroup" => {
                    for o in opts.split(',').filter(|o| CONTROLLERS.contains(o)) {
                        v1.insert(o.to_string(), PathBuf::from(mountpoint));
                    }
                }
                _ => {}
            }
        }
        match (v1.is_empty(), v2) {
            (true, Some(root)) => Layout::V2 { root },
            (false, unified) => Layout::Hybrid { v1, unified },
            (true, None) => Layout::None,
        }
    }

    /// Every hierarchy's mountpoint a sandbox's groups are made under (the v1
    /// controllers' and the v2 one).
    pub fn roots(&self) -> Vec<PathBuf> {
        match self {
            Layout::V2 { root } => vec![root.clone()],
            Layout::Hybrid { v1, unified } => {
                // Co-mounted controllers (`cpu,cpuacct`) share a mountpoint.
                let mut v: Vec<PathBuf> = v1.values().cloned().chain(unified.clone()).collect();
                v.sort();
                v.dedup();
                v
            }
            Layout::None => vec![],
        }
    }
}

/// `(mountpoint, fstype, super options)` of each line of a mountinfo text.
fn mounts(mountinfo: &str) -> impl Iterator<Item = (&str, &str, &str)> {
    mountinfo.lines().filter_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let mountpoint = left.split(' ').nth(4)?;
        let mut r = right.split(' ');
        let fstype = r.next().unwrap_or("");
        let opts = r.nth(1).unwrap_or("");
        Some((mountpoint, fstype, opts))
    })
}

/// Mount points of every cgroup hierarchy (v1, named ones included, and v2), from a
/// mountinfo text: where a group made by another program (runsc) can be.
pub fn mount_points(mountinfo: &str) -> Vec<PathBuf> {
    mounts(mountinfo)
        .filter(|(_, fstype, _)| *fstype == "cgroup" || *fstype == "cgroup2")
        .map(|(m, _, _)| PathBuf::from(m))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_hybrid_and_pure_v2() {
        let hybrid = "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n\
                      35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n\
                      39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n\
                      41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
        let layout = Layout::parse(hybrid);
        match &layout {
            Layout::Hybrid { v1, unified } => {
                assert_eq!(v1["memory"], PathBuf::from("/sys/fs/cgroup/memory"));
                assert_eq!(v1["pids"], PathBuf::from("/sys/fs/cgroup/pids"));
                assert_eq!(*unified, Some(PathBuf::from("/sys/fs/cgroup/unified")));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(layout.roots().len(), 4);
        let v2 = "30 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate\n";
        assert_eq!(
            Layout::parse(v2),
            Layout::V2 {
                root: "/sys/fs/cgroup".into()
            }
        );
        assert_eq!(Layout::parse(""), Layout::None);
        assert!(Layout::None.roots().is_empty());
    }

    #[test]
    fn finds_v1_and_v2_hierarchies_only() {
        let mi = "25 30 0:23 / /sys rw,nosuid - sysfs sysfs rw\n\
                  32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n\
                  33 31 0:30 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd\n\
                  40 31 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n\
                  41 31 0:38 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n";
        assert_eq!(
            mount_points(mi),
            vec![
                PathBuf::from("/sys/fs/cgroup/cpu"),
                PathBuf::from("/sys/fs/cgroup/systemd"),
                PathBuf::from("/sys/fs/cgroup/unified"),
            ]
        );
        assert!(mount_points("").is_empty());
    }
}
