//! One conformance suite for every provider: the same cases, written in Python so
//! they run unchanged on the native provider (the host's python3), on the wasm
//! provider (python.wasm), on the docker provider (a Debian python image) and on the
//! gvisor provider (the host's python3 under gVisor's kernel). Where a provider lacks a capability, the case checks that
//! a spec needing it is refused with a clear error, instead of skipping.

use std::sync::Arc;
use std::time::{Duration, Instant};

use stockade::spec::Network;
use stockade::{
    CreateOptions, ErrorCode, ExecOutcome, ExecRequest, Provider, Sandbox, SandboxSpec,
};

use crate::{require_root, text};

/// A provider under test, with how to run Python on it.
struct Target {
    name: &'static str,
    provider: Arc<dyn Provider>,
    python: &'static str,
    image: Option<&'static str>,
}

impl Target {
    fn spec(&self) -> SandboxSpec {
        SandboxSpec {
            image: self.image.map(str::to_string),
            ..Default::default()
        }
    }

    async fn sandbox(&self, spec: SandboxSpec) -> Sandbox {
        let opts = CreateOptions {
            owner_pid: Some(std::process::id()),
        };
        Sandbox::create(self.provider.clone(), spec, opts)
            .await
            .unwrap_or_else(|e| panic!("{}: create: {e}", self.name))
    }

    async fn py(&self, sb: &Sandbox, code: &str, timeout_ms: u64) -> ExecOutcome {
        let mut req = ExecRequest::new([self.python, "-c", code]);
        req.timeout_ms = Some(timeout_ms);
        sb.exec(req)
            .await
            .unwrap_or_else(|e| panic!("{}: exec: {e}", self.name))
    }
}

