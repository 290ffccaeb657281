//! Egress policy (issue 18), with real traffic: an allowlist opens its names and
//! nothing else, lookups of other names never leave the host, refusals are immediate
//! and recorded, and the policy of a running sandbox can be replaced.

use std::net::{SocketAddr, UdpSocket};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use stockade::spec::{EgressPolicy, Network};
use stockade::{CreateOptions, EgressDenial, NativeProvider, Sandbox, SandboxSpec};

use crate::*;

/// Root, slirp4netns and nft, or a loud skip (a failure in CI).
fn require_egress(test: &str) -> bool {
    if !require_root(test) {
        return false;
    }
    for (tool, pkg) in [("slirp4netns", "slirp4netns"), ("nft", "nftables")] {
        let found = ["/usr/bin", "/usr/sbin", "/bin", "/sbin"]
            .iter()
            .any(|d| std::path::Path::new(d).join(tool).exists());
        if !found {
            let msg = format!("{test} needs {tool}: apt-get install {pkg}");
            assert!(std::env::var_os("CI").is_none(), "{msg}");
            eprintln!("SKIPPED: {msg}");
            return false;
        }
    }
    true
}

/// A resolver on the host's loopback that forwards to the host's own and writes
/// down every name it is asked: what reaches "upstream" is what it saw.
struct FakeUpstream {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<String>>>,
    /// Every query as it arrived.
    raw: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl FakeUpstream {
    fn start() -> FakeUpstream {
        FakeUpstream::start_with(Vec::new())
    }

    /// Also answers `names` itself (A records; no AAAA), as a zone of its own would.
    fn start_with(names: Vec<(String, std::net::Ipv4Addr)>) -> FakeUpstream {
        let real: SocketAddr = std::fs::read_to_string("/etc/resolv.conf")
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("nameserver "))
            .map(|a| format!("{}:53", a.trim()).parse().unwrap())
            .expect("a nameserver in /etc/resolv.conf");
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = sock.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let raw = Arc::new(Mutex::new(Vec::new()));
        let raw_log = raw.clone();
        std::thread::spawn(move || {
            let up = UdpSocket::bind("0.0.0.0:0").unwrap();
            up.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
            let mut buf = [0u8; 4096];
            let mut ans = [0u8; 4096];
            loop {
                let Ok((n, from)) = sock.recv_from(&mut buf) else {
                    return;
                };
                let name = qname(&buf[..n]);
                log.lock().unwrap().push(name.clone());
                raw_log.lock().unwrap().push(buf[..n].to_vec());
                if let Some((_, ip)) = names.iter().find(|(n, _)| n.eq_ignore_ascii_case(&name)) {
                    let _ = sock.send_to(&answer_a(&buf[..n], *ip), from);
                    continue;
                }
                if up.send_to(&buf[..n], real).is_ok()
                    && let Ok((m, _)) = up.recv_from(&mut ans)
                {
                    let _ = sock.send_to(&ans[..m], from);
                }
            }
        });
        FakeUpstream { addr, seen, raw }
    }

    fn saw(&self, name: &str) -> bool {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .any(|n| n.eq_ignore_ascii_case(name))
    }
}

/// An answer to `query` (one question): its A record is `ip` (TTL 60), an AAAA
/// question gets no record.
fn answer_a(query: &[u8], ip: std::net::Ipv4Addr) -> Vec<u8> {
    let mut end = 12;
    while query[end] != 0 {
        end += 1 + usize::from(query[end]);
    }
    end += 5;
    let qtype = u16::from_be_bytes([query[end - 4], query[end - 3]]);
    let mut r = query[..end].to_vec();
    r[2] = 0x81;
    r[3] = 0x80;
    r[6..12].copy_from_slice(&[0, u8::from(qtype == 1), 0, 0, 0, 0]);
    if qtype == 1 {
        r.extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4]);
        r.extend_from_slice(&ip.octets());
    }
    r
}

/// The question name of a DNS query (labels from offset 12).
fn qname(msg: &[u8]) -> String {
    let mut labels = Vec::new();
    let mut i = 12;
    while let Some(&len) = msg.get(i) {
        if len == 0 || len & 0xc0 != 0 {
            break;
        }
        let l = usize::from(len);
        labels.push(
            String::from_utf8_lossy(msg.get(i + 1..i + 1 + l).unwrap_or_default()).into_owned(),
        );
        i += 1 + l;
    }
    labels.join(".")
}

async fn policy_sandbox(upstream: &FakeUpstream, policy: EgressPolicy) -> Sandbox {
    let provider = Arc::new(NativeProvider::from(
        stockade::NativeLauncher::with_state_root(state_root())
            .with_dns_upstreams(&[upstream.addr]),
    ));
    let spec = SandboxSpec {
        network: Network::Policy(policy),
        ..Default::default()
    };
    Sandbox::create(
        provider,
        spec,
        CreateOptions {
            owner_pid: Some(std::process::id()),
        },
    )
    .await
    .expect("create a sandbox with an egress policy")
}

