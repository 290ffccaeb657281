//! The monitor's side of an egress policy: the sandbox's only resolver, and the
//! control socket (`net.sock`) through which the host reads denials and replaces the
//! policy.
//!
//! The resolver listens on port 53 of the sandbox's network namespace (a socket made
//! there while the monitor briefly entered it) and forwards allowed lookups from a
//! socket made in the host's namespace, so its upstream traffic never crosses the
//! sandbox's firewall: nothing there needs an exemption that code could use. Names
//! that are not allowed are answered NXDOMAIN at once and nothing is sent. Each
//! answer's addresses are added to the sandbox's nftables sets before the answer is
//! passed on, for the record's TTL (at least `MIN_ANSWER_TTL_SECS`).
//!
//! Rootless, the monitor cannot enter the sandbox's network namespace (that needs
//! CAP_SYS_ADMIN in the host's user namespace too), but it owns the sandbox's user
//! namespace: a forked child joins that and the network namespace, makes the
//! listeners there and hands them back over a socket pair (`SCM_RIGHTS`); every `nft`
//! run enters the two namespaces with CAP_NET_ADMIN there only. The upstream sockets
//! stay in the host's namespace as with root.

use std::collections::{HashMap, VecDeque};
use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, UdpSocket};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::RData;
use nix::sched::CloneFlags;
use nix::unistd::Pid;
use stockade_agent_proto::launch::{
    EgressPlan, MIN_ANSWER_TTL_SECS, NameRule, NetReply, NetRequest,
};
use stockade_agent_proto::{EgressDenial, now_ms};

use crate::proxy;

mod control;

use control::*;

/// Refusals of lookups and of the proxy's checks kept (the oldest go first).
const MAX_RECORDED: usize = 1024;
/// The deny sets' element timeout (`timeout 1h` in the ruleset).
const DENY_SET_TIMEOUT_MS: u64 = 3_600_000;
/// How long one upstream resolver gets to answer each send of a query (sent again
/// after each wait): 3.5 s in all, under the 5 s a stub resolver waits for us.
const UPSTREAM_WAITS: [Duration; 3] = [
    Duration::from_millis(500),
    Duration::from_secs(1),
    Duration::from_secs(2),
];
/// How long a DNS-over-TCP client gets for each query and answer.
const TCP_QUERY_TIMEOUT: Duration = Duration::from_secs(3);
/// The deny chains of the ruleset (see `stockade-native`'s `egress` module) and the
/// rule each reports.
const DENY_CHAINS: &[(&str, &str)] = &[
    ("deny_list", "denylist"),
    ("deny_host", "host or private range"),
    ("deny_other", "not in the allowlist"),
];

/// The sockets of a policy sandbox, made while the monitor is single-threaded.
pub struct Sockets {
    listen: UdpSocket,
    upstream4: UdpSocket,
    upstream6: Option<UdpSocket>,
    /// DNS over TCP on port 53 (a client's retry after a truncated answer, or its
    /// choice), with upstream sockets of its own.
    listen_tcp: TcpListener,
    tcp_upstream4: UdpSocket,
    tcp_upstream6: Option<UdpSocket>,
    control: UnixListener,
    ns: Namespaces,
    proxy: proxy::Listeners,
}

/// How the monitor acts in the sandbox's network namespace.
enum Namespaces {
    /// As root: a thread enters it (`setns`), and `nft` runs from that thread.
    Enter(fs::File),
    /// Rootless: `nft` is started in the sandbox's user and network namespaces with
    /// CAP_NET_ADMIN there (the monitor's threads stay where they are).
    Rootless { user: fs::File, net: fs::File },
}

impl Namespaces {
    fn try_clone(&self) -> Result<Namespaces, String> {
        let dup = |f: &fs::File| {
            f.try_clone()
                .map_err(|e| format!("cannot duplicate the namespace fd: {e}"))
        };
        Ok(match self {
            Namespaces::Enter(n) => Namespaces::Enter(dup(n)?),
            Namespaces::Rootless { user, net } => Namespaces::Rootless {
                user: dup(user)?,
                net: dup(net)?,
            },
        })
    }

    /// Enters the network namespace on this thread (root), or nothing (rootless).
    fn enter(&self) -> bool {
        match self {
            Namespaces::Enter(n) => nix::sched::setns(n, CloneFlags::CLONE_NEWNET).is_ok(),
            Namespaces::Rootless { .. } => true,
        }
    }
}

