//! `stockade run --timings`: each step of a run, with what it cost, on stderr.

use super::*;

/// The rows of the timings table in `stderr`: (at, took, step); `total` has no took.
fn rows(stderr: &str) -> Vec<(f64, Option<f64>, String)> {
    let table = stderr
        .split_once("      at     took  step\n")
        .unwrap_or_else(|| panic!("no timings table in: {stderr}"))
        .1;
    let mut out = Vec::new();
    for line in table.lines() {
        let at: f64 = line[..8]
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("{line}: {e}"));
        let took = line[9..17].trim();
        let took = (!took.is_empty()).then(|| took.parse::<f64>().unwrap());
        out.push((at, took, line[19..].to_string()));
        if line.ends_with("  total") {
            break;
        }
    }
    out
}

fn find<'a>(rows: &'a [(f64, Option<f64>, String)], name: &str) -> &'a (f64, Option<f64>, String) {
    rows.iter()
        .find(|r| r.2 == name)
        .unwrap_or_else(|| panic!("no step {name:?} in {rows:?}"))
}

both_ways! {
    fn run_timings_prints_each_step_on_stderr(via) {
        if !require_root("run_timings") {
            return;
        }
        let out = via.run(&["run", "--timings", "--", "/bin/sh", "-c", "echo out; sleep 0.05"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        // The command's own output is untouched: the table goes to stderr.
        assert_eq!(String::from_utf8_lossy(&out.stdout), "out\n");
        let rows = rows(&stderr);
        let (_, create, _) = find(&rows, "create");
        let (exec_at, exec, _) = find(&rows, "exec");
        let (destroy_at, destroy, _) = find(&rows, "destroy");
        let (total, none, _) = find(&rows, "total");
        assert!(none.is_none());
        let (create, exec, destroy) = (create.unwrap(), exec.unwrap(), destroy.unwrap());
        // The exec includes the command's 50 ms sleep; the three add up to the total.
        assert!(exec >= 50.0, "{stderr}");
        assert!(create > 0.0 && destroy > 0.0, "{stderr}");
        assert!((exec_at - create).abs() < 0.02, "{stderr}");
        assert!((destroy_at - (exec_at + exec)).abs() < 0.02, "{stderr}");
        assert!((total - (destroy_at + destroy)).abs() < 0.02, "{stderr}");
        if via.is_daemon() {
            return; // the daemon's sandboxes were made before; it says only the three
        }
        // In-process, the native provider's own steps: the host's, the monitor's and
        // PID 1's, all inside the create.
        for name in [
            "host: plan the sandbox",
            "host: start the monitor",
            "monitor: its process starting",
            "monitor: read the launch plan",
            "monitor: create the cgroups",
            "monitor: clone PID 1 into new namespaces",
            "monitor: move PID 1 into the cgroups",
            "monitor: wait for PID 1 to finish its setup",
            "PID 1: build the root and pivot into it",
            "PID 1: wait for the cgroups and the network",
            "host: the monitor's report",
        ] {
            let (at, took, _) = find(&rows, name);
            assert!(
                at + took.unwrap() <= create + 0.05,
                "{name} ends after the create: {stderr}"
            );
        }
        // One process's steps follow each other, in order (each number is rounded to
        // 0.01 ms on its own, so a start and the previous end can differ by 0.015).
        // Steps that start in the same 0.01 ms are printed in either order: the
        // shorter (an instant, "its process starting") counts as the first.
        let mut monitor: Vec<_> = rows.iter().filter(|r| r.2.starts_with("monitor: ")).collect();
        monitor.sort_by(|a, b| {
            a.0.total_cmp(&b.0)
                .then(a.1.unwrap_or(0.0).total_cmp(&b.1.unwrap_or(0.0)))
        });
        for w in monitor.windows(2) {
            assert!(
                w[1].0 + 0.02 >= w[0].0 + w[0].1.unwrap(),
                "monitor steps overlap: {stderr}"
            );
        }
        // PID 1 builds its root while the monitor moves it into the cgroups.
        let (pid1_at, _, _) = find(&rows, "PID 1: build the root and pivot into it");
        let (clone_at, clone, _) = find(&rows, "monitor: clone PID 1 into new namespaces");
        let _ = clone;
        assert!(*pid1_at + 0.01 >= *clone_at, "{stderr}");
    }
}

#[test]
fn inspect_says_how_a_native_sandbox_started() {
    if !require_root("inspect_steps") {
        return;
    }
    let out = stockade(&["create"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let v = json(&stockade(&["inspect", "--json", &id]).output().unwrap());
    let human = stockade(&["inspect", &id]).output().unwrap();
    let _ = stockade(&["rm", &id]).output();
    let steps = v["steps"]
        .as_array()
        .unwrap_or_else(|| panic!("no steps: {v}"));
    let names: Vec<&str> = steps.iter().filter_map(|s| s["name"].as_str()).collect();
    assert!(
        names.contains(&"monitor: move PID 1 into the cgroups"),
        "{names:?}"
    );
    assert!(
        names.contains(&"PID 1: build the root and pivot into it"),
        "{names:?}"
    );
    for s in steps {
        assert!(s["start_us"].is_u64() && s["took_us"].is_u64(), "{s}");
    }
    let human = String::from_utf8_lossy(&human.stdout);
    assert!(human.contains("started in:"), "{human}");
    assert!(
        human.contains("PID 1: build the root and pivot into it"),
        "{human}"
    );
}
