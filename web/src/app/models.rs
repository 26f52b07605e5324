//! The Models card: whole ONNX models, tuned task by task. Which run's
//! detail is open is the card's own state; the extract job's link opens
//! the root's job drawer.

use tunefleet_shared::model::{ModelState, ModelView};
use tunefleet_shared::protocol::JobId;
use yew::prelude::*;

use super::browser;
use super::detail::chart_svg;
use super::state::use_fleet;
use super::widgets::{cls, head, num_cell, on_link, row_opener, trials_bar};
use crate::chart;
use crate::format::{format_when, short_id, target_summary};
use crate::model_runs;

#[derive(Properties, PartialEq)]
pub(super) struct ModelsProps {
    /// Opens a job's drawer (the run's extract job).
    pub on_select_job: Callback<Option<JobId>>,
}

#[function_component]
pub(super) fn ModelsCard(p: &ModelsProps) -> Html {
    let fleet = use_fleet();
    let open = use_state_eq(|| None::<String>);
    // A click on the open run's row closes its detail.
    let on_open = {
        let open = open.clone();
        Callback::from(move |name: String| open.set((open.as_ref() != Some(&name)).then_some(name)))
    };
    let session = fleet.session();
    let models = session.fleet.models();
    if models.is_empty() {
        return Html::default();
    }
    let shown = open
        .as_ref()
        .and_then(|name| models.iter().find(|m| &m.name == name));
    let on_close = {
        let open = open.setter();
        Callback::from(move |_: MouseEvent| open.set(None))
    };
    html! {
        <section id="models" class="card models" aria-label="model runs">
            <h2>{ "Models" }<span class="count">{ models.len() }</span>
                <span class="sub">{ " · whole ONNX models, tuned task by task; click a run for its tasks" }</span>
            </h2>
            <div class="scroll">
                <table id="models-table">
                    { head(&[("Run", false, None), ("State", false, None), ("Trials", false, None),
                        ("Estimated", true, None), ("Untuned", true, None), ("Tuned", true, None),
                        ("onnxruntime", true, None), ("Verified", false, None),
                        ("Applied", true, Some("tuned schedules applied / functions tuned"))]) }
                    <tbody>{ for models.iter().map(|m| {
                        model_row(m, shown.is_some_and(|s| s.name == m.name), &on_open)
                    }) }</tbody>
                </table>
            </div>
            { for shown.map(|m| {
                let rounds = model_runs::round_sizes(m, |job| {
                    session.fleet.job(job).map(|j| j.trials_total)
                });
                model_detail(m, rounds, &on_close, &p.on_select_job)
            }) }
        </section>
    }
}

fn model_state_badge(state: ModelState) -> Html {
    let s = state.as_str();
    html! {
        <span class={format!("badge model-state st-{s}")} data-state={s}>{ s }</span>
    }
}

fn model_row(m: &ModelView, selected: bool, on_open: &Callback<String>) -> Html {
    let hint = model_runs::state_hint(m);
    let verified = model_runs::verified(m);
    let name = m.name.clone();
    let (onclick, onkeydown) = row_opener(on_open.reform(move |()| name.clone()));
    html! {
        <>
            <tr key={format!("model:{}", m.name)}
                class={cls(&[("model-row", true), ("selected", selected)])}
                data-model={m.name.clone()} data-state={m.state.as_str()} tabindex="0"
                aria-expanded={if selected { "true" } else { "false" }}
                {onclick} {onkeydown}>
                <td class="name">
                    <div>{ m.name.clone() }</div>
                    <div class="sub">{ format!("{} · {} tasks", target_summary(&m.target), m.tasks.len()) }</div>
                </td>
                <td>
                    { model_state_badge(m.state) }
                    if !hint.is_empty() { <div class="sub hint">{ hint }</div> }
                </td>
                <td>{ trials_bar(m.trials_done, m.trials_total, m.state.as_str(), "sub model-trials") }</td>
                <td class="num model-estimate">{ model_runs::latency(m.estimated_latency_s) }</td>
                { measured_cells(m) }
                <td class={cls(&[("model-verified", true), ("ok", verified == "yes"),
                    ("bad", verified == "no")])}>{ verified }</td>
                { num_cell(model_runs::applied(m)) }
            </tr>
            if let Some(e) = &m.error {
                <tr key={format!("model-error:{}", m.name)} class="model-error" data-model={m.name.clone()}>
                    <td colspan="9"><span class="bad"><b>{ "error: " }</b>{ e.clone() }</span></td>
                </tr>
            }
        </>
    }
}

