//! The upload box: workload YAML typed, pasted or dropped (checked by the
//! checker module, then submitted), or an ONNX model with its form
//! (`model_form.rs`), and what the master said about the last submit.
//!
//! Its state is its own ([`UploadState`], a reducer of the box): the file,
//! the checker's answer, the outcome. Effects of the box ask the checker
//! whenever the content changes, and turn the session's answer to a submit
//! into the outcome shown here.

use std::cell::RefCell;
use std::rc::Rc;

use gloo::file::callbacks::FileReader;
use tunefleet_shared::protocol::{ClientCommand, Role};
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::spawn_local;
use web_sys::{DragEvent, HtmlInputElement};
use yew::prelude::*;

use super::checker;
use super::model_form::model_form;
use super::state::{use_fleet, Fleet};
use super::widgets::{head, num_cell, on_input};
use crate::format::{format_bytes, short_id};
use crate::model_upload;
use crate::upload::{Checked, ErrorRow, PreviewRow, SubmitOutcome, ToCheck};
use crate::upload::{UploadAction, UploadState};
use crate::view_model::{Action, Session};

impl Reducible for UploadState {
    type Action = UploadAction;

    fn reduce(self: Rc<Self>, action: UploadAction) -> Rc<Self> {
        // The big parts (a checked file's rows, a model) are shared, not copied.
        let mut next = (*self).clone();
        next.apply(action);
        Rc::new(next)
    }
}

pub(super) type Upload = UseReducerHandle<UploadState>;

pub(super) fn plural<'a>(n: usize, one: &'a str, many: &'a str) -> &'a str {
    if n == 1 {
        one
    } else {
        many
    }
}

#[derive(Properties, PartialEq)]
pub(super) struct UploadProps {
    /// A file that could not be read: a line for the notice area.
    pub on_error: Callback<String>,
}

#[function_component]
pub(super) fn UploadBox(p: &UploadProps) -> Html {
    let fleet = use_fleet();
    let upload = use_reducer(UploadState::default);
    let dragging = use_state_eq(|| false);
    // The file being read; dropped (and so aborted) when the next is picked.
    let reader = use_mut_ref(|| None::<FileReader>);
    use_checker(&upload);
    use_submit_answers(&fleet, &upload);
    let pick = {
        let (upload, dragging) = (upload.dispatcher(), dragging.setter());
        let on_error = p.on_error.clone();
        Callback::from(move |file: web_sys::File| {
            dragging.set(false);
            upload.dispatch(UploadAction::Picked);
            let read = read_file(file, upload.clone(), on_error.clone(), reader.clone());
            *reader.borrow_mut() = read;
        })
    };
    let session = fleet.session();
    let body = match &upload.model {
        Some(model) => html! {
            <>
                { source(&upload, &model.file, model_upload::human_bytes(model.size as u64)) }
                { model_form(&fleet, &session, &upload, model) }
            </>
        },
        None => yaml_body(&fleet, &session, &upload),
    };
    html! {
        <section class="card upload" aria-label="submit workloads">
            <h2>{ "Submit workloads or a model" }</h2>
            { drop_zone(&dragging, pick) }
            { body }
            { submit_outcome(upload.outcome.as_ref()) }
        </section>
    }
}

/// Asks the checker about the box's content each time it changes; the
/// answer comes back as an action, dropped if the content moved on.
#[hook]
fn use_checker(upload: &Upload) {
    let upload = upload.clone();
    use_effect_with(upload.generation, move |&generation| {
        let answer = upload.dispatcher();
        match upload.to_check.clone() {
            Some(ToCheck::Workloads) => {
                let (text, name) = (upload.text.clone(), upload.name.clone());
                spawn_local(async move {
                    let checked = checker::check_workloads(&text, &name).await;
                    answer.dispatch(UploadAction::Checked {
                        generation,
                        checked,
                    });
                });
            }
            Some(ToCheck::Model { name, bytes }) => spawn_local(async move {
                let loaded = Box::new(checker::load_model(&name, &bytes).await);
                let size = bytes.len();
                answer.dispatch(UploadAction::ModelChecked {
                    generation,
                    name,
                    size,
                    loaded,
                });
            }),
            None => {}
        }
    });
}

