//! `--allow-net`, `--deny-net` and `stockade net` (issue 18), in-process and through
//! a daemon with a token (a tenant).

use super::*;

both_ways! {
    fn bad_net_flags_list_every_problem(via) {
        let out = via.run(&[
            "run", "--allow-net", "pypi.org:0", "--allow-net", "*.", "--deny-net",
            "10.1.2.3/24", "--network", "--", "true",
        ]);
        assert_eq!(out.status.code(), Some(64), "{}", String::from_utf8_lossy(&out.stderr));
        let err = String::from_utf8_lossy(&out.stderr);
        for needle in ["--network", "network.allow[0]", "port 0", "network.allow[1]", "network.deny[0]"] {
            assert!(err.contains(needle), "{needle} missing: {err}");
        }
    }
}

both_ways! {
    fn allow_net_then_net_opens_and_closes_a_name(via) {
        if !require_root("allow_net_then_net_opens_and_closes_a_name") {
            return;
        }
        let out = via.run(&["create", "--json", "--allow-net", "pypi.org:443"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let id = json(&out)["id"].as_str().unwrap().to_string();
        let lookup = "import socket\ntry:\n    socket.getaddrinfo('deb.debian.org', 443); print('resolved')\nexcept socket.gaierror: print('nxdomain')";
        let exec = |via: &Via| json(&via.run(&["exec", "--json", &id, "--", "python3", "-c", lookup]));
        let before = exec(via);
        assert_eq!(before["stdout"], "nxdomain\n", "{before}");
        let denied = before["egress_denied"].as_array().unwrap();
        assert!(
            denied.iter().any(|d| d["destination"] == "deb.debian.org" && d["protocol"] == "dns"),
            "{before}"
        );
        let set = via.run(&["net", &id, "--allow", "pypi.org:443", "--allow", "deb.debian.org:443"]);
        assert!(set.status.success(), "{}", String::from_utf8_lossy(&set.stderr));
        let during = exec(via);
        assert_eq!(during["stdout"], "resolved\n", "{during}");
        let info = json(&via.run(&["inspect", "--json", &id]));
        assert_eq!(info["spec"]["network"]["allow"][1], "deb.debian.org:443", "{info}");
        assert!(!info["egress_denied"].as_array().unwrap().is_empty(), "{info}");
        assert!(via.run(&["net", &id, "--allow", "pypi.org:443"]).status.success());
        assert_eq!(exec(via)["stdout"], "nxdomain\n");
        // A sandbox without a policy has none to replace.
        let plain = json(&via.run(&["create", "--json"]))["id"].as_str().unwrap().to_string();
        let refused = via.run(&["net", "--json", &plain, "--allow", "pypi.org"]);
        assert_eq!(refused.status.code(), Some(64), "{}", String::from_utf8_lossy(&refused.stdout));
        assert!(via.run(&["rm", &id, &plain]).status.success());
    }
}

both_ways! {
    fn events_follow_streams_refusals_and_ends_with_the_sandbox(via) {
        if !require_root("events_follow_streams_refusals_and_ends_with_the_sandbox") {
            return;
        }
        let out = via.run(&["create", "--json", "--allow-net", "pypi.org:443"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let id = json(&out)["id"].as_str().unwrap().to_string();
        let follower = via
            .cmd(&["events", "--json", "--follow", &id])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(500));
        // Two refused connections a second apart (two events), then a lookup.
        let code = "import socket, time\n\
                    for _ in range(2):\n\
                    \x20   try: socket.create_connection(('1.1.1.1', 443), timeout=3)\n\
                    \x20   except OSError: pass\n\
                    \x20   time.sleep(1)\n\
                    try: socket.getaddrinfo('example.com', 443)\n\
                    except OSError: pass\n";
        assert!(via.run(&["exec", &id, "--", "python3", "-c", code]).status.success());
        std::thread::sleep(std::time::Duration::from_millis(600));
        assert!(via.run(&["rm", &id]).status.success());
        // The stream ends by itself once the sandbox is gone.
        let out = follower.wait_with_output().unwrap();
        assert!(out.status.success(), "{:?} {} {}", out.status, String::from_utf8_lossy(&out.stderr), String::from_utf8_lossy(&out.stdout));
        let events: Vec<Value> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let conns = events
            .iter()
            .filter(|e| e["denial"]["destination"] == "1.1.1.1" && e["denial"]["port"] == 443)
            .count();
        assert_eq!(conns, 2, "one event per refused attempt: {events:#?}");
        assert!(
            events.iter().any(|e| e["type"] == "egress_denied"
                && e["sandbox"] == id.as_str()
                && e["denial"]["protocol"] == "dns"
                && e["denial"]["destination"] == "example.com"),
            "{events:#?}"
        );
    }
}