/// Python for the code of the tests below: `http(raw)` sends `raw` to `ip` on port
/// 80 and returns all it gets back (with the error that ended it).
macro_rules! py_http {
    () => {
        r#"def http(raw):
    s = socket.create_connection((ip, 80), timeout=10)
    s.sendall(raw)
    out = b''
    try:
        while True:
            b = s.recv(65536)
            if not b: break
            out += b
    except OSError as e:
        out += b' <%s>' % e.__class__.__name__.encode()
    s.close()
    return out
"#
    };
}

/// A sandbox whose allowlist is `pypi.org` alone.
async fn pypi_only(upstream: &FakeUpstream) -> Sandbox {
    policy_sandbox(
        upstream,
        EgressPolicy {
            allow: vec!["pypi.org".into()],
            deny: Vec::new(),
            credentials: Vec::new(),
        },
    )
    .await
}

fn host_ip(name: &str) -> String {
    use std::net::ToSocketAddrs;
    (name, 443)
        .to_socket_addrs()
        .unwrap_or_else(|e| panic!("the host cannot resolve {name}: {e}"))
        .find(SocketAddr::is_ipv4)
        .unwrap()
        .ip()
        .to_string()
}

fn find<'a>(
    d: &'a [EgressDenial],
    proto: &str,
    dest: &str,
    port: Option<u16>,
) -> Option<&'a EgressDenial> {
    d.iter()
        .find(|x| x.protocol == proto && x.destination == dest && x.port == port)
}

#[tokio::test]
async fn an_allowlist_opens_its_names_and_refuses_everything_else_at_once() {
    if !require_egress("an_allowlist_opens_its_names_and_refuses_everything_else_at_once") {
        return;
    }
    let upstream = FakeUpstream::start();
    let sb = pypi_only(&upstream).await;
    // npm's address as the host sees it: reachable from the host, not allowed here.
    let npm_ip = host_ip("registry.npmjs.org");
    let host = stockade_testkit::host_address();
    let code = format!(
        r#"
import socket, time, urllib.request
def refused(addr, port):
    t = time.monotonic()
    try:
        socket.create_connection((addr, port), timeout=5).close(); return 'connected'
    except OSError as e:
        return '%s %d' % (e.errno, (time.monotonic() - t) * 1000)
try:
    socket.getaddrinfo('registry.npmjs.org', 443); print('npm name: resolved')
except socket.gaierror as e:
    print('npm name: nxdomain', e.errno)
print('npm ip:', refused('{npm_ip}', 443))
print('metadata:', refused('169.254.169.254', 80))
print('host:', refused('{host}', 22))
print('other ip:', refused('1.1.1.1', 443))
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.settimeout(2)
u.connect(('1.1.1.1', 53))
try:
    u.send(b'x'); u.recv(16); print('udp: answered')
except OSError as e:
    print('udp:', e.errno)
r = urllib.request.urlopen('https://pypi.org/simple/six/', timeout=30)
print('pypi:', r.status, len(r.read()) > 0)
"#
    );
    let out = py(&sb, &code, 60_000).await;
    let s = text(&out.stdout);
    let report = format!(
        "{s}\n{}\n{:#?}\nall: {:#?}",
        text(&out.stderr),
        out.egress_denied,
        sb.egress_denied(0).await
    );
    assert!(
        s.contains("npm name: nxdomain"),
        "a disallowed name resolved: {report}"
    );
    assert!(
        s.contains("pypi: 200 True"),
        "the allowed name is not reachable: {report}"
    );
    // Every refusal is ECONNREFUSED (111) well within 100 ms, never a hang.
    for what in ["npm ip:", "metadata:", "host:", "other ip:"] {
        let line = s
            .lines()
            .find(|l| l.starts_with(what))
            .unwrap_or_else(|| panic!("{what} missing: {report}"));
        let mut f = line[what.len()..].split_whitespace();
        assert_eq!(f.next(), Some("111"), "{what} not refused: {report}");
        let ms: u64 = f.next().unwrap().parse().unwrap();
        assert!(ms < 100, "{what} took {ms} ms to be refused: {report}");
    }
    // Refused at once: EPERM from the send (the kernel reports a packet rejected on
    // its way out), or ECONNREFUSED when the ICMP answer comes first.
    assert!(
        s.contains("udp: 1\n") || s.contains("udp: 111"),
        "udp to another resolver was not refused: {report}"
    );
    // Nothing about the disallowed name reached the upstream resolver.
    assert!(
        upstream.saw("pypi.org"),
        "the allowed name did not go upstream: {report}"
    );
    assert!(
        !upstream.saw("registry.npmjs.org"),
        "a disallowed lookup left the host: {:?}",
        upstream.seen.lock().unwrap()
    );
    // And the exec result says what was refused, by which rule.
    let d = &out.egress_denied;
    let dns = find(d, "dns", "registry.npmjs.org", None).unwrap_or_else(|| panic!("{report}"));
    assert_eq!(dns.rule, "not in the allowlist");
    assert!(dns.to_string().contains("registry.npmjs.org"), "{dns}");
    assert_eq!(
        find(d, "tcp", &npm_ip, Some(443)).map(|x| x.rule.as_str()),
        Some("not in the allowlist"),
        "{report}"
    );
    assert_eq!(
        find(d, "tcp", "169.254.169.254", Some(80)).map(|x| x.rule.as_str()),
        Some("host or private range"),
        "{report}"
    );
    assert_eq!(
        find(d, "tcp", &host, Some(22)).map(|x| x.rule.as_str()),
        Some("host or private range"),
        "{report}"
    );
    assert!(find(d, "udp", "1.1.1.1", Some(53)).is_some(), "{report}");
    // A later exec does not inherit them; the sandbox's record keeps them all.
    let quiet = sh(&sb, "true", 10_000).await;
    assert!(quiet.egress_denied.is_empty(), "{:?}", quiet.egress_denied);
    assert!(sb.egress_denied(0).await.unwrap().len() >= 5);
    destroy_clean(sb).await;
}

