//! Network interface helpers.

use crate::{Result, SysError};

/// Brings the loopback interface of the current network namespace up.
pub fn loopback_up() -> Result<()> {
    // SAFETY: socket(2) with constant arguments; the fd is closed below on all paths.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(SysError::last("socket", "AF_INET, SOCK_DGRAM"));
    }
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = *src as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS/SIOCSIFFLAGS read and write the ifreq we own; the union
    // field ifru_flags is the one these requests use.
    let result = unsafe {
        if libc::ioctl(fd, libc::SIOCGIFFLAGS as _, &mut req) < 0 {
            Err(SysError::last("ioctl", "lo, SIOCGIFFLAGS"))
        } else {
            req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
            if libc::ioctl(fd, libc::SIOCSIFFLAGS as _, &req) < 0 {
                Err(SysError::last("ioctl", "lo, SIOCSIFFLAGS"))
            } else {
                Ok(())
            }
        }
    };
    // SAFETY: fd is a valid descriptor we opened above and close exactly once.
    unsafe { libc::close(fd) };
    result
}

/// The pid of the process that connected the unix socket `sock` (`SO_PEERCRED`), as
/// seen from the caller's pid namespace: 0 when the peer is outside it (e.g. on the
/// host, for PID 1 of a sandbox).
pub fn peer_pid(sock: std::os::fd::BorrowedFd<'_>) -> Result<i32> {
    use std::os::fd::AsRawFd;
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: SO_PEERCRED writes at most `len` bytes into the ucred we own and
    // updates `len`; `sock` is a valid descriptor for the call's duration.
    let r = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if r < 0 {
        return Err(SysError::last(
            "getsockopt",
            format!("{}, SO_PEERCRED", sock.as_raw_fd()),
        ));
    }
    Ok(cred.pid)
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd;

    #[test]
    fn peer_pid_is_ours_within_our_namespace() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        assert_eq!(
            super::peer_pid(a.as_fd()).unwrap(),
            std::process::id() as i32
        );
    }
}
