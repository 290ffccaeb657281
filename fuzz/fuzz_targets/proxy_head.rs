//! The egress proxy's first look at a connection and its parse of a request head:
//! no input panics, and what passes is what a strict server would read.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stockade_agent::wire::{Head, classify, host_of, parse_request, valid_authority};

/// A host the proxy checks against the allowlist: a bare name or address, never one
/// carrying a port, userinfo, path or whitespace that a server would read otherwise.
fn checkable(host: &str) {
    assert!(
        host.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "-._:".contains(c)),
        "host {host:?} holds a character a server could read as another host"
    );
    assert!(!host.ends_with('.'), "host {host:?} keeps its trailing dot");
}

fuzz_target!(|data: &[u8]| {
    let head = classify(data);
    if let Head::Tls(Some(sni)) = &head {
        assert_eq!(sni, &sni.to_ascii_lowercase());
    }
    match parse_request(data) {
        Ok(Some((n, req))) => {
            assert!(n <= data.len());
            assert_eq!(req.raw, &data[..n]);
            // A head the parser takes is one classify takes as HTTP (or was still
            // reading): nothing is both a request here and "another protocol" there.
            assert!(
                matches!(head, Head::Http | Head::Malformed(..)),
                "parsed as a request but classified as {head:?}"
            );
            for h in req.host.iter().chain(&req.target_host) {
                if !h.is_empty() {
                    checkable(h.trim_start_matches('[').trim_end_matches(']'));
                }
            }
        }
        Ok(None) => assert!(!matches!(head, Head::Http), "classify saw a whole head"),
        Err(why) => assert!(!why.is_empty()),
    }
    if let Ok(text) = std::str::from_utf8(data)
        && valid_authority(text)
    {
        let h = host_of(text);
        assert!(!h.is_empty() || text.trim_matches([' ', '\t']).starts_with('.'));
        checkable(&h);
    }
});