/// The master's answer to a submit (kept by the session), told in the
/// file's names.
#[hook]
fn use_submit_answers(fleet: &Fleet, upload: &Upload) {
    let number = fleet.session().answer().map(|(n, _)| *n);
    let (fleet, upload) = (fleet.clone(), upload.clone());
    use_effect_with(number, move |_| {
        let outcome = {
            let session = fleet.session();
            session
                .answer()
                .map(|(_, answer)| SubmitOutcome::of(answer, &upload.checked, &session.fleet))
        };
        if let Some(outcome) = outcome {
            upload.dispatch(UploadAction::Answered(outcome));
        }
    });
}

/// Where a file is dropped or chosen; `pick` reads it.
fn drop_zone(dragging: &UseStateHandle<bool>, pick: Callback<web_sys::File>) -> Html {
    let ondragover = {
        let dragging = dragging.setter();
        Callback::from(move |e: DragEvent| {
            e.prevent_default();
            dragging.set(true);
        })
    };
    let ondragleave = {
        let dragging = dragging.setter();
        Callback::from(move |_: DragEvent| dragging.set(false))
    };
    let ondrop = {
        let (pick, dragging) = (pick.clone(), dragging.setter());
        Callback::from(move |e: DragEvent| {
            e.prevent_default();
            let file = e
                .data_transfer()
                .and_then(|dt| dt.files())
                .and_then(|f| f.get(0));
            match file {
                Some(file) => pick.emit(file),
                None => dragging.set(false),
            }
        })
    };
    let onchange = Callback::from(move |e: Event| {
        let Some(input) = e
            .target()
            .and_then(|t| t.dyn_into::<HtmlInputElement>().ok())
        else {
            return;
        };
        let file = input.files().and_then(|files| files.get(0));
        // Picking the same file again must fire `change` again.
        input.set_value("");
        if let Some(file) = file {
            pick.emit(file);
        }
    });
    html! {
        <div class={if **dragging { "drop over" } else { "drop" }} {ondragover} {ondragleave} {ondrop}>
            <p>{ "Drop a workload YAML file or an ONNX model here, or choose one:" }</p>
            <input id="upload-file" type="file"
                accept=".yaml,.yml,.json,.onnx,text/yaml,application/json"
                aria-label="workload file or ONNX model" {onchange} />
        </div>
    }
}

/// Starts reading `file`: as bytes for a model, as text otherwise.
fn read_file(
    file: web_sys::File,
    upload: UseReducerDispatcher<UploadState>,
    on_error: Callback<String>,
    reader: Rc<RefCell<Option<FileReader>>>,
) -> Option<FileReader> {
    let name = file.name();
    let cannot_read = move |name: &str, e: gloo::file::FileReadError| {
        on_error.emit(format!("cannot read {name}: {e}"))
    };
    if !model_upload::is_model_file(&name) {
        let file = gloo::file::File::from(file);
        return Some(gloo::file::callbacks::read_as_text(&file, move |read| {
            // The read is over: its reader (and the file's copy) can go.
            reader.borrow_mut().take();
            match read {
                Ok(text) => upload.dispatch(UploadAction::FileRead { name, text }),
                Err(e) => cannot_read(&name, e),
            }
        }));
    }
    if file.size() > model_upload::MAX_ONNX_FILE_BYTES {
        // Protobuf stops at 2 GiB: such a file keeps its weights outside.
        let reason = format!(
            "{name}: not an ONNX model: larger than 2 GiB, the most a self-contained .onnx file can hold"
        );
        let size = file.size() as usize;
        upload.dispatch(UploadAction::ModelRefused { name, size, reason });
        return None;
    }
    let file = gloo::file::File::from(file);
    Some(gloo::file::callbacks::read_as_bytes(&file, move |read| {
        reader.borrow_mut().take();
        match read {
            Ok(bytes) => upload.dispatch(UploadAction::ModelRead { name, bytes }),
            Err(e) => cannot_read(&name, e),
        }
    }))
}