#[tokio::test]
async fn a_denied_name_wins_and_an_ip_literal_is_not_a_way_around() {
    if !require_egress("a_denied_name_wins_and_an_ip_literal_is_not_a_way_around") {
        return;
    }
    let upstream = FakeUpstream::start();
    let sb = policy_sandbox(
        &upstream,
        EgressPolicy {
            // Port 443 only on both: on hosts where every name shares one proxy
            // address, a port 80 entry for one would open port 80 for all.
            allow: vec!["*.debian.org:443".into(), "pypi.org:443".into()],
            deny: vec!["security.debian.org".into()],
            credentials: Vec::new(),
        },
    )
    .await;
    let code = "import socket\n\
                for n in ['deb.debian.org', 'security.debian.org', 'debian.org']:\n\
                \x20   try:\n        socket.getaddrinfo(n, 443); print(n, 'resolved')\n\
                \x20   except socket.gaierror: print(n, 'nxdomain')\n\
                s = socket.create_connection(('pypi.org', 443), timeout=10); print('pypi 443 ok'); s.close()\n\
                try:\n    socket.create_connection(('pypi.org', 80), timeout=5); print('pypi 80 open')\n\
                except OSError as e: print('pypi 80', e.errno)\n";
    let out = py(&sb, code, 30_000).await;
    let s = text(&out.stdout);
    let report = format!("{s}\n{}\n{:#?}", text(&out.stderr), out.egress_denied);
    assert!(s.contains("deb.debian.org resolved"), "{report}");
    assert!(
        s.contains("security.debian.org nxdomain"),
        "the denylist did not win: {report}"
    );
    assert!(
        s.contains("debian.org nxdomain"),
        "*.debian.org must not cover debian.org: {report}"
    );
    assert!(s.contains("pypi 443 ok"), "{report}");
    assert!(
        s.contains("pypi 80 111"),
        "a port the entry does not name is open: {report}"
    );
    assert!(
        !upstream.saw("security.debian.org"),
        "a denied lookup left the host"
    );
    let denied = find(&out.egress_denied, "dns", "security.debian.org", None).expect("recorded");
    assert_eq!(denied.rule, "denylist: security.debian.org");
    // The refused port of an allowed name is reported with that name.
    let port80 = out
        .egress_denied
        .iter()
        .find(|d| d.protocol == "tcp" && d.port == Some(80))
        .unwrap_or_else(|| panic!("{report}"));
    assert_eq!(port80.name.as_deref(), Some("pypi.org"), "{report}");
    destroy_clean(sb).await;
}

#[tokio::test]
async fn a_running_sandboxs_policy_is_replaced_both_ways() {
    if !require_egress("a_running_sandboxs_policy_is_replaced_both_ways") {
        return;
    }
    // A service on one of the host's own addresses: refused under every policy
    // unless a CIDR names it.
    let host = stockade_testkit::host_address();
    let service = std::net::TcpListener::bind((host.as_str(), 0)).unwrap();
    let port = service.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for c in service.incoming() {
            let _ = std::io::Write::write_all(&mut c.unwrap(), b"HOST SECRET\n");
        }
    });
    let upstream = FakeUpstream::start();
    let sb = pypi_only(&upstream).await;
    let code = format!(
        "import socket\ntry:\n    c = socket.create_connection(('{host}', {port}), timeout=5); print('got', c.recv(64))\n\
         except OSError as e: print('refused', e.errno)"
    );
    let before = py(&sb, &code, 20_000).await;
    assert!(
        text(&before.stdout).contains("refused 111"),
        "{}",
        text(&before.stdout)
    );
    // A host address opened on purpose, by a CIDR with its port.
    let open = Network::Policy(EgressPolicy {
        allow: vec!["pypi.org".into(), format!("{host}/32:{port}")],
        deny: Vec::new(),
        credentials: Vec::new(),
    });
    sb.set_network(&open).await.expect("replace the policy");
    let during = py(&sb, &code, 20_000).await;
    assert!(
        text(&during.stdout).contains("HOST SECRET"),
        "the new policy did not open the range: {} {}",
        text(&during.stdout),
        text(&during.stderr)
    );
    let info = provider().inspect(sb.id()).await.unwrap();
    assert_eq!(
        info.spec["network"]["allow"][1],
        format!("{host}/32:{port}")
    );
    // And closed again.
    sb.set_network(&Network::allow(["pypi.org"])).await.unwrap();
    let after = py(&sb, &code, 20_000).await;
    assert!(
        text(&after.stdout).contains("refused 111"),
        "{}",
        text(&after.stdout)
    );
    // A bad policy is refused with every problem, and the old one stays.
    let bad = Network::Policy(EgressPolicy {
        allow: vec!["10.0.0.1/8".into(), "pypi.org:0".into()],
        deny: vec!["*.".into()],
        credentials: Vec::new(),
    });
    let err = sb.set_network(&bad).await.unwrap_err().to_string();
    for needle in ["network.allow[0]", "network.allow[1]", "network.deny[0]"] {
        assert!(err.contains(needle), "{needle} missing: {err}");
    }
    destroy_clean(sb).await;
}

