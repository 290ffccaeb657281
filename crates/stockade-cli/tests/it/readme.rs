//! Every command of README.md's tour runs as shown: the `$ ` lines of the first
//! `sh` block under the heading [`TOUR`], in order, as one shell script (so `id=$(...)`
//! carries over), with `stockade` on PATH being the binary under test. Each must exit
//! 0, and the output shown under it must be what it prints (`…` elides: the pieces
//! between them must appear in that order).

use std::path::Path;
use std::process::Command;

use stockade_testkit::require_root;

/// The heading of the tour's section in README.md.
const TOUR: &str = "## 30-second tour";

/// The elision mark of the README's expected output.
const ELIDED: char = '…';

/// One `$ ` line of the tour and the output shown under it.
#[derive(Debug, PartialEq)]
struct Step {
    command: String,
    expected: Vec<String>,
}

/// The steps of the first `sh` block after the heading [`TOUR`].
fn tour(readme: &str) -> Vec<Step> {
    let mut lines = readme.lines().skip_while(|l| l.trim_end() != TOUR).skip(1);
    assert!(
        lines.by_ref().any(|l| l.trim_end() == "```sh"),
        "README.md has no ```sh block under {TOUR:?}"
    );
    let mut steps: Vec<Step> = Vec::new();
    let mut in_output = false;
    for line in lines {
        if line.trim_end() == "```" {
            return steps;
        }
        if let Some(command) = line.strip_prefix("$ ") {
            steps.push(Step {
                command: command.to_string(),
                expected: Vec::new(),
            });
            in_output = true;
        } else if line.trim().is_empty() {
            in_output = false;
        } else if in_output && let Some(step) = steps.last_mut() {
            step.expected.push(line.trim_end().to_string());
        } else {
            panic!("a line of the tour that is neither a command nor its output: {line:?}");
        }
    }
    panic!("the tour's ```sh block under {TOUR:?} is not closed");
}

/// Whether `actual` is `expected`, or, when `expected` elides with `…`, holds each
/// of its pieces in order (the first at the start, the last at the end).
fn matches(expected: &str, actual: &str) -> bool {
    if !expected.contains(ELIDED) {
        return expected == actual;
    }
    let pieces: Vec<&str> = expected.split(ELIDED).collect();
    let (first, last) = (pieces[0], pieces[pieces.len() - 1]);
    if !actual.starts_with(first) || !actual[first.len()..].ends_with(last) {
        return false;
    }
    let mut rest = &actual[first.len()..actual.len() - last.len()];
    for piece in &pieces[1..pieces.len() - 1] {
        match rest.find(piece) {
            Some(at) => rest = &rest[at + piece.len()..],
            None => return false,
        }
    }
    true
}

/// The script that runs `steps` in one shell, each step's stdout, stderr and exit
/// status into `out/N`, `err/N` and `rc/N`, stopping after the first that fails.
fn script(steps: &[Step], out: &Path) -> String {
    let mut s = String::new();
    for (i, step) in steps.iter().enumerate() {
        let d = out.display();
        s.push_str(&format!(
            "{{ {}\n}} >'{d}/out.{i}' 2>'{d}/err.{i}' </dev/null\n\
             rc=$?; echo $rc >'{d}/rc.{i}'; [ $rc -eq 0 ] || exit 0\n",
            step.command
        ));
    }
    s
}

#[test]
fn every_command_of_the_readme_tour_runs_as_shown() {
    if !require_root("readme_tour") {
        return;
    }
    let readme = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md");
    let text = std::fs::read_to_string(&readme).unwrap();
    let steps = tour(&text);
    assert!(steps.len() >= 3, "the tour has {} commands", steps.len());

    // `stockade` on PATH is the binary under test.
    let bin = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_stockade"), bin.path().join("stockade"))
        .unwrap();
    let path = format!(
        "{}:{}",
        bin.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let work = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    // A state directory of the tour's own, so what a failed step leaves is removed
    // below without touching the sandboxes of tests running beside it.
    let state = tempfile::tempdir().unwrap();
    let status = Command::new("sh")
        .arg("-c")
        .arg(script(&steps, out.path()))
        .current_dir(work.path())
        .env("PATH", path)
        .env("STOCKADE_STATE_DIR", state.path())
        .env_remove("STOCKADE_PROVIDER")
        .env_remove("STOCKADE_HOST")
        .status()
        .unwrap();
    let _ = Command::new(env!("CARGO_BIN_EXE_stockade"))
        // The tour's sandboxes are native ones; other providers' belong to other tests.
        .args(["--direct", "--provider", "native", "rm", "--all"])
        .env("STOCKADE_STATE_DIR", state.path())
        .env_remove("STOCKADE_PROVIDER")
        .output();
    assert!(status.success(), "the tour's shell failed: {status}");

    for (i, step) in steps.iter().enumerate() {
        let read = |what: &str| {
            std::fs::read_to_string(out.path().join(format!("{what}.{i}"))).unwrap_or_default()
        };
        let (stdout, stderr, rc) = (read("out"), read("err"), read("rc"));
        let cmd = &step.command;
        assert_eq!(
            rc.trim(),
            "0",
            "README tour command {} `{cmd}` failed (exit status {:?})\nstdout:\n{stdout}\nstderr:\n{stderr}",
            i + 1,
            rc.trim()
        );
        if step.expected.is_empty() {
            continue;
        }
        let actual: Vec<&str> = stdout.lines().map(str::trim_end).collect();
        let fits = actual.len() == step.expected.len()
            && step
                .expected
                .iter()
                .zip(&actual)
                .all(|(e, a)| matches(e, a));
        assert!(
            fits,
            "README tour command {} `{cmd}` printed\n{stdout}\nbut the README shows\n{}\nstderr:\n{stderr}",
            i + 1,
            step.expected.join("\n")
        );
    }
}

#[test]
fn the_tour_parser_and_matcher_see_what_the_readme_means() {
    let text =
        "# x\n## 30-second tour\n\nsome words\n\n```sh\n$ a --b\n1 2\n\n$ c\n$ d\nx…y…z\n```\n";
    assert_eq!(
        tour(text),
        vec![
            Step {
                command: "a --b".into(),
                expected: vec!["1 2".into()]
            },
            Step {
                command: "c".into(),
                expected: vec![]
            },
            Step {
                command: "d".into(),
                expected: vec!["x…y…z".into()]
            },
        ]
    );
    assert!(matches("x…y…z", "x1y2z"));
    assert!(matches("x…y…z", "xyz"));
    assert!(!matches("x…y…z", "x1z2y"));
    assert!(!matches("x…y…z", "ax1y2z"));
    assert!(!matches("x…y…z", "x1y2za"));
    assert!(matches(
        r#"{"duration_ms":…,"exit_code":137,…,"timed_out":true,"truncated":false}"#,
        r#"{"duration_ms":2014,"egress_denied":[],"exit_code":137,"id":"sb-1","timed_out":true,"truncated":false}"#
    ));
    assert!(!matches("1000 sandbox", "0 sandbox"));
}
