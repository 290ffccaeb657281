//! Issue 22: the gVisor platform can be chosen (`STOCKADE_GVISOR_PLATFORM`, or the
//! config file's `[gvisor] platform`), doctor and inspect say which one runs, and a
//! choice that cannot run is refused naming what was asked and the fix.

use stockade_testkit::{GVISOR_FIX, require, require_root, runsc};

use crate::{json, stockade};

#[test]
fn the_gvisor_platform_can_be_chosen_and_a_bad_choice_is_named() {
    if !require_root("the_gvisor_platform_can_be_chosen")
        || require("runsc (gVisor)", runsc(), GVISOR_FIX).is_none()
    {
        return;
    }
    // Asked for by the environment: doctor says so.
    let out = stockade(&["doctor", "--direct"])
        .env("STOCKADE_GVISOR_PLATFORM", "ptrace")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("ptrace (asked for by STOCKADE_GVISOR_PLATFORM)"),
        "{text}"
    );
    // And a sandbox made so runs on it, as inspect's applied list shows.
    let out = stockade(&["create", "--provider", "gvisor"])
        .env("STOCKADE_GVISOR_PLATFORM", "ptrace")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let info = stockade(&["inspect", "--provider", "gvisor", "--json", &id])
        .output()
        .unwrap();
    let rm = stockade(&["rm", "--provider", "gvisor", &id])
        .output()
        .unwrap();
    assert!(
        rm.status.success(),
        "{}",
        String::from_utf8_lossy(&rm.stderr)
    );
    let v = json(&info);
    assert!(
        v["applied"].as_array().is_some_and(|a| a
            .iter()
            .any(|w| w["kind"] == "platform" && w["detail"] == "ptrace")),
        "{v}"
    );
    // Asked for by the config file; a value that is no platform names the file, the
    // line and the platforms there are.
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(&config, "[gvisor]\nplatform = \"ptrace\"\n").unwrap();
    let out = stockade(&["doctor", "--direct"])
        .env("STOCKADE_CONFIG", &config)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("ptrace (asked for by the config file's [gvisor] platform)"),
        "{text}"
    );
    std::fs::write(&config, "[gvisor]\nplatform = \"turbo\"\n").unwrap();
    let out = stockade(&["run", "--provider", "gvisor", "--", "/bin/true"])
        .env("STOCKADE_CONFIG", &config)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(69), "{err}");
    assert!(
        err.contains(config.to_str().unwrap())
            && err.contains("turbo")
            && err.contains("`kvm`, `systrap`, `ptrace`"),
        "{err}"
    );
    // A name that is no platform, and kvm where it cannot run (here: `/dev/kvm` does
    // not run guests, or is absent): refused, naming the variable and the fix.
    for (value, says) in [
        (
            "warp",
            "STOCKADE_GVISOR_PLATFORM=\"warp\" is not a gVisor platform",
        ),
        ("kvm", "STOCKADE_GVISOR_PLATFORM asks for the kvm platform"),
    ] {
        let out = stockade(&["run", "--provider", "gvisor", "--", "/bin/true"])
            .env("STOCKADE_GVISOR_PLATFORM", value)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        if value == "kvm" && out.status.success() {
            continue; // a host whose /dev/kvm really runs gVisor
        }
        assert_eq!(out.status.code(), Some(69), "{value}: {err}");
        assert!(err.contains(says) && err.contains("fix:"), "{value}: {err}");
    }
}

/// A sandbox's id finds it whichever provider made it: exec, inspect, fs and rm need
/// no --provider again, and ls lists it with its provider.
#[test]
fn an_id_works_without_its_provider_named_again() {
    if !require_root("an_id_works_without_its_provider_named_again")
        || require("runsc (gVisor)", runsc(), GVISOR_FIX).is_none()
    {
        return;
    }
    let out = stockade(&["create", "--direct", "--provider", "gvisor"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let exec = stockade(&["exec", "--direct", "--json", &id, "--", "uname", "-r"])
        .output()
        .unwrap();
    let inspect = stockade(&["inspect", "--direct", "--json", &id])
        .output()
        .unwrap();
    let ls = stockade(&["ls", "--direct", "--json"]).output().unwrap();
    let fs = stockade(&["fs", "--direct", &id, "ls", "/tmp"])
        .output()
        .unwrap();
    let rm = stockade(&["rm", "--direct", &id]).output().unwrap();
    let gone = stockade(&["rm", "--direct", "--provider", "gvisor", &id])
        .output()
        .unwrap();
    assert!(
        exec.status.success(),
        "exec without --provider: {}",
        String::from_utf8_lossy(&exec.stderr)
    );
    // gVisor's own kernel answers, not the host's.
    let release = json(&exec)["stdout"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let host = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    assert_ne!(
        release.trim(),
        host.trim(),
        "the exec ran on the host's kernel"
    );
    assert_eq!(json(&inspect)["provider"], "gvisor", "{}", json(&inspect));
    let listed = json(&ls);
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["id"] == id.as_str() && s["provider"] == "gvisor"),
        "ls without --provider lists every provider's: {listed}"
    );
    assert!(
        fs.status.success(),
        "{}",
        String::from_utf8_lossy(&fs.stderr)
    );
    assert!(
        rm.status.success(),
        "rm without --provider: {}",
        String::from_utf8_lossy(&rm.stderr)
    );
    assert_eq!(gone.status.code(), Some(65), "the sandbox outlived its rm");
    // An id no provider holds is still not found, named.
    let none = stockade(&["exec", "--direct", "sb-0123456789ab", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(none.status.code(), Some(65));
    assert!(
        String::from_utf8_lossy(&none.stderr).contains("sb-0123456789ab"),
        "{}",
        String::from_utf8_lossy(&none.stderr)
    );
}
