//! Events: one listener per kind on the page's root, which reads what the
//! markup says about the element the event came from (see `crate::html`)
//! and turns it into a [`Msg`].
//!
//! Delegation rather than a listener per element: a render then never adds
//! or removes listeners, and a row's button wins over the row because the
//! nearest `[data-click]` is the one that counts.

use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use web_sys::{DragEvent, Element, Event, HtmlInputElement, KeyboardEvent};

use super::{send, Download, Msg};
use crate::model::{SortKey, StateFilter};

const KINDS: [&str; 8] = [
    "click",
    "keydown",
    "input",
    "change",
    "submit",
    "dragover",
    "dragleave",
    "drop",
];

/// Listens on `root` for every event the page reacts to, for the page's life.
pub fn listen(root: &Element) {
    for kind in KINDS {
        let handler = Closure::<dyn FnMut(Event)>::new(move |e: Event| {
            if let Some(msg) = decode(kind, &e) {
                send(msg);
            }
        });
        let _ = root.add_event_listener_with_callback(kind, handler.as_ref().unchecked_ref());
        handler.forget();
    }
}

fn decode(kind: &str, e: &Event) -> Option<Msg> {
    let target: Element = e.target()?.dyn_into().ok()?;
    match kind {
        "click" => {
            let el = target.closest("[data-click]").ok()??;
            if el.tag_name() == "A" {
                e.prevent_default();
            }
            action(&el.get_attribute("data-click")?)
        }
        "keydown" => match e.dyn_ref::<KeyboardEvent>()?.key().as_str() {
            // Rows are focusable: Enter opens them, as a click does.
            "Enter" if target.tag_name() == "TR" => action(&target.get_attribute("data-click")?),
            "Escape" if target.closest("#job-detail").ok()?.is_some() => Some(Msg::Select(None)),
            _ => None,
        },
        "input" => {
            let field = target.get_attribute("data-input")?;
            let value = js_sys::Reflect::get(&target, &JsValue::from_str("value"))
                .ok()?
                .as_string()?;
            input(&field, value)
        }
        "change" if target.id() == "upload-file" => {
            let input: HtmlInputElement = target.dyn_into().ok()?;
            let file = input.files().and_then(|files| files.get(0));
            // Picking the same file again must fire `change` again.
            input.set_value("");
            file.map(Msg::FilePicked)
        }
        "submit" => {
            target.closest("[data-submit=sign-in]").ok()??;
            e.prevent_default();
            Some(Msg::SignIn)
        }
        "dragover" | "dragleave" | "drop" => {
            target.closest(".drop").ok()??;
            match kind {
                "dragover" => {
                    e.prevent_default();
                    Some(Msg::Dragging(true))
                }
                "dragleave" => Some(Msg::Dragging(false)),
                _ => {
                    e.prevent_default();
                    let file = e
                        .dyn_ref::<DragEvent>()?
                        .data_transfer()
                        .and_then(|dt| dt.files())
                        .and_then(|files| files.get(0));
                    Some(file.map_or(Msg::Dragging(false), Msg::FilePicked))
                }
            }
        }
        _ => None,
    }
}

/// A `data-click` value: `verb` or `verb:argument`.
fn action(value: &str) -> Option<Msg> {
    let (verb, arg) = value.split_once(':').unwrap_or((value, ""));
    Some(match verb {
        "theme" => Msg::ToggleTheme,
        "sign-out" => Msg::SignOut,
        "reconnect" => Msg::Reconnect,
        "dismiss" => Msg::DismissNotice(arg.parse().ok()?),
        "clear-upload" => Msg::ClearUpload,
        "submit" => Msg::Submit,
        "submit-model" => Msg::SubmitModel,
        "filter" => Msg::Filter(StateFilter::ALL.into_iter().find(|f| f.label() == arg)?),
        "sort" => Msg::SortBy(sort_key(arg)?),
        "more" => Msg::ShowMore,
        "select" => Msg::Select(Some(arg.to_string())),
        "close-detail" => Msg::Select(None),
        "model" => Msg::SelectModel(Some(arg.to_string())),
        "close-model" => Msg::SelectModel(None),
        "cancel" => Msg::Cancel(arg.to_string()),
        "retry" => Msg::Retry(arg.to_string()),
        "download" => Msg::Download(match arg {
            "json" => Download::Json,
            "csv" => Download::Csv,
            "metaschedule" => Download::Metaschedule,
            _ => return None,
        }),
        _ => return None,
    })
}

fn sort_key(name: &str) -> Option<SortKey> {
    Some(match name {
        "name" => SortKey::Name,
        "op" => SortKey::Op,
        "state" => SortKey::State,
        "attempts" => SortKey::Attempts,
        "worker" => SortKey::Worker,
        "progress" => SortKey::Progress,
        "best" => SortKey::Best,
        "gflops" => SortKey::Gflops,
        _ => return None,
    })
}

/// A `data-input` field and its new value.
fn input(field: &str, value: String) -> Option<Msg> {
    let (field, arg) = field.split_once(':').unwrap_or((field, ""));
    Some(match field {
        "token" => Msg::TokenInput(value),
        "upload-text" => Msg::UploadText(value),
        "search" => Msg::Search(value),
        "model-name" => Msg::ModelName(value),
        "model-trials" => Msg::ModelTrials(value),
        "shape" => Msg::ModelShape(arg.to_string(), value),
        _ => return None,
    })
}
