//! The upload box: workload YAML (checked by the checker module) or an ONNX
//! model with its form, and what the master said about the last submit.

use crate::action::{Click, TextField};
use crate::app::{App, ModelUpload, SubmitOutcome};
use crate::format::{format_bytes, short_id};
use crate::html::Html;
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

/// Closes the file in the upload box (the source line's button).
fn clear_button(h: &mut Html) {
    h.raw("<button class=\"ghost small\"")
        .click(Click::ClearUpload)
        .raw(">Clear</button></div>");
}

fn hint(h: &mut Html, hint: Option<&str>) {
    if let Some(hint) = hint {
        h.raw("<span class=\"sub\">").text(hint).raw("</span>");
    }
}

pub(super) fn upload_card(h: &mut Html, app: &App) {
    h.raw("<section class=\"card upload\" aria-label=\"submit workloads\"><h2>Submit workloads or a model</h2><div")
        .class(&[("drop", true), ("over", app.dragging)])
        .raw(
            "><p>Drop a workload YAML file or an ONNX model here, or choose one:</p>\
             <input id=\"upload-file\" type=\"file\" accept=\".yaml,.yml,.json,.onnx,text/yaml,application/json\" \
             aria-label=\"workload file or ONNX model\"></div>",
        );
    if app.model.is_none() {
        h.raw(
            "<textarea id=\"upload-text\" rows=\"5\" spellcheck=\"false\" placeholder=\"…or paste YAML here\" \
             aria-label=\"workload YAML\"",
        )
        .field(TextField::UploadText)
        .raw(">\n");
        // The parser drops one newline right after `<textarea>` (and `<pre>`): the
        // one written above goes, so text that starts with a blank line keeps it.
        if app.upload_hidden_bytes.is_none() {
            h.text(&app.upload_text);
        }
        h.raw("</textarea>");
    }
    if let Some(m) = &app.model {
        h.raw("<div class=\"source\"><span class=\"mono\">")
            .text(&m.file)
            .raw("</span><span class=\"sub\"> · ")
            .text(&model_upload::human_bytes(m.size as u64))
            .raw("</span>");
        clear_button(h);
        model_result(h, app, m);
    } else {
        if !app.upload_text.is_empty() {
            h.raw("<div class=\"source\"><span class=\"mono\">")
                .text(&app.upload_name)
                .raw("</span><span class=\"sub\"> · ")
                .text(&format_bytes(app.upload_text.len()))
                .raw("</span>");
            if let Some(bytes) = app.upload_hidden_bytes {
                h.raw("<span class=\"sub\"> (too big to edit here: ")
                    .text(&format_bytes(bytes))
                    .raw(")</span>");
            }
            clear_button(h);
        }
        check_result(h, app);
    }
    submit_outcome(h, app);
    h.raw("</section>");
}

fn check_result(h: &mut Html, app: &App) {
    match &app.checked {
        Checked::Empty if app.checking => {
            h.raw("<p id=\"upload-checking\" class=\"sub\" role=\"status\">Checking…</p>");
        }
        Checked::Empty => {}
        Checked::Invalid(errors) => {
            h.raw("<div id=\"upload-errors\" class=\"errors\" role=\"alert\"><p class=\"bad\"><b>")
                .textf(format_args!(
                    "{} {} in {}",
                    errors.len(),
                    plural(errors.len(), "problem", "problems"),
                    app.upload_name
                ))
                .raw("</b> — nothing was sent.</p><ul>");
            for e in errors {
                error_row(h, e);
            }
            h.raw("</ul></div>");
        }
        Checked::Valid {
            rows,
            converted_from_lorien,
            ..
        } => {
            let submitting = app.session.submitting();
            let known = rows.iter().filter(|r| r.known).count();
            let what = plural(rows.len(), "workload", "workloads");
            h.raw("<div id=\"preview\" class=\"preview\"><p class=\"ok\"><b>")
                .textf(format_args!("✓ {} {what} valid", rows.len()))
                .raw("</b>");
            if *converted_from_lorien {
                h.raw(" (converted from a Lorien file)");
            }
            if known > 0 {
                h.raw("<span class=\"sub\">")
                    .textf(format_args!(" · {known} already known, will be skipped"))
                    .raw("</span>");
            }
            h.raw("</p><div class=\"actions\"><button id=\"submit\" class=\"primary\"")
                .click(Click::Submit)
                .flag(
                    "disabled",
                    !app.is_admin() || !app.session.live() || submitting || app.checking,
                )
                .raw(">");
            if submitting {
                h.raw("Submitting…");
            } else {
                h.textf(format_args!("Submit {} {what}", rows.len()));
            }
            h.raw("</button>");
            hint(h, submit_hint(app, false));
            h.raw(
                "</div><div class=\"scroll\"><table id=\"preview-table\" class=\"compact\"><thead><tr>\
                 <th>Name</th><th>Op</th><th>Shape</th><th>Dtype</th><th>Target</th><th class=\"num\">Trials</th>\
                 </tr></thead><tbody>",
            );
            for row in rows {
                preview_row(h, row);
            }
            h.raw("</tbody></table></div></div>");
        }
    }
}

