//! Calls into the checker module (`web-check`): workload and Lorien files
//! checked with the master's parser, ONNX models read and stripped, the
//! download files made from the master's `results`.
//!
//! The module is not part of the first load. `boot.js` defines the three
//! global functions below; the first call fetches and starts the module, the
//! later ones reuse it. Answers come back as JSON text, decoded with the
//! page's JSON reader ([`tunefleet_shared::tree`]).

use tunefleet_shared::tree::FromTree;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;

use crate::model_upload::LoadedModel;
use crate::upload::Checked;
use web_check::downloads::{Download, Files};

#[wasm_bindgen]
extern "C" {
    #[wasm_bindgen(catch, js_name = tunefleetCheckWorkloads)]
    fn check_workloads_js(text: &str, filename: &str) -> Result<js_sys::Promise, JsValue>;

    #[wasm_bindgen(catch, js_name = tunefleetMakeDownloads)]
    fn make_downloads_js(download: &str, results_reply: &str) -> Result<js_sys::Promise, JsValue>;

    #[wasm_bindgen(catch, js_name = tunefleetLoadModel)]
    fn load_model_js(file: &str, bytes: &[u8]) -> Result<js_sys::Promise, JsValue>;
}

/// The file checked, or one problem saying that the checker did not load.
pub(super) async fn check_workloads(text: &str, filename: &str) -> Checked {
    match call(check_workloads_js(text, filename)).await {
        Ok(Ok(checked)) => checked,
        Ok(Err(e)) => Checked::failed(e),
        Err(e) => Checked::failed(format!(
            "the workload checker could not be loaded ({e}): reload the page to try again"
        )),
    }
}

/// The model read and stripped, or why it cannot be used.
pub(super) async fn load_model(file: &str, bytes: &[u8]) -> Result<LoadedModel, String> {
    call(load_model_js(file, bytes)).await.map_err(|e| {
        format!("{file}: the model checker could not be loaded ({e}): reload the page to try again")
    })?
}

/// The files to save for `download`, made from the text of the master's
/// reply to `results`, or why not.
pub(super) async fn make_downloads(
    download: Download,
    results_reply: &str,
) -> Result<Files, String> {
    call(make_downloads_js(download.name(), results_reply))
        .await
        .map_err(|e| format!("the download module could not be loaded ({e}): try again"))?
}

/// Awaits the promise and decodes its `{"Ok": T}` / `{"Err": "why"}` text.
/// The outer error is the call itself failing (network, module load).
async fn call<T: FromTree>(
    promise: Result<js_sys::Promise, JsValue>,
) -> Result<Result<T, String>, String> {
    let value = JsFuture::from(promise.map_err(js_text)?)
        .await
        .map_err(js_text)?;
    let json = value
        .as_string()
        .ok_or_else(|| "its answer is not text".to_string())?;
    tunefleet_shared::tree::from_str(&json)
        .map_err(|e| format!("its answer is not understood: {e}"))
}

fn js_text(value: JsValue) -> String {
    value
        .dyn_ref::<js_sys::Error>()
        .map(|e| String::from(e.message()))
        .or_else(|| value.as_string())
        .unwrap_or_else(|| format!("{value:?}"))
}