/// Makes the resolver's sockets: the listener inside the sandbox's network namespace
/// (entered and left by this thread), the upstream ones and the control socket here.
pub fn prepare(state_dir: &Path, child: Pid, rootless: bool) -> Result<Sockets, String> {
    let upstream4 = UdpSocket::bind("0.0.0.0:0")
        .map_err(|e| format!("cannot open the resolver's upstream socket: {e}"))?;
    let upstream6 = UdpSocket::bind("[::]:0").ok();
    let tcp_upstream4 = UdpSocket::bind("0.0.0.0:0")
        .map_err(|e| format!("cannot open the resolver's upstream socket: {e}"))?;
    let tcp_upstream6 = UdpSocket::bind("[::]:0").ok();
    let ns_file = |kind: &str| {
        fs::File::open(format!("/proc/{}/ns/{kind}", child.as_raw()))
            .map_err(|e| format!("cannot open the sandbox's {kind} namespace: {e}"))
    };
    let netns = ns_file("net")?;
    let (listeners, ns) = if rootless {
        let user = ns_file("user")?;
        (
            listeners_from_child(&user, &netns)?,
            Namespaces::Rootless { user, net: netns },
        )
    } else {
        let ours = fs::File::open("/proc/self/ns/net")
            .map_err(|e| format!("cannot open our network namespace: {e}"))?;
        nix::sched::setns(&netns, CloneFlags::CLONE_NEWNET)
            .map_err(|e| format!("cannot enter the sandbox's network namespace: {e}"))?;
        let made = bind_listeners();
        nix::sched::setns(&ours, CloneFlags::CLONE_NEWNET)
            .map_err(|e| format!("cannot return to the host network namespace: {e}"))?;
        (made?, Namespaces::Enter(netns))
    };
    let (listen, listen_tcp, proxy) = listeners;
    let path = state_dir.join("net.sock");
    let _ = fs::remove_file(&path);
    let control = UnixListener::bind(&path)
        .map_err(|e| format!("cannot listen on {}: {e}", path.display()))?;
    Ok(Sockets {
        listen,
        upstream4,
        upstream6,
        listen_tcp,
        tcp_upstream4,
        tcp_upstream6,
        control,
        ns,
        proxy,
    })
}

type Listeners = (UdpSocket, TcpListener, proxy::Listeners);

/// The resolver's and the proxy's listeners, in the network namespace this thread
/// is in.
fn bind_listeners() -> Result<Listeners, String> {
    let listen = UdpSocket::bind("0.0.0.0:53")
        .map_err(|e| format!("cannot listen on port 53 in the sandbox's namespace: {e}"))?;
    let listen_tcp = TcpListener::bind("0.0.0.0:53")
        .map_err(|e| format!("cannot listen on tcp port 53 in the sandbox's namespace: {e}"))?;
    Ok((listen, listen_tcp, proxy::bind()?))
}

/// Rootless: a forked child joins the sandbox's user namespace (which we own, so it
/// gets every capability there and none on the host) and its network namespace,
/// binds the listeners and sends them back over a socket pair; this process keeps
/// them. The caller is single-threaded (a fork's child of a threaded process could
/// inherit a held lock).
fn listeners_from_child(user: &fs::File, net: &fs::File) -> Result<Listeners, String> {
    use std::os::fd::AsFd;
    use stockade_sys::process::Forked;

    let (ours, theirs) = std::os::unix::net::UnixStream::pair()
        .map_err(|e| format!("cannot make a socket pair: {e}"))?;
    match stockade_sys::process::fork()
        .map_err(|e| format!("cannot fork to bind in the sandbox's namespace: {e}"))?
    {
        Forked::Child => {
            drop(ours);
            let made = nix::sched::setns(user, CloneFlags::CLONE_NEWUSER)
                .map_err(|e| format!("cannot join the sandbox's user namespace: {e}"))
                .and_then(|()| {
                    nix::sched::setns(net, CloneFlags::CLONE_NEWNET)
                        .map_err(|e| format!("cannot join the sandbox's network namespace: {e}"))
                })
                .and_then(|()| bind_listeners());
            let sent = match &made {
                Ok((udp, tcp, p)) => {
                    let mut fds = vec![udp.as_fd(), tcp.as_fd()];
                    fds.extend(p.fds());
                    stockade_sys::net::send_fds(theirs.as_fd(), b"ok", &fds).is_ok()
                }
                Err(m) => (&theirs).write_all(m.as_bytes()).is_ok(),
            };
            stockade_sys::process::exit_now(i32::from(!sent));
        }
        Forked::Parent(pid) => {
            drop(theirs);
            let mut buf = [0u8; 1024];
            let got = stockade_sys::net::recv_fds(ours.as_fd(), &mut buf);
            let _ = nix::sys::wait::waitpid(pid, None);
            let (n, fds) =
                got.map_err(|e| format!("cannot receive the sandbox's listeners: {e}"))?;
            let text = String::from_utf8_lossy(&buf[..n]).into_owned();
            let mut fds = fds.into_iter();
            match (text.as_str(), fds.next(), fds.next(), fds.next()) {
                ("ok", Some(udp), Some(tcp), Some(v4)) => Ok((
                    UdpSocket::from(udp),
                    TcpListener::from(tcp),
                    proxy::Listeners::from_parts(
                        TcpListener::from(v4),
                        fds.next().map(TcpListener::from),
                    ),
                )),
                ("" | "ok", ..) => {
                    Err("the child that binds in the sandbox's namespace died".to_string())
                }
                (why, ..) => Err(why.to_string()),
            }
        }
    }
}

