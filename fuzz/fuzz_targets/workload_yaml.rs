//! A workload file as `tunefleet submit` and the master read it.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(workloads) = tunefleet_shared::workload::parse_workload_file(text, "fuzz.yaml") {
            // What the master does next with an accepted file: identity and wire form.
            for w in &workloads {
                let _ = w.job_id();
                let _ = serde_json::to_string(w);
            }
        }
    }
});
