//! The upload box: workload YAML (checked by the checker module) or an ONNX
//! model with its form, and what the master said about the last submit.

use wasm_bindgen::JsCast;
use web_sys::{DragEvent, HtmlInputElement};
use yew::prelude::*;

use super::{on, on_input};
use crate::app::{send, App, ModelUpload, Msg, SubmitOutcome};
use crate::format::{format_bytes, short_id};
use crate::model_upload::{self, Field};
use crate::upload::{Checked, ErrorRow, PreviewRow};

fn plural<'a>(n: usize, one: &'a str, many: &'a str) -> &'a str {
    if n == 1 {
        one
    } else {
        many
    }
}

/// Why the submit button is off, when it is.
fn submit_hint(app: &App, problems: bool) -> Option<&'static str> {
    if !app.is_admin() {
        Some("Sign in with the admin token to submit.")
    } else if !app.session.live() {
        Some("Waiting for the connection…")
    } else if problems {
        Some("Fix the problems above to submit.")
    } else {
        None
    }
}

fn hint(hint: Option<&'static str>) -> Html {
    match hint {
        Some(hint) => html! { <span class="sub">{ hint }</span> },
        None => Html::default(),
    }
}

/// The file in the upload box: its name, size and the button that clears it.
fn source(name: &str, size: String, hidden: Option<usize>) -> Html {
    html! {
        <div class="source">
            <span class="mono">{ name.to_string() }</span>
            <span class="sub">{ " · " }{ size }</span>
            if let Some(bytes) = hidden {
                <span class="sub">{ format!(" (too big to edit here: {})", format_bytes(bytes)) }</span>
            }
            <button class="ghost small" onclick={on(|| Msg::ClearUpload)}>{ "Clear" }</button>
        </div>
    }
}

fn drop_zone(app: &App) -> Html {
    let ondragover = Callback::from(|e: DragEvent| {
        e.prevent_default();
        send(Msg::Dragging(true));
    });
    let ondragleave = on(|| Msg::Dragging(false));
    let ondrop = Callback::from(|e: DragEvent| {
        e.prevent_default();
        let file = e
            .data_transfer()
            .and_then(|dt| dt.files())
            .and_then(|files| files.get(0));
        send(file.map_or(Msg::Dragging(false), Msg::FilePicked));
    });
    let onchange = Callback::from(|e: Event| {
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
            send(Msg::FilePicked(file));
        }
    });
    html! {
        <div class={if app.dragging { "drop over" } else { "drop" }} {ondragover} {ondragleave} {ondrop}>
            <p>{ "Drop a workload YAML file or an ONNX model here, or choose one:" }</p>
            <input id="upload-file" type="file"
                accept=".yaml,.yml,.json,.onnx,text/yaml,application/json"
                aria-label="workload file or ONNX model" {onchange} />
        </div>
    }
}

pub(super) fn upload_card(app: &App) -> Html {
    let body = if let Some(m) = &app.model {
        html! {
            <>
                { source(&m.file, model_upload::human_bytes(m.size as u64), None) }
                { model_result(app, m) }
            </>
        }
    } else {
        let text = if app.upload_hidden_bytes.is_none() {
            app.upload_text.clone()
        } else {
            String::new()
        };
        html! {
            <>
                <textarea id="upload-text" rows="5" spellcheck="false" placeholder="…or paste YAML here"
                    aria-label="workload YAML" value={text} oninput={on_input(Msg::UploadText)} />
                if !app.upload_text.is_empty() {
                    { source(&app.upload_name, format_bytes(app.upload_text.len()), app.upload_hidden_bytes) }
                }
                { check_result(app) }
            </>
        }
    };
    html! {
        <section class="card upload" aria-label="submit workloads">
            <h2>{ "Submit workloads or a model" }</h2>
            { drop_zone(app) }
            { body }
            { submit_outcome(app) }
        </section>
    }
}