struct Shared {
    policy: Mutex<EgressPlan>,
    /// Credentials (fixed at create): the proxy intercepts TLS to set them.
    intercept: Option<proxy::Intercept>,
    /// Address -> the allowed name it was last resolved from.
    resolved: Mutex<HashMap<IpAddr, (String, Instant)>>,
    /// Refusals of lookups and of the proxy's checks (connection refusals are in
    /// the ruleset's deny sets).
    recorded: Mutex<VecDeque<EgressDenial>>,
    /// Serializes nft runs (a policy swap replaces the table the resolver adds to).
    nft_lock: Mutex<()>,
    nft: String,
    /// Rootless: the sandbox's user and network namespaces, which `nft` enters.
    rootless_ns: Option<(fs::File, fs::File)>,
    state_dir: PathBuf,
}

/// Starts the resolver and control threads (the caller has blocked the signals it
/// handles, so these threads inherit the mask).
pub fn start(
    s: Sockets,
    mut policy: EgressPlan,
    nft: String,
    state_dir: PathBuf,
) -> Result<(), String> {
    // Taken out of the plan the resolver and the proxy clone per query and per
    // connection: the roots alone are hundreds of kilobytes.
    let intercept = policy
        .tls
        .take()
        .map(|t| proxy::Intercept::new(&t))
        .transpose()?;
    let shared = Arc::new(Shared {
        policy: Mutex::new(policy),
        intercept,
        resolved: Mutex::new(HashMap::new()),
        recorded: Mutex::new(VecDeque::new()),
        nft_lock: Mutex::new(()),
        nft,
        rootless_ns: match s.ns.try_clone()? {
            Namespaces::Enter(_) => None,
            Namespaces::Rootless { user, net } => Some((user, net)),
        },
        state_dir,
    });
    let ns2 = s.ns.try_clone()?;
    let ns3 = s.ns.try_clone()?;
    let sh = shared.clone();
    let (tcp, tcp_up4, tcp_up6) = (s.listen_tcp, s.tcp_upstream4, s.tcp_upstream6);
    std::thread::Builder::new()
        .name("resolver-tcp".into())
        .spawn(move || {
            if ns3.enter() {
                serve_dns_tcp(&sh, &tcp, &tcp_up4, tcp_up6.as_ref());
            }
        })
        .map_err(|e| format!("cannot start the resolver: {e}"))?;
    let sh = shared.clone();
    let (listen, up4, up6, ns) = (s.listen, s.upstream4, s.upstream6, s.ns);
    std::thread::Builder::new()
        .name("resolver".into())
        .spawn(move || {
            if ns.enter() {
                serve_dns(&sh, &listen, &up4, up6.as_ref());
            }
        })
        .map_err(|e| format!("cannot start the resolver: {e}"))?;
    // The proxy's threads stay in the host's namespace: they connect from there.
    proxy::start(s.proxy, shared.clone())?;
    let control = s.control;
    std::thread::Builder::new()
        .name("net-control".into())
        .spawn(move || {
            if ns2.enter() {
                serve_control(&shared, &control);
            }
        })
        .map_err(|e| format!("cannot start the network control thread: {e}"))?;
    Ok(())
}

