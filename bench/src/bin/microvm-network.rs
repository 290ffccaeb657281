//! Prints what network costs a microVM (medians): create to first exec and destroy
//! with `network: none` and `all`, alternated round by round; then, from inside a
//! sandbox, connection setup to pypi.org:443 (lookup + connect, and connect to the
//! address looked up once) and a small HTTPS download (11 KB from the npm registry),
//! in a microVM and in a native sandbox, both with `network: all`. Needs root, what
//! `crates/stockade-microvm/ci-setup.sh` installs, slirp4netns and nftables, and the
//! package registries reachable.
//!
//! cargo run -p stockade-bench --bin microvm-network -- [ROUNDS]

use std::sync::Arc;
use std::time::{Duration, Instant};

use stockade_core::spec::Network;
use stockade_core::{CreateOptions, ExecRequest, Provider, Sandbox, SandboxSpec};
use stockade_microvm::MicrovmProvider;
use stockade_native::NativeProvider;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Run inside a sandbox: `N` lookups + connects, `N` connects to the address, and
/// `N` downloads; prints one line per kind with the times in ms.
const PROBE: &str = r#"
import socket, sys, time, urllib.request
n = int(sys.argv[1])
def timed(f):
    t = time.monotonic(); f(); return (time.monotonic() - t) * 1000
ip = socket.gethostbyname('pypi.org')
lc = [timed(lambda: socket.create_connection(('pypi.org', 443), timeout=10).close()) for _ in range(n)]
c = [timed(lambda: socket.create_connection((ip, 443), timeout=10).close()) for _ in range(n)]
def get():
    with urllib.request.urlopen('https://registry.npmjs.org/left-pad', timeout=30) as r:
        assert len(r.read()) > 1000
d = [timed(get) for _ in range(n)]
for name, v in (('lookup+connect', lc), ('connect', c), ('download', d)):
    print(name, ' '.join('%.2f' % x for x in v))
"#;

async fn probe(sb: &Sandbox, n: usize) -> Vec<(String, Vec<f64>)> {
    let mut r = ExecRequest::new(["python3", "-c", PROBE, &n.to_string()]);
    r.timeout_ms = Some(600_000);
    let out = sb.exec(r).await.expect("the probe");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(
        out.exit_code,
        0,
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text.lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let name = w.next()?.to_string();
            Some((name, w.filter_map(|x| x.parse().ok()).collect()))
        })
        .collect()
}

#[tokio::main]
async fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("ROUNDS is a number"))
        .unwrap_or(5);
    let vm: Arc<dyn Provider> = Arc::new(MicrovmProvider::new());
    let native: Arc<dyn Provider> = Arc::new(NativeProvider::new());
    let opts = || CreateOptions {
        owner_pid: Some(std::process::id()),
    };
    let spec = |network: Network| {
        let mut s = SandboxSpec::default();
        s.limits.memory_bytes = 256 << 20;
        s.network = network;
        s
    };
    // One VM first, unmeasured: the boot assets (initramfs, root image) are made once.
    let warm = Sandbox::create(vm.clone(), spec(Network::None), opts())
        .await
        .expect("a microVM");
    warm.destroy().await.unwrap();

    let (mut create, mut destroy) = ([vec![], vec![]], [vec![], vec![]]);
    for _ in 0..rounds {
        for (i, net) in [Network::None, Network::Egress].into_iter().enumerate() {
            let t = Instant::now();
            let sb = Sandbox::create(vm.clone(), spec(net), opts())
                .await
                .expect("a microVM");
            sb.exec(ExecRequest::new(["true"])).await.unwrap();
            create[i].push(ms(t.elapsed()));
            let t = Instant::now();
            sb.destroy().await.unwrap();
            destroy[i].push(ms(t.elapsed()));
        }
    }
    println!("microvm create and destroy, TCG, {rounds} rounds alternated, median ms:\n");
    println!("| network | create to first exec | destroy | both |");
    println!("|---|---:|---:|---:|");
    for (i, name) in ["none", "all"].iter().enumerate() {
        let both: Vec<f64> = create[i]
            .iter()
            .zip(&destroy[i])
            .map(|(a, b)| a + b)
            .collect();
        println!(
            "| {name} | {:.0} | {:.0} | {:.0} |",
            median(create[i].clone()),
            median(destroy[i].clone()),
            median(both)
        );
    }

    let n = rounds.max(5) * 2;
    println!("\nfrom inside, network all, {n} each, median ms:\n");
    println!("| provider | lookup+connect pypi.org:443 | connect | download 11 KB (HTTPS) |");
    println!("|---|---:|---:|---:|");
    for (name, p) in [("native", native), ("microvm (TCG)", vm)] {
        let sb = Sandbox::create(p, spec(Network::Egress), opts())
            .await
            .expect("a sandbox with network");
        let rows = probe(&sb, n).await;
        sb.destroy().await.unwrap();
        let get = |k: &str| {
            rows.iter()
                .find(|(name, _)| name == k)
                .map(|(_, v)| median(v.clone()))
                .unwrap_or(f64::NAN)
        };
        println!(
            "| {name} | {:.2} | {:.2} | {:.1} |",
            get("lookup+connect"),
            get("connect"),
            get("download")
        );
    }
}
