//! Egress probes shared by the providers' network suites (docker, microvm): Python run
//! inside that tries connections and reports each one, and the checks of its output.

use stockade_core::{EgressDenial, ExecOutcome};

/// A probe run inside: each `(label, host, port)` is tried with a 3 s timeout and
/// printed as `label: ok` or `label: refused ERRNO MS`.
pub fn connect_probe(targets: &[(&str, &str, u16)]) -> String {
    let mut code = String::from(
        "import socket, time\ndef probe(label, host, port):\n    t = time.monotonic()\n    try:\n        socket.create_connection((host, port), timeout=3).close()\n        print(label + ': ok')\n    except OSError as e:\n        print('%s: refused %s %d' % (label, e.errno, (time.monotonic() - t) * 1000))\n",
    );
    for (label, host, port) in targets {
        code.push_str(&format!("probe({label:?}, {host:?}, {port})\n"));
    }
    code
}

/// The line of `out` that starts with `label:`.
pub fn line<'a>(out: &'a str, label: &str) -> &'a str {
    out.lines()
        .find(|l| l.starts_with(&format!("{label}:")))
        .unwrap_or_else(|| panic!("{label} missing from: {out}"))
}

/// `label` of a [`connect_probe`] was refused within `max_ms` (a refusal, not a hang
/// until the probe's 3 s timeout).
pub fn refused_within(out: &str, label: &str, max_ms: u64) {
    let l = line(out, label);
    assert!(l.contains("refused"), "{label} got through: {out}");
    let ms: u64 = l.split_whitespace().last().unwrap().parse().unwrap();
    assert!(
        ms < max_ms,
        "{label} took {ms} ms (a hang, not a refusal): {out}"
    );
}

/// Python for a sandbox whose allowlist is `pypi.org` alone: pypi.org resolves and
/// connects, registry.npmjs.org does not resolve, a request to pypi.org's address
/// naming npm as its `Host` is refused by the proxy, and a literal address (1.1.1.1)
/// is refused. Checked by [`assert_pypi_only`].
pub fn pypi_only_probe() -> String {
    format!(
        "import socket\nip = socket.gethostbyname('pypi.org')\nprint('pypi resolved')\ntry:\n    socket.gethostbyname('registry.npmjs.org'); print('npm: resolved')\nexcept OSError as e:\n    print('npm: refused', e)\ns = socket.create_connection((ip, 80), timeout=10)\ns.sendall(b'HEAD / HTTP/1.1\\r\\nHost: registry.npmjs.org\\r\\nConnection: close\\r\\n\\r\\n')\nprint('host npm:', s.recv(200).split(b'\\r\\n')[0].decode())\n{}",
        connect_probe(&[("pypi", "pypi.org", 80), ("literal", "1.1.1.1", 443)])
    )
}

/// [`pypi_only_probe`]'s run held: what the allowlist opens works, everything else is
/// refused (the literal address within `max_ms`), and the refusals reach the caller
/// with the exec's result, named.
pub fn assert_pypi_only(out: &ExecOutcome, max_ms: u64) {
    let o = String::from_utf8_lossy(&out.stdout);
    let o = o.as_ref();
    assert!(
        o.contains("pypi resolved"),
        "{o}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(line(o, "npm").contains("refused"), "{o}");
    assert_eq!(
        line(o, "host npm"),
        "host npm: HTTP/1.1 403 Forbidden",
        "{o}"
    );
    assert_eq!(line(o, "pypi"), "pypi: ok", "{o}");
    refused_within(o, "literal", max_ms);
    assert!(
        denied(&out.egress_denied, "dns", "registry.npmjs.org"),
        "{:#?}",
        out.egress_denied
    );
    assert!(
        denied(&out.egress_denied, "tcp", "1.1.1.1"),
        "{:#?}",
        out.egress_denied
    );
}

/// Whether `denials` names a refusal of `destination` over `protocol` (`dns`, `tcp`).
pub fn denied(denials: &[EgressDenial], protocol: &str, destination: &str) -> bool {
    denials
        .iter()
        .any(|x| x.protocol == protocol && x.destination == destination)
}
