//! A Lorien workload file (`tunefleet import-lorien`, or submitted as is).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = tunefleet_shared::lorien::is_lorien_file(text);
        if let Ok(workloads) = tunefleet_shared::lorien::import_lorien(text, "fuzz.yaml", 64) {
            // The converted file must parse back as a workload file.
            let yaml = tunefleet_shared::lorien::to_tunefleet_yaml(&workloads);
            let back = tunefleet_shared::workload::parse_workload_file(&yaml, "converted.yaml");
            assert!(
                back.is_ok(),
                "converted Lorien file does not parse: {back:?}\n{yaml}"
            );
        }
    }
});
