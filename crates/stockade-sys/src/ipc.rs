//! System V IPC objects of this process's IPC namespace.

/// The kinds of SysV IPC object, as `/proc/sysvipc` names them.
const KINDS: [&str; 3] = ["shm", "sem", "msg"];

/// Ids of the objects of one kind listed in `/proc/sysvipc/<kind>` (second column).
fn ids(kind: &str) -> Vec<i32> {
    std::fs::read_to_string(format!("/proc/sysvipc/{kind}"))
        .map(|t| parse_ids(&t))
        .unwrap_or_default()
}

fn parse_ids(table: &str) -> Vec<i32> {
    table
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().nth(1)?.parse().ok())
        .collect()
}

/// How many SysV shared memory segments, semaphore sets and message queues this
/// IPC namespace holds.
pub fn count() -> usize {
    KINDS.iter().map(|k| ids(k).len()).sum()
}

/// Removes (`IPC_RMID`) every SysV object of this IPC namespace the caller may
/// remove: all of them with CAP_SYS_ADMIN, else those it owns or created. A shared
/// memory segment still attached goes when its last user detaches. Returns how many
/// were removed.
pub fn remove_all() -> usize {
    let mut removed = 0;
    for kind in KINDS {
        for id in ids(kind) {
            // SAFETY: IPC_RMID takes no buffer (null is allowed for shmctl/msgctl,
            // and semctl reads no fourth argument for it); an id that is gone or not
            // ours fails with EINVAL/EPERM and changes nothing.
            let r = unsafe {
                match kind {
                    "shm" => libc::shmctl(id, libc::IPC_RMID, std::ptr::null_mut()),
                    "sem" => libc::semctl(id, 0, libc::IPC_RMID),
                    _ => libc::msgctl(id, libc::IPC_RMID, std::ptr::null_mut()),
                }
            };
            if r == 0 {
                removed += 1;
            }
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_ids_from_the_proc_table() {
        let t = "       key      shmid perms       size  cpid  lpid nattch   uid   gid  cuid  cgid      atime      dtime      ctime        rss       swap\n\
                 0  32769  1600  167772160 9 9 0 1000 1000 1000 1000 0 0 0 0 0\n\
                 0  5  600  4096 9 9 0 0 0 0 0 0 0 0 0 0\n";
        assert_eq!(parse_ids(t), [32769, 5]);
        assert!(parse_ids("key semid\n").is_empty());
    }
}
