//! Issue 17, item 6: the CLI with docker's manners. A command without `--` (flags
//! after it are its own), `-w`/`-e`, completions and the man page, `--json` results,
//! `rm` of an unknown id, `rm --all` ownership, a plain-text daemon log.

use std::process::{Command, Stdio};

use stockade_testkit::require;

use crate::via::Serve;
use crate::{json, require_root, stockade};

both_ways! {
    fn a_command_runs_without_dashes_and_keeps_its_flags(via) {
        if !require_root("a_command_runs_without_dashes") {
            return;
        }
        // `--json` before the command is stockade's; after it, the command's.
        let out = via.run(&[
            "run", "--json", "-w", "/", "-e", "A=1", "python3", "-c",
            "import os, sys; print(sys.argv[1:], os.getcwd(), os.environ['A'])",
            "--json", "-w", "x",
        ]);
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(json(&out)["stdout"], "['--json', '-w', 'x'] / 1\n");
        // `--` is still accepted.
        let out = via.run(&["run", "--json", "--", "sh", "-c", "echo dashes"]);
        assert_eq!(json(&out)["stdout"], "dashes\n");
        // exec: ID, then the command with its own flags; -w and -e for the exec.
        let id = json(&via.run(&["create", "--json"]))["id"].as_str().unwrap().to_string();
        let out = via.run(&[
            "exec", "--json", "-w", "/tmp", "-e", "B=2", &id, "sh", "-c", "echo $B $(pwd) $0",
            "--json",
        ]);
        assert_eq!(json(&out)["stdout"], "2 /tmp --json\n", "{}", String::from_utf8_lossy(&out.stderr));
        assert!(via.run(&["rm", &id]).status.success());
    }
}

both_ways! {
    fn rm_of_an_unknown_id_is_a_data_error_and_removes_nothing(via) {
        if !require_root("rm_of_an_unknown_id") {
            return;
        }
        let id = json(&via.run(&["create", "--json"]))["id"].as_str().unwrap().to_string();
        let out = via.run(&["rm", "--json", &id, "sb-000000000000"]);
        assert_eq!(out.status.code(), Some(65), "{}", String::from_utf8_lossy(&out.stdout));
        let err = json(&out);
        assert_eq!(err["error"]["code"], "not_found");
        assert!(err["error"]["message"].as_str().unwrap().contains("sb-000000000000"), "{err}");
        let ls = json(&via.run(&["ls", "--json"]));
        assert!(
            ls.as_array().unwrap().iter().any(|s| s["id"] == id.as_str()),
            "a typo among the ids removed nothing: {ls}"
        );
        let out = via.run(&["rm", "--json", &id]);
        assert_eq!(json(&out)["removed"], serde_json::json!([id]));
    }
}

both_ways! {
    fn cp_and_session_print_one_json_result(via) {
        if !require_root("cp_and_session_json") {
            return;
        }
        let id = json(&via.run(&["create", "--json"]))["id"].as_str().unwrap().to_string();
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f.txt");
        std::fs::write(&file, "12345").unwrap();
        let up = json(&via.run(&["cp", "--json", file.to_str().unwrap(), &format!("{id}:/tmp/")]));
        assert_eq!(up["kind"], "file", "{up}");
        assert_eq!(up["bytes"], 5, "{up}");
        assert_eq!(up["dest"], format!("{id}:/tmp/f.txt"), "{up}");
        let back = dir.path().join("back.txt");
        let down = json(&via.run(&["cp", "--json", &format!("{id}:/tmp/f.txt"), back.to_str().unwrap()]));
        assert_eq!(down["bytes"], 5, "{down}");
        assert_eq!(std::fs::read_to_string(&back).unwrap(), "12345");
        assert!(via.run(&["rm", &id]).status.success());
        let home = tempfile::tempdir().unwrap();
        let h = home.path().to_str().unwrap();
        let ran = json(&via.run(&["session", "--home", h, "exec", "--json", "-w", "/tmp", "s1", "pwd"]));
        assert_eq!(ran["stdout"], "/tmp\n", "{ran}");
        let rel = json(&via.run(&["session", "--home", h, "release", "--json", "s1"]));
        assert_eq!(rel, serde_json::json!({"name": "s1", "released": true}));
        let rm = json(&via.run(&["session", "--home", h, "rm", "--json", "s1"]));
        assert_eq!(rm, serde_json::json!({"name": "s1", "removed": true}));
    }
}

/// The ids `ls --json` shows with `STOCKADE_STATE_DIR` at `root`, in-process.
fn ids_in(root: &std::path::Path) -> Vec<String> {
    let out = stockade(&["ls", "--json", "--direct"])
        .env("STOCKADE_STATE_DIR", root)
        .output()
        .unwrap();
    json(&out)
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_string())
        .collect()
}