fn serve_dns(sh: &Shared, listen: &UdpSocket, up4: &UdpSocket, up6: Option<&UdpSocket>) {
    let mut buf = vec![0u8; 4096];
    // Upstream ids are ours (the client's is put back in the answer), so a late answer
    // to an earlier query is never taken for the current one.
    let mut next_id = (now_ms() & 0xffff) as u16;
    loop {
        let Ok((n, from)) = listen.recv_from(&mut buf) else {
            continue;
        };
        next_id = next_id.wrapping_add(1);
        if let Some(reply) = answer(sh, &buf[..n], up4, up6, next_id) {
            let _ = listen.send_to(&reply, from);
        }
    }
}

/// DNS over TCP: two-byte length, message; answered like UDP queries (forwarded
/// over UDP). One connection at a time, each with a read deadline, so a client that
/// holds one open stalls only its own sandbox's TCP lookups, for seconds.
fn serve_dns_tcp(sh: &Shared, listen: &TcpListener, up4: &UdpSocket, up6: Option<&UdpSocket>) {
    let mut next_id = ((now_ms() >> 16) & 0xffff) as u16;
    for conn in listen.incoming() {
        let Ok(mut conn) = conn else { continue };
        let _ = conn.set_read_timeout(Some(TCP_QUERY_TIMEOUT));
        let _ = conn.set_write_timeout(Some(TCP_QUERY_TIMEOUT));
        // At most a few queries per connection (a client reuses one for A and AAAA).
        for _ in 0..16 {
            let mut len = [0u8; 2];
            if conn.read_exact(&mut len).is_err() {
                break;
            }
            let mut query = vec![0u8; usize::from(u16::from_be_bytes(len))];
            if query.is_empty() || conn.read_exact(&mut query).is_err() {
                break;
            }
            next_id = next_id.wrapping_add(1);
            let Some(reply) = answer(sh, &query, up4, up6, next_id) else {
                break;
            };
            let Ok(n) = u16::try_from(reply.len()) else {
                break;
            };
            if conn.write_all(&n.to_be_bytes()).is_err() || conn.write_all(&reply).is_err() {
                break;
            }
        }
    }
}

