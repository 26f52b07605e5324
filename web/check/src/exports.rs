//! The checker module's entry points. Results travel as JSON strings: the
//! page already has serde_json for the protocol, so this costs it nothing.

use wasm_bindgen::prelude::wasm_bindgen;

/// [`crate::workloads::check`] as JSON: `{"Ok": Checked}`.
#[wasm_bindgen]
pub fn check_workloads(text: &str, filename: &str) -> String {
    let checked: Result<_, String> = Ok(crate::workloads::check(text, filename));
    serde_json::to_string(&checked).unwrap_or_else(|e| internal_error(&e))
}

/// [`crate::model_file::load`] as JSON: `{"Ok": LoadedModel}` or `{"Err": "why"}`.
#[wasm_bindgen]
pub fn load_model(file: &str, bytes: &[u8]) -> String {
    let loaded = crate::model_file::load(file, bytes);
    serde_json::to_string(&loaded).unwrap_or_else(|e| internal_error(&e))
}

/// [`crate::downloads::make`] as JSON: `{"Ok": Files}` or `{"Err": "why"}`.
/// `download` is one of [`crate::downloads::Download::NAMES`].
#[wasm_bindgen]
pub fn make_downloads(download: &str, results_reply: &str) -> String {
    let files = crate::downloads::Download::from_name(download)
        .ok_or_else(|| format!("no download named {download:?}"))
        .and_then(|d| crate::downloads::make(d, results_reply));
    serde_json::to_string(&files).unwrap_or_else(|e| internal_error(&e))
}

/// Serialising these plain types cannot fail; if it ever did, the page shows
/// this instead of a preview.
fn internal_error(e: &serde_json::Error) -> String {
    serde_json::json!({ "Err": format!("the checker could not encode its answer: {e}") })
        .to_string()
}
