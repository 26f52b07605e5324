//! A target (`--target`, a workload's `target:`) and a CPU list (`--cpus`).
#![no_main]
use libfuzzer_sys::fuzz_target;
use tunefleet_shared::target::Target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(target) = Target::parse(text) {
            // Its canonical text parses back to the same target.
            let again = Target::parse(&target.to_string()).expect("canonical text parses");
            assert_eq!(again, target);
            assert!(target.serves(&target), "a target serves jobs for itself");
        }
        if let Ok(cpus) = tunefleet_shared::cpus::CpuSet::parse(text) {
            let again = tunefleet_shared::cpus::CpuSet::parse(&cpus.to_string())
                .expect("printed list parses");
            assert_eq!(again, cpus);
            let _ = tunefleet_shared::cpus::split_among(&cpus, (data.len() % 9) + 1);
        }
    }
});