fn check_result(app: &App) -> Html {
    match &app.checked {
        Checked::Empty if app.checking => html! {
            <p id="upload-checking" class="sub" role="status">{ "Checking…" }</p>
        },
        Checked::Empty => Html::default(),
        Checked::Invalid(errors) => html! {
            <div id="upload-errors" class="errors" role="alert">
                <p class="bad"><b>{ format!(
                    "{} {} in {}",
                    errors.len(),
                    plural(errors.len(), "problem", "problems"),
                    app.upload_name
                ) }</b>{ " — nothing was sent." }</p>
                <ul>{ for errors.iter().map(error_row) }</ul>
            </div>
        },
        Checked::Valid {
            rows,
            converted_from_lorien,
            ..
        } => {
            let submitting = app.session.submitting();
            let known = rows.iter().filter(|r| r.known).count();
            let what = plural(rows.len(), "workload", "workloads");
            let disabled = !app.is_admin() || !app.session.live() || submitting || app.checking;
            html! {
                <div id="preview" class="preview">
                    <p class="ok"><b>{ format!("✓ {} {what} valid", rows.len()) }</b>
                        if *converted_from_lorien { { " (converted from a Lorien file)" } }
                        if known > 0 {
                            <span class="sub">{ format!(" · {known} already known, will be skipped") }</span>
                        }
                    </p>
                    <div class="actions">
                        <button id="submit" class="primary" {disabled} onclick={on(|| Msg::Submit)}>
                            if submitting { { "Submitting…" } } else { { format!("Submit {} {what}", rows.len()) } }
                        </button>
                        { hint(submit_hint(app, false)) }
                    </div>
                    <div class="scroll">
                        <table id="preview-table" class="compact">
                            <thead><tr>
                                <th>{ "Name" }</th><th>{ "Op" }</th><th>{ "Shape" }</th><th>{ "Dtype" }</th>
                                <th>{ "Target" }</th><th class="num">{ "Trials" }</th>
                            </tr></thead>
                            <tbody>{ for rows.iter().map(preview_row) }</tbody>
                        </table>
                    </div>
                </div>
            }
        }
    }
}

fn preview_row(row: &PreviewRow) -> Html {
    let target = row.target.split(' ').enumerate().map(|(i, token)| {
        html! {
            <>
                if i > 0 { { " " } }
                <span class="tok">{ token.to_string() }</span>
            </>
        }
    });
    html! {
        <tr key={row.job_id.clone()} class={row.known.then_some("known")}>
            <td class="name">{ row.name.clone() }
                if row.known { <span class="tag">{ "exists" }</span> }
            </td>
            <td>{ row.op.clone() }</td>
            <td class="shape">{ row.shape.clone() }</td>
            <td>{ row.dtype.clone() }</td>
            <td class="target">{ for target }</td>
            <td class="num">{ row.trials }</td>
        </tr>
    }
}

