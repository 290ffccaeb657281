//! ClientHellos as the egress proxy reads them (rustls's `Acceptor`, then the server
//! name): every input is a decision, never a panic, and a name is lowercase.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stockade_agent::wire::{Head, classify, incomplete};

fuzz_target!(|data: &[u8]| {
    // Always a TLS handshake record, so the fuzzer spends its time inside the hello.
    let mut record = Vec::with_capacity(data.len() + 1);
    record.push(0x16);
    record.extend_from_slice(data);
    match classify(&record) {
        Head::Tls(Some(sni)) => {
            assert!(!sni.is_empty());
            assert_eq!(sni, sni.to_ascii_lowercase());
        }
        Head::Tls(None) | Head::Other => {}
        Head::NeedMore => {
            // A hello that never completes is refused, not passed on by address.
            assert!(matches!(
                incomplete(&record, "t"),
                Head::Malformed("tls", _)
            ));
        }
        Head::Http | Head::Malformed(..) => panic!("a TLS record classified as HTTP"),
    }
});
