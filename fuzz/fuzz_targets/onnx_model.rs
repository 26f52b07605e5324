//! An uploaded ONNX file: summary, operator check, weight stripping, and an
//! `--input-shape` argument, as the CLI, the master and the page do.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tunefleet_shared::onnx;

fuzz_target!(|data: &[u8]| {
    if let Ok(summary) = onnx::summarize(data) {
        let _ = onnx::check_ops(&summary);
        if let Ok((stripped, _report)) = onnx::strip_weights(data, 64) {
            // Stripping keeps a model that still reads, with the same inputs.
            let again = onnx::summarize(&stripped).expect("a stripped model still parses");
            assert_eq!(again.inputs, summary.inputs);
        }
        let shapes = std::collections::BTreeMap::new();
        let _ = onnx::check_inputs(&summary, &shapes);
    }
    if let Ok(arg) = std::str::from_utf8(data) {
        let _ = onnx::parse_input_shape(arg);
    }
});
