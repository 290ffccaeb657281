//! `--image` from the CLI: pull on first use with progress, the image's command and
//! user, language presets from images, the config file, `image rm` of an image in use.
//! A real `docker-registry` on loopback and the Debian test image (mmdebstrap).

use std::path::Path;
use std::process::Command;

use stockade_testkit::{DEBIAN_FIX, Registry, debian_test_image, require};

use crate::via::Via;
use crate::{json, require_root, state_dir};

const HELLO: &[u8] = b"import os\nprint('hello from the image', os.getcwd(), os.getuid())\n";

/// `stockade` with its own home (image store) and config file.
pub(crate) fn stockade_in(home: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_stockade"));
    c.args(args)
        .env("STOCKADE_STATE_DIR", state_dir())
        .env("STOCKADE_HOME", home)
        .env("STOCKADE_CONFIG", home.join("config.toml"))
        .env_remove("STOCKADE_PROVIDER")
        .env_remove("STOCKADE_REGISTRY_USERNAME")
        .env_remove("STOCKADE_REGISTRY_TOKEN");
    c
}

/// [`stockade_in`], through the daemon when `via` has one.
fn cli(via: &Via, home: &Path, args: &[&str]) -> Command {
    via.wrap(stockade_in(home, args))
}

/// A registry serving the Debian image plus `/srv/hello.py`, its config saying user
/// nobody, workdir /srv and `Cmd ["python3", "hello.py"]`; returns it and the reference.
fn registry_with_image(dir: &Path, host: &str) -> Option<(Registry, String)> {
    let base = require("the Debian test image", debian_test_image(), DEBIAN_FIX)?;
    let reg = Registry::start(host, None)?;
    let layout = dir.join("layout");
    let config = serde_json::json!({
        "Env": ["PATH=/usr/local/bin:/usr/bin:/bin"], "WorkingDir": "/srv",
        "User": "nobody", "Cmd": ["python3", "hello.py"],
    });
    stockade_testkit::oci_layout(&layout, &base, &[("srv/hello.py", HELLO)], config, "v1");
    reg.push(&layout, "v1", "stockade-test/py:1", false);
    let reference = format!("{}/stockade-test/py:1", reg.addr);
    Some((reg, reference))
}

both_ways! {
    fn run_image_pulls_on_first_use_and_runs_its_command_as_its_user(via, home) {
        if !require_root("run_image") {
            return;
        }
        let Some((_reg, reference)) = registry_with_image(home, "127.0.0.1") else {
            return;
        };
        // A daemon's tenant pulls only from registries its profile lists, never from
        // this host's loopback (`stockade-server`'s `images::` tests): through the
        // daemon the image is the operator's, pulled here first and shared.
        if via.is_daemon() {
            let out = stockade_in(home, &["image", "pull", &reference]).output().unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        }
        // No command: the image's Cmd, in its WorkingDir, as its User (nobody). The
        // command is read from this host's image store, which a daemon does not use: it
        // says so, and the same command given explicitly runs the same way.
        let out = cli(via, home, &["run", "--image", &reference])
            .output()
            .unwrap();
        let out = if via.is_daemon() {
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(64), "{err}");
            assert!(err.contains("give the command after the options"), "{err}");
            cli(
                via,
                home,
                &["run", "--image", &reference, "--", "python3", "hello.py"],
            )
            .output()
            .unwrap()
        } else {
            out
        };
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "hello from the image /srv 65534\n",
            "stderr: {stderr}"
        );
        // Progress went to stderr while it pulled and unpacked (in-process: a daemon
        // pulls on its own host, without a progress channel to the CLI).
        if !via.is_daemon() {
            for want in ["pulling", "fetched", "unpacked"] {
                assert!(stderr.contains(want), "no {want:?} in: {stderr}");
            }
        }
        // A second run finds it in the store: no pull.
        let out = cli(via, home, &["run", "--image", &reference, "--", "id", "-u"])
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "65534\n");
        assert!(!String::from_utf8_lossy(&out.stderr).contains("pulling"));
        // --user overrides the image's user.
        let out = cli(
            via,
            home,
            &[
                "run", "--image", &reference, "--user", "2000", "--", "id", "-u",
            ],
        )
        .output()
        .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "2000\n");
    }
}

