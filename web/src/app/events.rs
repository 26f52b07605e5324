//! Events: one listener per kind on the page's root, which reads what the
//! markup says about the element the event came from (`data-click`,
//! `data-field`: [`crate::action`]) and turns it into a [`Msg`].
//!
//! Delegation rather than a listener per element: a render then never adds
//! or removes listeners, and a row's button wins over the row because the
//! nearest `[data-click]` is the one that counts.

use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use web_sys::{DragEvent, Element, Event, HtmlInputElement, KeyboardEvent};

use super::{send, Msg};
use crate::action::{Click, TextField};

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
pub(super) fn listen(root: &Element) {
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
            let field = target.get_attribute("data-field")?;
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

impl From<Click<'_>> for Msg {
    fn from(click: Click<'_>) -> Msg {
        match click {
            Click::ToggleTheme => Msg::ToggleTheme,
            Click::SignOut => Msg::SignOut,
            Click::Reconnect => Msg::Reconnect,
            Click::DismissNotice(id) => Msg::DismissNotice(id),
            Click::ClearUpload => Msg::ClearUpload,
            Click::Submit => Msg::Submit,
            Click::SubmitModel => Msg::SubmitModel,
            Click::Filter(filter) => Msg::Filter(filter),
            Click::Sort(key) => Msg::SortBy(key),
            Click::ShowMore => Msg::ShowMore,
            Click::Select(job) => Msg::Select(Some(job.to_string())),
            Click::CloseDetail => Msg::Select(None),
            Click::Model(name) => Msg::SelectModel(Some(name.to_string())),
            Click::CloseModel => Msg::SelectModel(None),
            Click::Cancel(job) => Msg::Cancel(job.to_string()),
            Click::Retry(job) => Msg::Retry(job.to_string()),
            Click::Download(what) => Msg::Download(what),
        }
    }
}

fn action(value: &str) -> Option<Msg> {
    Click::parse(value).map(Msg::from)
}

/// A field's new value.
fn input(field: &str, value: String) -> Option<Msg> {
    Some(match TextField::parse(field)? {
        TextField::Token => Msg::TokenInput(value),
        TextField::UploadText => Msg::UploadText(value),
        TextField::Search => Msg::Search(value),
        TextField::ModelName => Msg::ModelName(value),
        TextField::ModelTrials => Msg::ModelTrials(value),
        TextField::Shape(input) => Msg::ModelShape(input.to_string(), value),
    })
}