fn preview_row(h: &mut Html, row: &PreviewRow) {
    h.raw("<tr")
        .attr("data-key", &row.job_id)
        .class(&[("known", row.known)])
        .raw("><td class=\"name\">")
        .text(&row.name);
    if row.known {
        h.raw("<span class=\"tag\">exists</span>");
    }
    h.raw("</td><td>")
        .text(&row.op)
        .raw("</td><td class=\"shape\">")
        .text(&row.shape)
        .raw("</td><td>")
        .text(&row.dtype)
        .raw("</td><td class=\"target\">");
    for (i, token) in row.target.split(' ').enumerate() {
        if i > 0 {
            h.raw(" ");
        }
        h.raw("<span class=\"tok\">").text(token).raw("</span>");
    }
    h.raw("</td><td class=\"num\">")
        .num(row.trials)
        .raw("</td></tr>");
}

fn error_row(h: &mut Html, e: &ErrorRow) {
    h.raw("<li><span class=\"loc\">");
    match (e.line, e.column) {
        (Some(l), Some(c)) => h.textf(format_args!("line {l}, column {c}")),
        (Some(l), None) => h.textf(format_args!("line {l}")),
        _ => h.raw("file"),
    };
    h.raw("</span>");
    if let Some(field) = &e.field {
        h.raw("<code class=\"field\">").text(field).raw("</code>");
    }
    h.raw("<span class=\"msg\">")
        .text(&e.message)
        .raw("</span>");
    if let (Some(line), Some(source)) = (e.line, &e.source) {
        h.raw("<pre class=\"src\"><span class=\"ln\">")
            .textf(format_args!("{line:>4} │ "))
            .raw("</span>")
            .text(source);
        if let Some(col) = e
            .column
            .filter(|c| *c >= 1 && *c <= source.chars().count() + 1)
        {
            h.raw("\n<span class=\"ln\">     │ </span><span class=\"caret\">")
                .text(&" ".repeat(col - 1))
                .raw("^</span>");
        }
        h.raw("</pre>");
    }
    h.raw("</li>");
}

fn submit_outcome(h: &mut Html, app: &App) {
    match &app.submit_outcome {
        None => {}
        Some(SubmitOutcome::Accepted {
            summary,
            new_names,
            duplicate_names,
        }) => {
            h.raw("<div id=\"submit-result\" class=\"result ok\" role=\"status\"><b>")
                .textf(format_args!("Submitted: {summary}."))
                .raw("</b>");
            if !new_names.is_empty() {
                h.raw("<div class=\"sub\">New: ")
                    .text(&new_names.join(", "))
                    .raw("</div>");
            }
            if !duplicate_names.is_empty() {
                h.raw("<div class=\"sub\">Already known: ")
                    .text(&duplicate_names.join(", "))
                    .raw("</div>");
            }
            h.raw("</div>");
        }
        Some(SubmitOutcome::ModelAccepted { name, extract_job }) => {
            h.raw("<div id=\"submit-result\" class=\"result ok\" role=\"status\"><b>")
                .text(&model_upload::accepted_text(name))
                .raw("</b><div class=\"sub\">")
                .textf(format_args!(
                    "Extract job {}: it waits for a worker with the tvm backend. Follow the run in the Models card.",
                    short_id(extract_job)
                ))
                .raw("</div></div>");
        }
        Some(SubmitOutcome::Rejected(message)) => {
            h.raw("<div id=\"submit-result\" class=\"result bad\" role=\"alert\"><b>The master refused the file:</b><pre>\n")
                .text(message)
                .raw("</pre></div>");
        }
    }
}

// ---------------------------------------------------------------------------
// ONNX model upload
// ---------------------------------------------------------------------------

