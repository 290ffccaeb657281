//! Attacks by a tenant (a token holder) on the daemon's host: every host path it
//! names, and floods before it has authenticated. Each test tries the attack and
//! fails if it works.

use std::sync::Arc;

use stockade::spec::Mount;
use stockade::{ErrorCode, ExecRequest, Sandbox, SandboxSpec};
use stockade_client::pb;
use tonic::codegen::http;

use crate::harness::{TestDaemon, free_port, require_root};

const TOKEN: &str = "tenant-a-secret-0123456789";

struct Tenant {
    d: TestDaemon,
    port: u16,
    _tmp: tempfile::TempDir,
}

fn tcp_daemon_with_token(extra: &[&str]) -> Tenant {
    let tmp = tempfile::tempdir().unwrap();
    let tokens = tmp.path().join("tokens");
    std::fs::write(&tokens, format!("{TOKEN}\n")).unwrap();
    let port = free_port();
    let mut args = vec![
        format!("--listen=tcp:127.0.0.1:{port}"),
        format!("--token-file={}", tokens.display()),
    ];
    args.extend(extra.iter().map(std::string::ToString::to_string));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Tenant {
        d: TestDaemon::start(&args),
        port,
        _tmp: tmp,
    }
}

async fn raw(port: u16) -> pb::stockade_client::StockadeClient<tonic::transport::Channel> {
    let ch = tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    pb::stockade_client::StockadeClient::new(ch)
        .max_encoding_message_size(usize::MAX)
        .max_decoding_message_size(usize::MAX)
}

fn authed<T>(msg: T) -> tonic::Request<T> {
    let mut r = tonic::Request::new(msg);
    r.metadata_mut()
        .insert("authorization", format!("Bearer {TOKEN}").parse().unwrap());
    r
}

/// Creates `spec` on `provider` as the tenant, straight on the wire (no client-side
/// checks in the way); the refusal, or `None` if the daemon created it (then it is
/// destroyed).
async fn try_create(port: u16, provider: &str, spec: &SandboxSpec) -> Option<tonic::Status> {
    let mut c = raw(port).await;
    let r = c
        .create(authed(pb::CreateRequest {
            provider: provider.into(),
            spec_json: serde_json::to_string(spec).unwrap(),
            owner_pid: 0,
            no_pool: true,
        }))
        .await;
    match r {
        Ok(info) => {
            let id = info.into_inner().id;
            let _ = c.destroy(authed(pb::SandboxRef { id })).await;
            None
        }
        Err(s) => Some(s),
    }
}

fn with_image(image: &str) -> SandboxSpec {
    SandboxSpec {
        image: Some(image.into()),
        timeout_secs: 30,
        ..SandboxSpec::default()
    }
}