/// The file in the upload box: its name, size and the button that clears it.
pub(super) fn source(upload: &Upload, name: &str, size: String) -> Html {
    let onclick = upload.dispatcher();
    let onclick = Callback::from(move |_: MouseEvent| onclick.dispatch(UploadAction::Clear));
    html! {
        <div class="source">
            <span class="mono">{ name.to_string() }</span>
            <span class="sub">{ " · " }{ size }</span>
            if let Some(bytes) = upload.hidden_bytes {
                <span class="sub">{ format!(" (too big to edit here: {})", format_bytes(bytes)) }</span>
            }
            <button class="ghost small" {onclick}>{ "Clear" }</button>
        </div>
    }
}

/// Why the submit button is off, when it is.
pub(super) fn submit_hint(session: &Session, problems: bool) -> Html {
    let hint = if session.role() != Some(Role::Admin) {
        "Sign in with the admin token to submit."
    } else if !session.live() {
        "Waiting for the connection…"
    } else if problems {
        "Fix the problems above to submit."
    } else {
        return Html::default();
    };
    html! { <span class="sub">{ hint }</span> }
}

/// The text area, the file's line and the checker's answer.
fn yaml_body(fleet: &Fleet, session: &Session, upload: &Upload) -> Html {
    // A file too big for the text area is checked and submitted all the same.
    let text = if upload.hidden_bytes.is_none() {
        upload.text.clone()
    } else {
        String::new()
    };
    let oninput = {
        let upload = upload.dispatcher();
        on_input(move |text| upload.dispatch(UploadAction::Typed(text)))
    };
    html! {
        <>
            <textarea id="upload-text" rows="5" spellcheck="false" placeholder="…or paste YAML here"
                aria-label="workload YAML" value={text} {oninput} />
            if !upload.text.is_empty() {
                { source(upload, &upload.name, format_bytes(upload.text.len())) }
            }
            { check_result(fleet, session, upload) }
        </>
    }
}

fn check_result(fleet: &Fleet, session: &Session, upload: &Upload) -> Html {
    match &*upload.checked {
        Checked::Empty if upload.checking() => html! {
            <p id="upload-checking" class="sub" role="status">{ "Checking…" }</p>
        },
        Checked::Empty => Html::default(),
        Checked::Invalid(errors) => html! {
            <div id="upload-errors" class="errors" role="alert">
                <p class="bad"><b>{ format!(
                    "{} {} in {}",
                    errors.len(),
                    plural(errors.len(), "problem", "problems"),
                    upload.name
                ) }</b>{ " — nothing was sent." }</p>
                <ul>{ for errors.iter().map(error_row) }</ul>
            </div>
        },
        Checked::Valid {
            rows,
            converted_from_lorien,
            ..
        } => preview(fleet, session, upload, rows, *converted_from_lorien),
    }
}

/// The rows of a valid file, those the master already has marked, and the
/// submit button.
fn preview(
    fleet: &Fleet,
    session: &Session,
    upload: &Upload,
    rows: &[PreviewRow],
    converted_from_lorien: bool,
) -> Html {
    let is_known = |row: &PreviewRow| row.known || session.fleet.job(&row.job_id).is_some();
    let known = rows.iter().filter(|r| is_known(r)).count();
    let what = plural(rows.len(), "workload", "workloads");
    let submitting = session.submitting();
    let admin = session.role() == Some(Role::Admin);
    let disabled = !admin || !session.live() || submitting || upload.checking();
    let onclick = submit_workloads(fleet, upload);
    html! {
        <div id="preview" class="preview">
            <p class="ok"><b>{ format!("✓ {} {what} valid", rows.len()) }</b>
                if converted_from_lorien { { " (converted from a Lorien file)" } }
                if known > 0 {
                    <span class="sub">{ format!(" · {known} already known, will be skipped") }</span>
                }
            </p>
            <div class="actions">
                <button id="submit" class="primary" {disabled} {onclick}>
                    if submitting { { "Submitting…" } } else { { format!("Submit {} {what}", rows.len()) } }
                </button>
                { submit_hint(session, false) }
            </div>
            <div class="scroll">
                <table id="preview-table" class="compact">
                    { head(&[("Name", false, None), ("Op", false, None), ("Shape", false, None),
                        ("Dtype", false, None), ("Target", false, None), ("Trials", true, None)]) }
                    <tbody>{ for rows.iter().map(|row| preview_row(row, is_known(row))) }</tbody>
                </table>
            </div>
        </div>
    }
}

