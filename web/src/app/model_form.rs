//! The upload box with an ONNX model in it: what the checker read (nodes,
//! ops, inputs, weights), the form (run name, trials, shapes of dynamic
//! inputs) checked on every keystroke, and the submit button.

use tunefleet_shared::protocol::{ClientCommand, Role};
use yew::prelude::*;

use super::state::Fleet;
use super::upload_box::{plural, submit_hint, Upload};
use super::widgets::{head, on_input};
use crate::model_upload::{self, Field, InputRow, LoadedModel};
use crate::upload::{ModelUpload, UploadAction};
use crate::view_model::{Action, Session};

pub(super) fn model_form(
    fleet: &Fleet,
    session: &Session,
    upload: &Upload,
    m: &ModelUpload,
) -> Html {
    let model = match &*m.loaded {
        Ok(model) => model,
        Err(message) => {
            return html! {
                <div id="upload-errors" class="errors" role="alert">
                    <p class="bad"><b>{ format!("{} cannot be submitted", m.file) }</b>{ " — nothing was sent." }</p>
                    <ul><li><span class="msg">{ message.clone() }</span></li></ul>
                </div>
            };
        }
    };
    let checked = m.check(&session.fleet);
    let problems = match &checked {
        Some(Err(p)) => p.as_slice(),
        _ => &[],
    };
    let invalid = |field: &Field| problems.iter().any(|p| &p.field == field);
    let submitting = session.submitting();
    let admin = session.role() == Some(Role::Admin);
    let disabled = !admin || !session.live() || submitting || !problems.is_empty();
    let edit = |action: fn(String) -> UploadAction| {
        let upload = upload.dispatcher();
        on_input(move |text| upload.dispatch(action(text)))
    };
    html! {
        <div id="model-preview" class="preview model-preview" data-file={model.file.clone()}>
            { summary(model) }
            <div class="scroll">
                <table id="model-inputs" class="compact">
                    { head(&[("Input", false, None), ("Type", false, None), ("Shape", false, None)]) }
                    <tbody>
                        { for model.inputs.iter().map(|input| {
                            input_row(upload, m, input, invalid(&Field::Shape(input.name.clone())))
                        }) }
                    </tbody>
                </table>
            </div>
            <p id="model-weights" class="note">{ model.weights_note() }</p>
            <div class="model-form">
                <label><span class="sub">{ "Run name" }</span>
                    <input id="model-name" type="text" spellcheck="false" autocomplete="off"
                        class={invalid(&Field::Name).then_some("invalid")}
                        value={m.form.name.clone()} oninput={edit(UploadAction::ModelName)} />
                </label>
                <label><span class="sub">{ "Trials (whole model)" }</span>
                    <input id="model-trials" type="text" inputmode="numeric" autocomplete="off"
                        class={invalid(&Field::Trials).then_some("invalid")}
                        value={m.form.trials.clone()} oninput={edit(UploadAction::ModelTrials)} />
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
                <button id="submit-model" class="primary" {disabled} onclick={submit_model(fleet, upload)}>
                    { if submitting { "Submitting…" } else { "Submit model run" } }
                </button>
                { submit_hint(session, !problems.is_empty()) }
            </div>
        </div>
    }
}

/// Nodes, op types and inputs, and the most used ops.
fn summary(model: &LoadedModel) -> Html {
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
    html! {
        <>
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
        </>
    }
}

/// Sends the model run, if its form passes the checks.
fn submit_model(fleet: &Fleet, upload: &Upload) -> Callback<MouseEvent> {
    let (fleet, upload) = (fleet.clone(), upload.clone());
    Callback::from(move |_: MouseEvent| {
        let Some(m) = &upload.model else {
            return;
        };
        let command = {
            let session = fleet.session();
            let (Ok(model), Some(Ok(checked))) = (&*m.loaded, m.check(&session.fleet)) else {
                return;
            };
            if !session.link().is_live() {
                return;
            }
            ClientCommand::SubmitModel {
                model: Box::new(model_upload::submission(model, &checked)),
            }
        };
        upload.dispatch(UploadAction::Submitting);
        fleet.dispatch(Action::Request(command));
    })
}

fn input_row(upload: &Upload, m: &ModelUpload, input: &InputRow, invalid: bool) -> Html {
    let field = input.needs_shape.then(|| {
        let (name, upload) = (input.name.clone(), upload.dispatcher());
        let oninput =
            on_input(move |text| upload.dispatch(UploadAction::ModelShape(name.clone(), text)));
        let value = m.form.shapes.get(&input.name).cloned().unwrap_or_default();
        html! {
            <div class="shape-field">
                <input type="text" spellcheck="false" autocomplete="off"
                    class={if invalid { "model-shape invalid" } else { "model-shape" }}
                    data-shape={input.name.clone()} placeholder={input.example.clone()}
                    aria-label={format!("shape of {}", input.name)} {value} {oninput} />
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
