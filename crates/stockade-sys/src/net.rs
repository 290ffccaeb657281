//! Network interface helpers.

use crate::{Result, SysError};

/// Brings the loopback interface of the current network namespace up.
pub fn loopback_up() -> Result<()> {
    interface_up("lo")
}

/// An `AF_INET` datagram socket for interface ioctls, closed when dropped.
fn ioctl_socket() -> Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: socket(2) with constant arguments.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(SysError::last("socket", "AF_INET, SOCK_DGRAM"));
    }
    // SAFETY: fd is a descriptor we just opened and own alone.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// An `ifreq` naming interface `name` (at most 15 bytes), the rest zero.
fn ifreq(name: &str) -> Result<libc::ifreq> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains('\0') {
        return Err(SysError::other(
            "ioctl",
            name,
            "an interface name is 1 to 15 bytes without NUL",
        ));
    }
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(name.bytes()) {
        *dst = src as libc::c_char;
    }
    Ok(req)
}

fn sockaddr_v4(addr: std::net::Ipv4Addr) -> libc::sockaddr {
    let sin = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: 0,
        sin_addr: libc::in_addr {
            s_addr: u32::from(addr).to_be(),
        },
        sin_zero: [0; 8],
    };
    // SAFETY: sockaddr_in and sockaddr are both 16 bytes of plain old data; this is
    // how the kernel's interface ioctls take an IPv4 address.
    unsafe { std::mem::transmute::<libc::sockaddr_in, libc::sockaddr>(sin) }
}

/// Brings interface `name` of the current network namespace up.
pub fn interface_up(name: &str) -> Result<()> {
    use std::os::fd::AsRawFd;
    let sock = ioctl_socket()?;
    let mut req = ifreq(name)?;
    // SAFETY: SIOCGIFFLAGS/SIOCSIFFLAGS read and write the ifreq we own; the union
    // field ifru_flags is the one these requests use; `sock` is open for the calls.
    unsafe {
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS as _, &mut req) < 0 {
            return Err(SysError::last("ioctl", format!("{name}, SIOCGIFFLAGS")));
        }
        req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS as _, &req) < 0 {
            return Err(SysError::last("ioctl", format!("{name}, SIOCSIFFLAGS")));
        }
    }
    Ok(())
}

/// Gives interface `name` the IPv4 address `addr/prefix` (the address and netmask
/// ioctls; the kernel adds the route of the subnet once the interface is up).
pub fn set_ipv4_address(name: &str, addr: std::net::Ipv4Addr, prefix: u8) -> Result<()> {
    use std::os::fd::AsRawFd;
    if prefix > 32 {
        return Err(SysError::other(
            "ioctl",
            format!("{name}, {addr}/{prefix}"),
            "an IPv4 prefix is 0 to 32",
        ));
    }
    let mask = std::net::Ipv4Addr::from(u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0));
    let sock = ioctl_socket()?;
    let mut req = ifreq(name)?;
    req.ifr_ifru.ifru_addr = sockaddr_v4(addr);
    // SAFETY: SIOCSIFADDR reads the ifreq we own, whose ifru_addr union field (the
    // one this request uses) holds an AF_INET address; `sock` is open for the call.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFADDR as _, &req) } < 0 {
        return Err(SysError::last(
            "ioctl",
            format!("{name}, SIOCSIFADDR {addr}"),
        ));
    }
    req.ifr_ifru.ifru_netmask = sockaddr_v4(mask);
    // SAFETY: as above, with ifru_netmask, the field SIOCSIFNETMASK reads.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFNETMASK as _, &req) } < 0 {
        return Err(SysError::last(
            "ioctl",
            format!("{name}, SIOCSIFNETMASK {mask}"),
        ));
    }
    Ok(())
}

/// Adds the IPv4 default route through `gateway` (which an interface's subnet must
/// reach) to the current network namespace.
pub fn add_ipv4_default_route(gateway: std::net::Ipv4Addr) -> Result<()> {
    use std::os::fd::AsRawFd;
    let sock = ioctl_socket()?;
    // SAFETY: rtentry is plain old data; all-zero is a valid value (no device name,
    // metric 0).
    let mut rt: libc::rtentry = unsafe { std::mem::zeroed() };
    rt.rt_dst = sockaddr_v4(std::net::Ipv4Addr::UNSPECIFIED);
    rt.rt_genmask = sockaddr_v4(std::net::Ipv4Addr::UNSPECIFIED);
    rt.rt_gateway = sockaddr_v4(gateway);
    rt.rt_flags = libc::RTF_UP | libc::RTF_GATEWAY;
    // SAFETY: SIOCADDRT reads the rtentry we own (its rt_dev pointer is null: the
    // kernel picks the interface from the gateway); `sock` is open for the call.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCADDRT as _, &rt) } < 0 {
        return Err(SysError::last(
            "ioctl",
            format!("SIOCADDRT default via {gateway}"),
        ));
    }
    Ok(())
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