/// Sends the checked file, unless the checker has yet to answer for it.
fn submit_workloads(fleet: &Fleet, upload: &Upload) -> Callback<MouseEvent> {
    let (fleet, upload) = (fleet.clone(), upload.clone());
    Callback::from(move |_: MouseEvent| {
        let Checked::Valid { yaml, .. } = &*upload.checked else {
            return;
        };
        let live = fleet.session().link().is_live();
        if upload.checking() || !live {
            return;
        }
        let command = ClientCommand::Submit {
            yaml: yaml.clone(),
            filename: Some(upload.name.clone()),
            fresh: false,
        };
        upload.dispatch(UploadAction::Submitting);
        fleet.dispatch(Action::Request(command));
    })
}

fn preview_row(row: &PreviewRow, known: bool) -> Html {
    let target = row.target.split(' ').enumerate().map(|(i, token)| {
        html! {
            <>
                if i > 0 { { " " } }
                <span class="tok">{ token.to_string() }</span>
            </>
        }
    });
    html! {
        <tr key={row.job_id.clone()} class={known.then_some("known")}>
            <td class="name">{ row.name.clone() }
                if known { <span class="tag">{ "exists" }</span> }
            </td>
            <td>{ row.op.clone() }</td>
            <td class="shape">{ row.shape.clone() }</td>
            <td>{ row.dtype.clone() }</td>
            <td class="target">{ for target }</td>
            { num_cell(row.trials.to_string()) }
        </tr>
    }
}

fn error_row(e: &ErrorRow) -> Html {
    let loc = match (e.line, e.column) {
        (Some(l), Some(c)) => format!("line {l}, column {c}"),
        (Some(l), None) => format!("line {l}"),
        _ => "file".to_string(),
    };
    html! {
        <li>
            <span class="loc">{ loc }</span>
            if let Some(field) = &e.field { <code class="field">{ field.clone() }</code> }
            <span class="msg">{ e.message.clone() }</span>
            { source_line(e) }
        </li>
    }
}

/// The line an error is on, with a caret under its column.
fn source_line(e: &ErrorRow) -> Html {
    let (Some(line), Some(source)) = (e.line, &e.source) else {
        return Html::default();
    };
    let caret = e
        .column
        .filter(|c| *c >= 1 && *c <= source.chars().count() + 1)
        .map(|col| {
            html! {
                <>
                    { "\n" }<span class="ln">{ "     │ " }</span>
                    <span class="caret">{ format!("{}^", " ".repeat(col - 1)) }</span>
                </>
            }
        });
    html! {
        <pre class="src"><span class="ln">{ format!("{line:>4} │ ") }</span>{ source.clone() }{ caret }</pre>
    }
}

fn submit_outcome(outcome: Option<&SubmitOutcome>) -> Html {
    match outcome {
        None => Html::default(),
        Some(SubmitOutcome::Accepted {
            summary,
            new_names,
            duplicate_names,
        }) => html! {
            <div id="submit-result" class="result ok" role="status">
                <b>{ format!("Submitted: {summary}.") }</b>
                if !new_names.is_empty() {
                    <div class="sub">{ "New: " }{ new_names.join(", ") }</div>
                }
                if !duplicate_names.is_empty() {
                    <div class="sub">{ "Already known: " }{ duplicate_names.join(", ") }</div>
                }
            </div>
        },
        Some(SubmitOutcome::ModelAccepted { name, extract_job }) => html! {
            <div id="submit-result" class="result ok" role="status">
                <b>{ model_upload::accepted_text(name) }</b>
                <div class="sub">{ format!(
                    "Extract job {}: it waits for a worker with the tvm backend. Follow the run in the Models card.",
                    short_id(extract_job)
                ) }</div>
            </div>
        },
        Some(SubmitOutcome::Rejected(message)) => html! {
            <div id="submit-result" class="result bad" role="alert">
                <b>{ "The master refused the file:" }</b><pre>{ message.clone() }</pre>
            </div>
        },
    }
}
