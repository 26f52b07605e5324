//! A MetaSchedule database as `tunefleet import` reads it: the input is the
//! workload file, a line `---`, then the record file. Whatever parses must
//! satisfy the checks the master applies to an import.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tunefleet_shared::import::{parse_metaschedule_database, MAX_IMPORTED_RECORDS};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (workloads, records) = text.split_once("\n---\n").unwrap_or((text, ""));
    if let Ok(parsed) = parse_metaschedule_database(workloads, "w.json", records, "r.json") {
        for w in &parsed {
            assert!(w.check().is_ok(), "a parsed workload fails the master's check");
            assert!(!w.records.is_empty() && w.records.len() <= MAX_IMPORTED_RECORDS);
        }
    }
});