// `rm --all` as root in-process removes what root made, not what a daemon made for
// its tenants (nor other users'), unless --everyone; through a daemon, the tenant's.
#[test]
fn rm_all_removes_only_what_the_caller_owns() {
    if !require_root("rm_all_removes_only_what_the_caller_owns") {
        return;
    }
    let d = Serve::start_with(true, crate::via::Home::Inherit);
    let root = d.state_root().to_path_buf();
    // Native alone: the other providers' sandboxes of this root belong to other tests
    // running beside this one.
    let direct = |args: &[&str]| {
        stockade(args)
            .args(["--direct", "--provider", "native"])
            .env("STOCKADE_STATE_DIR", &root)
            .output()
            .unwrap()
    };
    let mine = json(&direct(&["create", "--json"]))["id"]
        .as_str()
        .unwrap()
        .to_string();
    let tenants = json(&d.cli(&["create", "--json"]))["id"]
        .as_str()
        .unwrap()
        .to_string();
    // Through the daemon: the tenant's own only.
    let out = d.cli(&["rm", "--all", "--json"]);
    assert_eq!(
        json(&out)["removed"],
        serde_json::json!([tenants]),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(ids_in(&root).contains(&mine));
    let tenants = json(&d.cli(&["create", "--json"]))["id"]
        .as_str()
        .unwrap()
        .to_string();
    // In-process: root's own, not the daemon's.
    let out = direct(&["rm", "--all", "--json"]);
    assert_eq!(json(&out)["removed"], serde_json::json!([mine]));
    assert_eq!(ids_in(&root), std::slice::from_ref(&tenants));
    let out = direct(&["rm", "--all", "--everyone", "--json"]);
    assert_eq!(json(&out)["removed"], serde_json::json!([tenants]));
    assert!(ids_in(&root).is_empty());
}

#[test]
fn bash_loads_the_completion_script() {
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "source <('{}' completions bash) && complete -p stockade",
            env!("CARGO_BIN_EXE_stockade")
        ))
        .output()
        .expect("bash runs (crates/stockade-cli/ci-setup.sh installs it)");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(said.contains("stockade"), "{said}");
    for shell in ["zsh", "fish"] {
        let out = stockade(&["completions", shell]).output().unwrap();
        assert!(out.status.success() && !out.stdout.is_empty(), "{shell}");
    }
    // A reader that stops early is not an error (it was a panic with a backtrace).
    for words in ["completions bash", "man"] {
        let out = Command::new("bash")
            .arg("-c")
            .arg(format!(
                "'{}' {words} | head -c 1 >/dev/null; echo \"${{PIPESTATUS[0]}}\"",
                env!("CARGO_BIN_EXE_stockade")
            ))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{words}: {stderr}");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            "0",
            "{words}: {stderr}"
        );
    }
}

fn man_present() -> Result<(), String> {
    match Command::new("man").arg("--version").output() {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(format!(
            "`man --version` failed: {}",
            String::from_utf8_lossy(&o.stderr)
        )),
        Err(e) => Err(format!("cannot run man: {e}")),
    }
}

#[test]
fn man_renders_the_generated_pages() {
    if require(
        "man (man-db)",
        man_present(),
        "apt-get install man-db (crates/stockade-cli/ci-setup.sh does)",
    )
    .is_none()
    {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for (args, name, needle) in [
        (&["man"][..], "stockade.1", "completions"),
        (&["man", "run"][..], "stockade-run.1", "--workdir"),
        (
            &["man", "image", "pull"][..],
            "stockade-image-pull.1",
            "--insecure-registry",
        ),
    ] {
        let out = stockade(args).output().unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let page = dir.path().join(name);
        std::fs::write(&page, &out.stdout).unwrap();
        let shown = Command::new("man")
            .arg("-l")
            .arg(&page)
            .env("MANPAGER", "cat")
            .env("PAGER", "cat")
            .env("MANWIDTH", "200")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&shown.stdout).replace("\u{2010}", "-");
        assert!(
            shown.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&shown.stderr)
        );
        assert!(text.contains(needle), "{name} lacks {needle}: {text}");
        assert!(
            text.contains("Global options") || args.len() > 1 || text.contains("--json"),
            "{text}"
        );
    }
    let out = stockade(&["man", "nosuch"]).output().unwrap();
    assert_eq!(out.status.code(), Some(64));
}