/// Untuned, tuned and onnxruntime, once the compiled model was measured.
fn measured_cells(m: &ModelView) -> Html {
    let Some(x) = model_runs::measured(m) else {
        return html! {
            <>
                <td class="num">{ "–" }</td><td class="num model-tuned">{ "–" }</td><td class="num">{ "–" }</td>
            </>
        };
    };
    html! {
        <>
            { num_cell(x.untuned.clone()) }
            <td class="num model-tuned"><b>{ x.tuned.clone() }</b>
                if let Some(s) = &x.speedup { <div class="sub ok">{ s.clone() }</div> }
            </td>
            <td class="num">{ x.onnxruntime.clone() }
                if let Some(r) = &x.vs_onnxruntime {
                    <div class={if x.beats_onnxruntime { "sub ok" } else { "sub warnish" }}>{ r.clone() }</div>
                }
            </td>
        </>
    }
}

fn model_detail(
    m: &ModelView,
    rounds: String,
    on_close: &Callback<MouseEvent>,
    on_select_job: &Callback<Option<JobId>>,
) -> Html {
    let tz = browser::tz_offset_min();
    let when = |t| format_when(t, tz);
    let extract = m.extract_job.clone();
    let open_extract = on_select_job.clone();
    let open_extract = on_link(move || open_extract.emit(Some(extract.clone())));
    html! {
        <div id="model-detail" class="model-detail" data-model={m.name.clone()}>
            <div class="drawer-head">
                <h2>{ m.name.clone() }</h2>
                { model_state_badge(m.state) }
                <div class="spacer"></div>
                <button class="icon" aria-label="close" onclick={on_close.clone()}>{ "×" }</button>
            </div>
            <div class="model-detail-body">
                <div>
                    <dl class="facts">
                        <dt>{ "Target" }</dt><dd>{ target_summary(&m.target) }</dd>
                        <dt>{ "Trials" }</dt>
                        <dd>{ format!("{} / {} ({})", m.trials_done, m.trials_total, rounds) }</dd>
                        <dt>{ "Estimated" }</dt><dd>{ model_runs::latency(m.estimated_latency_s) }</dd>
                        <dt>{ "Extract job" }</dt>
                        <dd><a class="mono" href="#" onclick={open_extract}>{ short_id(&m.extract_job) }</a></dd>
                        <dt>{ "Created" }</dt><dd>{ when(Some(m.created_at)) }</dd>
                        <dt>{ "Finished" }</dt><dd>{ when(m.finished_at) }</dd>
                        if m.stop_requested {
                            <dt>{ "Stop" }</dt><dd>{ "requested: no more rounds" }</dd>
                        }
                    </dl>
                    <h3>{ "Estimated latency over trials" }</h3>
                    { estimate_chart(m) }
                </div>
                <div>
                    <h3>{ format!("Tasks ({})", m.tasks.len()) }</h3>
                    { tasks(m) }
                </div>
            </div>
        </div>
    }
}

fn estimate_chart(m: &ModelView) -> Html {
    let Some(c) = chart::estimate_chart(&m.curve, m.trials_total) else {
        return html! {
            <p class="empty">{ "No estimate yet: it starts once the tasks are extracted and timed." }</p>
        };
    };
    chart_svg(
        "model-chart",
        format!("estimated latency over trials for {}", m.name),
        &c,
        "x: trials · y: the whole model's estimated latency (each task at weight × its best, \
         or its time untuned until it has one)",
    )
}

fn tasks(m: &ModelView) -> Html {
    if m.tasks.is_empty() {
        let text = if m.state == ModelState::Extracting {
            "Not extracted yet."
        } else {
            "No tasks."
        };
        return html! { <p class="empty">{ text }</p> };
    }
    html! {
        <div class="scroll tasks-scroll">
            <table id="model-tasks" class="compact">
                { head(&[("Task", false, None), ("Weight", true, None), ("Trials", true, None),
                    ("Best", true, None), ("Share", true, None), ("Note", false, None)]) }
                <tbody>
                    { for m.tasks.iter().map(|t| html! {
                        <tr data-task={t.name.clone()} class={(t.trivial || t.dead).then_some("known")}>
                            <td class="mono task-name" title={t.name.clone()}>{ t.name.clone() }</td>
                            { num_cell(t.weight.to_string()) }
                            { num_cell(t.trials.to_string()) }
                            { num_cell(model_runs::latency(t.best_latency_s)) }
                            { num_cell(model_runs::share(t)) }
                            <td class="sub">{ model_runs::task_note(t) }</td>
                        </tr>
                    }) }
                </tbody>
            </table>
        </div>
    }
}