fn error_row(e: &ErrorRow) -> Html {
    let loc = match (e.line, e.column) {
        (Some(l), Some(c)) => format!("line {l}, column {c}"),
        (Some(l), None) => format!("line {l}"),
        _ => "file".to_string(),
    };
    let src = match (e.line, &e.source) {
        (Some(line), Some(source)) => {
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
        _ => Html::default(),
    };
    html! {
        <li>
            <span class="loc">{ loc }</span>
            if let Some(field) = &e.field { <code class="field">{ field.clone() }</code> }
            <span class="msg">{ e.message.clone() }</span>
            { src }
        </li>
    }
}

fn submit_outcome(app: &App) -> Html {
    match &app.submit_outcome {
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

// ---------------------------------------------------------------------------
// ONNX model upload
// ---------------------------------------------------------------------------

fn model_result(app: &App, upload: &ModelUpload) -> Html {
    let model = match &upload.loaded {
        Ok(model) => model,
        Err(message) => {
            return html! {
                <div id="upload-errors" class="errors" role="alert">
                    <p class="bad"><b>{ format!("{} cannot be submitted", upload.file) }</b>{ " — nothing was sent." }</p>
                    <ul><li><span class="msg">{ message.clone() }</span></li></ul>
                </div>
            };
        }
    };
    let checked = upload.check(app);
    let problems = match &checked {
        Some(Err(p)) => p.as_slice(),
        _ => &[],
    };
    let invalid = |field: &Field| problems.iter().any(|p| &p.field == field);
    let submitting = app.session.submitting();
    let s = &model.summary;
    let ops: Vec<String> = model
        .top_ops(8)
        .into_iter()
        .map(|(op, n)| format!("{op} ×{n}"))
        .collect();
    let more_ops = model.op_type_count().saturating_sub(ops.len());
    let mut ops = ops.join(", ");
    if more_ops > 0 {
        ops.push_str(&format!(" and {more_ops} more"));
    }
    let disabled = !app.is_admin() || !app.session.live() || submitting || !problems.is_empty();
    html! {
        <div id="model-preview" class="preview model-preview" data-file={model.file.clone()}>
            <p class="ok"><b>{ "✓ ONNX model" }</b>
                <span class="sub">{ format!(
                    " · {} nodes · {} op types · {} {}",
                    s.nodes,
                    model.op_type_count(),
                    s.inputs.len(),
                    plural(s.inputs.len(), "input", "inputs")
                ) }</span>
            </p>
            <p id="model-ops" class="sub ops">{ ops }</p>
            <div class="scroll">
                <table id="model-inputs" class="compact">
                    <thead><tr><th>{ "Input" }</th><th>{ "Type" }</th><th>{ "Shape" }</th></tr></thead>
                    <tbody>
                        { for model.inputs.iter().map(|input| {
                            model_input_row(upload, input, invalid(&Field::Shape(input.name.clone())))
                        }) }
                    </tbody>
                </table>
            </div>
            <p id="model-weights" class="note">{ model.weights_note() }</p>
            <div class="model-form">
                <label><span class="sub">{ "Run name" }</span>
                    <input id="model-name" type="text" spellcheck="false" autocomplete="off"
                        class={invalid(&Field::Name).then_some("invalid")}
                        value={upload.form.name.clone()} oninput={on_input(Msg::ModelName)} />
                </label>
                <label><span class="sub">{ "Trials (whole model)" }</span>
                    <input id="model-trials" type="text" inputmode="numeric" autocomplete="off"
                        class={invalid(&Field::Trials).then_some("invalid")}
                        value={upload.form.trials.clone()} oninput={on_input(Msg::ModelTrials)} />
                </label>
            </div>
            if !problems.is_empty() {
                <div id="model-problems" class="errors" role="alert">
                    <ul>{ for problems.iter().map(|p| html! {
                        <li><span class="msg">{ p.message.clone() }</span></li>
                    }) }</ul>
                </div>
            }
            <div class="actions">
                <button id="submit-model" class="primary" {disabled} onclick={on(|| Msg::SubmitModel)}>
                    { if submitting { "Submitting…" } else { "Submit model run" } }
                </button>
                { hint(submit_hint(app, !problems.is_empty())) }
            </div>
        </div>
    }
}

fn model_input_row(upload: &ModelUpload, input: &model_upload::InputRow, invalid: bool) -> Html {
    let field = input.needs_shape.then(|| {
        let name = input.name.clone();
        let value = upload
            .form
            .shapes
            .get(&input.name)
            .cloned()
            .unwrap_or_default();
        html! {
            <div class="shape-field">
                <input type="text" spellcheck="false" autocomplete="off"
                    class={if invalid { "model-shape invalid" } else { "model-shape" }}
                    data-shape={input.name.clone()} placeholder={input.example.clone()}
                    aria-label={format!("shape of {}", input.name)} {value}
                    oninput={on_input(move |v| Msg::ModelShape(name.clone(), v))} />
                <span class="sub">{ "dynamic: give the sizes to tune for" }</span>
            </div>
        }
    });
    html! {
        <tr key={input.name.clone()} data-input={input.name.clone()}>
            <td class="name mono">{ input.name.clone() }</td>
            <td>{ input.dtype.clone() }</td>
            <td class="shape"><span class="mono">{ input.dims.clone() }</span>{ field }</td>
        </tr>
    }
}