fn normalize(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

/// The answer to one query: refused locally, or forwarded and passed back.
fn answer(
    sh: &Shared,
    query: &[u8],
    up4: &UdpSocket,
    up6: Option<&UdpSocket>,
    upstream_id: u16,
) -> Option<Vec<u8>> {
    let q = Message::from_vec(query).ok()?;
    if q.metadata.message_type != MessageType::Query {
        return None;
    }
    let refuse = |code: ResponseCode| {
        let mut r = Message::error_msg(q.metadata.id, q.metadata.op_code, code);
        r.metadata.recursion_desired = q.metadata.recursion_desired;
        r.metadata.recursion_available = true;
        r.add_queries(q.queries.clone());
        r.to_vec().ok()
    };
    if q.metadata.op_code != OpCode::Query || q.queries.len() != 1 {
        return refuse(ResponseCode::Refused);
    }
    let name = normalize(&q.queries[0].name().to_ascii());
    let policy = sh.policy.lock().map(|p| p.clone()).ok()?;
    let rule = if let Some(d) = policy.deny.iter().find(|r| r.matches(&name)) {
        Some(format!("denylist: {}", d.text))
    } else if !policy.allow.iter().any(|r| r.matches(&name)) {
        Some("not in the allowlist".to_string())
    } else {
        None
    };
    if let Some(rule) = rule {
        record_dns(sh, &name, rule);
        return refuse(ResponseCode::NXDomain);
    }
    let allows: Vec<&NameRule> = policy.allow.iter().filter(|r| r.matches(&name)).collect();
    // A query of our own goes upstream: the question, the recursion flag and a plain
    // EDNS payload size. Nothing else the code wrote into its query (records in the
    // other sections, EDNS options, a signature) leaves the sandbox.
    let mut fwd = Message::new(upstream_id, MessageType::Query, OpCode::Query);
    fwd.metadata.recursion_desired = q.metadata.recursion_desired;
    fwd.add_query(q.queries[0].clone());
    if let Some(e) = &q.edns {
        let mut plain = hickory_proto::op::Edns::new();
        plain.set_max_payload(e.max_payload().clamp(512, 4096));
        fwd.set_edns(plain);
    }
    let Ok(out) = fwd.to_vec() else {
        return refuse(ResponseCode::FormErr);
    };
    let Some(mut reply) = forward(&out, &policy.upstreams, up4, up6, upstream_id) else {
        return refuse(ResponseCode::ServFail);
    };
    if let Ok(m) = Message::from_vec(&reply) {
        let mut addrs = Vec::new();
        for rec in &m.answers {
            let ip = match &rec.data {
                RData::A(a) => IpAddr::V4(a.0),
                RData::AAAA(a) => IpAddr::V6(a.0),
                _ => continue,
            };
            addrs.push((ip, rec.ttl.max(MIN_ANSWER_TTL_SECS)));
        }
        // An address this name opened that stays open for more than half of the new
        // TTL needs no nft run (most lookups repeat a recent one).
        let fresh: Vec<(IpAddr, u32)> = match sh.resolved.lock() {
            Ok(r) => {
                let now = Instant::now();
                addrs
                    .iter()
                    .filter(|(ip, ttl)| {
                        !r.get(ip).is_some_and(|(n, until)| {
                            *n == name && *until > now + Duration::from_secs(u64::from(*ttl) / 2)
                        })
                    })
                    .copied()
                    .collect()
            }
            Err(_) => addrs.clone(),
        };
        if !fresh.is_empty() {
            let addrs = fresh;
            if let Err(e) = open_addresses(sh, &addrs, &allows) {
                eprintln!("stockade monitor: {e}");
                // Not opened: the answer would lead to a refusal; say so instead.
                return refuse(ResponseCode::ServFail);
            }
            if let Ok(mut r) = sh.resolved.lock() {
                let now = Instant::now();
                r.retain(|_, (_, until)| *until > now);
                for (ip, ttl) in &addrs {
                    r.insert(
                        *ip,
                        (name.clone(), now + Duration::from_secs(u64::from(*ttl))),
                    );
                }
            }
        }
    }
    reply[..2].copy_from_slice(&q.metadata.id.to_be_bytes());
    Some(reply)
}

fn forward(
    query: &[u8],
    upstreams: &[String],
    up4: &UdpSocket,
    up6: Option<&UdpSocket>,
    id: u16,
) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; 4096];
    for up in upstreams {
        let Ok(addr) = up.parse::<SocketAddr>() else {
            continue;
        };
        let sock = match addr {
            SocketAddr::V4(_) => up4,
            SocketAddr::V6(_) => match up6 {
                Some(s) => s,
                None => continue,
            },
        };
        // UDP loses queries (a busy resolver drops some): sent again after each
        // wait, as the stub resolvers do, and any copy's answer is taken.
        for wait in UPSTREAM_WAITS {
            if sock.send_to(query, addr).is_err() {
                break;
            }
            let deadline = Instant::now() + wait;
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() || sock.set_read_timeout(Some(left)).is_err() {
                    break;
                }
                match sock.recv_from(&mut buf) {
                    Ok((n, from)) if from == addr && n >= 2 && buf[..2] == id.to_be_bytes() => {
                        return Some(buf[..n].to_vec());
                    }
                    Ok(_) => continue,
                    Err(_) => break,
                }
            }
        }
    }
    None
}

fn record_dns(sh: &Shared, name: &str, rule: String) {
    keep(
        sh,
        EgressDenial {
            at_ms: now_ms(),
            protocol: "dns".into(),
            destination: name.to_string(),
            port: None,
            name: Some(name.to_string()),
            rule,
        },
    );
}

fn keep(sh: &Shared, denial: EgressDenial) {
    if let Ok(mut d) = sh.recorded.lock() {
        if d.len() >= MAX_RECORDED {
            d.pop_front();
        }
        d.push_back(denial);
    }
}

impl proxy::Policy for Shared {
    fn plan(&self) -> Option<EgressPlan> {
        self.policy.lock().ok().map(|p| p.clone())
    }

    fn intercept(&self) -> Option<&proxy::Intercept> {
        self.intercept.as_ref()
    }

    fn record(&self, protocol: &str, dest: SocketAddr, name: Option<&str>, rule: String) {
        keep(
            self,
            EgressDenial {
                at_ms: now_ms(),
                protocol: protocol.into(),
                destination: dest.ip().to_string(),
                port: Some(dest.port()),
                name: name.map(str::to_string),
                rule,
            },
        );
    }
}

