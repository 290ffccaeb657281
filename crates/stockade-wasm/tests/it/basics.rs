//! Running modules: output, arguments, environment, exit codes, stdin, refusals.

use stockade_core::{Capabilities, ExecRequest, Provider, SandboxSpec};
use stockade_spec::Network;

use crate::support::{create, exec_req, guest, provider, run, spec, text};

#[tokio::test]
async fn hello() {
    let Some(g) = guest() else { return };
    let (p, _scratch) = provider();
    let id = create(&p, spec(&g)).await;
    let out = run(&p, &id, &["guest", "hello"]).await;
    assert_eq!(text(&out.stdout), "hello from wasm\n");
    assert_eq!(out.exit_code, 0);
    assert!(!out.timed_out && !out.oom_killed && !out.truncated());
    p.destroy(&id).await.unwrap();
}

#[tokio::test]
async fn args_and_env_are_exactly_what_was_given() {
    let Some(g) = guest() else { return };
    let (p, _scratch) = provider();
    let mut s = spec(&g);
    s.env.insert("FROM_SPEC".into(), "spec".into());
    s.env.insert("BOTH".into(), "spec".into());
    let id = create(&p, s).await;

    let out = run(&p, &id, &["prog", "args", "a b", "", "ü"]).await;
    assert_eq!(text(&out.stdout), "prog\nargs\na b\n\nü\n");

    let mut req = ExecRequest::new(["prog", "env"]);
    req.env.insert("FROM_EXEC".into(), "exec".into());
    req.env.insert("BOTH".into(), "exec".into());
    let out = exec_req(&p, &id, req).await.unwrap();
    let env = text(&out.stdout);
    let keys: Vec<&str> = env.lines().map(|l| l.split('=').next().unwrap()).collect();
    // The host's environment (CARGO_*, the real HOME, ...) never reaches the guest.
    assert_eq!(
        keys,
        ["BOTH", "FROM_EXEC", "FROM_SPEC", "HOME", "LANG", "PATH"],
        "{env}"
    );
    assert!(
        env.contains("BOTH=exec\n") && env.contains("HOME=/tmp\n"),
        "{env}"
    );
}

#[tokio::test]
async fn exit_codes_traps_and_stdin() {
    let Some(g) = guest() else { return };
    let (p, _scratch) = provider();
    let id = create(&p, spec(&g)).await;
    for code in [0, 1, 3, 42, 125] {
        let c = code.to_string();
        let out = run(&p, &id, &["g", "exit", &c]).await;
        assert_eq!(out.exit_code, code);
        assert_eq!(out.signal, None);
    }
    // WASI allows exit statuses below 126 only; a larger one aborts the guest.
    let out = run(&p, &id, &["g", "exit", "255"]).await;
    assert_eq!((out.exit_code, out.signal), (134, Some(6)));
    assert!(
        text(&out.stderr).contains("invalid exit status"),
        "{}",
        text(&out.stderr)
    );
    // abort() is a trap: reported as SIGABRT, as a native crash would be.
    let out = run(&p, &id, &["g", "abort"]).await;
    assert_eq!((out.exit_code, out.signal), (134, Some(6)));
    assert!(
        text(&out.stderr).contains("wasm trap"),
        "{}",
        text(&out.stderr)
    );

    let mut req = ExecRequest::new(["g", "stdin"]);
    req.stdin = b"fed through stdin\n".to_vec();
    let out = exec_req(&p, &id, req).await.unwrap();
    assert_eq!(text(&out.stdout), "fed through stdin\n");

    let out = run(&p, &id, &["g", "both"]).await;
    assert_eq!(
        (text(&out.stdout), text(&out.stderr)),
        ("to stdout\n".into(), "to stderr\n".into())
    );
}

#[tokio::test]
async fn output_streams_live() {
    let Some(g) = guest() else { return };
    let (p, _scratch) = provider();
    let id = create(&p, spec(&g)).await;
    let (tx, mut rx) = tokio::sync::mpsc::channel(4);
    let collect = tokio::spawn(async move {
        let mut chunks = Vec::new();
        while let Some(c) = rx.recv().await {
            chunks.push(c);
        }
        chunks
    });
    let mut req = ExecRequest::new(["g", "flood", "300000"]);
    req.stream = true;
    let out = p
        .exec(
            &id,
            stockade_core::CheckedRequest::new(req).unwrap(),
            stockade_core::ExecIo::output(tx),
        )
        .await
        .unwrap();
    let chunks = collect.await.unwrap();
    let live: Vec<u8> = chunks.iter().flat_map(|c| c.data.clone()).collect();
    assert_eq!(live, out.stdout, "live output is the captured output");
    assert!(chunks.len() > 1, "sent in several chunks");
    assert!(text(&out.stdout).ends_with("END\n"));
}

#[tokio::test]
async fn specs_it_cannot_honour_are_refused() {
    let Some(g) = guest() else { return };
    let (p, _scratch) = provider();
    let caps: Capabilities = p.capabilities();
    // The default spec (seccomp and landlock on) is accepted as is.
    caps.check("wasm", &spec(&g).validate().unwrap()).unwrap();

    let refusal = |s: SandboxSpec| {
        let p = p.clone();
        async move {
            // Refused at the boundary (the capability check), or by the provider.
            let v = s.validate().unwrap();
            match stockade_core::CheckedSpec::new(v, &p) {
                Err(e) => e.to_string(),
                Ok(v) => p
                    .create(v, Default::default())
                    .await
                    .unwrap_err()
                    .to_string(),
            }
        }
    };
    let mut s = spec(&g);
    s.network = Network::Egress;
    s.writable = true;
    let err = refusal(s).await;
    assert!(err.contains("cannot give network egress"), "{err}");
    assert!(err.contains("cannot make the root writable"), "{err}");

    let err = refusal(SandboxSpec::default()).await;
    assert!(err.contains("cannot run without an image"), "{err}");

    let mut s = spec(&g);
    s.image = Some("python:3.12-slim".into());
    let err = refusal(s).await;
    assert!(err.contains("does not run OCI images"), "{err}");

    let mut s = spec(&g);
    s.limits.cpus = 0.5;
    s.workdir = Some("/srv".into());
    let err = refusal(s).await;
    assert!(err.contains("below one cpu"), "{err}");
    assert!(
        err.contains("workdir /srv is not in /tmp or a mount"),
        "{err}"
    );

    let mut s = spec(&g);
    s.image = Some("/nonexistent/m.wasm".into());
    let err = refusal(s).await;
    assert!(err.contains("/nonexistent/m.wasm does not exist"), "{err}");

    let req = ExecRequest {
        keep_stdin_open: true,
        ..ExecRequest::new(["g"])
    };
    let id = crate::support::create(&p, spec(&g)).await;
    let err = exec_req(&p, &id, req).await.unwrap_err().to_string();
    assert!(err.contains("cannot keep stdin open"), "{err}");
}

#[tokio::test]
async fn a_module_that_is_not_wasm_is_refused() {
    let (p, _scratch) = provider();
    let dir = tempfile::tempdir().unwrap();
    let bogus = dir.path().join("bogus.wasm");
    std::fs::write(&bogus, b"#!/bin/sh\necho pwned\n").unwrap();
    let v = spec(&bogus).validate().unwrap();
    let err = p
        .create(
            stockade_core::CheckedSpec::new(v, &p).unwrap(),
            Default::default(),
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("is not a WebAssembly module"), "{err}");
}