#[test]
fn the_daemon_log_in_a_pipe_has_no_colour_codes() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("d.sock");
    let child = Command::new("setpriv")
        .args([
            "--pdeathsig",
            "KILL",
            env!("CARGO_BIN_EXE_stockade"),
            "serve",
        ])
        .arg(format!("--listen=unix:{}", sock.display()))
        .arg(format!(
            "--state-dir={}",
            dir.path().join("daemon").display()
        ))
        .env("STOCKADE_HOME", dir.path().join("home"))
        .env("STOCKADE_STATE_DIR", dir.path().join("sandboxes"))
        .env("STOCKADE_LOG", "info")
        .env_remove("NO_COLOR")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The log up to the line saying it listens, then the rest after SIGTERM.
    let mut child = child;
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        for line in std::io::BufRead::lines(std::io::BufReader::new(stderr)) {
            let Ok(line) = line else { break };
            let _ = tx.send(line);
        }
    });
    let mut log = String::new();
    while !log.contains("listening") {
        let line = rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("stockade serve did not say it listens ({e}): {log}"));
        log.push_str(&line);
        log.push('\n');
    }
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    child.wait().unwrap();
    reader.join().unwrap();
    log.extend(rx.try_iter().map(|l| l + "\n"));
    assert!(
        !log.contains('\u{1b}'),
        "ANSI escape codes in a piped log: {log:?}"
    );
}

