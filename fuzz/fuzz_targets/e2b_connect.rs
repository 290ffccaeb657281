//! E2B's Connect bodies as envd reads them: envelopes, server-streaming and unary
//! request messages, decoded into the process and watch requests the methods take.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stockade_e2b::connect::{envelopes, stream_request, unary_request};
use stockade_e2b::messages::{SelectRequest, StartRequest, WatchRequest};

fuzz_target!(|data: &[u8]| {
    if let Ok(list) = envelopes(data) {
        // Envelopes account for every byte of the body.
        let total: usize = list.iter().map(|(_, p)| p.len() + 5).sum();
        assert_eq!(total, data.len());
    }
    let _ = stream_request::<StartRequest>(data);
    let _ = stream_request::<WatchRequest>(data);
    let _ = stream_request::<serde_json::Value>(data);
    let _ = unary_request::<SelectRequest>(data);
    let _ = unary_request::<serde_json::Value>(data);
});