fn model_result(h: &mut Html, app: &App, upload: &ModelUpload) {
    let model = match &upload.loaded {
        Ok(model) => model,
        Err(message) => {
            h.raw("<div id=\"upload-errors\" class=\"errors\" role=\"alert\"><p class=\"bad\"><b>")
                .textf(format_args!("{} cannot be submitted", upload.file))
                .raw("</b> — nothing was sent.</p><ul><li><span class=\"msg\">")
                .text(message)
                .raw("</span></li></ul></div>");
            return;
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
    h.raw("<div id=\"model-preview\" class=\"preview model-preview\"")
        .attr("data-file", &model.file)
        .raw("><p class=\"ok\"><b>✓ ONNX model</b><span class=\"sub\">")
        .textf(format_args!(
            " · {} nodes · {} op types · {} {}",
            s.nodes,
            model.op_type_count(),
            s.inputs.len(),
            plural(s.inputs.len(), "input", "inputs")
        ))
        .raw("</span></p><p id=\"model-ops\" class=\"sub ops\">")
        .text(&ops.join(", "));
    if more_ops > 0 {
        h.textf(format_args!(" and {more_ops} more"));
    }
    h.raw(
        "</p><div class=\"scroll\"><table id=\"model-inputs\" class=\"compact\"><thead><tr>\
         <th>Input</th><th>Type</th><th>Shape</th></tr></thead><tbody>",
    );
    for input in &model.inputs {
        model_input_row(h, upload, input, invalid(&Field::Shape(input.name.clone())));
    }
    h.raw("</tbody></table></div><p id=\"model-weights\" class=\"note\">")
        .text(&model.weights_note())
        .raw(
            "</p><div class=\"model-form\"><label><span class=\"sub\">Run name</span>\
             <input id=\"model-name\" type=\"text\" spellcheck=\"false\" autocomplete=\"off\"",
        )
        .field(TextField::ModelName)
        .class(&[("invalid", invalid(&Field::Name))])
        .attr("value", &upload.form.name)
        .raw(
            "></label><label><span class=\"sub\">Trials (whole model)</span>\
             <input id=\"model-trials\" type=\"text\" inputmode=\"numeric\" autocomplete=\"off\"",
        )
        .field(TextField::ModelTrials)
        .class(&[("invalid", invalid(&Field::Trials))])
        .attr("value", &upload.form.trials)
        .raw("></label></div>");
    if !problems.is_empty() {
        h.raw("<div id=\"model-problems\" class=\"errors\" role=\"alert\"><ul>");
        for p in problems {
            h.raw("<li><span class=\"msg\">")
                .text(&p.message)
                .raw("</span></li>");
        }
        h.raw("</ul></div>");
    }
    h.raw("<div class=\"actions\"><button id=\"submit-model\" class=\"primary\"")
        .click(Click::SubmitModel)
        .flag(
            "disabled",
            !app.is_admin() || !app.session.live() || submitting || !problems.is_empty(),
        )
        .raw(">")
        .raw(if submitting {
            "Submitting…"
        } else {
            "Submit model run"
        })
        .raw("</button>");
    hint(h, submit_hint(app, !problems.is_empty()));
    h.raw("</div></div>");
}

fn model_input_row(
    h: &mut Html,
    upload: &ModelUpload,
    input: &model_upload::InputRow,
    invalid: bool,
) {
    h.raw("<tr")
        .attr("data-input", &input.name)
        .raw("><td class=\"name mono\">")
        .text(&input.name)
        .raw("</td><td>")
        .text(&input.dtype)
        .raw("</td><td class=\"shape\"><span class=\"mono\">")
        .text(&input.dims)
        .raw("</span>");
    if input.needs_shape {
        h.raw("<div class=\"shape-field\"><input type=\"text\" spellcheck=\"false\" autocomplete=\"off\"")
            .class(&[("model-shape", true), ("invalid", invalid)])
            .field(TextField::Shape(&input.name))
            .attr("data-shape", &input.name)
            .attr("placeholder", &input.example)
            .attrf("aria-label", format_args!("shape of {}", input.name))
            .attr(
                "value",
                upload
                    .form
                    .shapes
                    .get(&input.name)
                    .map_or("", String::as_str),
            )
            .raw("><span class=\"sub\">dynamic: give the sizes to tune for</span></div>");
    }
    h.raw("</td></tr>");
}
