//! A text frame on /ws/worker, as the master parses it.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tunefleet_shared::protocol::WorkerMessage;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(message) = serde_json::from_str::<WorkerMessage>(text) {
            // Whatever parses serialises, and parses back the same.
            let json = serde_json::to_string(&message).expect("serialises");
            let back: WorkerMessage = serde_json::from_str(&json).expect("parses back");
            assert_eq!(format!("{back:?}"), format!("{message:?}"));
        }
    }
});