both_ways! {
    fn languages_run_from_images_and_name_a_missing_interpreter(via, home) {
        if !require_root("languages_from_images") {
            return;
        }
        let Some((_reg, reference)) = registry_with_image(home, "127.0.0.1") else {
            return;
        };
        // --language with --image: the interpreter is the image's, found on its PATH.
        let v = json(
            &cli(
                via,
                home,
                &[
                    "run",
                    "--json",
                    "--image",
                    &reference,
                    "-l",
                    "python",
                    "--code",
                    "import sys, os; print(sys.executable, os.path.exists('/srv/hello.py'))",
                ],
            )
            .output()
            .unwrap(),
        );
        assert_eq!(v["stdout"], "/usr/bin/python3 True\n", "{v}");

        // The host has no ruby; the config maps ruby to an image without it: the error
        // names the interpreter, the image and what to do.
        assert!(
            !Path::new("/usr/bin/ruby").exists(),
            "this test assumes no host ruby"
        );
        std::fs::write(
            home.join("config.toml"),
            format!("[languages]\nruby = \"{reference}\"\n"),
        )
        .unwrap();
        let out = cli(
            via,
            home,
            &["run", "--json", "-l", "ruby", "--code", "puts 1"],
        )
        .output()
        .unwrap();
        assert_eq!(
            out.status.code(),
            Some(69),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
        let msg = json(&out)["error"]["message"].as_str().unwrap().to_string();
        assert!(msg.contains("ruby") && msg.contains(&reference), "{msg}");

        // Without the config entry, the preset's own image is tried (docker.io here is
        // unreachable), and the error says the host lacks ruby and how to fix it.
        std::fs::write(home.join("config.toml"), "").unwrap();
        let out = cli(
            via,
            home,
            &["run", "--json", "-l", "ruby", "--code", "puts 1"],
        )
        .output()
        .unwrap();
        assert_eq!(out.status.code(), Some(69));
        let msg = json(&out)["error"]["message"].as_str().unwrap().to_string();
        assert!(
            msg.contains("ruby is not installed on this host") && msg.contains("ruby:3.3-slim"),
            "{msg}"
        );

        // A broken config file is an error naming the file.
        std::fs::write(home.join("config.toml"), "[registries]\nsecure = 1\n").unwrap();
        let out = cli(
            via,
            home,
            &["run", "--json", "-l", "ruby", "--code", "puts 1"],
        )
        .output()
        .unwrap();
        assert_eq!(out.status.code(), Some(64));
        assert!(String::from_utf8_lossy(&out.stdout).contains("config.toml"));
    }
}

both_ways! {
    fn plain_http_registries_other_than_loopback_need_the_config_file(via, home) {
        if !require_root("insecure_registry_config") {
            return;
        }
        // 127.0.0.2 is loopback to the kernel but not to Stockade's plain-HTTP rule.
        let Some((reg, reference)) = registry_with_image(home, "127.0.0.2") else {
            return;
        };
        let out = cli(via, home, &["image", "pull", "--json", &reference])
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(69),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
        std::fs::write(
            home.join("config.toml"),
            format!("[registries]\ninsecure = [\"{}\"]\n", reg.addr),
        )
        .unwrap();
        let out = cli(via, home, &["image", "pull", "--json", &reference])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert!(
            json(&out)["digest"]
                .as_str()
                .unwrap()
                .starts_with("sha256:")
        );
    }
}

both_ways! {
    fn an_image_in_use_is_not_removed(via, home) {
        if !require_root("image_in_use") {
            return;
        }
        let Some((_reg, reference)) = registry_with_image(home, "127.0.0.1") else {
            return;
        };
        let out = cli(via, home, &["image", "pull", &reference])
            .output()
            .unwrap();
        assert!(out.status.success());
        let created = json(
            &cli(via, home, &["create", "--json", "--image", &reference])
                .output()
                .unwrap(),
        );
        let id = created["id"].as_str().unwrap().to_string();
        let out = cli(via, home, &["image", "rm", "--json", &reference])
            .output()
            .unwrap();
        let removed_while_running = out.status.code();
        let msg = String::from_utf8_lossy(&out.stdout).to_string();
        let rm = cli(via, home, &["rm", &id]).output().unwrap();
        assert!(rm.status.success());
        assert_eq!(removed_while_running, Some(64), "{msg}");
        assert!(msg.contains("in use"), "{msg}");
        let out = cli(via, home, &["image", "rm", &reference])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let ls = json(&cli(via, home, &["image", "ls", "--json"]).output().unwrap());
        assert_eq!(ls, serde_json::json!([]), "an empty list is an empty array");
    }
}

/// The array `image ls --json` prints.
fn image_ls(home: &Path) -> Vec<serde_json::Value> {
    let out = stockade_in(home, &["image", "ls", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    json(&out)
        .as_array()
        .expect("image ls --json prints an array")
        .clone()
}

// Issue 15: an OCI layout whose index names the image only by a bare tag imported,
// printed a digest, and then the image was neither listed nor runnable by it.
both_ways! {
    fn an_image_imported_without_a_name_is_listed_and_runs_by_digest(via, home) {
        if !require_root("unnamed_import") {
            return;
        }
        let Some(base) = require("the Debian test image", debian_test_image(), DEBIAN_FIX) else {
            return;
        };
        let layout = home.join("layout");
        let config = serde_json::json!({"Env": ["PATH=/usr/bin:/bin"]});
        stockade_testkit::oci_layout(&layout, &base, &[("hello", b"hi\n")], config, "1");
        let out = cli(
            via,
            home,
            &["image", "import", "--json", layout.to_str().unwrap()],
        )
        .output()
        .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let digest = json(&out)["imported"][0]["digest"].as_str().unwrap().to_string();
        let ls = image_ls(home);
        assert_eq!(ls.len(), 1, "{ls:?}");
        assert_eq!(ls[0]["digest"], digest.as_str());
        assert_eq!(ls[0]["reference"], serde_json::Value::Null, "{ls:?}");
        let text = cli(via, home, &["image", "ls"]).output().unwrap();
        assert!(
            String::from_utf8_lossy(&text.stdout).starts_with(&format!("<none>\t{digest}")),
            "{}",
            String::from_utf8_lossy(&text.stdout)
        );
        let hex = digest.strip_prefix("sha256:").unwrap();
        for by in [
            digest.clone(),
            format!("sha256:{}", &hex[..8]),
            hex[..12].to_string(),
        ] {
            let out = cli(
                via,
                home,
                &["run", "--image", &by, "--", "/bin/cat", "/hello"],
            )
            .output()
            .unwrap();
            assert_eq!(
                String::from_utf8_lossy(&out.stdout),
                "hi\n",
                "--image {by}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        // Removed by its digest, it is gone from the list.
        let out = cli(via, home, &["image", "rm", &digest]).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(image_ls(home).is_empty());
    }
}

both_ways! {
    fn an_ambiguous_digest_prefix_is_refused_with_the_candidates(via, home) {
        let base = home.join("base.tar");
        std::fs::write(&base, tar::Builder::new(Vec::new()).into_inner().unwrap()).unwrap();
        // 17 images: two of them share their first hex digit.
        let mut digests = Vec::new();
        for i in 0..17 {
            let layout = home.join(format!("layout{i}"));
            let body = format!("{i}\n");
            stockade_testkit::oci_layout(
                &layout,
                &base,
                &[("n", body.as_bytes())],
                serde_json::json!({}),
                "latest",
            );
            let out = cli(
                via,
                home,
                &["image", "import", "--json", layout.to_str().unwrap()],
            )
            .output()
            .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            digests.push(json(&out)["imported"][0]["digest"].as_str().unwrap().to_string());
        }
        assert_eq!(image_ls(home).len(), 17);
        let first = |d: &String| d.chars().nth(7).unwrap();
        let c = digests
            .iter()
            .map(first)
            .find(|c| digests.iter().filter(|d| first(d) == *c).count() > 1)
            .unwrap();
        let out = cli(
            via,
            home,
            &["image", "inspect", "--json", &format!("sha256:{c}")],
        )
        .output()
        .unwrap();
        assert_eq!(out.status.code(), Some(64));
        let msg = json(&out)["error"]["message"].as_str().unwrap().to_string();
        for d in digests.iter().filter(|d| first(d) == c) {
            assert!(msg.contains(d.as_str()), "{d} not named in: {msg}");
        }
    }
}

/// In-process, a provider that fetches its images itself shows how: `run --provider
/// docker` of an image dockerd lacks says it loads it from the store into dockerd.
#[test]
fn docker_run_shows_how_the_image_reaches_dockerd() {
    if !require_root("docker_image_progress") {
        return;
    }
    let Some(base) = require("the Debian test image", debian_test_image(), DEBIAN_FIX) else {
        return;
    };
    if require(
        "dockerd with the test image",
        stockade_testkit::docker_test_image(),
        stockade_testkit::DOCKER_FIX,
    )
    .is_none()
    {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let layout = home.path().join("layout");
    let config = serde_json::json!({"Env": ["PATH=/usr/bin:/bin"]});
    stockade_testkit::oci_layout(&layout, &base, &[("srv/hello.py", HELLO)], config, "1");
    let reference = format!("localhost/stockade-cli-progress-{}:1", std::process::id());
    let imported = stockade_in(
        home.path(),
        &[
            "image",
            "import",
            layout.to_str().unwrap(),
            "--tag",
            &reference,
        ],
    )
    .output()
    .unwrap();
    assert!(imported.status.success(), "{imported:?}");
    let out = stockade_in(
        home.path(),
        &[
            "run",
            "--provider",
            "docker",
            "--image",
            &reference,
            "--",
            "python3",
            "/srv/hello.py",
        ],
    )
    .output()
    .unwrap();
    let _ = Command::new("/usr/bin/docker")
        .args(["rmi", "-f", &reference])
        .output();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "loading {reference} from the stockade image store into dockerd"
        )),
        "{stderr}"
    );
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("hello from the image"));
}