#[tokio::test]
async fn an_allowed_address_opens_only_the_allowed_names_sni_and_host_checked() {
    if !require_egress("an_allowed_address_opens_only_the_allowed_names_sni_and_host_checked") {
        return;
    }
    let upstream = FakeUpstream::start();
    let sb = pypi_only(&upstream).await;
    // Everything below goes to pypi.org's own address, which the allowlist opened:
    // only the name asked for (TLS SNI, HTTP Host) differs.
    let code = concat!(
        r#"
import socket, ssl, time
ip = socket.gethostbyname('pypi.org')
def tls(name, verify=True):
    ctx = ssl.create_default_context()
    if not verify:
        ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
    t = time.monotonic()
    try:
        s = ctx.wrap_socket(socket.create_connection((ip, 443), timeout=10), server_hostname=name)
        s.close(); return 'ok'
    except (OSError, ssl.SSLError) as e:
        return 'refused %d %s' % ((time.monotonic() - t) * 1000, getattr(e, 'reason', e))
print('sni pypi:', tls('pypi.org'))
print('sni npm:', tls('registry.npmjs.org'))
print('sni none:', tls(None, verify=False))
"#,
        py_http!(),
        r#"
r = http(b'GET / HTTP/1.1\r\nHost: registry.npmjs.org\r\nConnection: close\r\n\r\n')
print('host npm:', r.split(b'\r\n')[0].decode(), b'network policy' in r)
r = http(b'GET http://registry.npmjs.org/ HTTP/1.1\r\nHost: pypi.org\r\nConnection: close\r\n\r\n')
print('absolute npm:', r.split(b'\r\n')[0].decode())
r = http(b'POST / HTTP/1.1\r\nHost: pypi.org\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n')
print('smuggle:', r.split(b'\r\n')[0].decode())
# Keep-alive: an allowed request, then one for another name on the same connection.
r = http(b'HEAD / HTTP/1.1\r\nHost: pypi.org\r\n\r\nGET / HTTP/1.1\r\nHost: registry.npmjs.org\r\n\r\n')
print('second request answered:', r.count(b'HTTP/1.1 '), b'network policy' in r)
s = socket.create_connection((ip, 443), timeout=10)
s.sendall(b'\x01\x02 hello there\r\n\r\n')
try:
    print('not tls:', s.recv(100))
except OSError as e:
    print('not tls:', e.errno)
try:
    c = socket.create_connection(('127.0.0.1', 1023), timeout=5)
    c.sendall(b'GET / HTTP/1.1\r\nHost: pypi.org\r\n\r\n')
    print('proxy port direct:', c.recv(100))
except OSError as e:
    print('proxy port direct:', e.errno)
"#
    );
    let out = py(&sb, code, 60_000).await;
    let s = text(&out.stdout);
    let report = format!("{s}\n{}\n{:#?}", text(&out.stderr), out.egress_denied);
    assert!(
        s.contains("sni pypi: ok"),
        "the allowed name's TLS failed: {report}"
    );
    let line = |p: &str| {
        s.lines()
            .find(|l| l.starts_with(p))
            .unwrap_or_else(|| panic!("{p} missing: {report}"))
            .to_string()
    };
    for (what, reason) in [
        ("sni npm:", "ACCESS_DENIED"),
        ("sni none:", "ACCESS_DENIED"),
    ] {
        let l = line(what);
        assert!(
            l.contains("refused") && l.contains(reason),
            "{what} got through: {report}"
        );
        let ms: u64 = l.split_whitespace().nth(3).unwrap().parse().unwrap();
        assert!(ms < 1000, "{what} took {ms} ms: {report}");
    }
    assert!(
        s.contains("host npm: HTTP/1.1 403 Forbidden True"),
        "a Host not allowed was passed on: {report}"
    );
    assert!(s.contains("absolute npm: HTTP/1.1 403"), "{report}");
    assert!(s.contains("smuggle: HTTP/1.1 403"), "{report}");
    // The HEAD is answered; the request for the other name is not (the connection
    // ends instead).
    assert!(
        s.contains("second request answered: 1 False"),
        "a second request for another name went through: {report}"
    );
    // Refused by the proxy (a request line a lax server would take is answered with
    // its 403), never passed to the server.
    let not_tls = line("not tls:");
    assert!(
        !not_tls.contains("HTTP") || not_tls.contains("403 Forbidden"),
        "non-TLS bytes on 443 reached the server: {report}"
    );
    assert!(
        !line("proxy port direct:").contains("HTTP"),
        "the proxy's own port is a way out: {report}"
    );
    let d = &out.egress_denied;
    let ip = host_ip("pypi.org");
    let tls = find(d, "tls", &ip, Some(443)).unwrap_or_else(|| panic!("{report}"));
    assert_eq!(tls.name.as_deref(), Some("registry.npmjs.org"), "{report}");
    assert_eq!(tls.rule, "name not in the allowlist");
    assert!(
        d.iter()
            .any(|x| x.protocol == "tls" && x.rule == "TLS without a server name (SNI)"),
        "{report}"
    );
    let http = d
        .iter()
        .find(|x| x.protocol == "http" && x.name.as_deref() == Some("registry.npmjs.org"))
        .unwrap_or_else(|| panic!("{report}"));
    assert_eq!(
        (http.destination.as_str(), http.port, http.rule.as_str()),
        (ip.as_str(), Some(80), "name not in the allowlist"),
        "{report}"
    );
    assert!(
        d.iter()
            .any(|x| x.rule == "HTTP request with both Content-Length and Transfer-Encoding"),
        "{report}"
    );
    assert!(
        d.iter()
            .any(|x| x.rule == "neither TLS nor HTTP on port 443"),
        "{report}"
    );
    destroy_clean(sb).await;
}

