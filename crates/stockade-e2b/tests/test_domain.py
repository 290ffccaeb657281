"""Domain mode (`--e2b-domain` with TLS): the SDKs with E2B_DOMAIN alone."""

import os
import subprocess
import sys

from conftest import KEY_A


def _openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def test_domain_mode_over_tls_needs_no_sandbox_url(tmp_path):
    binary = os.environ.get("STOCKADE_BIN")
    assert binary, "STOCKADE_BIN must name a built `stockade` binary: run crates/stockade-e2b/test.sh"
    w = str(tmp_path)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "1",
             "-subj", "/CN=stockade e2b test ca", cwd=w)
    _openssl("req", *ec, "-keyout", "srv.key", "-out", "srv.csr", "-subj", "/CN=e2b.test", cwd=w)
    (tmp_path / "ext.cnf").write_text(
        "subjectAltName=DNS:*.e2b.test,DNS:api.e2b.test\n"
        "basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"
    )
    _openssl("x509", "-req", "-in", "srv.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", "srv.pem", "-days", "1", "-extfile", "ext.cnf", cwd=w)
    (tmp_path / "tokens").write_text(KEY_A + "\n")
    here = os.path.dirname(os.path.abspath(__file__))
    r = subprocess.run(
        ["unshare", "--mount", "--net", "--fork", sys.executable,
         os.path.join(here, "domain_mode.py"), binary, w],
        capture_output=True, text=True, timeout=300,
    )
    log = (tmp_path / "serve.log").read_text() if (tmp_path / "serve.log").exists() else ""
    assert r.returncode == 0, f"{r.stdout}\n{r.stderr}\nserve.log:\n{log[-4000:]}"
    assert r.stdout.strip().endswith("domain mode ok"), r.stdout


def test_bad_tls_files_and_domains_are_refused_at_start(tmp_path):
    binary = os.environ["STOCKADE_BIN"]
    (tmp_path / "tokens").write_text(KEY_A + "\n")
    (tmp_path / "bad.pem").write_text("not a certificate\n")
    base = [binary, "serve", "--listen", f"unix://{tmp_path}/d.sock", "--state-dir",
            str(tmp_path / "s"), "--token-file", str(tmp_path / "tokens"),
            "--e2b-listen", "127.0.0.1:0"]
    r = subprocess.run(base + ["--e2b-tls-cert", str(tmp_path / "bad.pem"),
                               "--e2b-tls-key", str(tmp_path / "bad.pem")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "--e2b-tls-cert" in r.stderr, r.stderr
    r = subprocess.run(base + ["--e2b-domain", "Not_A.Domain"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "--e2b-domain" in r.stderr, r.stderr
