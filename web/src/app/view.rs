//! Rendering: the page is a function of [`App`]'s state.
//!
//! Element ids and `data-*` attributes (`#conn`, `#overall-bar`, `#jobs tr[data-job]`,
//! ...) are stable: the browser tests find things by them.

use tunefleet_shared::export::{has_metaschedule_records, job_gflops};
use tunefleet_shared::model::{ModelState, ModelView};
use tunefleet_shared::protocol::{JobState, JobView, Role, WorkerView};
use web_sys::{HtmlInputElement, HtmlTextAreaElement};
use yew::prelude::*;

use super::{browser, App, Download, ModelUpload, Msg, SubmitOutcome, Theme};
use crate::chart::{self, Chart};
use crate::format::{
    format_bytes, format_clock, format_duration, format_flops, format_gflops, format_latency,
    short_id, target_summary,
};
use crate::model::{visible_jobs, Link, SortKey, StateFilter};
use crate::model_runs;
use crate::model_upload::{self, Field};
use crate::upload::{Checked, ErrorRow, PreviewRow};

pub fn page(app: &App, ctx: &Context<App>) -> Html {
    let now = browser::now_ms();
    html! {
        <div class="page">
            { header(app, ctx) }
            { banner(app, ctx) }
            <main class={classes!("grid", (!app.session.live()).then_some("stale"),
                (!app.session.fleet.models().is_empty()).then_some("with-models"))}>
                { overall(app, now) }
                { models_card(app, ctx) }
                { upload_card(app, ctx) }
                { workers_card(app, ctx, now) }
                { jobs_card(app, ctx) }
            </main>
            { detail(app, ctx) }
            { notices(app, ctx) }
        </div>
    }
}

// ---------------------------------------------------------------------------
// Header, connection, token
// ---------------------------------------------------------------------------

fn header(app: &App, ctx: &Context<App>) -> Html {
    let link = app.session.link();
    let (state, text) = match &link {
        Link::Live { role } if app.session.live() => (
            "live",
            match role {
                Role::Admin => "Live · admin",
                Role::Read => "Live · read-only",
            },
        ),
        Link::Live { .. } => ("connecting", "Syncing…"),
        Link::Connecting { attempt: 0 } => ("connecting", "Connecting…"),
        Link::Connecting { .. } => ("connecting", "Reconnecting…"),
        Link::Retrying { .. } => ("down", "Disconnected"),
        Link::NeedsToken { .. } => ("auth", "Token needed"),
        Link::Incompatible { .. } => ("down", "Incompatible master"),
    };
    let theme_label = match app.theme {
        Theme::Auto => "Theme: follows the system (click for dark)",
        Theme::Dark => "Theme: dark (click for light)",
        Theme::Light => "Theme: light (click to follow the system)",
    };
    let theme_icon = match app.theme {
        Theme::Auto => "◐",
        Theme::Dark => "☾",
        Theme::Light => "☀",
    };
    html! {
        <header class="top">
            <div class="brand">
                <svg class="logo" viewBox="0 0 20 20" aria-hidden="true">
                    <path d="M3 14 L7 9 L11 12 L17 4" />
                </svg>
                <span>{ "tunefleet" }</span>
            </div>
            <div id="conn" class={classes!("conn", state)} data-state={state} role="status">
                <span class="dot"></span>{ text }
            </div>
            <div class="spacer"></div>
            { token_area(app, ctx) }
            <button class="icon" title={theme_label} aria-label={theme_label}
                onclick={ctx.link().callback(|_| Msg::ToggleTheme)}>{ theme_icon }</button>
        </header>
    }
}

fn token_area(app: &App, ctx: &Context<App>) -> Html {
    let needs = matches!(app.session.link(), Link::NeedsToken { .. });
    if app.token.is_some() && !needs {
        let role = match app.session.role() {
            Some(Role::Admin) => html! { <span class="badge role">{ "admin" }</span> },
            _ => html! {},
        };
        return html! {
            <div class="token">
                { role }
                <button id="sign-out" class="ghost" title="Forget the admin token (this tab only keeps it until it closes)"
                    onclick={ctx.link().callback(|_| Msg::SignOut)}>{ "Sign out" }</button>
            </div>
        };
    }
    let onsubmit = ctx.link().callback(|e: SubmitEvent| {
        e.prevent_default();
        Msg::SignIn
    });
    let oninput = ctx.link().callback(|e: InputEvent| {
        Msg::TokenInput(e.target_unchecked_into::<HtmlInputElement>().value())
    });
    html! {
        <form class={classes!("token", needs.then_some("attention"))} {onsubmit}>
            <input id="token" type="password" placeholder="admin token" autocomplete="off"
                aria-label="admin token" value={app.token_input.clone()} {oninput} />
            <button type="submit" class="primary small">{ "Sign in" }</button>
        </form>
    }
}

fn banner(app: &App, ctx: &Context<App>) -> Html {
    let reconnect = ctx.link().callback(|_| Msg::Reconnect);
    match app.session.link() {
        Link::Retrying {
            attempt,
            delay_ms,
            reason,
        } => html! {
            <div id="banner" class="banner warn" role="alert">
                <strong>{ "Connection to the master lost" }</strong>
                <span>{ format!(" ({reason}). Reconnecting in {:.1} s (attempt {attempt}); the tables show the last known state.", delay_ms as f64 / 1000.0) }</span>
                <button class="ghost small" onclick={reconnect}>{ "Reconnect now" }</button>
            </div>
        },
        Link::Connecting { attempt } if attempt > 0 => html! {
            <div id="banner" class="banner warn" role="alert">
                <strong>{ "Reconnecting to the master…" }</strong>
                <span>{ " the tables show the last known state." }</span>
            </div>
        },
        Link::NeedsToken { reason } => html! {
            <div id="banner" class="banner bad" role="alert">
                <strong>{ "The master wants the admin token." }</strong>
                <span>{ format!(" {reason}. Enter it above (it is kept in this tab's session storage only), or start the master with --public-read for a read-only view.") }</span>
            </div>
        },
        Link::Incompatible { reason } => html! {
            <div id="banner" class="banner bad" role="alert">
                <strong>{ "This dashboard cannot talk to this master." }</strong>
                <span>{ format!(" {reason}") }</span>
            </div>
        },
        _ => html! {},
    }
}

