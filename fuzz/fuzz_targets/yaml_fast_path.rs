//! The YAML fast path against serde-saphyr: wherever it reads a file, it
//! must read the same tree, with the same positions (shared/src/yaml_tree/fast.rs).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Err(disagreement) = tunefleet_shared::testing::yaml_fast_path_agrees(text) {
            panic!("{disagreement}");
        }
    }
});
