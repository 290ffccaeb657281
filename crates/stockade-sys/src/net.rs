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