/// Adds resolved addresses to the allow sets with their TTL. An element already there
/// is deleted and added again in the same transaction, so its timeout starts anew.
fn open_addresses(sh: &Shared, addrs: &[(IpAddr, u32)], rules: &[&NameRule]) -> Result<(), String> {
    let mut elems: HashMap<&'static str, Vec<(String, u32)>> = HashMap::new();
    for (ip, ttl) in addrs {
        let v6 = ip.is_ipv6();
        for r in rules {
            for proto in &r.protocols {
                match &r.ports {
                    None => elems
                        .entry(if v6 { "allowany6" } else { "allowany4" })
                        .or_default()
                        .push((format!("{ip} . {proto}"), *ttl)),
                    Some(ports) => {
                        for p in ports {
                            elems
                                .entry(if v6 { "allow6" } else { "allow4" })
                                .or_default()
                                .push((format!("{ip} . {proto} . {p}"), *ttl));
                        }
                    }
                }
            }
        }
    }
    let mut batch = String::new();
    for (set, list) in &elems {
        let with: Vec<String> = list
            .iter()
            .map(|(e, t)| format!("{e} timeout {t}s"))
            .collect();
        let bare: Vec<&str> = list.iter().map(|(e, _)| e.as_str()).collect();
        batch.push_str(&format!(
            "add element inet stockade {set} {{ {} }}\n",
            with.join(", ")
        ));
        batch.push_str(&format!(
            "delete element inet stockade {set} {{ {} }}\n",
            bare.join(", ")
        ));
        batch.push_str(&format!(
            "add element inet stockade {set} {{ {} }}\n",
            with.join(", ")
        ));
    }
    if batch.is_empty() {
        return Ok(());
    }
    let _g = sh.nft_lock.lock();
    sh.run_nft(&["-f", "-"], Some(&batch)).map(drop)
}

impl Shared {
    /// `nft ARGS` in the sandbox's network namespace: the calling thread's (root, see
    /// [`Namespaces::enter`]), or entered by the child itself (rootless).
    fn run_nft(&self, args: &[&str], stdin: Option<&str>) -> Result<String, String> {
        let mut cmd = Command::new(&self.nft);
        if let Some((user, net)) = &self.rootless_ns {
            let dup = |f: &fs::File| {
                f.try_clone()
                    .map(std::os::fd::OwnedFd::from)
                    .map_err(|e| format!("cannot duplicate the namespace fd: {e}"))
            };
            stockade_sys::process::enter_with_net_admin(&mut cmd, dup(user)?, dup(net)?);
        }
        run_nft(&self.nft, cmd, args, stdin)
    }
}

fn run_nft(
    nft: &str,
    mut cmd: Command,
    args: &[&str],
    stdin: Option<&str>,
) -> Result<String, String> {
    let mut child = cmd
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {nft}: {e}"))?;
    if let (Some(text), Some(mut i)) = (stdin, child.stdin.take()) {
        let _ = i.write_all(text.as_bytes());
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("cannot run {nft}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{nft} {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_nft_durations() {
        assert_eq!(parse_duration_ms("1h"), Some(3_600_000));
        assert_eq!(parse_duration_ms("59m59s987ms"), Some(3_599_987));
        assert_eq!(parse_duration_ms("2s"), Some(2000));
        assert_eq!(parse_duration_ms("1x"), None);
    }

    #[test]
    fn parses_deny_sets_from_nft_list() {
        let text = "table inet stockade {\n\tset allow4 {\n\t\ttype ipv4_addr . inet_proto . inet_service\n\t\tflags timeout\n\t}\n\tset deny_other4 {\n\t\ttype ipv4_addr . inet_proto . inet_service\n\t\tsize 4096\n\t\tflags dynamic,timeout\n\t\ttimeout 1h\n\t\telements = { 104.16.1.34 . tcp . 443 expires 59m58s500ms,\n\t\t\t     192.0.2.1 . udp . 53 timeout 1h expires 59m59s }\n\t}\n}\n";
        let sets = parse_set_elements(text);
        let other = sets.iter().find(|(n, _)| n == "deny_other4").unwrap();
        assert_eq!(
            other.1,
            vec![
                DeniedElem {
                    addr: "104.16.1.34".into(),
                    proto: "tcp".into(),
                    port: 443,
                    timeout_ms: 3_600_000,
                    expires_ms: 3_598_500
                },
                DeniedElem {
                    addr: "192.0.2.1".into(),
                    proto: "udp".into(),
                    port: 53,
                    timeout_ms: 3_600_000,
                    expires_ms: 3_599_000
                }
            ]
        );
        assert!(
            sets.iter()
                .find(|(n, _)| n == "allow4")
                .unwrap()
                .1
                .is_empty()
        );
    }
}