/// Every provider this build has, each present or failing in CI with how to fix it.
fn targets(test: &str) -> Vec<Target> {
    let mut v = Vec::new();
    // A run for one provider (`STOCKADE_TEST_PROVIDER`, test.sh's gvisor and microvm
    // runs) tests that provider alone: the others ran in the main run.
    if let Ok(name) = std::env::var("STOCKADE_TEST_PROVIDER")
        && name != "native"
    {
        if require_root(test) {
            v.push(Target {
                name: Box::leak(name.into_boxed_str()),
                provider: crate::provider(),
                python: "/usr/bin/python3",
                image: None,
            });
        }
        return v;
    }
    if require_root(test) {
        v.push(Target {
            name: "native",
            provider: crate::provider(),
            python: "/usr/bin/python3",
            image: None,
        });
    }
    if stockade_testkit::rootless() {
        // The rootless run (test.sh, as an unprivileged user) is about the native
        // provider without root; wasm and docker ran in the root run.
        return v;
    }
    let wasm_python = stockade::wasm::list_runtimes()
        .map(|l| {
            l.runtimes
                .iter()
                .any(|r| r.name == "python-wasm" && r.installed)
        })
        .unwrap_or(false);
    if wasm_python {
        v.push(Target {
            name: "wasm",
            provider: stockade::provider(Some("wasm")).expect("wasm provider"),
            python: "python",
            image: Some("python"),
        });
    } else {
        let msg = format!(
            "{test}: the wasm provider needs python-wasm: stockade runtime install python-wasm (CI: crates/stockade-wasm/ci-setup.sh)"
        );
        if std::env::var_os("CI").is_some() {
            panic!("{msg}");
        }
        eprintln!("SKIPPED (wasm part): {msg}");
    }
    // Docker: a real dockerd and the Debian python test image.
    let docker = crate::require_root(test)
        .then(|| {
            stockade_testkit::require(
                "dockerd and the docker test image",
                stockade_testkit::docker_test_image(),
                stockade_testkit::DOCKER_FIX,
            )
        })
        .flatten();
    if let Some(image) = docker {
        v.push(Target {
            name: "docker",
            provider: stockade::provider(Some("docker")).expect("docker provider"),
            python: "/usr/bin/python3",
            image: Some(Box::leak(image.into_boxed_str())),
        });
    }
    // gVisor: a real runsc (Debian's), on the host's read-only view.
    let gvisor = crate::require_root(test)
        .then(|| {
            stockade_testkit::require(
                "runsc (gVisor)",
                stockade_testkit::runsc(),
                stockade_testkit::GVISOR_FIX,
            )
        })
        .flatten();
    if gvisor.is_some() {
        v.push(Target {
            name: "gvisor",
            provider: stockade::provider(Some("gvisor")).expect("gvisor provider"),
            python: "/usr/bin/python3",
            image: None,
        });
    }
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_python_output_exit_codes_and_environment() {
    for t in targets("conformance_python_output_exit_codes_and_environment") {
        let mut spec = t.spec();
        spec.env.insert("GIVEN".into(), "yes".into());
        let sb = t.sandbox(spec).await;
        let out = t.py(&sb, "import os, sys; print(6 * 7); print(sorted(os.environ)); sys.stderr.write('err\\n'); sys.exit(3)", 30_000).await;
        assert_eq!(out.exit_code, 3, "{}: {}", t.name, text(&out.stderr));
        let stdout = text(&out.stdout);
        assert!(stdout.starts_with("42\n"), "{}: {stdout}", t.name);
        assert!(
            stdout.contains("['GIVEN', 'HOME', 'LANG', 'PATH']"),
            "{}: environment beyond what was given: {stdout}",
            t.name
        );
        assert_eq!(text(&out.stderr), "err\n", "{}", t.name);
        sb.destroy().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_no_network_by_default() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    for t in targets("conformance_no_network_by_default") {
        let sb = t.sandbox(t.spec()).await;
        let code = format!(
            "import socket\nfor h, p in (('127.0.0.1', {port}), ('1.1.1.1', 53)):\n    try:\n        socket.create_connection((h, p), timeout=2)\n        print('CONNECTED', h)\n    except Exception as e:\n        print('blocked', type(e).__name__)"
        );
        let out = t.py(&sb, &code, 30_000).await;
        let s = text(&out.stdout) + &text(&out.stderr);
        assert!(
            !s.contains("CONNECTED"),
            "{}: reached the network: {s}",
            t.name
        );
        assert!(
            listener.accept().is_err(),
            "{}: the host listener got a connection",
            t.name
        );
        sb.destroy().await.unwrap();
        if !t.provider.capabilities().network_egress {
            let err = Sandbox::create(
                t.provider.clone(),
                SandboxSpec {
                    network: Network::Egress,
                    ..t.spec()
                },
                CreateOptions::default(),
            )
            .await
            .unwrap_err();
            assert_eq!(err.code(), ErrorCode::InvalidSpec, "{}: {err}", t.name);
            assert!(err.to_string().contains("network"), "{}: {err}", t.name);
        }
    }
}

/// Every provider that gives egress reaches the public internet with it, never the
/// host (its loopback, its own address, docker's bridge), the private ranges or the
/// cloud metadata address; the others refuse such a spec.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_network_egress_reaches_out_but_never_the_host() {
    // A service on every host address: loopback and the host's own outbound address.
    let listener = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let host_ip = stockade_testkit::host_address();
    for t in targets("conformance_network_egress_reaches_out_but_never_the_host") {
        let spec = SandboxSpec {
            network: Network::Egress,
            ..t.spec()
        };
        if !t.provider.capabilities().network_egress {
            let err = Sandbox::create(t.provider.clone(), spec, CreateOptions::default())
                .await
                .unwrap_err();
            assert_eq!(err.code(), ErrorCode::InvalidSpec, "{}: {err}", t.name);
            continue;
        }
        let sb = t.sandbox(spec).await;
        let code = [
            "import socket".to_string(),
            "s = socket.create_connection(('pypi.org', 443), timeout=10); print('egress ok'); s.close()".to_string(),
            format!("for host in ('127.0.0.1', '10.0.2.2', '{host_ip}', '169.254.169.254', '192.168.0.1', '172.17.0.1'):"),
            "    try:".to_string(),
            format!("        socket.create_connection((host, {port}), timeout=2); print('HOST REACHED', host)"),
            "    except OSError as e: print('host blocked', e)".to_string(),
        ]
        .join("\n");
        let out = t.py(&sb, &code, 60_000).await;
        let s = text(&out.stdout);
        assert!(
            s.contains("egress ok"),
            "{}: no egress: {s} {}",
            t.name,
            text(&out.stderr)
        );
        assert!(!s.contains("HOST REACHED"), "{}: {s}", t.name);
        assert_eq!(s.matches("host blocked").count(), 6, "{}: {s}", t.name);
        assert!(
            listener.accept().is_err(),
            "{}: the host's service received a connection",
            t.name
        );
        sb.destroy().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_writes_only_where_allowed() {
    for t in targets("conformance_writes_only_where_allowed") {
        let sb = t.sandbox(t.spec()).await;
        // WASI preview 1 has no root filesystem: on wasm an absolute path that names no
        // mount resolves in the working directory (the sandbox's own writable /tmp), so
        // `/pwned` is probed only where there is a real root.
        let mut paths = vec!["/usr/pwned", "/usr/bin/pwned", "/etc/pwned", "/tmp/ok"];
        if t.provider.capabilities().host_rootfs {
            paths.push("/pwned");
        }
        let code = format!(
            "for p in {paths:?}:\n    try:\n        open(p, 'w').write('x')\n        print('WROTE', p)\n    except OSError as e:\n        print('refused', p)"
        );
        let out = t.py(&sb, &code, 30_000).await;
        let s = text(&out.stdout);
        assert_eq!(
            s.matches("WROTE").count(),
            1,
            "{}: {s} {}",
            t.name,
            text(&out.stderr)
        );
        assert!(s.contains("WROTE /tmp/ok"), "{}: {s}", t.name);
        assert!(
            !std::path::Path::new("/pwned").exists()
                && !std::path::Path::new("/usr/pwned").exists()
        );
        sb.destroy().await.unwrap();
        if !t.provider.capabilities().writable_root {
            let err = Sandbox::create(
                t.provider.clone(),
                SandboxSpec {
                    writable: true,
                    ..t.spec()
                },
                CreateOptions::default(),
            )
            .await
            .unwrap_err();
            assert_eq!(err.code(), ErrorCode::InvalidSpec, "{}: {err}", t.name);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_deadline_stops_a_busy_loop() {
    for t in targets("conformance_deadline_stops_a_busy_loop") {
        let sb = t.sandbox(t.spec()).await;
        let start = Instant::now();
        let out = t.py(&sb, "while True: pass", 1_000).await;
        assert!(out.timed_out, "{}: {out:?}", t.name);
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "{}: took {:?}",
            t.name,
            start.elapsed()
        );
        let again = t.py(&sb, "print('alive')", 30_000).await;
        assert_eq!(text(&again.stdout), "alive\n", "{}", t.name);
        sb.destroy().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_output_is_capped_and_flagged() {
    for t in targets("conformance_output_is_capped_and_flagged") {
        let sb = t.sandbox(t.spec()).await;
        let out = t.py(&sb, "import sys\nfor _ in range(80): sys.stdout.write('x' * 65536)\nsys.stdout.write('END')", 60_000).await;
        assert!(out.truncated(), "{}", t.name);
        assert_eq!(out.stdout.len(), 1 << 20, "{}", t.name);
        assert_eq!(out.stdout_dropped, 80 * 65536 + 3 - (1 << 20), "{}", t.name);
        assert!(out.stdout.ends_with(b"END"), "{}: the tail is kept", t.name);
        sb.destroy().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_memory_bomb_is_contained() {
    for t in targets("conformance_memory_bomb_is_contained") {
        let mut spec = t.spec();
        spec.limits.memory_bytes = 128 << 20;
        let sb = t.sandbox(spec).await;
        let out = t
            .py(
                &sb,
                "a = []\nwhile True: a.append(bytearray(8 << 20))",
                60_000,
            )
            .await;
        assert_ne!(out.exit_code, 0, "{}", t.name);
        assert!(
            !out.timed_out,
            "{}: the bomb ran into the deadline instead of the cap",
            t.name
        );
        // Native reports the kernel's OOM kill; wasm fails the allocation inside.
        assert!(
            out.oom_killed || text(&out.stderr).contains("MemoryError"),
            "{}: {out:?}",
            t.name
        );
        assert_eq!(
            text(&t.py(&sb, "print('alive')", 30_000).await.stdout),
            "alive\n",
            "{}",
            t.name
        );
        sb.destroy().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_file_api_round_trip() {
    for t in targets("conformance_file_api_round_trip") {
        let sb = t.sandbox(t.spec()).await;
        sb.write("/tmp/prog.py", "print('v1')\n")
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", t.name));
        assert_eq!(
            sb.edit("/tmp/prog.py", "v1", "v2", false).await.unwrap(),
            1,
            "{}",
            t.name
        );
        let out = t
            .py(
                &sb,
                "exec(open('/tmp/prog.py').read()); open('/tmp/out.txt', 'w').write('from code')",
                30_000,
            )
            .await;
        assert_eq!(
            text(&out.stdout),
            "v2\n",
            "{}: {}",
            t.name,
            text(&out.stderr)
        );
        assert_eq!(
            sb.read("/tmp/out.txt").await.unwrap(),
            b"from code",
            "{}",
            t.name
        );
        let names: Vec<String> = sb
            .ls("/tmp")
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .collect();
        assert!(
            names.contains(&"prog.py".to_string()) && names.contains(&"out.txt".to_string()),
            "{}: {names:?}",
            t.name
        );
        sb.mkdir("/tmp/d/e")
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", t.name));
        sb.write("/tmp/d/e/f.txt", "needle\n").await.unwrap();
        assert_eq!(
            sb.glob("**/*.txt", "/tmp/d").await.unwrap(),
            ["e/f.txt"],
            "{}",
            t.name
        );
        assert_eq!(
            sb.grep("needle", "/tmp/d", None, 0).await.unwrap()[0].line,
            "needle",
            "{}",
            t.name
        );
        assert_eq!(
            sb.stat("/tmp/d/e/f.txt").await.unwrap().size,
            7,
            "{}",
            t.name
        );
        sb.rm("/tmp/d").await.unwrap();
        assert_eq!(
            sb.stat("/tmp/d").await.unwrap_err().code(),
            ErrorCode::NotFound,
            "{}",
            t.name
        );
        let err = sb.write("/usr/evil", "x").await.unwrap_err();
        assert!(
            matches!(
                err.code(),
                ErrorCode::PolicyDenied | ErrorCode::NotFound | ErrorCode::InvalidSpec
            ),
            "{}: {err}",
            t.name
        );
        sb.destroy().await.unwrap();
    }
}

/// How a call of an optional verb was answered: `Some(true)` served (even when this
/// call is refused for a reason of its own), `Some(false)` refused as a verb the
/// provider does not have ([`stockade::is_unsupported`]), `None` unavailable on this
/// host now (a rootless sandbox on v1 cgroups has no CPU counter): a declared verb
/// may answer so, an undeclared one must not be served.
fn served<T>(r: &stockade::Result<T>) -> Option<bool> {
    match r {
        Err(e) if stockade::is_unsupported(e) => Some(false),
        Err(e) if e.code() == ErrorCode::Unavailable => None,
        _ => Some(true),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_each_provider_serves_exactly_the_verbs_it_declares() {
    use stockade::Verb;
    for t in targets("conformance_each_provider_serves_exactly_the_verbs_it_declares") {
        let declared = t.provider.capabilities().verbs;
        let table = stockade::PROVIDER_VERBS
            .iter()
            .find(|(n, _)| *n == t.name)
            .map(|(_, v)| *v)
            .unwrap_or_else(|| panic!("{} is not in PROVIDER_VERBS", t.name));
        // These run as root, where docker's live egress policy is served too.
        assert_eq!(
            declared, table,
            "{}: its capabilities and the table differ",
            t.name
        );
        let sb = t.sandbox(t.spec()).await;
        let (p, id) = (t.provider.clone(), sb.id().to_string());
        let mut seen = Vec::new();

        let usage = p.usage(&id).await;
        seen.push((Verb::Usage, served(&usage), format!("{usage:?}")));
        let file = p
            .file_as(&id, 0, stockade::FileOp::Stat { path: "/".into() })
            .await;
        seen.push((Verb::FilesAsUser, served(&file), format!("{file:?}")));
        let net = p.set_network(&id, &Network::None).await;
        seen.push((Verb::EgressControl, served(&net), format!("{net:?}")));
        let snaps = p.snapshots().await;
        seen.push((Verb::Snapshots, served(&snaps), format!("{snaps:?}")));
        let paused = p.pause(&id).await;
        seen.push((Verb::Pause, served(&paused), format!("{paused:?}")));
        let fork = p.fork(&id, 1, CreateOptions::default()).await;
        seen.push((Verb::Fork, served(&fork), format!("{fork:?}")));
        if let Ok(copies) = &fork {
            for c in copies {
                p.destroy(&c.id).await.unwrap();
            }
        }
        if paused.is_ok() {
            p.resume(&id)
                .await
                .unwrap_or_else(|e| panic!("{}: resume after pause: {e}", t.name));
            let out = t.py(&sb, "print('back')", 30_000).await;
            assert_eq!(text(&out.stdout), "back\n", "{}: after resume", t.name);
        }
        sb.destroy().await.unwrap();
        for (verb, got, answer) in seen {
            // Unavailable here is neither: a declared verb the host cannot serve now,
            // or an undeclared one refused in words of the provider's own.
            let Some(got) = got else { continue };
            assert_eq!(
                got,
                declared.has(verb),
                "{}: {} is declared {} but the provider answered {answer}",
                t.name,
                verb.title(),
                if declared.has(verb) {
                    "served"
                } else {
                    "refused"
                },
            );
        }
    }
}

/// Polls `cond` every 100 ms for up to `secs`; whether it held.
async fn within(secs: u64, mut cond: impl AsyncFnMut() -> bool) -> bool {
    let until = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < until {
        if cond().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_a_detached_exec_returns_at_once_and_runs_on() {
    for t in targets("conformance_a_detached_exec_returns_at_once_and_runs_on") {
        let sb = t.sandbox(t.spec()).await;
        let detached = |code: &str| {
            let mut req = ExecRequest::new([t.python, "-c", code]);
            req.detach = true;
            req
        };
        let serve = "import sys, time\nprint('started', flush=True)\nsys.stderr.write('to stderr\\n'); sys.stderr.flush()\ntime.sleep(60)";
        if t.name == "wasm" {
            let e = sb.exec(detached(serve)).await.unwrap_err();
            assert_eq!(e.code(), ErrorCode::InvalidSpec, "wasm: {e}");
            sb.destroy().await.unwrap();
            continue;
        }
        // It answers once the command runs, long before its 60 s.
        let started = Instant::now();
        let o = sb.exec(detached(serve)).await.unwrap();
        let took = started.elapsed();
        let pid = o
            .pid
            .unwrap_or_else(|| panic!("{}: no pid for a detached exec: {o:?}", t.name));
        assert_eq!(o.exit_code, 0, "{}: {o:?}", t.name);
        assert!(took < Duration::from_secs(20), "{}: took {took:?}", t.name);
        // Its output, both streams, in the file named by its pid.
        let log = stockade::detached_log(pid);
        let mut seen = String::new();
        let kept = within(20, async || {
            seen = sb.read(&log).await.map(|d| text(&d)).unwrap_or_default();
            seen.contains("started") && seen.contains("to stderr")
        })
        .await;
        assert!(kept, "{}: {log} holds {seen:?}", t.name);
        let alive = |pid: u32| {
            let sb = &sb;
            async move { sb.stat(&format!("/proc/{pid}")).await.is_ok() }
        };
        assert!(alive(pid).await, "{}: the detached command is gone", t.name);
        // A later exec of the same user stops it, as on any machine.
        let kill = t
            .py(
                &sb,
                &format!("import os, signal; os.kill({pid}, signal.SIGTERM)"),
                30_000,
            )
            .await;
        assert_eq!(kill.exit_code, 0, "{}: {}", t.name, text(&kill.stderr));
        assert!(
            within(20, async || !alive(pid).await).await,
            "{}: SIGTERM did not end it",
            t.name
        );

        // The deadline still ends a detached command.
        let mut req = detached("import time; time.sleep(60)");
        req.timeout_ms = Some(1_000);
        let bounded = sb.exec(req).await.unwrap().pid.expect("pid");
        assert!(
            within(20, async || !alive(bounded).await).await,
            "{}: a detached command outlived its deadline",
            t.name
        );

        // Discarded output leaves no file.
        let mut req = detached("print('nothing kept')");
        req.discard_output = true;
        let quiet = sb.exec(req).await.unwrap().pid.expect("pid");
        assert!(within(20, async || !alive(quiet).await).await, "{}", t.name);
        let e = sb.read(&stockade::detached_log(quiet)).await.unwrap_err();
        assert_eq!(e.code(), ErrorCode::NotFound, "{}: {e}", t.name);

        // A program that cannot start is no start: its exit code and why, no pid.
        let mut req = ExecRequest::new(["/no/such/program"]);
        req.detach = true;
        let o = sb.exec(req).await.unwrap();
        assert_eq!((o.pid, o.exit_code), (None, 127), "{}: {o:?}", t.name);
        assert!(
            text(&o.stderr).contains("/no/such/program"),
            "{}: {o:?}",
            t.name
        );

        // Stdin cannot reach a command that was not waited for.
        let mut req = detached("pass");
        req.stdin = b"input".to_vec();
        let e = sb.exec(req).await.unwrap_err();
        assert_eq!(e.code(), ErrorCode::InvalidSpec, "{}: {e}", t.name);
        sb.destroy().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_a_server_inside_answers_the_host_through_its_port() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    for t in targets("conformance_a_server_inside_answers_the_host_through_its_port") {
        let sb = t.sandbox(t.spec()).await;
        if t.name == "wasm" {
            let e = t
                .provider
                .connect_port(sb.id(), 8000)
                .await
                .err()
                .expect("wasm has no ports");
            assert_eq!(e.code(), ErrorCode::Unavailable, "wasm: {e}");
            sb.destroy().await.unwrap();
            continue;
        }
        // Nothing listens yet: said, with the port.
        let e = t
            .provider
            .connect_port(sb.id(), 8000)
            .await
            .err()
            .expect("nothing listens");
        assert_eq!(e.code(), ErrorCode::Unavailable, "{}: {e}", t.name);
        assert!(e.to_string().contains("port 8000"), "{}: {e}", t.name);
        // A server of the socket module alone (the docker test image has no http).
        let serve = "import socket\ns = socket.socket()\ns.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\ns.bind(('127.0.0.1', 8000)); s.listen()\nwhile True:\n    c, _ = s.accept(); got = c.recv(4096)\n    c.sendall(b'HTTP/1.0 200 OK\\r\\n\\r\\nasked ' + got.split(b' ')[1]); c.close()";
        let mut req = ExecRequest::new([t.python, "-c", serve]);
        req.detach = true;
        sb.exec(req).await.unwrap().pid.expect("pid");
        let mut answer = String::new();
        for _ in 0..100 {
            if let Ok(mut s) = t.provider.connect_port(sb.id(), 8000).await {
                s.write_all(b"GET / HTTP/1.0\r\nHost: sandbox\r\n\r\n")
                    .await
                    .unwrap();
                let mut buf = Vec::new();
                let _ =
                    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut buf)).await;
                answer = text(&buf);
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(answer.starts_with("HTTP/1.0 200"), "{}: {answer:?}", t.name);
        assert!(answer.ends_with("asked /"), "{}: {answer:?}", t.name);
        sb.destroy().await.unwrap();
        // The sandbox gone, so is its port.
        assert!(
            t.provider.connect_port(sb.id(), 8000).await.is_err(),
            "{}",
            t.name
        );
    }
}

/// Waits until what `rx` has sent (kept in `seen`) holds `needle`.
async fn seen_within(
    rx: &mut tokio::sync::mpsc::Receiver<stockade::OutputChunk>,
    seen: &mut String,
    needle: &str,
    secs: u64,
) -> bool {
    let until = tokio::time::Instant::now() + Duration::from_secs(secs);
    while !seen.contains(needle) {
        match tokio::time::timeout_at(until, rx.recv()).await {
            Ok(Some(c)) => seen.push_str(&String::from_utf8_lossy(&c.data)),
            Ok(None) | Err(_) => return false,
        }
    }
    true
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_an_exec_on_a_terminal_takes_keys_signals_and_sizes() {
    use stockade::{ExecInput, ExecIo, TtySize};
    use tokio::sync::mpsc;
    for t in targets("conformance_an_exec_on_a_terminal_takes_keys_signals_and_sizes") {
        let sb = t.sandbox(t.spec()).await;
        let mut req = ExecRequest::new(["/bin/sh"]);
        req.tty = Some(TtySize {
            rows: 30,
            cols: 100,
        });
        req.keep_stdin_open = true;
        req.stream = true;
        req.timeout_ms = Some(120_000);
        if t.name == "wasm" {
            let e = sb.exec(req).await.unwrap_err();
            assert_eq!(e.code(), ErrorCode::Unavailable, "wasm: {e}");
            sb.destroy().await.unwrap();
            continue;
        }
        let (out_tx, mut out_rx) = mpsc::channel(256);
        let (in_tx, in_rx) = mpsc::channel(16);
        let io = ExecIo {
            output: Some(out_tx),
            input: Some(in_rx),
        };
        let name = t.name;
        let drive = async move {
            let mut seen = String::new();
            let key = |s: &str| ExecInput::Stdin(s.as_bytes().to_vec());
            // Each check prints a word the typed line does not hold (the terminal
            // echoes what is typed), so only the command's output matches.
            let mut step = async |keys: &str, needle: &str| {
                in_tx.send(key(keys)).await.unwrap();
                assert!(
                    seen_within(&mut out_rx, &mut seen, needle, 30).await,
                    "{name}: no {needle:?} after {keys:?}; the terminal showed {seen:?}"
                );
            };
            step(
                "test -t 0 && test -t 1 && test -t 2 && echo all-$((1+1))-tty\n",
                "all-2-tty",
            )
            .await;
            step("echo term-$TERM-x\n", "term-xterm-x").await;
            step("stty size\n", "30 100").await;
            // Its far end is the exec user's, as a login's terminal is; where the
            // agent may not chown it (docker drops CAP_CHOWN, gVisor's devpts keeps
            // root), root's and no one else's to open (mode 600, or 620 with group tty).
            step(
                "case $(stat -c %u:%a \"$(tty)\") in \"$(id -u)\":*|0:600|0:620) echo own-$((2+3));; esac\n",
                "own-5",
            )
            .await;
            // Ctrl-C typed interrupts the foreground command, not the shell.
            in_tx
                .send(key("sleep 60; echo slept-$((4+4))\n"))
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_millis(1500)).await;
            in_tx.send(key("\x03")).await.unwrap();
            tokio::time::sleep(Duration::from_millis(300)).await;
            // gVisor's line discipline also leaves the Ctrl-C in the line the shell
            // reads next: an empty line takes it away (elsewhere it is nothing).
            in_tx.send(key("\n")).await.unwrap();
            step("echo after-$((3+4))\n", "after-7").await;
            in_tx
                .send(ExecInput::Resize(TtySize {
                    rows: 40,
                    cols: 120,
                }))
                .await
                .unwrap();
            step("stty size\n", "40 120").await;
            // A command after the resize runs to its end.
            step("sleep 1; echo then-$((5+5))\n", "then-10").await;
            in_tx.send(key("exit 7\n")).await.unwrap();
            seen
        };
        let (outcome, seen) = tokio::join!(sb.exec_with(req, io), drive);
        let o = outcome.unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            o.exit_code, 7,
            "{name}: {o:?}; the terminal showed {seen:?}"
        );
        assert!(
            !seen.contains("slept-8"),
            "{name}: Ctrl-C did not interrupt: {seen:?}"
        );
        assert!(!o.timed_out, "{name}: {o:?}");
        // A detached exec has no terminal.
        let mut req = ExecRequest::new(["/bin/true"]);
        req.tty = Some(TtySize::DEFAULT);
        req.detach = true;
        let e = sb.exec(req).await.unwrap_err();
        assert_eq!(e.code(), ErrorCode::InvalidSpec, "{name}: {e}");
        sb.destroy().await.unwrap();
    }
}

/// The stdout lines of a watch seen so far, parsed; waits (up to `secs`) until one
/// satisfies `until`.
async fn watch_lines_until(
    rx: &mut tokio::sync::mpsc::Receiver<stockade::OutputChunk>,
    buf: &mut Vec<u8>,
    seen: &mut Vec<stockade::WatchLine>,
    secs: u64,
    until: impl Fn(&stockade::WatchLine) -> bool,
) -> bool {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        while let Some(n) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=n).collect();
            let parsed = stockade::WatchLine::parse(&line[..n]).unwrap_or_else(|| {
                panic!("not a watch line: {:?}", String::from_utf8_lossy(&line))
            });
            let done = until(&parsed);
            seen.push(parsed);
            if done {
                return true;
            }
        }
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(c)) if c.stream == stockade::Stream::Stdout => buf.extend_from_slice(&c.data),
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => return false,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_a_directory_watch_reports_changes_without_an_interpreter() {
    use stockade::{ExecInput, ExecIo, WatchError, WatchKind, WatchLine};
    use tokio::sync::mpsc;
    for t in targets("conformance_a_directory_watch_reports_changes_without_an_interpreter") {
        let name = t.name;
        let sb = t.sandbox(t.spec()).await;
        let mut req = ExecRequest::watch_dir("/tmp/watched", true);
        req.keep_stdin_open = true;
        req.timeout_ms = Some(120_000);
        // No program is looked up: the watcher is the agent's own.
        req.env.insert("PATH".into(), "/nonexistent".into());
        if name == "wasm" {
            let e = sb.exec(req).await.unwrap_err();
            assert_eq!(e.code(), ErrorCode::Unavailable, "wasm: {e}");
            sb.destroy().await.unwrap();
            continue;
        }
        let sh = |script: &str| {
            let mut r = ExecRequest::new(["/bin/sh", "-c", script]);
            r.timeout_ms = Some(60_000);
            r
        };
        let o = sb
            .exec(sh(
                "mkdir -p /tmp/watched/old/deep && echo x > /tmp/watched/old/deep/was",
            ))
            .await
            .unwrap();
        assert_eq!(o.exit_code, 0, "{name}: {o:?}");
        let (out_tx, mut out_rx) = mpsc::channel(256);
        let (in_tx, in_rx) = mpsc::channel(16);
        let io = ExecIo {
            output: Some(out_tx),
            input: Some(in_rx),
        };
        let sb2 = sb.clone();
        let watch = tokio::spawn(async move { sb2.exec_with(req, io).await });
        let (mut buf, mut seen) = (Vec::new(), Vec::new());
        assert!(
            watch_lines_until(&mut out_rx, &mut buf, &mut seen, 60, |l| *l
                == WatchLine::Ready)
            .await,
            "{name}: the watch never said it was ready: {seen:?}"
        );
        let o = sb
            .exec(sh(
                "cd /tmp/watched && echo a > f && mkdir d && echo b > d/g && chmod 600 f \
                 && mv f h && rm d/g && echo more >> old/deep/was",
            ))
            .await
            .unwrap();
        assert_eq!(o.exit_code, 0, "{name}: {o:?}");
        // Everything the exec did is queued before it returned: one sync has it all.
        in_tx
            .send(ExecInput::Stdin(b"sync 1\n".to_vec()))
            .await
            .unwrap();
        assert!(
            watch_lines_until(&mut out_rx, &mut buf, &mut seen, 30, |l| *l
                == WatchLine::Synced(1))
            .await,
            "{name}: no answer to sync 1: {seen:?}"
        );
        let has = |n: &str, k: WatchKind| {
            seen.iter()
                .any(|l| matches!(l, WatchLine::Event { name, kind } if name == n && *kind == k))
        };
        for (n, k) in [
            ("f", WatchKind::Create),
            ("f", WatchKind::Write),
            ("d", WatchKind::Create),
            ("d/g", WatchKind::Create),
            ("f", WatchKind::Chmod),
            ("f", WatchKind::Rename),
            ("h", WatchKind::Create),
            ("d/g", WatchKind::Remove),
            // Recursive: a directory that was there before the watch is watched too.
            ("old/deep/was", WatchKind::Write),
        ] {
            assert!(has(n, k), "{name}: no {k:?} of {n}: {seen:?}");
        }
        // The watched directory gone, the watch ends by itself.
        let o = sb.exec(sh("rm -rf /tmp/watched")).await.unwrap();
        assert_eq!(o.exit_code, 0, "{name}: {o:?}");
        let ended = tokio::time::timeout(Duration::from_secs(30), watch)
            .await
            .unwrap_or_else(|_| panic!("{name}: the watch outlived its directory"))
            .unwrap()
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(ended.exit_code, 0, "{name}: {ended:?}");
        drop(in_tx);
        // What cannot be watched says why, with the exec's exit 2.
        for (path, error) in [
            ("/nonexistent/dir", WatchError::NotFound),
            ("/bin/sh", WatchError::NotADirectory),
        ] {
            let o = sb.exec(ExecRequest::watch_dir(path, false)).await.unwrap();
            let first =
                WatchLine::parse(o.stdout.split(|b| *b == b'\n').next().unwrap_or_default());
            assert!(
                matches!(&first, Some(WatchLine::Failed { error: e, message }) if *e == error && message.contains(path)),
                "{name}: {path}: {o:?}"
            );
            assert_eq!(o.exit_code, 2, "{name}: {path}: {o:?}");
        }
        let e = sb
            .exec(ExecRequest::watch_dir("relative", false))
            .await
            .unwrap_err();
        assert_eq!(e.code(), ErrorCode::InvalidSpec, "{name}: {e}");
        sb.destroy().await.unwrap();
    }
}
