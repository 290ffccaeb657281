//! A host of a test's own: a network namespace joined to this one by a veth pair,
//! at an address that is none of this host's (a /30 of 198.18.0.0/15, the range set
//! aside for benchmarks), so what a test serves there is reached as a remote host
//! is, not through loopback or an address of this host. Removed on drop.

use std::net::Ipv4Addr;
use std::process::Command;

use crate::{require, root};

/// How to get what a [`Peer`] needs.
pub const PEER_FIX: &str = "run as root on a host with iproute2 (apt-get install iproute2)";

pub struct Peer {
    /// The namespace's name (`ip netns exec NAME`).
    pub name: String,
    /// The peer's address; this host's end of the link is `addr - 1`.
    pub addr: Ipv4Addr,
    link: String,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl Peer {
    /// A new peer, or `None` (after a SKIPPED line) without root or iproute2 outside
    /// CI.
    pub fn start() -> Option<Peer> {
        require("root", root(), "run the tests as root")?;
        require("a network namespace peer", Peer::make(), PEER_FIX)
    }

    fn make() -> Result<Peer, String> {
        // A /30 picked at random, again while this host already has it.
        let mut raw = [0u8; 3];
        let mut last = "no free /30 in 198.18.0.0/15".to_string();
        for _ in 0..16 {
            std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom").unwrap(), &mut raw)
                .unwrap();
            let base = Ipv4Addr::new(198, 18 + (raw[0] & 1), raw[1], raw[2] & 0xfc);
            let host_end = Ipv4Addr::from(u32::from(base) + 1);
            let taken = Command::new("ip")
                .args(["-o", "-4", "addr", "show"])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).contains(&format!(" {host_end}/")))
                .unwrap_or(true);
            if taken {
                last = "no free /30 in 198.18.0.0/15".into();
                continue;
            }
            let tag: String = raw.iter().map(|b| format!("{b:02x}")).collect();
            let name = format!("stk-peer-{tag}");
            let link = format!("stkp{tag}");
            let peer_end = format!("stkq{tag}");
            let p = Peer {
                name: name.clone(),
                addr: Ipv4Addr::from(u32::from(base) + 2),
                link: link.clone(),
            };
            let made = (|| {
                ip(&["netns", "add", &name])?;
                ip(&[
                    "link", "add", &link, "type", "veth", "peer", "name", &peer_end,
                ])?;
                ip(&["link", "set", &peer_end, "netns", &name])?;
                ip(&["addr", "add", &format!("{host_end}/30"), "dev", &link])?;
                ip(&["link", "set", &link, "up"])?;
                ip(&[
                    "-n",
                    &name,
                    "addr",
                    "add",
                    &format!("{}/30", p.addr),
                    "dev",
                    &peer_end,
                ])?;
                ip(&["-n", &name, "link", "set", &peer_end, "up"])?;
                ip(&["-n", &name, "link", "set", "lo", "up"])
            })();
            match made {
                Ok(()) => return Ok(p),
                // Another process on the host re-mounting /run/netns can take the new
                // namespace (and the veth pair with it) away mid-way: made again under
                // another name, a few times. `p`'s drop removes what was made.
                Err(e) => last = e,
            }
        }
        Err(format!("no peer after 16 tries; the last: {last}"))
    }

    /// `program` to run inside the peer.
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name, program]);
        c
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = ip(&["link", "del", &self.link]);
        let _ = ip(&["netns", "del", &self.name]);
    }
}
