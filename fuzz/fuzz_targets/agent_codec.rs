//! The agent protocol's frames, both directions, and the microVM's mux frames: any
//! bytes decode to a message or an error, and a decoded message encodes back to
//! bytes that decode to the same message.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stockade_agent_proto::codec::{encode, read_msg};
use stockade_agent_proto::mux::{read_frame, write_frame};
use stockade_agent_proto::{AgentMsg, ClientMsg};

fn round_trip<T>(data: &[u8])
where
    T: serde::Serialize + serde::de::DeserializeOwned,
{
    let mut r = data;
    while let Ok(Some(msg)) = read_msg::<_, T>(&mut r) {
        let once = encode(&msg).expect("a decoded message encodes");
        let again: T = read_msg(&mut once.as_slice())
            .expect("an encoded message decodes")
            .expect("an encoded message is one frame");
        assert_eq!(
            once,
            encode(&again).expect("encodes"),
            "the encoding is not stable"
        );
    }
}

fuzz_target!(|data: &[u8]| {
    round_trip::<ClientMsg>(data);
    round_trip::<AgentMsg>(data);
    let mut r = data;
    while let Ok(Some(f)) = read_frame(&mut r) {
        let mut out = Vec::new();
        write_frame(&mut out, f.stream, f.kind, &f.payload).expect("a read frame writes");
        let back = read_frame(&mut out.as_slice())
            .expect("reads")
            .expect("one frame");
        assert_eq!(back, f);
    }
});
