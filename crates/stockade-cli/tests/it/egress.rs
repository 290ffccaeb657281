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