fn notices(app: &App, ctx: &Context<App>) -> Html {
    html! {
        <div class="notices" aria-live="polite">
            { for app.notices.iter().map(|n| {
                let id = n.id;
                html! {
                    <div key={id} class={classes!("notice", n.error.then_some("error"))}>
                        <span>{ &n.text }</span>
                        <button class="icon small" aria-label="dismiss"
                            onclick={ctx.link().callback(move |_| Msg::DismissNotice(id))}>{ "×" }</button>
                    </div>
                }
            }) }
        </div>
    }
}

// ---------------------------------------------------------------------------
// Overall progress
// ---------------------------------------------------------------------------

fn overall(app: &App, now: u64) -> Html {
    let fleet = &app.session.fleet;
    let o = crate::model::fleet_overall(fleet, now);
    let workers = fleet.workers().len();
    let busy = fleet
        .workers()
        .iter()
        .filter(|w| w.current_job.is_some())
        .count();
    let pct = o.percent.floor() as u32;
    let running_share = (o.percent - o.done_share - o.failed_share).max(0.0);
    let eta = match o.eta_ms {
        Some(ms) if o.finished() < o.total => format!("ETA {}", format_duration(ms)),
        _ if o.total > 0 && o.finished() == o.total => "all finished".into(),
        _ => "ETA –".into(),
    };
    html! {
        <section class="card overall" aria-label="fleet progress">
            <div class="overall-head">
                <h2>{ "Fleet progress" }</h2>
                <span id="overall-pct" class="pct">{ format!("{pct}%") }</span>
            </div>
            <div id="overall-bar" class="bar big" role="progressbar" aria-valuemin="0"
                aria-valuemax="100" aria-valuenow={pct.to_string()}
                aria-label="jobs finished">
                <div class="seg done" style={format!("width:{:.2}%", o.done_share)}></div>
                <div class="seg failed" style={format!("width:{:.2}%", o.failed_share)}></div>
                <div class="seg running" style={format!("width:{:.2}%", running_share)}></div>
            </div>
            <div id="overall-text" class="stats">
                <span><b>{ o.done }</b>{ format!(" / {} done", o.total) }</span>
                <span class={classes!((o.failed > 0).then_some("bad"))}>
                    <b>{ o.failed }</b>{ " failed" }</span>
                <span><b>{ o.running }</b>{ " running" }</span>
                <span><b>{ o.queued }</b>{ " queued" }</span>
                if o.cancelled > 0 {
                    <span><b>{ o.cancelled }</b>{ " cancelled" }</span>
                }
                <span id="eta">{ eta }</span>
                <span class="push">{ format!("{workers} {} ({busy} busy)", if workers == 1 { "worker" } else { "workers" }) }</span>
            </div>
        </section>
    }
}

// ---------------------------------------------------------------------------
// Upload
// ---------------------------------------------------------------------------

fn upload_card(app: &App, ctx: &Context<App>) -> Html {
    let link = ctx.link();
    let on_file = link.batch_callback(|e: Event| {
        let input: HtmlInputElement = e.target_unchecked_into();
        let file = input.files().and_then(|files| files.get(0));
        // Picking the same file again must fire `change` again.
        input.set_value("");
        file.map(Msg::FilePicked)
    });
    let on_drag_over = link.callback(|e: DragEvent| {
        e.prevent_default();
        Msg::Dragging(true)
    });
    let on_drag_leave = link.callback(|_: DragEvent| Msg::Dragging(false));
    let on_drop = link.batch_callback(|e: DragEvent| {
        e.prevent_default();
        let file = e
            .data_transfer()
            .and_then(|dt| dt.files())
            .and_then(|files| files.get(0));
        Some(file.map_or(Msg::Dragging(false), Msg::FilePicked))
    });
    let on_text = link.callback(|e: InputEvent| {
        Msg::UploadText(e.target_unchecked_into::<HtmlTextAreaElement>().value())
    });
    let text_value = if app.upload_hidden_bytes.is_some() {
        String::new()
    } else {
        app.upload_text.clone()
    };
    let source = if let Some(m) = &app.model {
        html! {
            <div class="source">
                <span class="mono">{ &m.file }</span>
                <span class="sub">{ format!(" · {}", model_upload::human_bytes(m.size as u64)) }</span>
                <button class="ghost small" onclick={link.callback(|_| Msg::ClearUpload)}>{ "Clear" }</button>
            </div>
        }
    } else if app.upload_text.is_empty() {
        html! {}
    } else {
        html! {
            <div class="source">
                <span class="mono">{ &app.upload_name }</span>
                <span class="sub">{ format!(" · {}", format_bytes(app.upload_text.len())) }</span>
                if let Some(bytes) = app.upload_hidden_bytes {
                    <span class="sub">{ format!(" (too big to edit here: {})", format_bytes(bytes)) }</span>
                }
                <button class="ghost small" onclick={link.callback(|_| Msg::ClearUpload)}>{ "Clear" }</button>
            </div>
        }
    };
    html! {
        <section class="card upload" aria-label="submit workloads">
            <h2>{ "Submit workloads or a model" }</h2>
            <div class={classes!("drop", app.dragging.then_some("over"))}
                ondragover={on_drag_over} ondragleave={on_drag_leave} ondrop={on_drop}>
                <p>{ "Drop a workload YAML file or an ONNX model here, or choose one:" }</p>
                <input id="upload-file" type="file" accept=".yaml,.yml,.json,.onnx,text/yaml,application/json"
                    onchange={on_file} aria-label="workload file or ONNX model" />
            </div>
            if app.model.is_none() {
                <textarea id="upload-text" rows="5" spellcheck="false" placeholder="…or paste YAML here"
                    aria-label="workload YAML" value={text_value} oninput={on_text} />
            }
            { source }
            if let Some(m) = &app.model {
                { model_result(app, ctx, m) }
            } else {
                { check_result(app, ctx) }
            }
            { submit_outcome(app) }
        </section>
    }
}

