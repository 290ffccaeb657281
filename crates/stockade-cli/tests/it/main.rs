//! The `stockade` binary as scripts use it: JSON field names, exit codes, errors.
//! Needs root (native provider); fails in CI without it, skips loudly elsewhere.

use std::process::{Command, Output};

use serde_json::Value;

#[macro_use]
mod via;
mod bench;
mod daemon;
mod docker_user;
mod egress;
mod faults;
mod gvisor;
mod idrange;
mod images;
mod languages;
mod manners;
mod readme;
mod rootless;
mod snapshot;
mod timings;

use stockade_testkit::require_root;

fn state_dir() -> std::path::PathBuf {
    std::env::temp_dir().join(format!("stockade-cli-it-{}", std::process::id()))
}

fn stockade(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_stockade"));
    c.args(args)
        .env("STOCKADE_STATE_DIR", state_dir())
        .env_remove("STOCKADE_PROVIDER");
    c
}

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

both_ways! {
    fn run_json_has_the_promised_fields_and_exit_code_passes_through(via) {
        if !require_root("run_json") {
            return;
        }
        let out = via.run(&[
            "run",
            "--json",
            "--",
            "/usr/bin/python3",
            "-c",
            "import sys; print('hi'); sys.exit(7)",
        ]);
        assert_eq!(
            out.status.code(),
            Some(7),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v = json(&out);
        for field in [
            "exit_code",
            "stdout",
            "stderr",
            "timed_out",
            "oom_killed",
            "truncated",
            "duration_ms",
        ] {
            assert!(v.get(field).is_some(), "missing {field}: {v}");
        }
        assert_eq!(v["exit_code"], 7);
        assert_eq!(v["stdout"], "hi\n");
        assert_eq!(v["timed_out"], false);
    }
}

both_ways! {
    fn host_environment_does_not_reach_the_sandbox(via) {
        if !require_root("host_environment") {
            return;
        }
        let out = via
            .cmd(&["run", "--json", "--", "/usr/bin/env"])
            .env("STOCKADE_HOST_SECRET", "leaked-value")
            .output()
            .unwrap();
        let v = json(&out);
        let env = v["stdout"].as_str().unwrap();
        assert!(!env.contains("leaked-value"), "host env leaked: {env}");
        let mut keys: Vec<&str> = env.lines().filter_map(|l| l.split('=').next()).collect();
        keys.sort();
        assert_eq!(keys, ["HOME", "LANG", "PATH"], "{env}");
    }
}

both_ways! {
    fn languages_run_with_the_hosts_interpreters(via) {
        if !require_root("languages") {
            return;
        }
        for (lang, code, want) in [
            ("python", "print(6 * 7)", "42\n"),
            ("bash", "echo $((6 * 7))", "42\n"),
            ("sh", "echo 42", "42\n"),
            ("javascript", "console.log(6 * 7)", "42\n"),
        ] {
            let out = via.run(&["run", "--json", "--language", lang, "--code", code]);
            let v = json(&out);
            assert_eq!(v["stdout"], want, "{lang}: {v}");
        }
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("prog.py");
        std::fs::write(&file, "import sys\nprint('from file', sys.argv[0])\n").unwrap();
        let v = json(&via.run(&[
            "run",
            "--json",
            "-l",
            "python",
            "-f",
            file.to_str().unwrap(),
        ]));
        assert_eq!(v["stdout"], "from file /code/main.py\n", "{v}");
        let out = via.run(&["run", "--json", "--language", "cobol", "--code", "x"]);
        assert_eq!(out.status.code(), Some(64));
        assert!(
            json(&out)["error"]["message"]
                .as_str()
                .unwrap()
                .contains("unknown language")
        );
    }
}

both_ways! {
    fn timeout_flag_is_the_exec_deadline_for_run(via) {
        if !require_root("timeout_flag") {
            return;
        }
        let out = via.run(&[
            "run",
            "--json",
            "--timeout",
            "1",
            "--",
            "sh",
            "-c",
            "sleep 30",
        ]);
        let v = json(&out);
        assert_eq!(v["timed_out"], true, "{v}");
        assert_eq!(v["exit_code"], 137);
        assert!(v["duration_ms"].as_u64().unwrap() < 2500, "{v}");
    }
}

both_ways! {
    fn create_exec_ls_inspect_rm(via) {
        if !require_root("create_exec_ls_inspect_rm") {
            return;
        }
        let out = via.run(&["create", "--json", "--memory", "256m", "--env", "FOO=bar"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let id = json(&out)["id"].as_str().unwrap().to_string();
        let ex = via.run(&[
            "exec",
            "--json",
            &id,
            "--",
            "sh",
            "-c",
            "echo $FOO > /tmp/f; cat /tmp/f",
        ]);
        assert_eq!(json(&ex)["stdout"], "bar\n");
        let again = via.run(&["exec", "--json", &id, "--", "cat", "/tmp/f"]);
        assert_eq!(
            json(&again)["stdout"],
            "bar\n",
            "state persists between execs"
        );
        let ls = json(&via.run(&["ls", "--json"]));
        assert!(
            ls.as_array()
                .unwrap()
                .iter()
                .any(|s| s["id"] == id.as_str()),
            "{ls}"
        );
        let info = json(&via.run(&["inspect", "--json", &id]));
        assert_eq!(info["spec"]["limits"]["memory_bytes"], 256u64 << 20);
        // The report is typed: each wall a kind, whether it stands, and its words.
        let applied = info["applied"].as_array().unwrap();
        assert!(
            applied.iter().any(|w| w["kind"] == "limits"
                && w["enforced"] == true
                && w["detail"].as_str().unwrap().contains("memory 256MiB")),
            "{applied:?}"
        );
        assert!(
            applied
                .iter()
                .any(|w| w["kind"] == "seccomp" && w["enforced"] == true),
            "{applied:?}"
        );
        assert!(via.run(&["rm", &id]).status.success());
        let gone = via.run(&["exec", "--json", &id, "--", "true"]);
        assert_eq!(gone.status.code(), Some(65), "not found after rm");
        assert_eq!(json(&gone)["error"]["code"], "not_found");
        let again = via.run(&["rm", "--json", &id]);
        assert_eq!(again.status.code(), Some(65), "rm of an id that is gone");
        assert_eq!(json(&again)["error"]["code"], "not_found");
    }
}

both_ways! {
    fn exec_detach_returns_with_a_pid_and_logs_prints_its_output(via) {
        if !require_root("exec_detach_returns_with_a_pid_and_logs_prints_its_output") {
            return;
        }
        let out = via.run(&["create", "--json"]);
        let id = json(&out)["id"].as_str().unwrap().to_string();
        let started = std::time::Instant::now();
        let d = via.run(&[
            "exec", "--json", "-d", &id, "--", "sh", "-c", "echo up; echo oops >&2; sleep 60",
        ]);
        let took = started.elapsed();
        assert!(d.status.success(), "{}", String::from_utf8_lossy(&d.stderr));
        let v = json(&d);
        let pid = v["pid"].as_u64().unwrap_or_else(|| panic!("no pid: {v}"));
        assert_eq!(v["log"], format!("/tmp/.stockade-exec/{pid}.log"), "{v}");
        assert!(took < std::time::Duration::from_secs(30), "exec -d took {took:?}");
        // `logs` prints what it wrote so far.
        let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let mut seen = String::new();
        while std::time::Instant::now() < until {
            let l = via.run(&["logs", &id, &pid.to_string()]);
            seen = String::from_utf8_lossy(&l.stdout).into_owned();
            if seen.contains("up") && seen.contains("oops") {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        assert!(seen.contains("up\n") && seen.contains("oops\n"), "{seen:?}");
        // It runs on; a later exec stops it; `logs -f` then returns.
        let kill = via.run(&["exec", "--json", &id, "--", "kill", &pid.to_string()]);
        assert_eq!(json(&kill)["exit_code"], 0, "{}", json(&kill));
        let follow = via.run(&["logs", "-f", &id, &pid.to_string()]);
        assert!(follow.status.success(), "{}", String::from_utf8_lossy(&follow.stderr));
        assert!(String::from_utf8_lossy(&follow.stdout).contains("up"));
        // An unknown pid names what is missing; stdin and -d are refused together.
        let none = via.run(&["logs", &id, "99999"]);
        assert_eq!(none.status.code(), Some(65));
        assert!(String::from_utf8_lossy(&none.stderr).contains("99999"));
        let both = via.run(&["exec", "-d", "-i", &id, "--", "cat"]);
        assert_eq!(both.status.code(), Some(2), "{}", String::from_utf8_lossy(&both.stderr));
        assert!(via.run(&["rm", &id]).status.success());
    }
}

both_ways! {
    fn forward_carries_a_hosts_connections_to_a_port_inside(via) {
        use std::io::{BufRead, Read, Write};
        if !require_root("forward_carries_a_hosts_connections_to_a_port_inside") {
            return;
        }
        let id = json(&via.run(&["create", "--json"]))["id"]
            .as_str()
            .unwrap()
            .to_string();
        // Echoes what it reads, after "hello ", until its client closes its side.
        let serve = "import socket\ns = socket.socket()\ns.bind(('127.0.0.1', 8000)); s.listen()\nwhile True:\n    c, _ = s.accept(); c.sendall(b'hello ')\n    while True:\n        b = c.recv(65536)\n        if not b: break\n        c.sendall(b)\n    c.close()";
        let d = via.run(&["exec", "-d", &id, "--", "python3", "-c", serve]);
        assert!(d.status.success(), "{}", String::from_utf8_lossy(&d.stderr));
        let mut fwd = via
            .cmd(&["forward", "--json", &id, "0:8000"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        // Kept open to the end: the forward's last word (an error, in JSON) goes there.
        let mut out = std::io::BufReader::new(fwd.stdout.take().unwrap());
        out.read_line(&mut line).unwrap();
        let at: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"));
        let addr = at["listen"].as_str().unwrap().to_string();
        // 1 MiB each way through one connection (more than one message of any layer),
        // and the close of our sending side reaches the server inside.
        let payload: Vec<u8> = (0..1u32 << 20).map(|i| (i % 251) as u8).collect();
        let mut got = Vec::new();
        for _ in 0..100 {
            let mut c = std::net::TcpStream::connect(&addr).unwrap();
            let mut r = c.try_clone().unwrap();
            let reader = std::thread::spawn(move || {
                let mut got = Vec::new();
                let _ = r.read_to_end(&mut got);
                got
            });
            let _ = c.write_all(&payload);
            let _ = c.shutdown(std::net::Shutdown::Write);
            got = reader.join().unwrap();
            if !got.is_empty() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        assert_eq!(got.len(), payload.len() + 6, "what came back through the forward");
        assert_eq!(&got[..6], b"hello ");
        assert!(got[6..] == payload[..], "the bytes came back changed");
        // A port that is no port is refused by name.
        let bad = via.run(&["forward", &id, "70000"]);
        assert_eq!(
            bad.status.code(),
            Some(64),
            "{}",
            String::from_utf8_lossy(&bad.stderr)
        );
        assert!(via.run(&["rm", &id]).status.success());
        // The sandbox gone, the forward ends, saying so.
        let ended = fwd.wait_timeout_or_kill(std::time::Duration::from_secs(10));
        let mut last = String::new();
        let _ = out.read_to_string(&mut last);
        assert_eq!(ended, Some(65), "the forward outlived its sandbox: {last}");
        assert!(last.contains("not_found"), "{last}");
    }
}

trait WaitOrKill {
    fn wait_timeout_or_kill(&mut self, d: std::time::Duration) -> Option<i32>;
}

impl WaitOrKill for std::process::Child {
    fn wait_timeout_or_kill(&mut self, d: std::time::Duration) -> Option<i32> {
        let until = std::time::Instant::now() + d;
        while std::time::Instant::now() < until {
            if let Ok(Some(st)) = self.try_wait() {
                return st.code();
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let _ = self.kill();
        let _ = self.wait();
        None
    }
}

both_ways! {
    fn bad_flags_list_every_problem(via) {
        let out = via.run(&[
            "run", "--memory", "lots", "--pids", "0", "--mount", "nocolon", "--", "true",
        ]);
        assert_eq!(out.status.code(), Some(64));
        let err = String::from_utf8_lossy(&out.stderr);
        for needle in ["--memory", "limits.pids", "--mount"] {
            assert!(err.contains(needle), "{needle} missing: {err}");
        }
    }
}

both_ways! {
    fn doctor_reports_providers(via) {
        let out = via.run(&["doctor", "--json"]);
        let v = json(&out);
        let names: Vec<&str> = v["providers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap())
            .collect();
        assert!(names.contains(&"native"), "{v}");
        assert!(
            v["checks"]
                .as_array()
                .unwrap()
                .iter()
                .any(|c| c["name"] == "cgroups"),
            "{v}"
        );
        // Through a daemon, the daemon is checked too, and the exit code says it answers.
        assert_eq!(
            v["daemon"]["usable"].as_bool(),
            via.is_daemon().then_some(true),
            "{v}"
        );
        if via.is_daemon() {
            assert_eq!(out.status.code(), Some(0), "{v}");
        }
    }
}

both_ways! {
    fn killing_the_cli_mid_run_leaves_nothing(via) {
        if !require_root("killing_the_cli") {
            return;
        }
        let mut child = via.cmd(&["run", "--", "sleep", "60"]).spawn().unwrap();
        // The sandbox this CLI owns (other tests run sandboxes in parallel), as `ls`
        // shows it in-process and through the daemon alike.
        let owned_by = |pid: u32| -> Vec<String> {
            let out = via.run(&["ls", "--json"]);
            serde_json::from_slice::<Value>(&out.stdout)
                .ok()
                .and_then(|v| v.as_array().cloned())
                .unwrap_or_default()
                .iter()
                .filter(|s| s["owner_pid"] == pid)
                .filter_map(|s| s["id"].as_str().map(str::to_string))
                .collect()
        };
        let mut owned = Vec::new();
        for _ in 0..200 {
            owned = owned_by(child.id());
            if !owned.is_empty() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        assert_eq!(owned.len(), 1, "the running CLI owns one sandbox");
        let pid = child.id();
        kill9(pid);
        child.wait().unwrap();
        let mut gone = false;
        for _ in 0..200 {
            if owned_by(pid).is_empty() {
                gone = true;
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        assert!(gone, "{} outlived the killed CLI", owned[0]);
    }
}

fn kill9(pid: u32) {
    assert!(
        Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status()
            .unwrap()
            .success()
    );
}

both_ways! {
    fn wasm_provider_runs_python_from_the_cli(via) {
        let out = via.run(&[
            "run",
            "--json",
            "--provider",
            "wasm",
            "--language",
            "python",
            "--code",
            "import sys; print(6 * 7, sys.platform)",
        ]);
        let v = json(&out);
        assert_eq!(
            v["stdout"], "42 wasi\n",
            "python.wasm did not run ({v}); install it with `stockade runtime install python-wasm` (CI does in crates/stockade-wasm/ci-setup.sh)"
        );
        let out = via.run(&[
            "run",
            "--json",
            "--provider",
            "wasm",
            "--timeout",
            "1",
            "--language",
            "python",
            "--code",
            "while True: pass",
        ]);
        let v = json(&out);
        assert_eq!(v["timed_out"], true, "{v}");
        let ls = json(&via.run(&["runtime", "ls", "--json"]));
        assert!(
            ls["runtimes"]
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r["name"] == "python-wasm" && r["installed"] == true),
            "{ls}"
        );
    }
}

both_ways! {
    fn fs_cp_and_workspace_from_the_cli(via) {
        if !require_root("fs_cp_and_workspace") {
            return;
        }
        let ws = tempfile::tempdir().unwrap();
        std::os::unix::fs::chown(ws.path(), Some(1000), Some(1000)).unwrap();
        std::fs::write(ws.path().join("input.txt"), "from host\n").unwrap();
        let id = json(&via.run(&[
            "create",
            "--json",
            "--workspace",
            &format!("{}:rw", ws.path().display()),
        ]))["id"]
            .as_str()
            .unwrap()
            .to_string();
        let pwd = json(&via.run(&[
            "exec",
            "--json",
            &id,
            "--",
            "sh",
            "-c",
            "pwd; cat input.txt",
        ]));
        assert_eq!(pwd["stdout"], "/work\nfrom host\n");
        assert!(
            via.run(&["fs", &id, "write", "/work/out.txt", "written by fs"])
                .status
                .success()
        );
        assert_eq!(
            std::fs::read_to_string(ws.path().join("out.txt")).unwrap(),
            "written by fs"
        );
        let r = json(&via.run(&["fs", "--json", &id, "read", "/work/out.txt"]));
        assert_eq!(r["data"], "written by fs");
        let e = json(&via.run(&[
            "fs",
            "--json",
            &id,
            "edit",
            "/work/out.txt",
            "fs",
            "the CLI",
        ]));
        assert_eq!(e["replacements"], 1);
        let ls = json(&via.run(&["fs", "--json", &id, "ls", "/work"]));
        let names: Vec<&str> = ls
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["input.txt", "out.txt"]);
        let g = json(&via.run(&["fs", "--json", &id, "grep", "CLI", "/work"]));
        assert_eq!(g["matches"][0]["line"], "written by the CLI");
        let gl = json(&via.run(&["fs", "--json", &id, "glob", "*.txt", "/work"]));
        assert_eq!(gl["paths"].as_array().unwrap().len(), 2);
        let missing = via.run(&["fs", "--json", &id, "read", "/work/nope"]);
        assert_eq!(missing.status.code(), Some(65));
        // cp in and out, directories included; a symlink is read inside the sandbox.
        let src = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(src.path().join("pkg/sub")).unwrap();
        std::fs::write(src.path().join("pkg/sub/mod.py"), "X = 1\n").unwrap();
        assert!(
            via.run(&[
                "cp",
                src.path().join("pkg").to_str().unwrap(),
                &format!("{id}:/tmp/pkg")
            ])
            .status
            .success()
        );
        let out = tempfile::tempdir().unwrap();
        assert!(
            via.run(&[
                "cp",
                &format!("{id}:/tmp/pkg"),
                out.path().join("back").to_str().unwrap()
            ])
            .status
            .success()
        );
        assert_eq!(
            std::fs::read_to_string(out.path().join("back/sub/mod.py")).unwrap(),
            "X = 1\n"
        );
        // After the directory's copy: a link leaving the tree is refused on the host
        // (stockade::archive::unpack_on_host); copied alone, it is read inside.
        let _ = via.run(&[
            "exec",
            &id,
            "--",
            "sh",
            "-c",
            "ln -s /etc/hostname /tmp/pkg/hostlink",
        ]);
        let refused = via.run(&[
            "cp",
            &format!("{id}:/tmp/pkg"),
            out.path().join("back2").to_str().unwrap(),
        ]);
        assert_eq!(refused.status.code(), Some(77), "{refused:?}");
        assert!(!out.path().join("back2/sub").exists());
        assert!(
            via.run(&[
                "cp",
                &format!("{id}:/tmp/pkg/hostlink"),
                out.path().join("h").to_str().unwrap()
            ])
            .status
            .success()
        );
        assert_eq!(
            std::fs::read_to_string(out.path().join("h")).unwrap(),
            "sandbox\n",
            "the link was read on the host, not inside"
        );
        // A file copied onto an existing directory lands inside it.
        let single = src.path().join("single.txt");
        std::fs::write(&single, "one file").unwrap();
        assert!(
            via.run(&["cp", single.to_str().unwrap(), &format!("{id}:/tmp")])
                .status
                .success()
        );
        assert_eq!(
            json(&via.run(&["fs", "--json", &id, "read", "/tmp/single.txt"]))["data"],
            "one file"
        );
        assert!(via.run(&["rm", &id]).status.success());
        // Read-only workspace by default.
        let ro = json(&via.run(&[
            "run",
            "--json",
            "--workspace",
            ws.path().to_str().unwrap(),
            "--",
            "sh",
            "-c",
            "touch x",
        ]));
        assert_ne!(ro["exit_code"], 0, "{ro}");
        assert!(!ws.path().join("x").exists());
    }
}

both_ways! {
    fn session_exec_persists_the_workspace(via) {
        if !require_root("session_exec") {
            return;
        }
        let home = tempfile::tempdir().unwrap();
        let h = home.path().to_str().unwrap();
        let a = json(&via.run(&[
            "session",
            "--home",
            h,
            "exec",
            "--json",
            "demo",
            "--",
            "sh",
            "-c",
            "echo 1 >> log; cat log",
        ]));
        assert_eq!(a["stdout"], "1\n", "{a}");
        assert!(
            via.run(&["session", "--home", h, "release", "demo"])
                .status
                .success()
        );
        let b = json(&via.run(&[
            "session",
            "--home",
            h,
            "exec",
            "--json",
            "demo",
            "--",
            "sh",
            "-c",
            "echo 2 >> log; cat log",
        ]));
        assert_eq!(b["stdout"], "1\n2\n", "the workspace survived the release");
        let ls = json(&via.run(&["session", "--home", h, "ls", "--json"]));
        assert_eq!(ls[0]["name"], "demo");
        assert!(
            via.run(&["session", "--home", h, "rm", "demo"])
                .status
                .success()
        );
        assert!(!home.path().join("sessions/demo").exists());
    }
}

// Issue 14, finding 3: descriptors the caller of `stockade` left open do not reach
// the code (the fds are planted without close-on-exec, so `stockade` inherits them).
both_ways! {
    fn descriptors_inherited_by_the_cli_do_not_reach_the_code(via) {
        if !require_root("descriptors_inherited_by_the_cli") {
            return;
        }
        let planted = stockade_testkit::fds::planted();
        let out = via.run(&["run", "--", "/bin/sh", "-c", &planted.probe()]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        planted.assert_none_leaked(&String::from_utf8_lossy(&out.stdout));
    }
}

both_ways! {
    fn exec_tty_runs_the_command_on_a_terminal(via) {
        use std::io::Write as _;
        if !require_root("exec_tty_runs_the_command_on_a_terminal") {
            return;
        }
        let out = via.run(&["create", "--json"]);
        let id = json(&out)["id"].as_str().unwrap().to_string();
        let mut child = via
            .cmd(&["exec", "-t", &id, "--", "/bin/sh"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn stockade exec -t");
        // Typed on the terminal inside: its answers say it is one, of the default size
        // (this test's stdout is no terminal), and the shell's exit code comes back.
        child
            .stdin
            .take()
            .unwrap()
            .write_all(b"tty; test -t 0 && test -t 2 && echo on-$((1+1)); stty size; exit 3\n")
            .unwrap();
        let done = child.wait_with_output().unwrap();
        let shown = String::from_utf8_lossy(&done.stdout);
        assert_eq!(done.status.code(), Some(3), "{shown}\n{}", String::from_utf8_lossy(&done.stderr));
        assert!(shown.contains("/dev/pts/"), "{shown}");
        assert!(shown.contains("on-2"), "{shown}");
        assert!(shown.contains("24 80"), "{shown}");
        // No JSON of a terminal, and no terminal for a detached command.
        let j = via.run(&["exec", "--json", "-t", &id, "--", "true"]);
        let said = format!("{}{}", String::from_utf8_lossy(&j.stdout), String::from_utf8_lossy(&j.stderr));
        assert_eq!(j.status.code(), Some(64), "{said}");
        assert!(said.contains("--tty"), "{said}");
        let d = via.run(&["exec", "-t", "-d", &id, "--", "true"]);
        assert_eq!(d.status.code(), Some(2), "{}", String::from_utf8_lossy(&d.stderr));
        assert!(via.run(&["rm", &id]).status.success());
        // `run -t`: a fresh sandbox, the command on its terminal, gone after.
        let mut child = via
            .cmd(&["run", "-t", "--", "/bin/sh"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn stockade run -t");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(b"test -t 1 && echo ran-$((2+3)); exit 4\n")
            .unwrap();
        let done = child.wait_with_output().unwrap();
        let shown = String::from_utf8_lossy(&done.stdout);
        assert_eq!(done.status.code(), Some(4), "{shown}\n{}", String::from_utf8_lossy(&done.stderr));
        assert!(shown.contains("ran-5"), "{shown}");
    }
}

both_ways! {
    fn watch_prints_each_change_until_the_directory_goes(via) {
        use std::io::{BufRead, BufReader};
        if !require_root("watch_prints_each_change_until_the_directory_goes") {
            return;
        }
        let id = json(&via.run(&["create", "--json"]))["id"].as_str().unwrap().to_string();
        let mk = via.run(&["exec", "--json", &id, "--", "mkdir", "-p", "/tmp/w/sub"]);
        assert_eq!(json(&mk)["exit_code"], 0, "{}", json(&mk));
        let mut child = via
            .cmd(&["watch", "-r", &id, "/tmp/w"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // It says on stderr once it watches.
        let mut err = BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        err.read_line(&mut line).unwrap();
        assert!(line.starts_with("watching /tmp/w and below"), "{line:?}");
        let ch = via.run(&["exec", "--json", &id, "--", "sh", "-c", "echo a > /tmp/w/sub/f && rm -r /tmp/w"]);
        assert_eq!(json(&ch)["exit_code"], 0, "{}", json(&ch));
        // The directory gone, the watch ends by itself, having printed each change.
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{:?}", out.status);
        let text = String::from_utf8_lossy(&out.stdout);
        for want in ["create sub/f", "write  sub/f", "remove sub/f", "remove sub"] {
            assert!(text.lines().any(|l| l == want), "no {want:?} in {text:?}");
        }
        // What cannot be watched is refused by name with its exit code.
        let none = via.run(&["watch", "--json", &id, "/nope"]);
        assert_eq!(none.status.code(), Some(65), "{}", String::from_utf8_lossy(&none.stdout));
        assert!(String::from_utf8_lossy(&none.stdout).contains("/nope"));
        let rel = via.run(&["watch", &id, "relative"]);
        assert_eq!(rel.status.code(), Some(64), "{}", String::from_utf8_lossy(&rel.stderr));
        assert!(via.run(&["rm", &id]).status.success());
    }
}