/// The most descriptors [`send_fds`] and [`recv_fds`] carry in one message.
pub const MAX_PASSED_FDS: usize = 8;

/// Sends `data` with `fds` attached (`SCM_RIGHTS`) over the unix socket `sock`.
pub fn send_fds(
    sock: std::os::fd::BorrowedFd<'_>,
    data: &[u8],
    fds: &[std::os::fd::BorrowedFd<'_>],
) -> Result<()> {
    use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
    if fds.len() > MAX_PASSED_FDS {
        return Err(SysError::other(
            "sendmsg",
            format!("{} fds", fds.len()),
            format!("at most {MAX_PASSED_FDS} descriptors per message"),
        ));
    }
    let mut space =
        [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_PASSED_FDS))];
    let mut cmsg = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !cmsg.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(SysError::other(
            "sendmsg",
            "SCM_RIGHTS",
            "no room for the descriptors",
        ));
    }
    rustix::net::sendmsg(
        sock,
        &[std::io::IoSlice::new(data)],
        &mut cmsg,
        SendFlags::NOSIGNAL,
    )
    .map_err(|e| SysError::other("sendmsg", "SCM_RIGHTS", e.to_string()))?;
    Ok(())
}

/// Receives one message into `buf` and the descriptors attached to it (close-on-exec
/// here). Returns the bytes read and the descriptors, in the order sent.
pub fn recv_fds(
    sock: std::os::fd::BorrowedFd<'_>,
    buf: &mut [u8],
) -> Result<(usize, Vec<std::os::fd::OwnedFd>)> {
    use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
    let mut space =
        [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_PASSED_FDS))];
    let mut cmsg = RecvAncillaryBuffer::new(&mut space);
    let got = rustix::net::recvmsg(
        sock,
        &mut [std::io::IoSliceMut::new(buf)],
        &mut cmsg,
        RecvFlags::CMSG_CLOEXEC,
    )
    .map_err(|e| SysError::other("recvmsg", "SCM_RIGHTS", e.to_string()))?;
    let mut fds = Vec::new();
    for m in cmsg.drain() {
        if let RecvAncillaryMessage::ScmRights(passed) = m {
            fds.extend(passed);
        }
    }
    Ok((got.bytes, fds))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Seek, Write};
    use std::os::fd::AsFd;

    #[test]
    fn peer_pid_is_ours_within_our_namespace() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        assert_eq!(peer_pid(a.as_fd()).unwrap(), std::process::id() as i32);
    }

    #[test]
    fn descriptors_cross_a_socket_pair_and_still_work() {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut file = tempfile_in_tmp();
        file.write_all(b"passed").unwrap();
        send_fds(a.as_fd(), b"ok", &[file.as_fd()]).unwrap();
        let mut buf = [0u8; 16];
        let (n, fds) = recv_fds(b.as_fd(), &mut buf).unwrap();
        assert_eq!(&buf[..n], b"ok");
        assert_eq!(fds.len(), 1);
        let mut got = std::fs::File::from(fds.into_iter().next().unwrap());
        got.rewind().unwrap();
        let mut text = String::new();
        got.read_to_string(&mut text).unwrap();
        assert_eq!(text, "passed");
        // A message without descriptors has none, and too many are refused.
        send_fds(a.as_fd(), b"no", &[]).unwrap();
        let (n, fds) = recv_fds(b.as_fd(), &mut buf).unwrap();
        assert_eq!((&buf[..n], fds.len()), (&b"no"[..], 0));
        let many = vec![file.as_fd(); MAX_PASSED_FDS + 1];
        assert!(send_fds(a.as_fd(), b"x", &many).is_err());
    }

    fn tempfile_in_tmp() -> std::fs::File {
        let path = std::env::temp_dir().join(format!("stockade-sys-fd-{}", std::process::id()));
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        std::fs::remove_file(&path).unwrap();
        f
    }
}