/// A mistyped flag before the command is refused (clap's suggestion), never run as
/// the command; docker's spellings get Stockade's; after the command's first word
/// every flag is the command's.
#[test]
fn flags_before_the_command_are_checked_and_dockers_get_a_hint() {
    let out = stockade(&["run", "--memroy", "1g", "--", "true"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("unexpected argument '--memroy'") && err.contains("--memory"),
        "{err}"
    );
    assert!(!err.contains("cannot execute"), "the typo was run: {err}");
    for (args, says) in [
        (&["run", "--rm", "--", "true"][..], "always destroys"),
        (
            &["run", "-v", "/tmp:/w", "--", "true"],
            "--mount HOST:TARGET",
        ),
        // `exec -d` detaches as docker's does; `run` has no -d, and says where it is.
        (&["run", "-d", "--", "true"], "exec --detach"),
        (&["create", "--name", "x"], "the id"),
    ] {
        let out = stockade(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
    // Docker's `-it` is a terminal here too: the shell reads what is typed.
    if require_root("run -it") {
        use std::io::Write as _;
        let mut child = stockade(&["run", "-it", "--", "sh"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(b"test -t 0 && exit 5\n")
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(5),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

both_ways! {
    fn a_commands_own_flags_pass_after_its_first_word(via) {
        if !require_root("a_commands_own_flags_pass_after_its_first_word") {
            return;
        }
        let out = via.run(&["run", "sh", "-c", "echo $0 $1", "--rm", "-v"]);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "--rm -v\n",
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn global_flags_are_listed_apart() {
    let out = stockade(&["run", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    let (own, global) = help
        .split_once("Global options:")
        .expect("a Global options section");
    assert!(
        global.contains("--json") && global.contains("--provider"),
        "{help}"
    );
    assert!(!own.contains("--tls-ca"), "{help}");
}

#[test]
fn setup_tune_dry_run_names_each_cgroup2_mount_and_pid_max_and_changes_nothing() {
    if !require_root("setup_tune_dry_run") {
        return;
    }
    let before = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let out = stockade(&["setup", "tune", "--dry-run"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let cg2: Vec<&str> = before
        .lines()
        .filter(|l| l.contains(" - cgroup2 "))
        .filter_map(|l| l.split_whitespace().nth(4))
        .collect();
    if cg2.is_empty() {
        // A cgroup v1 host: a clear refusal.
        assert_eq!(out.status.code(), Some(69), "{text}");
        return;
    }
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for mp in cg2 {
        assert!(text.contains(mp), "{mp} not named: {text}");
    }
    assert!(
        text.contains("would run: mount -o remount") || text.contains("already on"),
        "{text}"
    );
    // pid_max: named, raised only when lower, and not by a dry run.
    let pid_max = || {
        std::fs::read_to_string("/proc/sys/kernel/pid_max")
            .unwrap()
            .trim()
            .parse::<u64>()
            .unwrap()
    };
    let pid_max_before = pid_max();
    assert!(text.contains("/proc/sys/kernel/pid_max"), "{text}");
    if pid_max_before < 1 << 22 {
        assert!(text.contains("would run: echo 4194304"), "{text}");
    }
    assert_eq!(pid_max(), pid_max_before, "a dry run changed pid_max");
    let after = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let opts = |m: &str| -> Vec<String> {
        m.lines()
            .filter(|l| l.contains(" - cgroup2 "))
            .map(str::to_string)
            .collect()
    };
    assert_eq!(opts(&before), opts(&after), "a dry run changed a mount");
}

/// `stockade ARGS` with a state directory of its own (in-process, `ls` then sees this
/// test's sandboxes alone; a daemon is this test's own anyway).
fn own_state(via: &crate::via::Via, dir: &std::path::Path, args: &[&str]) -> Command {
    let mut cmd = via.cmd(args);
    cmd.env("STOCKADE_STATE_DIR", dir);
    cmd
}

both_ways! {
    fn a_closed_stdout_ends_quietly_and_a_create_nobody_can_see_is_destroyed(via) {
        if !require_root("a_closed_stdout_ends_quietly") {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let run = |args: &[&str]| own_state(via, dir.path(), args).output().unwrap();
        // Its stdout a pipe whose reader has gone (`stockade ... | true`).
        let closed = |args: &[&str]| {
            let (reader, writer) = std::io::pipe().unwrap();
            drop(reader);
            let out = own_state(via, dir.path(), args)
                .stdout(writer)
                .stderr(Stdio::piped())
                .output()
                .unwrap();
            (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
        };
        // Native alone: the other providers' sandboxes of this root belong to other
        // suites running beside this one.
        let ids = || -> Vec<String> {
            json(&run(&["ls", "--json", "--provider", "native"]))
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["id"].as_str().unwrap().to_string())
                .collect()
        };
        let id = json(&run(&["create", "--json"]))["id"].as_str().unwrap().to_string();
        // `stockade inspect ID | head -1`: the shell's code for SIGPIPE, no panic.
        for args in [vec!["inspect", id.as_str()], vec!["ls"], vec!["ls", "--json"]] {
            let (code, stderr) = closed(&args);
            assert_eq!(code, Some(141), "{args:?}: {stderr}");
            assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        }
        // `stockade create | true`: nobody learns the id, so nothing is left running.
        for args in [vec!["create"], vec!["create", "--json"]] {
            let (code, stderr) = closed(&args);
            assert!(code.is_some_and(|c| c != 0), "{args:?}: {code:?} {stderr}");
            assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
            assert_eq!(ids(), std::slice::from_ref(&id), "{args:?} left a sandbox: {stderr}");
        }
        // `stockade run --json ... | true`: the result is printed after the destroy, so
        // the sandbox is gone when the command ends at that print.
        let (code, stderr) = closed(&["run", "--json", "--", "true"]);
        assert_eq!(code, Some(141), "{stderr}");
        assert_eq!(ids(), std::slice::from_ref(&id), "run left its sandbox: {stderr}");
        let (_, stderr) = closed(&["create"]);
        assert!(stderr.contains("was destroyed: nobody could be told its id"), "{stderr}");
        assert!(run(&["rm", &id]).status.success());
        assert!(ids().is_empty());
    }
}

/// A code file that is not a file (a device, a directory) is the caller's mistake
/// (exit 64, naming it), not an internal error from a mount that failed.
#[test]
fn a_code_file_that_is_not_a_file_is_the_callers_mistake() {
    for f in ["/dev/null", "/etc"] {
        let out = stockade(&["run", "--direct", "--language", "python", "-f", f])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "-f {f}: {err}");
        assert!(
            err.contains(&format!("code file {f} is not a regular file")),
            "{err}"
        );
    }
}

/// `run -f hello.py` knows its language by the extension; a file whose extension
/// names none is refused naming the ones that do.
#[test]
fn a_code_files_extension_names_its_language() {
    if !require_root("a_code_files_extension_names_its_language") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let py = dir.path().join("hello.py");
    std::fs::write(&py, "print('hello from', 6 * 7)\n").unwrap();
    let out = stockade(&["run", "--direct", "-f", py.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello from 42\n");
    let odd = dir.path().join("notes.txt");
    std::fs::write(&odd, "x").unwrap();
    let out = stockade(&["run", "--direct", "-f", odd.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{err}");
    assert!(
        err.contains("its extension names no language") && err.contains(".py (python)"),
        "{err}"
    );
    // The host's python3 is not there on wasm: the refusal names the flag that works.
    let out = stockade(&[
        "run",
        "--direct",
        "--provider",
        "wasm",
        "--",
        "python3",
        "-c",
        "print(1)",
    ])
    .output()
    .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{err}");
    assert!(err.contains("--language python"), "{err}");
}

/// A workdir that cannot be one (a file on the host's root view, a kernel file
/// system) is the caller's mistake too (exit 64), not an internal error from the
/// root's build.
#[test]
fn a_workdir_that_cannot_be_one_is_the_callers_mistake() {
    if !require_root("a_workdir_that_cannot_be_one_is_the_callers_mistake") {
        return;
    }
    for (w, says) in [
        ("/etc/passwd", "is a file, not a directory"),
        ("/proc/self", "kernel file system"),
        ("/sys/kernel", "kernel file system"),
    ] {
        let out = stockade(&["run", "--direct", "--workdir", w, "--", "true"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "--workdir {w}: {err}");
        assert!(err.contains(says), "--workdir {w}: {err}");
    }
    let out = stockade(&["run", "--direct", "--workdir", "/dev/shm", "--", "pwd"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "/dev/shm\n");
}
