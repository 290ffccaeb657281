//! System V IPC objects of this process's IPC namespace.

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
    Kind::ALL.iter().map(|k| ids(k.name()).len()).sum()
}

/// A kind of SysV IPC object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Shared memory segments.
    Shm,
    /// Semaphore sets.
    Sem,
    /// Message queues.
    Msg,
}

impl Kind {
    /// Every kind.
    pub const ALL: [Kind; 3] = [Kind::Shm, Kind::Sem, Kind::Msg];

    /// The name `/proc/sysvipc` gives it.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Shm => "shm",
            Kind::Sem => "sem",
            Kind::Msg => "msg",
        }
    }

    /// The kind named `name` ([`Kind::name`]).
    pub fn from_name(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// Whether this kernel lists the IPC namespace's objects in `/proc/sysvipc` (gVisor
/// 2022 does not, nor does it answer `SHM_STAT`/`SEM_STAT`/`MSG_STAT`: there the
/// objects can only be found by id, see [`probe_id`]).
pub fn listable() -> bool {
    std::path::Path::new("/proc/sysvipc/shm").exists()
}

/// Makes a private object of `kind` and removes it at once, returning the id it got.
/// Where ids are handed out in sequence (gVisor: the first free id above the last
/// one given), two probes whose ids are not consecutive mean objects were made in
/// between, each with an id between the two.
pub fn probe_id(kind: Kind) -> std::io::Result<i32> {
    // SAFETY: plain system calls on integers; IPC_PRIVATE always makes a new object,
    // which only we know of until it is removed just below.
    let id = unsafe {
        match kind {
            Kind::Shm => libc::shmget(libc::IPC_PRIVATE, 1, 0o600),
            Kind::Sem => libc::semget(libc::IPC_PRIVATE, 1, 0o600),
            Kind::Msg => libc::msgget(libc::IPC_PRIVATE, 0o600),
        }
    };
    if id < 0 {
        return Err(std::io::Error::other(format!(
            "cannot make a private {} object: {}",
            kind.name(),
            std::io::Error::last_os_error()
        )));
    }
    remove(kind, id);
    Ok(id)
}

/// Removes (`IPC_RMID`) the object `id` of `kind`; false when there is none or it is
/// not the caller's to remove.
pub fn remove(kind: Kind, id: i32) -> bool {
    // SAFETY: IPC_RMID takes no buffer (null is allowed for shmctl/msgctl, and semctl
    // reads no fourth argument for it); an id that is gone or not ours fails with
    // EINVAL/EPERM and changes nothing.
    let r = unsafe {
        match kind {
            Kind::Shm => libc::shmctl(id, libc::IPC_RMID, std::ptr::null_mut()),
            Kind::Sem => libc::semctl(id, 0, libc::IPC_RMID),
            Kind::Msg => libc::msgctl(id, libc::IPC_RMID, std::ptr::null_mut()),
        }
    };
    r == 0
}

/// Removes (`IPC_RMID`) every SysV object of this IPC namespace the caller may
/// remove: all of them with CAP_SYS_ADMIN, else those it owns or created. A shared
/// memory segment still attached goes when its last user detaches. Returns how many
/// were removed.
pub fn remove_all() -> usize {
    let mut removed = 0;
    for kind in Kind::ALL {
        for id in ids(kind.name()) {
            if remove(kind, id) {
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
    fn kinds_round_trip_their_names() {
        for k in Kind::ALL {
            assert_eq!(Kind::from_name(k.name()), Some(k));
        }
        assert_eq!(Kind::from_name("shmem"), None);
    }

    #[test]
    fn reads_ids_from_the_proc_table() {
        let t = "       key      shmid perms       size  cpid  lpid nattch   uid   gid  cuid  cgid      atime      dtime      ctime        rss       swap\n\
                 0  32769  1600  167772160 9 9 0 1000 1000 1000 1000 0 0 0 0 0\n\
                 0  5  600  4096 9 9 0 0 0 0 0 0 0 0 0 0\n";
        assert_eq!(parse_ids(t), [32769, 5]);
        assert!(parse_ids("key semid\n").is_empty());
    }
}