fn check_result(app: &App, ctx: &Context<App>) -> Html {
    match &app.checked {
        Checked::Empty if app.checking => html! {
            <p id="upload-checking" class="sub" role="status">{ "Checking…" }</p>
        },
        Checked::Empty => html! {},
        Checked::Invalid(errors) => html! {
            <div id="upload-errors" class="errors" role="alert">
                <p class="bad"><b>{ format!("{} {} in {}", errors.len(), if errors.len() == 1 { "problem" } else { "problems" }, app.upload_name) }</b>{ " — nothing was sent." }</p>
                <ul>{ for errors.iter().map(error_row) }</ul>
            </div>
        },
        Checked::Valid {
            rows,
            converted_from_lorien,
            ..
        } => {
            let admin = app.is_admin();
            let live = app.session.live();
            let submitting = app.session.submitting();
            let known = rows.iter().filter(|r| r.known).count();
            let label = if submitting {
                "Submitting…".to_string()
            } else {
                format!(
                    "Submit {} {}",
                    rows.len(),
                    if rows.len() == 1 {
                        "workload"
                    } else {
                        "workloads"
                    }
                )
            };
            let hint = if !admin {
                Some("Sign in with the admin token to submit.")
            } else if !live {
                Some("Waiting for the connection…")
            } else {
                None
            };
            html! {
                <div id="preview" class="preview">
                    <p class="ok">
                        <b>{ format!("✓ {} {} valid", rows.len(), if rows.len() == 1 { "workload" } else { "workloads" }) }</b>
                        if *converted_from_lorien { { " (converted from a Lorien file)" } }
                        if known > 0 { <span class="sub">{ format!(" · {known} already known, will be skipped") }</span> }
                    </p>
                    <div class="actions">
                        <button id="submit" class="primary" disabled={!admin || !live || submitting || app.checking}
                            onclick={ctx.link().callback(|_| Msg::Submit)}>{ label }</button>
                        if let Some(hint) = hint { <span class="sub">{ hint }</span> }
                    </div>
                    <div class="scroll">
                        <table id="preview-table" class="compact">
                            <thead><tr>
                                <th>{ "Name" }</th><th>{ "Op" }</th><th>{ "Shape" }</th>
                                <th>{ "Dtype" }</th><th>{ "Target" }</th><th class="num">{ "Trials" }</th>
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
    html! {
        <tr key={row.job_id.clone()} class={classes!(row.known.then_some("known"))}>
            <td class="name">{ &row.name }
                if row.known { <span class="tag">{ "exists" }</span> }</td>
            <td>{ &row.op }</td>
            <td class="shape">{ &row.shape }</td>
            <td>{ &row.dtype }</td>
            <td class="target">{ for row.target.split(' ').enumerate().map(|(i, tok)| html! {
                <><span class="tok">{ tok }</span>{ if i + 1 < row.target.split(' ').count() { " " } else { "" } }</>
            }) }</td>
            <td class="num">{ row.trials }</td>
        </tr>
    }
}

fn error_row(e: &ErrorRow) -> Html {
    let location = match (e.line, e.column) {
        (Some(l), Some(c)) => format!("line {l}, column {c}"),
        (Some(l), None) => format!("line {l}"),
        _ => "file".to_string(),
    };
    html! {
        <li>
            <span class="loc">{ location }</span>
            if let Some(field) = &e.field { <code class="field">{ field }</code> }
            <span class="msg">{ &e.message }</span>
            if let (Some(line), Some(source)) = (e.line, &e.source) {
                <pre class="src"><span class="ln">{ format!("{line:>4} │ ") }</span>{ source }
                    if let Some(col) = e.column.filter(|c| *c >= 1 && *c <= source.chars().count() + 1) {
                        { "\n" }<span class="ln">{ "     │ " }</span><span class="caret">{ format!("{}^", " ".repeat(col - 1)) }</span>
                    }
                </pre>
            }
        </li>
    }
}

fn submit_outcome(app: &App) -> Html {
    match &app.submit_outcome {
        None => html! {},
        Some(SubmitOutcome::Accepted {
            summary,
            new_names,
            duplicate_names,
        }) => html! {
            <div id="submit-result" class="result ok" role="status">
                <b>{ format!("Submitted: {summary}.") }</b>
                if !new_names.is_empty() {
                    <div class="sub">{ format!("New: {}", new_names.join(", ")) }</div>
                }
                if !duplicate_names.is_empty() {
                    <div class="sub">{ format!("Already known: {}", duplicate_names.join(", ")) }</div>
                }
            </div>
        },
        Some(SubmitOutcome::ModelAccepted { name, extract_job }) => html! {
            <div id="submit-result" class="result ok" role="status">
                <b>{ model_upload::accepted_text(name) }</b>
                <div class="sub">{ format!("Extract job {}: it waits for a worker with the tvm backend. Follow the run in the Models card.", short_id(extract_job)) }</div>
            </div>
        },
        Some(SubmitOutcome::Rejected(message)) => html! {
            <div id="submit-result" class="result bad" role="alert">
                <b>{ "The master refused the file:" }</b>
                <pre>{ message }</pre>
            </div>
        },
    }
}

// ---------------------------------------------------------------------------
// ONNX model upload
// ---------------------------------------------------------------------------

fn model_result(app: &App, ctx: &Context<App>, upload: &ModelUpload) -> Html {
    let model = match &upload.loaded {
        Ok(model) => model,
        Err(message) => {
            return html! {
                <div id="upload-errors" class="errors" role="alert">
                    <p class="bad"><b>{ format!("{} cannot be submitted", upload.file) }</b>{ " — nothing was sent." }</p>
                    <ul><li><span class="msg">{ message }</span></li></ul>
                </div>
            }
        }
    };
    let link = ctx.link();
    let checked = upload.check(app);
    let problems = match &checked {
        Some(Err(p)) => p.as_slice(),
        _ => &[],
    };
    let invalid = |field: &Field| problems.iter().any(|p| &p.field == field);
    let admin = app.is_admin();
    let live = app.session.live();
    let submitting = app.session.submitting();
    let hint = if !admin {
        Some("Sign in with the admin token to submit.")
    } else if !live {
        Some("Waiting for the connection…")
    } else if !problems.is_empty() {
        Some("Fix the problems above to submit.")
    } else {
        None
    };
    let s = &model.summary;
    let ops: Vec<String> = model
        .top_ops(8)
        .into_iter()
        .map(|(op, n)| format!("{op} ×{n}"))
        .collect();
    let more_ops = model.op_type_count().saturating_sub(ops.len());
    let on_name = link.callback(|e: InputEvent| {
        Msg::ModelName(e.target_unchecked_into::<HtmlInputElement>().value())
    });
    let on_trials = link.callback(|e: InputEvent| {
        Msg::ModelTrials(e.target_unchecked_into::<HtmlInputElement>().value())
    });
    html! {
        <div id="model-preview" class="preview model-preview" data-file={model.file.clone()}>
            <p class="ok">
                <b>{ "✓ ONNX model" }</b>
                <span class="sub">{ format!(" · {} nodes · {} op types · {} {}", s.nodes, model.op_type_count(),
                    s.inputs.len(), if s.inputs.len() == 1 { "input" } else { "inputs" }) }</span>
            </p>
            <p id="model-ops" class="sub ops">{ ops.join(", ") }
                if more_ops > 0 { { format!(" and {more_ops} more") } }</p>
            <div class="scroll">
                <table id="model-inputs" class="compact">
                    <thead><tr><th>{ "Input" }</th><th>{ "Type" }</th><th>{ "Shape" }</th></tr></thead>
                    <tbody>{ for model.inputs.iter().map(|input| model_input_row(ctx, upload, input, invalid(&Field::Shape(input.name.clone())))) }</tbody>
                </table>
            </div>
            <p id="model-weights" class="note">{ model.weights_note() }</p>
            <div class="model-form">
                <label>
                    <span class="sub">{ "Run name" }</span>
                    <input id="model-name" type="text" spellcheck="false" autocomplete="off"
                        class={classes!(invalid(&Field::Name).then_some("invalid"))}
                        value={upload.form.name.clone()} oninput={on_name} />
                </label>
                <label>
                    <span class="sub">{ "Trials (whole model)" }</span>
                    <input id="model-trials" type="text" inputmode="numeric" autocomplete="off"
                        class={classes!(invalid(&Field::Trials).then_some("invalid"))}
                        value={upload.form.trials.clone()} oninput={on_trials} />
                </label>
            </div>
            if !problems.is_empty() {
                <div id="model-problems" class="errors" role="alert">
                    <ul>{ for problems.iter().map(|p| html! { <li><span class="msg">{ &p.message }</span></li> }) }</ul>
                </div>
            }
            <div class="actions">
                <button id="submit-model" class="primary"
                    disabled={!admin || !live || submitting || !problems.is_empty()}
                    onclick={link.callback(|_| Msg::SubmitModel)}>
                    { if submitting { "Submitting…" } else { "Submit model run" } }</button>
                if let Some(hint) = hint { <span class="sub">{ hint }</span> }
            </div>
        </div>
    }
}

fn model_input_row(
    ctx: &Context<App>,
    upload: &ModelUpload,
    input: &model_upload::InputRow,
    invalid: bool,
) -> Html {
    let field = if input.needs_shape {
        let name = input.name.clone();
        let oninput = ctx.link().callback(move |e: InputEvent| {
            Msg::ModelShape(
                name.clone(),
                e.target_unchecked_into::<HtmlInputElement>().value(),
            )
        });
        html! {
            <div class="shape-field">
                <input type="text" class={classes!("model-shape", invalid.then_some("invalid"))}
                    data-input={input.name.clone()} spellcheck="false" autocomplete="off"
                    placeholder={input.example.clone()} aria-label={format!("shape of {}", input.name)}
                    value={upload.form.shapes.get(&input.name).cloned().unwrap_or_default()} {oninput} />
                <span class="sub">{ "dynamic: give the sizes to tune for" }</span>
            </div>
        }
    } else {
        html! {}
    };
    html! {
        <tr data-input={input.name.clone()}>
            <td class="name mono">{ &input.name }</td>
            <td>{ &input.dtype }</td>
            <td class="shape"><span class="mono">{ &input.dims }</span>{ field }</td>
        </tr>
    }
}

// ---------------------------------------------------------------------------
// Model runs
// ---------------------------------------------------------------------------

fn model_state_badge(state: ModelState) -> Html {
    html! { <span class={classes!("badge", "model-state", format!("st-{state}"))} data-state={state.as_str()}>{ state.as_str() }</span> }
}

fn models_card(app: &App, ctx: &Context<App>) -> Html {
    let models = app.session.fleet.models();
    if models.is_empty() {
        return html! {};
    }
    html! {
        <section id="models" class="card models" aria-label="model runs">
            <h2>{ "Models" }<span class="count">{ models.len() }</span>
                <span class="sub">{ " · whole ONNX models, tuned task by task; click a run for its tasks" }</span></h2>
            <div class="scroll">
                <table id="models-table">
                    <thead><tr>
                        <th>{ "Run" }</th><th>{ "State" }</th><th>{ "Trials" }</th>
                        <th class="num">{ "Estimated" }</th>
                        <th class="num">{ "Untuned" }</th><th class="num">{ "Tuned" }</th>
                        <th class="num">{ "onnxruntime" }</th>
                        <th>{ "Verified" }</th><th class="num" title="tuned schedules applied / functions tuned">{ "Applied" }</th>
                    </tr></thead>
                    <tbody>{ for models.iter().map(|m| model_row(app, ctx, m)) }</tbody>
                </table>
            </div>
            { model_detail(app, ctx) }
        </section>
    }
}

fn model_row(app: &App, ctx: &Context<App>, m: &ModelView) -> Html {
    let selected = app.selected_model.as_deref() == Some(m.name.as_str());
    let name = m.name.clone();
    let onclick = ctx
        .link()
        .callback(move |_| Msg::SelectModel((!selected).then(|| name.clone())));
    let key_name = m.name.clone();
    let onkeydown = ctx.link().batch_callback(move |e: KeyboardEvent| {
        (e.key() == "Enter").then(|| Msg::SelectModel((!selected).then(|| key_name.clone())))
    });
    let measured = model_runs::measured(m);
    let pct = model_runs::trials_percent(m);
    let hint = model_runs::state_hint(m);
    let verified = model_runs::verified(m);
    html! {
        <>
        <tr class={classes!("model-row", selected.then_some("selected"))}
            data-model={m.name.clone()} data-state={m.state.as_str()} tabindex="0"
            aria-expanded={selected.to_string()} {onclick} {onkeydown}>
            <td class="name">
                <div>{ &m.name }</div>
                <div class="sub">{ format!("{} · {} tasks", target_summary(&m.target), m.tasks.len()) }</div>
            </td>
            <td>{ model_state_badge(m.state) }
                if !hint.is_empty() { <div class="sub hint">{ hint }</div> }</td>
            <td>
                <div class="trials">
                    <div class="bar small" role="progressbar" aria-valuemin="0" aria-valuemax={m.trials_total.to_string()}
                        aria-valuenow={m.trials_done.to_string()}>
                        <div class={classes!("seg", format!("st-{}", m.state))} style={format!("width:{pct:.1}%")}></div>
                    </div>
                    <span class="sub model-trials">{ format!("{}/{}", m.trials_done, m.trials_total) }</span>
                </div>
            </td>
            <td class="num model-estimate">{ model_runs::latency(m.estimated_latency_s) }</td>
            if let Some(x) = &measured {
                <td class="num">{ &x.untuned }</td>
                <td class="num model-tuned"><b>{ &x.tuned }</b>
                    if let Some(s) = &x.speedup { <div class="sub ok">{ s }</div> }</td>
                <td class="num">{ &x.onnxruntime }
                    if let Some(r) = &x.vs_onnxruntime { <div class={classes!("sub", if x.beats_onnxruntime { "ok" } else { "warnish" })}>{ r }</div> }</td>
            } else {
                <td class="num">{ "–" }</td><td class="num model-tuned">{ "–" }</td><td class="num">{ "–" }</td>
            }
            <td class={classes!("model-verified", match verified { "yes" => Some("ok"), "no" => Some("bad"), _ => None })}>{ verified }</td>
            <td class="num">{ model_runs::applied(m) }</td>
        </tr>
        if let Some(e) = &m.error {
            <tr class="model-error" data-model={m.name.clone()}>
                <td colspan="9"><span class="bad"><b>{ "error: " }</b>{ e }</span></td>
            </tr>
        }
        </>
    }
}

fn model_detail(app: &App, ctx: &Context<App>) -> Html {
    let Some(name) = &app.selected_model else {
        return html! {};
    };
    let Some(m) = app.session.fleet.models().iter().find(|m| &m.name == name) else {
        return html! {};
    };
    let tz = browser::tz_offset_min();
    let when = |t: Option<u64>| t.map_or_else(|| "–".to_string(), |t| format_clock(t, tz));
    let close = ctx.link().callback(|_| Msg::SelectModel(None));
    let chart = chart::estimate_chart(&m.curve, m.trials_total);
    let extract = m.extract_job.clone();
    let open_extract = ctx.link().callback(move |e: MouseEvent| {
        e.prevent_default();
        Msg::Select(Some(extract.clone()))
    });
    html! {
        <div id="model-detail" class="model-detail" data-model={m.name.clone()}>
            <div class="drawer-head">
                <h2>{ &m.name }</h2>
                { model_state_badge(m.state) }
                <div class="spacer"></div>
                <button class="icon" aria-label="close" onclick={close}>{ "×" }</button>
            </div>
            <div class="model-detail-body">
                <div>
                    <dl class="facts">
                        <dt>{ "Target" }</dt><dd>{ target_summary(&m.target) }</dd>
                        <dt>{ "Trials" }</dt><dd>{ format!("{} / {} ({} per round)", m.trials_done, m.trials_total, m.trials_per_round) }</dd>
                        <dt>{ "Estimated" }</dt><dd>{ model_runs::latency(m.estimated_latency_s) }</dd>
                        <dt>{ "Extract job" }</dt><dd><a class="mono" href="#" onclick={open_extract}>{ short_id(&m.extract_job) }</a></dd>
                        <dt>{ "Created" }</dt><dd>{ when(Some(m.created_at)) }</dd>
                        <dt>{ "Finished" }</dt><dd>{ when(m.finished_at) }</dd>
                        if m.stop_requested { <dt>{ "Stop" }</dt><dd>{ "requested: no more rounds" }</dd> }
                    </dl>
                    <h3>{ "Estimated latency over trials" }</h3>
                    if let Some(c) = &chart {
                        { chart_svg("model-chart", &format!("estimated latency over trials for {}", m.name), c,
                            format!("x: trials · y: Σ weight × best latency of the tuned tasks, once every task has a first measurement{}", if c.log { " (log scale)" } else { "" })) }
                    } else {
                        <p class="empty">{ "No estimate yet: it starts once tasks have measured candidates." }</p>
                    }
                </div>
                <div>
                    <h3>{ format!("Tasks ({})", m.tasks.len()) }</h3>
                    if m.tasks.is_empty() {
                        <p class="empty">{ if m.state == ModelState::Extracting { "Not extracted yet." } else { "No tasks." } }</p>
                    } else {
                        <div class="scroll tasks-scroll">
                            <table id="model-tasks" class="compact">
                                <thead><tr><th>{ "Task" }</th><th class="num">{ "Weight" }</th><th class="num">{ "Trials" }</th>
                                    <th class="num">{ "Best" }</th><th class="num">{ "Share" }</th><th>{ "Note" }</th></tr></thead>
                                <tbody>
                                    { for m.tasks.iter().map(|t| html! {
                                        <tr data-task={t.name.clone()}
                                            class={classes!((t.trivial || t.dead).then_some("known"))}>
                                            <td class="mono task-name" title={t.name.clone()}>{ &t.name }</td>
                                            <td class="num">{ t.weight }</td>
                                            <td class="num">{ t.trials }</td>
                                            <td class="num">{ model_runs::latency(t.best_latency_s) }</td>
                                            <td class="num">{ model_runs::share(t) }</td>
                                            <td class="sub">{ model_runs::task_note(t) }</td>
                                        </tr>
                                    }) }
                                </tbody>
                            </table>
                        </div>
                    }
                </div>
            </div>
        </div>
    }
}

// ---------------------------------------------------------------------------
// Workers
// ---------------------------------------------------------------------------

fn workers_card(app: &App, ctx: &Context<App>, now: u64) -> Html {
    let workers = app.session.fleet.workers();
    let tz = browser::tz_offset_min();
    html! {
        <section class="card workers" aria-label="workers">
            <h2>{ "Workers" }<span class="count">{ workers.len() }</span></h2>
            if workers.is_empty() {
                <p class="empty">{ "No worker is connected. Start one with " }
                    <code>{ "tunefleet-worker --server ws://HOST:PORT --target …" }</code></p>
            } else {
                <div class="scroll">
                    <table id="workers" class="compact">
                        <thead><tr>
                            <th>{ "Worker" }</th><th>{ "State" }</th>
                            <th class="num">{ "Done" }</th><th>{ "Connected" }</th>
                        </tr></thead>
                        <tbody>{ for workers.iter().map(|w| worker_row(app, ctx, w, now, tz)) }</tbody>
                    </table>
                </div>
            }
        </section>
    }
}

fn worker_row(app: &App, ctx: &Context<App>, w: &WorkerView, now: u64, tz: i64) -> Html {
    let current = w.current_job.as_ref().map(|id| {
        let name = app
            .session
            .fleet
            .job(id)
            .map_or_else(|| short_id(id).to_string(), |j| j.name.clone());
        let id = id.clone();
        html! {
            <a class="sub link" href="#" onclick={ctx.link().callback(move |e: MouseEvent| {
                e.prevent_default();
                Msg::Select(Some(id.clone()))
            })}>{ name }</a>
        }
    });
    let busy = w.current_job.is_some();
    let backend = match &w.tvm_version {
        Some(v) => format!("{} (TVM {v})", w.backend),
        None => w.backend.clone(),
    };
    html! {
        <tr key={w.session.clone()} data-worker={w.session.clone()} data-name={w.name.clone()}
            data-state={if busy { "busy" } else { "idle" }}>
            <td>
                <div class="name">{ &w.name }</div>
                <div class="sub mono" title={format!("worker id {} · session {}", w.worker_id, w.session)}>
                    { format!("{} · {}", short_id(&w.session), backend) }</div>
                <div class="sub target">{ target_summary(&w.target) }</div>
            </td>
            <td>
                <span class={classes!("badge", if busy { "st-running" } else { "st-idle" })}>
                    { if busy { "busy" } else { "idle" } }</span>
                { current.unwrap_or_default() }
            </td>
            <td class="num">{ w.jobs_done }</td>
            <td>
                <div>{ format_clock(w.connected_at, tz) }</div>
                <div class="sub">{ format!("for {}", format_duration(now.saturating_sub(w.connected_at))) }</div>
            </td>
        </tr>
    }
}

// ---------------------------------------------------------------------------
// Jobs
// ---------------------------------------------------------------------------

fn jobs_card(app: &App, ctx: &Context<App>) -> Html {
    let link = ctx.link();
    let fleet = &app.session.fleet;
    // The jobs listed: archived ones are counted in the header, not the chips.
    let o = crate::model::overall(fleet.jobs(), 0);
    let archived = fleet.archived().total;
    let rows = visible_jobs(fleet.jobs(), app.filter, &app.search, app.sort);
    let shown = rows.len().min(app.limit);
    let any_ms = fleet.jobs().iter().any(has_metaschedule_records);
    let no_jobs = fleet.jobs().is_empty();
    let ms_title = if any_ms {
        "database_workload.json and database_tuning_record.json, for tvm.s_tir.meta_schedule.database.JSONDatabase"
    } else {
        "No job has MetaSchedule records yet (only workers with the tvm backend produce them)"
    };
    let header = |label: &'static str, key: SortKey, class: &'static str| {
        let active = app.sort.key == key;
        let arrow = match (active, app.sort.descending) {
            (true, false) => " ▲",
            (true, true) => " ▼",
            _ => "",
        };
        let aria = match (active, app.sort.descending) {
            (true, false) => "ascending",
            (true, true) => "descending",
            _ => "none",
        };
        html! {
            <th class={class} aria-sort={aria}>
                <button class="sort" data-sort={label}
                    onclick={link.callback(move |_| Msg::SortBy(key))}>{ label }{ arrow }</button>
            </th>
        }
    };
    let on_search = link.callback(|e: InputEvent| {
        Msg::Search(e.target_unchecked_into::<HtmlInputElement>().value())
    });
    html! {
        <section class="card jobs" aria-label="jobs">
            <div class="card-head">
                <h2>{ "Jobs" }<span class="count">{ o.total }</span>
                    if archived > 0 {
                        <span class="sub" id="archived-count" title="Ended jobs the master archived (--job-retention): counted in the progress bar, listed by `tunefleet results --archived`">
                            { format!(" + {archived} archived") }
                        </span>
                    }
                </h2>
                <div class="downloads">
                    <span class="sub">{ "Download" }</span>
                    <button id="dl-json" class="ghost small" disabled={no_jobs} title="Every job as the protocol's JobView objects"
                        onclick={link.callback(|_| Msg::Download(Download::Json))}>{ "JSON" }</button>
                    <button id="dl-csv" class="ghost small" disabled={no_jobs} title="One row per job"
                        onclick={link.callback(|_| Msg::Download(Download::Csv))}>{ "CSV" }</button>
                    <button id="dl-metaschedule" class="ghost small" disabled={!any_ms} title={ms_title}
                        onclick={link.callback(|_| Msg::Download(Download::Metaschedule))}>{ "MetaSchedule" }</button>
                </div>
            </div>
            <div class="toolbar">
                <div class="chips" role="group" aria-label="filter by state">
                    { for StateFilter::ALL.iter().map(|&f| {
                        let pressed = app.filter == f;
                        html! {
                            <button class={classes!("chip", pressed.then_some("on"))} data-filter={f.label()}
                                aria-pressed={pressed.to_string()}
                                onclick={link.callback(move |_| Msg::Filter(f))}>
                                { f.label() }<span class="n">{ f.count(&o) }</span>
                            </button>
                        }
                    }) }
                </div>
                <input id="job-search" type="search" placeholder="Filter by name, op or id"
                    aria-label="filter jobs" value={app.search.clone()} oninput={on_search} />
            </div>
            if no_jobs {
                <p class="empty">{
                    if !fleet.synced() {
                        "Waiting for the master…"
                    } else if archived > 0 {
                        "Every job has ended and been archived by the master (--job-retention): `tunefleet results --archived` lists them."
                    } else {
                        "No jobs yet: submit a workload file."
                    }
                }</p>
            } else if rows.is_empty() {
                <p class="empty">{ "No job matches this filter." }</p>
            } else {
                <div class="scroll jobs-scroll">
                    <table id="jobs">
                        <thead><tr>
                            { header("Name", SortKey::Name, "") }
                            { header("Op", SortKey::Op, "") }
                            { header("State", SortKey::State, "") }
                            { header("Att.", SortKey::Attempts, "num") }
                            { header("Worker", SortKey::Worker, "") }
                            { header("Trials", SortKey::Progress, "") }
                            { header("Best", SortKey::Best, "num") }
                            { header("GFLOP/s", SortKey::Gflops, "num") }
                            <th><span class="visually-hidden">{ "actions" }</span></th>
                        </tr></thead>
                        <tbody>{ for rows.iter().take(shown).map(|job| job_row(app, ctx, job)) }</tbody>
                    </table>
                </div>
                if shown < rows.len() {
                    <button class="ghost more" onclick={link.callback(|_| Msg::ShowMore)}>
                        { format!("Show more ({} of {} shown)", shown, rows.len()) }</button>
                }
            }
        </section>
    }
}

fn state_badge(state: JobState) -> Html {
    html! { <span class={classes!("badge", format!("st-{state}"))}>{ state.as_str() }</span> }
}

fn job_actions(app: &App, ctx: &Context<App>, job: &JobView) -> Html {
    if !app.is_admin() {
        return html! {};
    }
    let live = app.session.live();
    let id = job.job_id.clone();
    let link = ctx.link().clone();
    if job.state.is_terminal() && job.state != JobState::Done {
        let onclick = Callback::from(move |e: MouseEvent| {
            e.stop_propagation();
            link.send_message(Msg::Retry(id.clone()))
        });
        html! { <button class="ghost small action" data-action="retry" disabled={!live} {onclick}>{ "Retry" }</button> }
    } else if !job.state.is_terminal() {
        let onclick = Callback::from(move |e: MouseEvent| {
            e.stop_propagation();
            link.send_message(Msg::Cancel(id.clone()))
        });
        html! { <button class="ghost small action danger" data-action="cancel" disabled={!live} {onclick}>{ "Cancel" }</button> }
    } else {
        html! {}
    }
}

fn trials_bar(job: &JobView) -> Html {
    let pct = if job.trials_total == 0 {
        0.0
    } else {
        (f64::from(job.trials_done) / f64::from(job.trials_total) * 100.0).min(100.0)
    };
    html! {
        <div class="trials">
            <div class="bar small" role="progressbar" aria-valuemin="0" aria-valuemax={job.trials_total.to_string()}
                aria-valuenow={job.trials_done.to_string()}>
                <div class={classes!("seg", format!("st-{}", job.state))} style={format!("width:{pct:.1}%")}></div>
            </div>
            <span class="sub">{ format!("{}/{}", job.trials_done, job.trials_total) }</span>
        </div>
    }
}

fn job_row(app: &App, ctx: &Context<App>, job: &JobView) -> Html {
    let id = job.job_id.clone();
    let selected = app.selected.as_deref() == Some(job.job_id.as_str());
    let key_id = id.clone();
    let onclick = ctx.link().callback(move |_| Msg::Select(Some(id.clone())));
    // Rows are focusable: Enter opens the detail, as a click does.
    let onkeydown = ctx.link().batch_callback(move |e: KeyboardEvent| {
        (e.key() == "Enter").then(|| Msg::Select(Some(key_id.clone())))
    });
    html! {
        <tr key={job.job_id.clone()} data-job={job.job_id.clone()} data-name={job.name.clone()}
            data-state={job.state.as_str()} class={classes!("job", selected.then_some("selected"))}
            tabindex="0" {onclick} {onkeydown}>
            <td class="name">
                <div>{ &job.name }</div>
                <div class="sub mono">{ short_id(&job.job_id) }</div>
            </td>
            <td>{ job.workload.op_name() }</td>
            <td>{ state_badge(job.state) }
                if !job.errors.is_empty() && !job.state.is_terminal() {
                    <span class="sub bad" title={job.errors.last().map(|e| e.message.clone()).unwrap_or_default()}>{ " ⚠" }</span>
                }
            </td>
            <td class="num">{ job.attempts }</td>
            <td class="worker">{ job.worker.clone().unwrap_or_else(|| "–".into()) }</td>
            <td>{ trials_bar(job) }</td>
            <td class="num best">{ job.best_latency_s.map_or_else(|| "–".into(), format_latency) }</td>
            <td class="num">{ job_gflops(job).map_or_else(|| "–".into(), format_gflops) }</td>
            <td class="actions">{ job_actions(app, ctx, job) }</td>
        </tr>
    }
}

// ---------------------------------------------------------------------------
// Job detail
// ---------------------------------------------------------------------------

fn detail(app: &App, ctx: &Context<App>) -> Html {
    let Some(id) = &app.selected else {
        return html! {};
    };
    let close = ctx.link().callback(|_| Msg::Select(None));
    let Some(job) = app.session.fleet.job(id) else {
        return html! {
            <aside id="job-detail" class="drawer" aria-label="job detail">
                <div class="drawer-head"><h2>{ short_id(id) }</h2>
                    <button class="icon" aria-label="close" onclick={close}>{ "×" }</button></div>
                <p class="empty">{ "This job is not known (any more)." }</p>
            </aside>
        };
    };
    let tz = browser::tz_offset_min();
    let when = |t: Option<u64>| t.map_or_else(|| "–".to_string(), |t| format_clock(t, tz));
    let fact = |label: &'static str, value: String| {
        html! { <><dt>{ label }</dt><dd>{ value }</dd></> }
    };
    let w = &job.workload;
    let flops = w.flops();
    let result = job.result.as_ref();
    html! {
        <aside id="job-detail" class="drawer" aria-label="job detail" data-job={job.job_id.clone()}
            onkeydown={ctx.link().batch_callback(|e: KeyboardEvent| (e.key() == "Escape").then_some(Msg::Select(None)))}>
            <div class="drawer-head">
                <h2>{ &job.name }</h2>
                { state_badge(job.state) }
                <div class="spacer"></div>
                { job_actions(app, ctx, job) }
                <button class="icon" aria-label="close" onclick={close}>{ "×" }</button>
            </div>
            <dl class="facts">
                <dt>{ "Job id" }</dt><dd class="mono">{ &job.job_id }</dd>
                { fact("Op", w.op_name().to_string()) }
                { fact("Shape", w.shape_summary()) }
                { fact("Dtype", w.dtype.clone()) }
                { fact("Target", target_summary(&w.target)) }
                { fact("Trials", format!("{} / {}", job.trials_done, job.trials_total)) }
                { fact("Attempts", job.attempts.to_string()) }
                { fact("Worker", job.worker.clone().or_else(|| result.map(|r| r.worker.clone())).unwrap_or_else(|| "–".into())) }
                { fact("Best latency", job.best_latency_s.map_or_else(|| "–".into(), format_latency)) }
                { fact("GFLOP/s", job_gflops(job).map_or_else(|| "–".into(), format_gflops)) }
                if let Some(f) = flops { { fact("Work per run", format_flops(f)) } }
                if let Some(r) = result {
                    { fact("Backend", match &r.tvm_version { Some(v) => format!("{} (TVM {v})", r.backend), None => r.backend.clone() }) }
                    { fact("Tuning time", format_duration((r.wall_time_s * 1000.0) as u64)) }
                }
                if job.cache_hit || job.cached_from.is_some() {
                    { fact(if job.cache_hit { "Answered from" } else { "Warm-started from" },
                        job.cached_from.clone().unwrap_or_default()) }
                }
                { fact("Created", when(Some(job.created_at))) }
                if !job.actions.is_empty() {
                    <dt>{ "By" }</dt>
                    <dd id="job-actions">{ job.actions.iter().map(|a| format!("{} by {} at {}", a.action, a.by, format_clock(a.at, tz))).collect::<Vec<_>>().join("; ") }</dd>
                }
                { fact("Started", when(job.started_at)) }
                { fact("Finished", when(job.finished_at)) }
            </dl>
            <h3>{ "Best latency over trials" }</h3>
            { curve(job) }
            <h3>{ format!("Errors ({})", job.errors.len()) }</h3>
            if job.errors.is_empty() {
                <p class="empty">{ "None." }</p>
            } else {
                <ol id="job-errors" class="error-history">
                    { for job.errors.iter().rev().map(|e| html! {
                        <li>
                            <div class="sub">{ format!("attempt {} · {} · {}", e.attempt, e.worker.clone().unwrap_or_else(|| "no worker".into()), format_clock(e.at, tz)) }</div>
                            <div class="msg">{ &e.message }</div>
                        </li>
                    }) }
                </ol>
            }
            <h3>{ format!("Top records ({})", job.records.len()) }</h3>
            if job.records.is_empty() {
                <p class="empty">{ "No records yet." }</p>
            } else {
                <table id="job-records" class="compact">
                    <thead><tr><th class="num">{ "#" }</th><th class="num">{ "Latency" }</th>
                        <th class="num">{ "GFLOP/s" }</th><th>{ "Record" }</th></tr></thead>
                    <tbody>
                        { for job.records.iter().enumerate().map(|(i, r)| {
                            let text = r.record.to_string();
                            let short: String = text.chars().take(90).collect();
                            let gflops = flops.filter(|_| r.latency_s > 0.0).map(|f| f / r.latency_s / 1e9);
                            html! {
                                <tr key={i}>
                                    <td class="num">{ i + 1 }</td>
                                    <td class="num">{ format_latency(r.latency_s) }</td>
                                    <td class="num">{ gflops.map_or_else(|| "–".into(), format_gflops) }</td>
                                    <td><code class="record" title={text.clone()}>{ if short.len() < text.len() { format!("{short}…") } else { short } }</code></td>
                                </tr>
                            }
                        }) }
                    </tbody>
                </table>
            }
        </aside>
    }
}

fn curve(job: &JobView) -> Html {
    let Some(c) = chart::latency_chart(&job.history, job.trials_total) else {
        return html! { <p class="empty">{ "No measurements yet." }</p> };
    };
    chart_svg(
        "job-chart",
        &format!("best latency over trials for {}", job.name),
        &c,
        format!(
            "x: trials · y: best latency so far{}",
            if c.log { " (log scale)" } else { "" }
        ),
    )
}

fn chart_svg(id: &'static str, label: &str, c: &Chart, caption: String) -> Html {
    let (x0, x1) = (chart::LEFT, chart::WIDTH - chart::RIGHT);
    let y_axis = chart::HEIGHT - chart::BOTTOM;
    html! {
        <figure class="chart">
            <svg {id} viewBox={format!("0 0 {} {}", chart::WIDTH, chart::HEIGHT)} role="img"
                aria-label={label.to_string()}>
                { for c.y_ticks.iter().map(|t| html! {
                    <>
                        <line class="gridline" x1={x0.to_string()} x2={x1.to_string()} y1={t.at.to_string()} y2={t.at.to_string()} />
                        <text class="tick" x={(x0 - 6.0).to_string()} y={(t.at + 4.0).to_string()} text-anchor="end">{ &t.label }</text>
                    </>
                }) }
                { for c.x_ticks.iter().map(|t| html! {
                    <text class="tick" x={t.at.to_string()} y={(y_axis + 16.0).to_string()} text-anchor="middle">{ &t.label }</text>
                }) }
                <line class="axis" x1={x0.to_string()} x2={x1.to_string()} y1={y_axis.to_string()} y2={y_axis.to_string()} />
                <path class="curve" d={c.path.clone()} />
                <circle class="last" cx={c.last.0.to_string()} cy={c.last.1.to_string()} r="3.5" />
            </svg>
            <figcaption class="sub">{ caption }</figcaption>
        </figure>
    }
}