/// Requests a lax server would still take, and a protocol switch the server did not
/// agree to, never carry a request for another name past the proxy.
#[tokio::test]
async fn the_proxy_reads_http_as_strictly_as_a_server() {
    if !require_egress("the_proxy_reads_http_as_strictly_as_a_server") {
        return;
    }
    let upstream = FakeUpstream::start();
    let sb = pypi_only(&upstream).await;
    let code = concat!(
        r#"
import socket
ip = socket.gethostbyname('pypi.org')
"#,
        py_http!(),
        r#"
def first(r): return r.split(b'\r\n')[0].decode(errors='replace')
npm = b'GET / HTTP/1.1\r\nHost: registry.npmjs.org\r\nConnection: close\r\n\r\n'
# An upgrade the server answers without a 101, then another name on the connection.
r = http(b'GET / HTTP/1.1\r\nHost: pypi.org\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n' + npm)
print('upgrade answers:', r.count(b'HTTP/1.1 '), b'npmjs' in r.lower())
print('h2c:', first(http(b'GET / HTTP/1.1\r\nHost: pypi.org\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n')))
print('leading space:', first(http(b' ' + npm)))
print('tab:', first(http(npm.replace(b'GET ', b'GET\t', 1))))
print('userinfo:', first(http(b'GET / HTTP/1.1\r\nHost: registry.npmjs.org:80@pypi.org\r\nConnection: close\r\n\r\n')))
print('trace:', first(http(b'TRACE / HTTP/1.1\r\nHost: pypi.org\r\nConnection: close\r\n\r\n')))
print('query:', first(http(b'GET /?next=http://registry.npmjs.org/ HTTP/1.1\r\nHost: pypi.org\r\nConnection: close\r\n\r\n')))
"#
    );
    let out = py(&sb, code, 90_000).await;
    let s = text(&out.stdout);
    let report = format!(
        "{s}
{}
{:#?}",
        text(&out.stderr),
        out.egress_denied
    );
    let line = |p: &str| {
        s.lines()
            .find(|l| l.starts_with(p))
            .unwrap_or_else(|| panic!("{p} missing: {report}"))
            .to_string()
    };
    assert_eq!(
        line("upgrade answers:"),
        "upgrade answers: 1 False",
        "a request after an upgrade the server refused got through: {report}"
    );
    // The server kept the connection open after its answer: the next request on it
    // was read, as HTTP, and refused.
    assert!(
        out.egress_denied.iter().any(|x| x.protocol == "http"
            && x.name.as_deref() == Some("registry.npmjs.org")
            && x.rule == "name not in the allowlist"),
        "the request after the upgrade was not checked: {report}"
    );
    for what in ["h2c:", "leading space:", "tab:", "userinfo:", "trace:"] {
        assert!(
            line(what).contains("403 Forbidden"),
            "{what} was passed on: {report}"
        );
    }
    assert!(
        !line("query:").contains("403") && line("query:").contains("HTTP/1.1"),
        "an origin-form query was taken for another host: {report}"
    );
    let d = &out.egress_denied;
    for rule in [
        "an HTTP/2 upgrade (h2c) is not proxied",
        "HTTP request line after leading whitespace",
        "HTTP request line with a tab after the method",
        "TRACE requests are not proxied",
    ] {
        assert!(d.iter().any(|x| x.rule == rule), "{rule}: {report}");
    }
    assert!(
        d.iter()
            .any(|x| x.rule.starts_with("HTTP request with a malformed Host")),
        "{report}"
    );
    destroy_clean(sb).await;
}

/// An HTTPS server on one of the host's addresses standing in for an API: its
/// certificate (for `name`) comes from a CA of the test's; it logs each request's
/// Authorization header host-side and answers only whether it matched `expected`.
struct FakeApi {
    port: u16,
    log: std::path::PathBuf,
    ca_pem: String,
    child: std::process::Child,
    _dir: tempfile::TempDir,
}

impl FakeApi {
    fn start(host: &str, name: &str, expected: &str) -> FakeApi {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
        let dir = tempfile::tempdir().unwrap();
        let ca_key = KeyPair::generate().unwrap();
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, "fake API CA");
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca, ca_key);
        let key = KeyPair::generate().unwrap();
        let leaf = CertificateParams::new(vec![name.to_string()])
            .unwrap()
            .signed_by(&key, &issuer)
            .unwrap();
        std::fs::write(dir.path().join("cert.pem"), leaf.pem()).unwrap();
        std::fs::write(dir.path().join("key.pem"), key.serialize_pem()).unwrap();
        let log = dir.path().join("requests.log");
        let server = r#"
import http.server, json, ssl, sys, os
host, cert, key, log = sys.argv[1:5]
expected = os.environ['EXPECTED']
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    def log_message(self, *a): pass
    def do_GET(self):
        if self.path == '/echo':
            # What an endpoint that echoes headers does (httpbin's /headers).
            out = ('{"authorization": "%s"}' % self.headers.get('Authorization')).encode()
            self.send_response(200)
            self.send_header('Content-Length', str(len(out)))
            self.end_headers()
            self.wfile.write(out)
            return
        self.reply(b'')
    def do_TRACE(self):
        out = str(self.headers).encode()
        self.send_response(200)
        self.send_header('Content-Type', 'message/http')
        self.send_header('Content-Length', str(len(out)))
        self.end_headers()
        self.wfile.write(out)
    def do_POST(self):
        self.reply(self.rfile.read(int(self.headers.get('Content-Length', 0))))
    def reply(self, body):
        auth = self.headers.get_all('Authorization') or []
        with open(log, 'a') as f:
            f.write(json.dumps({'path': self.path, 'auth': auth, 'body': len(body)}) + '\n')
        out = ('auth=%s body=%d\n' % ('match' if auth == [expected] else 'mismatch', len(body))).encode()
        self.send_response(200)
        self.send_header('Content-Length', str(len(out)))
        self.end_headers()
        self.wfile.write(out)
s = http.server.ThreadingHTTPServer((host, 0), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); ctx.load_cert_chain(cert, key)
s.socket = ctx.wrap_socket(s.socket, server_side=True)
print(s.server_address[1], flush=True)
s.serve_forever()
"#;
        let mut child = std::process::Command::new("python3")
            .arg("-c")
            .arg(server)
            .arg(host)
            .arg(dir.path().join("cert.pem"))
            .arg(dir.path().join("key.pem"))
            .arg(&log)
            .env("EXPECTED", expected)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        FakeApi {
            port: line.trim().parse().expect("the fake API's port"),
            log,
            ca_pem: ca_cert.pem(),
            child,
            _dir: dir,
        }
    }

    fn requests(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

impl Drop for FakeApi {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn a_credential_reaches_its_host_and_never_the_sandbox() {
    if !require_egress("a_credential_reaches_its_host_and_never_the_sandbox") {
        return;
    }
    let host = stockade_testkit::host_address();
    let name = "api.stockade.test";
    // The secret, made here and never written into the sandbox's code.
    let secret = format!("sk-live-{}", u64::from(std::process::id()) * 7919);
    let api = FakeApi::start(&host, name, &format!("Bearer {secret}"));
    let upstream = FakeUpstream::start_with(vec![(name.to_string(), host.parse().unwrap())]);
    let launcher = Arc::new(NativeProvider::from(
        stockade::NativeLauncher::with_state_root(state_root())
            .with_dns_upstreams(&[upstream.addr])
            .with_upstream_roots(api.ca_pem.clone()),
    ));
    let port = api.port;
    let spec = SandboxSpec {
        network: Network::Policy(EgressPolicy {
            // The fake API lives on a host address: opened on purpose, by a CIDR.
            allow: vec![
                format!("{name}:{port}"),
                format!("{host}/32:{port}"),
                "pypi.org:443".into(),
            ],
            deny: Vec::new(),
            credentials: vec![stockade::spec::Credential {
                host: name.into(),
                header: "Authorization".into(),
                value: format!("Bearer {secret}"),
                env: Some("API_KEY".into()),
            }],
        }),
        ..Default::default()
    };
    let sb = Sandbox::create(
        launcher,
        spec,
        CreateOptions {
            owner_pid: Some(std::process::id()),
        },
    )
    .await
    .expect("create a sandbox with a credential");
    let code = format!(
        r#"
import os, urllib.request, urllib.error
key = os.environ['API_KEY']
print('placeholder:', key.startswith('stockade-placeholder-'))
def call(url, data=None, extra=None):
    h = {{'Authorization': 'Bearer ' + key}}
    h.update(extra or {{}})
    try:
        r = urllib.request.urlopen(urllib.request.Request(url, data=data, headers=h), timeout=20)
        return '%d %s' % (r.status, r.read().decode().strip())
    except urllib.error.HTTPError as e:
        return '%d %s' % (e.code, e.read().decode().strip())
    except Exception as e:
        return 'error %r' % e
print('get:', call('https://{name}:{port}/v1/models'))
print('post:', call('https://{name}:{port}/v1/chat', data=b'x' * 100000))
print('echo:', call('https://{name}:{port}/echo'))
def trace():
    r = urllib.request.Request('https://{name}:{port}/', method='TRACE', headers={{'Authorization': 'Bearer ' + key}})
    try:
        return '%d %s' % (urllib.request.urlopen(r, timeout=20).status, 'answered')
    except urllib.error.HTTPError as e:
        return '%d %s' % (e.code, e.read().decode().strip())
    except Exception as e:
        return 'error %r' % e
print('trace:', trace())
print('after the echo:', call('https://{name}:{port}/v1/models'))
print('elsewhere:', call('https://pypi.org/simple/six/'))
print('in a query:', call('https://pypi.org/simple/six/?k=' + key, extra={{'Authorization': 'none'}}))
"#
    );
    let out = py(&sb, &code, 60_000).await;
    let s = text(&out.stdout);
    let report = format!(
        "{s}\n{}\n{:#?}\nserver saw: {:?}",
        text(&out.stderr),
        out.egress_denied,
        api.requests()
    );
    assert!(s.contains("placeholder: True"), "{report}");
    assert!(
        s.contains("get: 200 auth=match body=0"),
        "the credential did not reach its host: {report}"
    );
    assert!(
        s.contains("post: 200 auth=match body=100000"),
        "a request body was not relayed whole: {report}"
    );
    // An echo of the credential is cut before it reaches the code, and recorded;
    // TRACE is refused; the next request works.
    assert!(!s.contains(&secret), "the credential came back: {report}");
    let echo = s
        .lines()
        .find(|l| l.starts_with("echo:"))
        .unwrap_or_default();
    // (Its head may have gone out; the body that held the credential did not.)
    assert!(!echo.contains("Bearer"), "{report}");
    assert!(
        out.egress_denied
            .iter()
            .any(|d| d.name.as_deref() == Some(name)
                && d.rule
                    == format!("a response from {name} carried an injected credential back (cut)")),
        "{report}"
    );
    assert!(s.contains("trace: 403"), "TRACE was relayed: {report}");
    assert!(s.contains("after the echo: 200 auth=match"), "{report}");
    // The server saw the real header, once per request, never the placeholder.
    let seen = api.requests();
    assert_eq!(seen.len(), 3, "{report}");
    for r in &seen {
        assert_eq!(
            r["auth"],
            serde_json::json!([format!("Bearer {secret}")]),
            "{report}"
        );
    }
    // The placeholder sent to another host is refused and recorded.
    for what in ["elsewhere:", "in a query:"] {
        let line = s
            .lines()
            .find(|l| l.starts_with(what))
            .unwrap_or_else(|| panic!("{report}"));
        assert!(
            line.contains("403") && line.contains("placeholder"),
            "{what} {report}"
        );
    }
    assert!(
        out.egress_denied
            .iter()
            .any(|d| d.name.as_deref() == Some("pypi.org")
                && d.rule
                    == format!("the placeholder of the credential for {name} sent to pypi.org")),
        "{report}"
    );
    // Nowhere in the sandbox: every process's environment and command line, and
    // every file it can write or that Stockade wrote for it. The secret is passed
    // reversed, so this search's own command line does not hold it.
    let rev: String = secret.chars().rev().collect();
    let search = format!(
        r#"
import os
needle = '{rev}'[::-1].encode()
hits = []
for pid in os.listdir('/proc'):
    if pid.isdigit():
        for f in ('environ', 'cmdline'):
            try:
                if needle in open('/proc/%s/%s' % (pid, f), 'rb').read(): hits.append(pid + '/' + f)
            except OSError: pass
for top in ('/etc', '/tmp', '/var', '/run', '/home', '/root', '/dev/shm'):
    for d, _, files in os.walk(top):
        for f in files:
            p = os.path.join(d, f)
            try:
                if os.path.isfile(p) and needle in open(p, 'rb').read(): hits.append(p)
            except OSError: pass
print('hits:', hits)
"#
    );
    let found = py(&sb, &search, 60_000).await;
    let f = text(&found.stdout);
    // The search's own process holds the secret (it rebuilt it) only in memory.
    assert!(
        f.contains("hits: []"),
        "the secret is inside the sandbox: {f} {}",
        text(&found.stderr)
    );
    // And not in what the host keeps about the sandbox.
    let info = provider().inspect(sb.id()).await.unwrap();
    assert!(!info.spec.to_string().contains(&secret), "{}", info.spec);
    for f in ["state.json", "plan.json"] {
        let p = state_root().join(sb.id()).join(f);
        let text = std::fs::read_to_string(&p).unwrap_or_default();
        assert!(!text.contains(&secret), "{} holds the secret", p.display());
    }
    // Credentials are fixed at create.
    let err = sb
        .set_network(&Network::Policy(EgressPolicy {
            allow: vec![format!("{name}:{port}")],
            deny: Vec::new(),
            credentials: vec![stockade::spec::Credential {
                host: name.into(),
                header: "Authorization".into(),
                value: "other".into(),
                env: None,
            }],
        }))
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("fixed when the sandbox is created"),
        "{err}"
    );
    destroy_clean(sb).await;
}

#[tokio::test]
async fn dns_over_tcp_follows_the_same_policy() {
    if !require_egress("dns_over_tcp_follows_the_same_policy") {
        return;
    }
    let upstream = FakeUpstream::start();
    let sb = pypi_only(&upstream).await;
    // Raw queries over TCP to the sandbox's resolver: rcode and answer count each.
    let code = r#"
import socket, struct
def ask(name, qid):
    q = struct.pack('>HHHHHH', qid, 0x0100, 1, 0, 0, 0)
    q += b''.join(bytes([len(l)]) + l.encode() for l in name.split('.')) + b'\0' + struct.pack('>HH', 1, 1)
    s = socket.create_connection(('127.0.0.1', 53), timeout=10)
    s.sendall(struct.pack('>H', len(q)) + q)
    n = struct.unpack('>H', s.recv(2))[0]
    r = b''
    while len(r) < n:
        r += s.recv(n - len(r))
    s.close()
    qid2, flags, _, an = struct.unpack('>HHHH', r[:8])
    return '%s id=%s rcode=%d answers=%d' % (name, qid2 == qid, flags & 0xf, an)
print(ask('pypi.org', 4242))
print(ask('registry.npmjs.org', 4343))
"#;
    let out = py(&sb, code, 30_000).await;
    let s = text(&out.stdout);
    let report = format!("{s}\n{}\n{:#?}", text(&out.stderr), out.egress_denied);
    assert!(
        s.lines().any(
            |l| l.starts_with("pypi.org id=True rcode=0 answers=") && !l.ends_with("answers=0")
        ),
        "an allowed name over TCP: {report}"
    );
    assert!(
        s.contains("registry.npmjs.org id=True rcode=3 answers=0"),
        "a refused name over TCP is not NXDOMAIN: {report}"
    );
    assert!(
        !upstream.saw("registry.npmjs.org"),
        "a refused TCP lookup left the host"
    );
    assert!(
        find(&out.egress_denied, "dns", "registry.npmjs.org", None).is_some(),
        "{report}"
    );
    destroy_clean(sb).await;
}

#[tokio::test]
async fn bad_policies_are_refused_with_every_problem_before_anything_starts() {
    let spec = SandboxSpec {
        network: Network::Policy(EgressPolicy {
            allow: vec![
                "10.1.2.3/24".into(),
                "pypi.org:0".into(),
                "*.".into(),
                "example.com:70000/sctp".into(),
            ],
            deny: vec!["".into()],
            credentials: Vec::new(),
        }),
        ..Default::default()
    };
    let err = Sandbox::create(provider(), spec, CreateOptions::default())
        .await
        .unwrap_err()
        .to_string();
    for needle in [
        "network.allow[0]",
        "bits set past its /24",
        "network.allow[1]",
        "port 0",
        "network.allow[2]",
        "names no domain",
        "network.allow[3]",
        "70000",
        "sctp",
        "network.deny[0]",
    ] {
        assert!(err.contains(needle), "{needle} missing: {err}");
    }
}

/// The code's own DNS query once went upstream as written: records in its answer,
/// authority and additional sections (a channel to whoever runs the resolver) and
/// its EDNS options. Only the question goes now.
#[tokio::test]
async fn only_the_question_of_a_query_reaches_the_upstream_resolver() {
    if !require_egress("only_the_question_of_a_query_reaches_the_upstream_resolver") {
        return;
    }
    let upstream = FakeUpstream::start();
    let sb = pypi_only(&upstream).await;
    let code = r#"
import socket, struct
def name(n): return b''.join(bytes([len(p)]) + p.encode() for p in n.split('.')) + b'\0'
def rr(t, data): return name('x.example') + struct.pack('>HHIH', t, 1, 60, len(data)) + data
q = struct.pack('>HHHHHH', 0x1234, 0x0100, 1, 1, 0, 1) + name('pypi.org') + struct.pack('>HH', 1, 1)
q += rr(1, bytes([10, 0, 0, 1]))
q += rr(16, bytes([12]) + b'exfil-marker')
ns = [l.split()[1] for l in open('/etc/resolv.conf') if l.startswith('nameserver')][0]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(10)
s.sendto(q, (ns, 53))
try:
    print('answered', len(s.recv(4096)))
except OSError as e:
    print('no answer', e)
"#;
    let out = py(&sb, code, 30_000).await;
    let report = format!("{}{}", text(&out.stdout), text(&out.stderr));
    let raw = upstream.raw.lock().unwrap().clone();
    let asked: Vec<&Vec<u8>> = raw.iter().filter(|m| qname(m) == "pypi.org").collect();
    assert!(
        !asked.is_empty(),
        "the query never reached upstream: {report}"
    );
    for m in asked {
        let count = |i: usize| u16::from_be_bytes([m[i], m[i + 1]]);
        assert_eq!(
            (count(4), count(6), count(8)),
            (1, 0, 0),
            "upstream got more than the question: {m:?}"
        );
        assert!(count(10) <= 1, "upstream got additional records: {m:?}");
        assert!(
            !m.windows(12).any(|w| w == b"exfil-marker"),
            "the code's record reached upstream: {report}"
        );
    }
    destroy_clean(sb).await;
}
