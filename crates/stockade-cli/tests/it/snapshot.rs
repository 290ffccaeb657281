//! `stockade snapshot` and `--from-snapshot` on a provider without snapshots
//! (native): bad names, the refusal naming the provider and what to use, spec flags
//! beside `--from-snapshot`. The microvm provider's snapshots are tested with real
//! VMs in crates/stockade-microvm/tests/it.

use crate::{json, require_root};

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

both_ways! {
    fn snapshots_are_refused_by_name_where_the_provider_has_none(via) {
        if !require_root("snapshots_are_refused") {
            return;
        }
        let id = json(&via.run(&["create", "--json"]))["id"].as_str().unwrap().to_string();
        for bad in ["../x", ".x", "a/b", ""] {
            let out = via.run(&["snapshot", &id, bad]);
            assert_eq!(out.status.code(), Some(64), "{bad:?}: {}", stderr(&out));
            assert!(stderr(&out).contains("is not valid"), "{}", stderr(&out));
        }
        let out = via.run(&["snapshot", &id, "base"]);
        assert_ne!(out.status.code(), Some(0));
        assert!(
            stderr(&out).contains("snapshot on the native provider is unavailable")
                && stderr(&out).contains("use the microvm provider"),
            "{}",
            stderr(&out)
        );
        // Spec flags beside --from-snapshot are refused: the snapshot's spec holds.
        let out = via.run(&["create", "--from-snapshot", "base", "--memory", "1g"]);
        assert_eq!(out.status.code(), Some(64), "{}", stderr(&out));
        assert!(stderr(&out).contains("drop the spec flags"), "{}", stderr(&out));
        let out = via.run(&["run", "--from-snapshot", "base", "--cpus", "2", "true"]);
        assert!(stderr(&out).contains("drop the spec flags"), "{}", stderr(&out));
        let out = via.run(&["create", "--from-snapshot", "base"]);
        assert_ne!(out.status.code(), Some(0));
        let ls = via.run(&["snapshot", "ls", "--json"]);
        if via.is_daemon() {
            // The daemon asks each of its providers; this tenant has none.
            assert!(stderr(&out).contains("snapshot base not found"), "{}", stderr(&out));
            assert_eq!(json(&ls), serde_json::json!([]), "{}", stderr(&ls));
        } else {
            assert!(
                stderr(&out).contains("starting from a snapshot on the native provider is unavailable"),
                "{}",
                stderr(&out)
            );
            assert!(String::from_utf8_lossy(&ls.stdout).contains("listing snapshots on the native provider"));
        }
        assert!(via.run(&["rm", &id]).status.success());
    }
}
