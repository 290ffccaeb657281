//! The sandbox spec as every front door receives it (JSON) and the flag forms the CLI
//! parses: no input panics, and a spec that validates still validates after a
//! round trip through JSON (what the daemon stores and reads back).
#![no_main]

use libfuzzer_sys::fuzz_target;
use stockade_spec::{Mount, NetRule, SandboxSpec, User, parse_size};

fuzz_target!(|data: &[u8]| {
    if let Ok(spec) = serde_json::from_slice::<SandboxSpec>(data) {
        let json = serde_json::to_vec(&spec).expect("a spec serializes");
        let back: SandboxSpec = serde_json::from_slice(&json).expect("its JSON reads back");
        let first = spec.validate().is_ok();
        assert_eq!(
            first,
            back.validate().is_ok(),
            "validation changed over a round trip"
        );
    }
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = Mount::parse(text);
        let _ = User::parse(text);
        let _ = NetRule::parse(text);
        let _ = NetRule::parse_deny(text);
        if let Ok(n) = parse_size(text) {
            // What a size prints as parses back to the same size.
            assert_eq!(parse_size(&n.to_string()), Ok(n));
        }
    }
});
