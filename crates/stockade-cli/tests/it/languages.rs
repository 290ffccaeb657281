//! Issue 17, item 5: languages that are honest. `stockade languages` says how each
//! language runs here; TypeScript runs with the host's Node when it strips types, and
//! a missing language's error names the one fix.

use serde_json::Value;
use stockade_testkit::{DEBIAN_FIX, debian_test_image, require};

use crate::images::stockade_in;
use crate::json;

/// The row of `language` in `languages --json` (with `args` before it).
fn row(rows: &Value, language: &str) -> Value {
    rows.as_array()
        .expect("languages --json prints an array")
        .iter()
        .find(|r| r["language"] == language)
        .unwrap_or_else(|| panic!("no {language} in {rows}"))
        .clone()
}

#[test]
fn languages_say_how_each_runs_host_stored_image_or_pull() {
    let Some(base) = require("the Debian test image", debian_test_image(), DEBIAN_FIX) else {
        return;
    };
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    // An image in the store named as zsh's under [languages].
    let layout = h.join("layout");
    stockade_testkit::oci_layout(&layout, &base, &[], serde_json::json!({}), "1");
    let out = stockade_in(
        h,
        &[
            "image",
            "import",
            "--tag",
            "local/zsh:1",
            layout.to_str().unwrap(),
        ],
    )
    .output()
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(
        h.join("config.toml"),
        "[languages]\nzsh = \"local/zsh:1\"\n",
    )
    .unwrap();
    // native: python3 is the host's.
    let native = json(&stockade_in(h, &["languages", "--json"]).output().unwrap());
    let py = row(&native, "python");
    assert_eq!(
        (py["how"].as_str(), py["ready"].as_bool()),
        (Some("host"), Some(true)),
        "{py}"
    );
    assert!(py["detail"].as_str().unwrap().ends_with("/python3"), "{py}");
    // docker takes every interpreter from an image: stored, or pulled on first use.
    let docker = json(
        &stockade_in(h, &["languages", "--json", "--provider", "docker"])
            .output()
            .unwrap(),
    );
    let zsh = row(&docker, "zsh");
    assert_eq!(zsh["how"], "image", "{zsh}");
    assert_eq!(zsh["detail"], "local/zsh:1", "{zsh}");
    assert_eq!(zsh["ready"], true, "{zsh}");
    let ruby = row(&docker, "ruby");
    assert_eq!(ruby["how"], "pull", "{ruby}");
    assert_eq!(ruby["ready"], false, "{ruby}");
    assert_eq!(ruby["fix"], "stockade image pull ruby:3.3-slim", "{ruby}");
    // wasm: python by its WASI runtime, the rest not at all.
    let wasm = json(
        &stockade_in(h, &["languages", "--json", "--provider", "wasm"])
            .output()
            .unwrap(),
    );
    assert_eq!(row(&wasm, "bash")["how"], "unavailable", "{wasm}");
    // doctor shows the same rows.
    let doctor = json(
        &stockade_in(h, &["doctor", "--json", "--direct"])
            .output()
            .unwrap(),
    );
    assert_eq!(row(&doctor["languages"], "python"), py, "{doctor}");
    let text = String::from_utf8_lossy(&stockade_in(h, &["languages"]).output().unwrap().stdout)
        .to_string();
    assert!(text.contains("python") && text.contains("host"), "{text}");
}

#[test]
fn typescript_runs_with_node_or_deno_else_the_error_names_the_one_fix() {
    if !crate::require_root("typescript_runs_with_node") {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    // An image no registry serves (nothing listens on port 1), so no pull can help.
    std::fs::write(
        h.join("config.toml"),
        "[languages]\ntypescript = \"127.0.0.1:1/deno:1\"\n",
    )
    .unwrap();
    let ts = row(
        &json(&stockade_in(h, &["languages", "--json"]).output().unwrap()),
        "typescript",
    );
    let out = stockade_in(
        h,
        &[
            "run",
            "--json",
            "--direct",
            "-l",
            "typescript",
            "--code",
            "const x: number = 6 * 7; console.log(x)",
        ],
    )
    .output()
    .unwrap();
    let v = json(&out);
    if ts["how"] == "host" {
        // Deno, or Node 22.6+ stripping the types.
        assert_eq!(v["stdout"], "42\n", "{ts} {v}");
        return;
    }
    assert_eq!(out.status.code(), Some(69), "{v}");
    let msg = v["error"]["message"].as_str().unwrap();
    assert_eq!(msg.matches("fix:").count(), 1, "{msg}");
    assert!(
        msg.ends_with(
            "(fix: install Node.js 22.6 or newer (it strips the types) or Deno on this host)"
        ),
        "{msg}"
    );
    assert!(
        !msg.contains("--insecure-registry") && !msg.contains("--image"),
        "{msg}"
    );
    assert_eq!(
        ts["fix"],
        "install Node.js 22.6 or newer (it strips the types) or Deno on this host"
    );
}