fn with_mount(host: &str) -> SandboxSpec {
    let mut s = SandboxSpec {
        timeout_secs: 30,
        ..SandboxSpec::default()
    };
    s.mounts.push(Mount::parse(&format!("{host}:/m")).unwrap());
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_cannot_name_a_host_path_as_its_image() {
    if !require_root("the daemon's tests") {
        return;
    }
    // A profile that lets tenants use wasm (the built-in one does not).
    let dir = tempfile::tempdir().unwrap();
    let profiles = dir.path().join("profiles.toml");
    std::fs::write(
        &profiles,
        "[profile.tenant]\nproviders = [\"native\", \"wasm\"]\n",
    )
    .unwrap();
    let t = tcp_daemon_with_token(&[&format!("--profiles={}", profiles.display())]);
    // A real module on the host and one that is not there: the same answer, and
    // neither is opened (a daemon that opened them would tell them apart).
    let tmp = tempfile::tempdir().unwrap();
    let real = tmp.path().join("m.wasm");
    std::fs::write(&real, b"\0asm\x01\0\0\0").unwrap();
    let real = real.display().to_string();
    let missing = tmp.path().join("missing.wasm").display().to_string();
    let mut seen = Vec::new();
    for image in [
        real.as_str(),
        missing.as_str(),
        "/etc/passwd",
        "/nonexistent/passwd",
        "../../../etc/passwd",
    ] {
        let s = try_create(t.port, "wasm", &with_image(image))
            .await
            .unwrap_or_else(|| panic!("the daemon ran host file {image} as a wasm module"));
        seen.push((s.code(), s.message().replace(image, "IMAGE")));
    }
    assert!(
        seen.iter().all(|s| *s == seen[0]),
        "errors differ by host file existence: {seen:#?}"
    );
    assert_eq!(seen[0].0, tonic::Code::PermissionDenied, "{seen:?}");
    assert!(seen[0].1.contains("runtime"), "{seen:?}");
    // Native images are references, never archives or directories on the host.
    for image in ["/tmp", "./layout", "/var/cache/img.tar"] {
        let s = try_create(t.port, "native", &with_image(image))
            .await
            .unwrap_or_else(|| panic!("the daemon used host path {image} as an image"));
        assert_eq!(s.code(), tonic::Code::PermissionDenied, "{image}: {s:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_mounts_only_inside_the_allowed_directories() {
    if !require_root("the daemon's tests") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let allowed = tmp.path().join("allowed");
    std::fs::create_dir_all(allowed.join("data")).unwrap();
    std::fs::write(allowed.join("data/hello"), "inside\n").unwrap();
    std::os::unix::fs::symlink("/etc", allowed.join("escape")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", allowed.join("passwd")).unwrap();
    std::os::unix::fs::symlink("data", allowed.join("inner-link")).unwrap();
    let a = allowed.display().to_string();
    let t = tcp_daemon_with_token(&[&format!("--allow-mount={a}")]);

    // Outside: refused the same way whether the path exists or not.
    let outside = |host: &'static str| async move {
        let s = try_create(t.port, "native", &with_mount(host))
            .await
            .unwrap_or_else(|| panic!("the daemon mounted {host}"));
        (s.code(), s.message().replace(host, "P"))
    };
    let etc = outside("/etc").await;
    assert_eq!(etc.0, tonic::Code::PermissionDenied, "{etc:?}");
    assert_eq!(outside("/nonexistent-stockade-x").await, etc);
    assert_eq!(outside("/root").await, etc);

    // `..` and symlinks inside the allowed directory that lead out of it.
    let dotdot = format!("{a}/data/../../../etc");
    for host in [
        dotdot.as_str(),
        &format!("{a}/escape"),
        &format!("{a}/escape/shadow"),
        &format!("{a}/passwd"),
        // A symlink that stays inside is refused too: no symlink is followed.
        &format!("{a}/inner-link"),
    ] {
        let s = try_create(t.port, "native", &with_mount(host))
            .await
            .unwrap_or_else(|| panic!("the daemon mounted {host}"));
        assert_eq!(s.code(), tonic::Code::PermissionDenied, "{host}: {s:?}");
        assert!(!s.message().contains("root:"), "{s:?}");
    }

    // A prefix that is not a parent directory.
    std::fs::create_dir_all(format!("{a}-evil")).unwrap();
    let s = try_create(t.port, "native", &with_mount(&format!("{a}-evil")))
        .await
        .expect("a sibling with the same prefix is outside");
    assert_eq!(s.code(), tonic::Code::PermissionDenied, "{s:?}");

    // What the operator allows works, and shows what was checked.
    let c = t.d.client(Some(TOKEN)).await;
    let sb = Sandbox::create(
        Arc::new(c.clone()),
        with_mount(&format!("{a}/data")),
        Default::default(),
    )
    .await
    .unwrap();
    let o = sb
        .exec(ExecRequest::new(["/bin/cat", "/m/hello"]))
        .await
        .unwrap();
    assert_eq!(o.stdout, b"inside\n", "{o:?}");
    sb.destroy().await.unwrap();
    // Its staged mount goes with it (the reaper sweeps every 5 s).
    let staged = t.d.dir.join("daemon/mounts");
    crate::harness::eventually(30, "the staged mount to be removed", || {
        let staged = staged.clone();
        async move {
            std::fs::read_dir(&staged)
                .map(|r| r.count() == 0)
                .unwrap_or(true)
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_mounts_nothing_without_an_allowlist() {
    if !require_root("the daemon's tests") {
        return;
    }
    let t = tcp_daemon_with_token(&[]);
    for host in ["/tmp", "/etc", "/nonexistent-stockade-y"] {
        let s = try_create(t.port, "native", &with_mount(host))
            .await
            .unwrap_or_else(|| panic!("the daemon mounted {host}"));
        assert_eq!(s.code(), tonic::Code::PermissionDenied, "{host}: {s:?}");
        assert!(s.message().contains("allowed: none"), "{s:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_names_cannot_leave_the_daemons_home() {
    if !require_root("the daemon's tests") {
        return;
    }
    let t = tcp_daemon_with_token(&[]);
    let c = t.d.client(Some(TOKEN)).await;
    let target = format!("/tmp/stockade-it-session-escape-{}", std::process::id());
    let deep = format!("../../../../../../..{target}");
    for name in [
        "..",
        "../x",
        "a/b",
        deep.as_str(),
        target.as_str(),
        ".hidden",
    ] {
        let e = c.session_get(name).await.unwrap_err();
        assert_eq!(e.code(), ErrorCode::InvalidSpec, "{name}: {e}");
        for e in [
            c.session_release(name).await.unwrap_err(),
            c.session_delete(name).await.unwrap_err(),
        ] {
            assert_eq!(e.code(), ErrorCode::InvalidSpec, "{name}: {e}");
        }
    }
    assert!(
        !std::path::Path::new(&target).exists(),
        "a session escaped to {target}"
    );
    t.d.assert_none_left().await;
}

// ----- before authentication -----

/// `/proc/PID/status` VmHWM (peak resident set), bytes.
fn peak_rss(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = s
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/PID/status");
    kb * 1024
}

static ZEROS: [u8; 64 << 10] = [0; 64 << 10];

/// Sends one gRPC request whose message claims and carries `len` bytes (produced
/// as it is sent, so the test itself stays small); returns the grpc-status.
async fn send_large(port: u16, rpc: &str, token: Option<&str>, len: usize) -> Option<i32> {
    use http_body_util::BodyExt;
    use tower::{Service, ServiceExt};
    let mut ch = tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut header = vec![0u8];
    header.extend_from_slice(&(len as u32).to_be_bytes());
    let chunks = std::iter::once(bytes::Bytes::from(header))
        .chain((0..len / ZEROS.len()).map(|_| bytes::Bytes::from_static(&ZEROS)));
    let frames = tokio_stream::iter(
        chunks.map(|b| Ok::<_, std::convert::Infallible>(http_body::Frame::data(b))),
    );
    let body = tonic::body::Body::new(http_body_util::StreamBody::new(frames));
    let mut req = http::Request::builder()
        .method("POST")
        .uri(format!(
            "http://127.0.0.1:{port}/stockade.v1.Stockade/{rpc}"
        ))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let req = req.body(body).unwrap();
    let resp = ch.ready().await.unwrap().call(req).await.ok()?;
    let status = |h: &http::HeaderMap| {
        h.get("grpc-status")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
    };
    if let Some(s) = status(resp.headers()) {
        return Some(s);
    }
    let trailers = resp.into_body().collect().await.ok()?.trailers().cloned()?;
    status(&trailers)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unauthenticated_flood_of_large_messages_is_refused_unread() {
    if !require_root("the daemon's tests") {
        return;
    }
    let t = tcp_daemon_with_token(&[]);
    let c = t.d.client(Some(TOKEN)).await;
    c.health().await.unwrap();
    let pid = t.d.pid();
    let before = peak_rss(pid);
    const N: usize = 24;
    const LEN: usize = 60 << 20;
    let mut tasks = Vec::new();
    for i in 0..N {
        let token = (i % 2 == 0).then_some("wrong-token-0123456789");
        tasks.push(tokio::spawn(send_large(t.port, "File", token, LEN)));
    }
    let mut statuses = Vec::new();
    for task in tasks {
        statuses.push(task.await.unwrap());
    }
    let after = peak_rss(pid);
    let grew = after.saturating_sub(before);
    eprintln!(
        "flood: {N} x {} MiB anonymous: peak RSS {} -> {} MiB",
        LEN >> 20,
        before >> 20,
        after >> 20
    );
    assert!(
        grew < 100 << 20,
        "{N} anonymous {LEN}-byte messages grew the daemon's peak RSS by {} MiB \
         ({} -> {} MiB): their bodies were read before the token was checked",
        grew >> 20,
        before >> 20,
        after >> 20
    );
    assert!(
        statuses
            .iter()
            .all(|s| *s == Some(tonic::Code::Unauthenticated as i32)),
        "every anonymous call is refused as unauthenticated: {statuses:?}"
    );
    // Still serving its tenant.
    c.health().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_file_calls_carry_large_messages() {
    if !require_root("the daemon's tests") {
        return;
    }
    let t = tcp_daemon_with_token(&[]);
    // A tenant's oversized spec is refused by size, naming the limit.
    let mut c = raw(t.port).await;
    let s = c
        .create(authed(pb::CreateRequest {
            provider: String::new(),
            spec_json: " ".repeat(8 << 20),
            owner_pid: 0,
            no_pool: true,
        }))
        .await
        .unwrap_err();
    assert_eq!(s.code(), tonic::Code::ResourceExhausted, "{s:?}");
    assert!(s.message().contains("limit"), "{s:?}");
    assert_eq!(
        send_large(t.port, "Exec", Some(TOKEN), 16 << 20).await,
        Some(tonic::Code::ResourceExhausted as i32)
    );
    // A 20 MiB file write is within the File limit: it reaches the daemon, which
    // does not know the sandbox.
    let s = c
        .file(authed(pb::FileRequest {
            sandbox_id: "sb-none".into(),
            op: Some(pb::file_request::Op::Write(pb::WriteOp {
                path: "/tmp/x".into(),
                data: vec![0; 20 << 20],
                mode: None,
            })),
        }))
        .await
        .unwrap_err();
    assert_eq!(s.code(), tonic::Code::NotFound, "{s:?}");
}

/// A request the client-side checks would stop, sent straight on the wire: the daemon
/// checks it itself (an empty argv, a NUL in an argument, a relative cwd, a zero
/// timeout), on both exec RPCs, and the sandbox stays usable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_checks_exec_requests_itself() {
    if !require_root("the daemon's tests") {
        return;
    }
    let t = tcp_daemon_with_token(&[]);
    let mut c = raw(t.port).await;
    let id = c
        .create(authed(pb::CreateRequest {
            provider: "native".into(),
            spec_json: serde_json::to_string(&with_image_none()).unwrap(),
            owner_pid: 0,
            no_pool: true,
        }))
        .await
        .unwrap()
        .into_inner()
        .id;
    let base = |argv: &[&str]| pb::ExecRequest {
        sandbox_id: id.clone(),
        argv: argv.iter().map(std::string::ToString::to_string).collect(),
        ..Default::default()
    };
    let bad = [
        (base(&[]), "argv is empty"),
        (base(&["echo", "a\0b"]), "contains NUL"),
        (
            pb::ExecRequest {
                cwd: Some("rel".into()),
                ..base(&["true"])
            },
            "is not absolute",
        ),
    ];
    for (req, want) in bad {
        let e = c.exec(authed(req.clone())).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
        assert!(e.message().contains(want), "{want}: {e:?}");
        let e = match c.exec_stream(authed(req)).await {
            Err(e) => e,
            Ok(s) => {
                let mut s = s.into_inner();
                loop {
                    match s.message().await {
                        Err(e) => break e,
                        Ok(Some(_)) => continue,
                        Ok(None) => panic!("the daemon ran {want:?}"),
                    }
                }
            }
        };
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    }
    let ok = c.exec(authed(base(&["echo", "ok"]))).await.unwrap();
    assert_eq!(ok.into_inner().stdout, b"ok\n");
    c.destroy(authed(pb::SandboxRef { id })).await.unwrap();
}

fn with_image_none() -> SandboxSpec {
    SandboxSpec {
        timeout_secs: 30,
        ..SandboxSpec::default()
    }
}

/// A tenant's allowlist never opens the daemon's host or its LAN, at create and
/// when it replaces a running sandbox's policy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_cannot_open_the_daemons_host_or_its_network() {
    if !require_root("the daemon's tests") {
        return;
    }
    let t = tcp_daemon_with_token(&[]);
    let host = stockade_testkit::host_address();
    let net = stockade::linux::layout::read_host_networks();
    let mut attempts = vec![format!("{host}:8080"), format!("{host}/32")];
    attempts.extend(net.iter().filter(|n| !n.contains(':')).cloned());
    for allow in &attempts {
        let spec = SandboxSpec {
            timeout_secs: 30,
            network: serde_json::from_value(serde_json::json!([allow])).unwrap(),
            ..SandboxSpec::default()
        };
        let s = try_create(t.port, "native", &spec)
            .await
            .unwrap_or_else(|| panic!("a tenant opened {allow}"));
        assert_eq!(s.code(), tonic::Code::InvalidArgument, "{allow}: {s:?}");
        assert!(
            s.message().contains("tenants of this daemon may not open"),
            "{s:?}"
        );
    }
    // A running sandbox's policy replaced the same way.
    let mut c = raw(t.port).await;
    let info = c
        .create(authed(pb::CreateRequest {
            provider: "native".into(),
            spec_json: serde_json::to_string(&SandboxSpec {
                timeout_secs: 30,
                network: serde_json::from_value(serde_json::json!(["pypi.org"])).unwrap(),
                ..SandboxSpec::default()
            })
            .unwrap(),
            owner_pid: 0,
            no_pool: true,
        }))
        .await
        .expect("an allowlist of names is fine")
        .into_inner();
    let s = c
        .set_network(authed(pb::SetNetworkRequest {
            sandbox_id: info.id.clone(),
            network_json: serde_json::json!([format!("{host}:22")]).to_string(),
        }))
        .await
        .expect_err("a tenant opened the host by replacing its policy");
    assert_eq!(s.code(), tonic::Code::InvalidArgument, "{s:?}");
    let _ = c.destroy(authed(pb::SandboxRef { id: info.id })).await;
}

/// A tenant cannot turn any of the sandbox's hardening off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_cannot_turn_hardening_off() {
    if !require_root("the daemon's tests") {
        return;
    }
    let t = tcp_daemon_with_token(&[]);
    for (name, off) in [
        (
            "seccomp",
            stockade::spec::Hardening {
                seccomp: false,
                ..Default::default()
            },
        ),
        (
            "landlock",
            stockade::spec::Hardening {
                landlock: false,
                ..Default::default()
            },
        ),
        (
            "no_new_privileges",
            stockade::spec::Hardening {
                no_new_privileges: false,
                ..Default::default()
            },
        ),
        (
            "drop_capabilities",
            stockade::spec::Hardening {
                drop_capabilities: false,
                ..Default::default()
            },
        ),
    ] {
        let spec = SandboxSpec {
            timeout_secs: 30,
            hardening: off,
            ..SandboxSpec::default()
        };
        let s = try_create(t.port, "native", &spec)
            .await
            .unwrap_or_else(|| panic!("a tenant turned {name} off"));
        assert_eq!(s.code(), tonic::Code::PermissionDenied, "{name}: {s:?}");
        assert!(
            s.message().contains(&format!("hardening.{name} = false")),
            "{s:?}"
        );
    }
}

/// An allowlist entry whose text ends inside a multi-byte character (found by the
/// `spec` fuzz target) once panicked the spec check: with the release build's
/// `panic = "abort"`, one tenant request would have taken the daemon and every
/// tenant's sandboxes down. It is refused as a bad entry, and the daemon serves on.
#[tokio::test]
async fn a_spec_that_once_panicked_the_check_is_refused_and_the_daemon_serves_on() {
    if !require_root("the daemon's tests") {
        return;
    }
    let t = tcp_daemon_with_token(&[]);
    for entry in ["\u{30d}smo", "pypi.org/t\u{e9}cp", "\u{1f600}/udp"] {
        let spec = SandboxSpec {
            timeout_secs: 30,
            network: stockade::spec::Network::allow([entry]),
            ..SandboxSpec::default()
        };
        let s = try_create(t.port, "native", &spec)
            .await
            .unwrap_or_else(|| panic!("a sandbox was made with the entry {entry:?}"));
        assert_eq!(s.code(), tonic::Code::InvalidArgument, "{entry:?}: {s:?}");
        assert!(s.message().contains("network.allow[0]"), "{s:?}");
    }
    let ok = SandboxSpec {
        timeout_secs: 30,
        ..SandboxSpec::default()
    };
    assert!(
        try_create(t.port, "native", &ok).await.is_none(),
        "the daemon stopped serving after the bad specs"
    );
}

/// A tenant with no profile of the operator's gets the built-in one, cut to the
/// host: a sandbox larger than the host, the in-process wasm engine, or more than
/// a day of lifetime is refused by name of the rule; what it makes says which
/// profile admitted it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_is_held_to_the_builtin_profile() {
    if !require_root("the daemon's tests") {
        return;
    }
    let t = tcp_daemon_with_token(&[]);
    let big = |f: &dyn Fn(&mut SandboxSpec)| {
        let mut s = SandboxSpec {
            timeout_secs: 30,
            ..SandboxSpec::default()
        };
        f(&mut s);
        s
    };
    for (rule, spec) in [
        ("max_memory", big(&|s| s.limits.memory_bytes = 100 << 30)),
        ("max_cpus", big(&|s| s.limits.cpus = 64.0)),
        ("max_tmp", big(&|s| s.limits.tmp_bytes = 50 << 30)),
        ("max_pids", big(&|s| s.limits.pids = 1_000_000)),
        ("max_lifetime_secs", big(&|s| s.timeout_secs = 30 * 86_400)),
    ] {
        let s = try_create(t.port, "native", &spec)
            .await
            .unwrap_or_else(|| panic!("a tenant got past {rule}"));
        assert_eq!(s.code(), tonic::Code::PermissionDenied, "{rule}: {s:?}");
        assert!(
            s.message()
                .contains(&format!("profile \"tenant\" ({rule})")),
            "{rule}: {s:?}"
        );
    }
    let s = try_create(t.port, "wasm", &with_image("python"))
        .await
        .expect("a tenant ran wasm by default");
    assert_eq!(s.code(), tonic::Code::PermissionDenied, "{s:?}");
    assert!(s.message().contains("runs as the daemon's user"), "{s:?}");
    let mut c = raw(t.port).await;
    let info = c
        .create(authed(pb::CreateRequest {
            provider: "native".into(),
            spec_json: serde_json::to_string(&big(&|_| {})).unwrap(),
            owner_pid: 0,
            no_pool: true,
        }))
        .await
        .expect("a default sandbox is admitted")
        .into_inner();
    let shown = c
        .inspect(authed(pb::SandboxRef {
            id: info.id.clone(),
        }))
        .await
        .unwrap()
        .into_inner();
    assert!(
        shown.spec_json.contains(r#""stockade.profile":"tenant""#),
        "inspect does not name the profile: {}",
        shown.spec_json
    );
    let _ = c.destroy(authed(pb::SandboxRef { id: info.id })).await;
}

/// The operator's profile file: totals across a tenant's live sandboxes (concurrent
/// creations cannot pass them together), network modes at create and at
/// `set_network`, and the tenants it names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_profile_caps_a_tenants_totals_and_its_network() {
    if !require_root("the daemon's tests") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let profiles = dir.path().join("profiles.toml");
    std::fs::write(
        &profiles,
        "[profile.tenant]\ntotal_memory = \"1g\"\ntotal_cpus = 2\nnetwork = [\"none\", \"policy\"]\n",
    )
    .unwrap();
    let t = tcp_daemon_with_token(&[&format!("--profiles={}", profiles.display())]);
    let half = SandboxSpec {
        timeout_secs: 60,
        limits: stockade::spec::Limits {
            memory_bytes: 512 << 20,
            cpus: 0.5,
            ..Default::default()
        },
        ..SandboxSpec::default()
    };
    // Four at once: two fit in 1 GiB, whatever the order they arrive in.
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let spec = half.clone();
        let port = t.port;
        tasks.push(tokio::spawn(async move {
            let mut c = raw(port).await;
            c.create(authed(pb::CreateRequest {
                provider: "native".into(),
                spec_json: serde_json::to_string(&spec).unwrap(),
                owner_pid: 0,
                no_pool: true,
            }))
            .await
        }));
    }
    let mut made = Vec::new();
    let mut refused = Vec::new();
    for task in tasks {
        match task.await.unwrap() {
            Ok(i) => made.push(i.into_inner().id),
            Err(s) => refused.push(s),
        }
    }
    assert_eq!(made.len(), 2, "{made:?} {refused:?}");
    for s in &refused {
        assert_eq!(s.code(), tonic::Code::ResourceExhausted, "{s:?}");
        assert!(s.message().contains("total_memory"), "{s:?}");
    }
    let mut c = raw(t.port).await;
    // A destroy gives its share back.
    c.destroy(authed(pb::SandboxRef {
        id: made.pop().unwrap(),
    }))
    .await
    .unwrap();
    let again = c
        .create(authed(pb::CreateRequest {
            provider: "native".into(),
            spec_json: serde_json::to_string(&half).unwrap(),
            owner_pid: 0,
            no_pool: true,
        }))
        .await
        .expect("a destroyed sandbox still counted in the totals")
        .into_inner();
    made.push(again.id);
    let egress = SandboxSpec {
        timeout_secs: 30,
        limits: stockade::spec::Limits {
            memory_bytes: 1 << 20,
            ..Default::default()
        },
        network: stockade::spec::Network::Egress,
        ..SandboxSpec::default()
    };
    let s = try_create(t.port, "native", &egress)
        .await
        .expect("the profile's network modes were not applied");
    assert!(s.message().contains("(network)"), "{s:?}");
    let s = c
        .set_network(authed(pb::SetNetworkRequest {
            sandbox_id: made[0].clone(),
            network_json: "\"egress\"".into(),
        }))
        .await
        .expect_err("set_network opened what the profile does not allow");
    assert_eq!(s.code(), tonic::Code::PermissionDenied, "{s:?}");
    for id in made {
        let _ = c.destroy(authed(pb::SandboxRef { id })).await;
    }
}

/// Connections that never authenticate (300 of them, each sending nothing, or a
/// bare HTTP/2 preface) once held every connection slot of the daemon, so no tenant
/// got in while they stayed open. They are pending now: at most a quarter of the
/// slots, the oldest closed first, each closed after its handshake timeout. A
/// tenant that connects in the middle of the flood is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_without_a_token_do_not_keep_a_tenant_out() {
    if !require_root("the daemon's tests") {
        return;
    }
    use tokio::io::AsyncWriteExt;
    let t = tcp_daemon_with_token(&[]);
    let mut held = Vec::new();
    for i in 0..300 {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", t.port))
            .await
            .expect("connect");
        if i % 2 == 1 {
            s.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
                .await
                .unwrap();
        }
        held.push(s);
    }
    let spec = SandboxSpec {
        timeout_secs: 30,
        ..SandboxSpec::default()
    };
    let served = tokio::time::timeout(std::time::Duration::from_secs(8), async {
        try_create(t.port, "native", &spec).await
    })
    .await;
    match served {
        Ok(None) => {}
        Ok(Some(s)) => panic!("the tenant's create failed under the flood: {s:?}"),
        Err(_) => panic!("300 idle connections without a token kept the tenant out for 8 s"),
    }
    // Most of the flood's connections were closed by the daemon, not left to hold
    // slots: reading from them (past the server's SETTINGS) ends.
    let mut closed = 0;
    for s in &mut held {
        let mut b = [0u8; 256];
        let ended = tokio::time::timeout(std::time::Duration::from_millis(50), async {
            loop {
                match tokio::io::AsyncReadExt::read(s, &mut b).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        })
        .await;
        if ended.is_ok() {
            closed += 1;
        }
    }
    assert!(
        closed >= 200,
        "only {closed} of 300 idle connections were closed"
    );
}

/// A tenant's session list once showed where the daemon keeps its workspace on the
/// host (a path of the daemon's home); it shows where the workspace is inside.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_sessions_show_no_host_path() {
    if !require_root("the daemon's tests") {
        return;
    }
    let t = tcp_daemon_with_token(&[]);
    let mut c = raw(t.port).await;
    c.session_get(authed(pb::SessionRef {
        name: "proj".into(),
    }))
    .await
    .expect("a tenant's session");
    let list = c
        .session_list(authed(pb::SessionListRequest {}))
        .await
        .unwrap()
        .into_inner()
        .sessions;
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].workspace, "/work", "{:?}", list[0]);
    c.session_delete(authed(pb::SessionRef {
        name: "proj".into(),
    }))
    .await
    .unwrap();
}
