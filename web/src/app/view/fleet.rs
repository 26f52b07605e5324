//! The fleet's cards: model runs, workers and jobs.

use tunefleet_shared::export::{has_metaschedule_records, job_gflops};
use tunefleet_shared::model::{ModelState, ModelView};
use tunefleet_shared::protocol::{JobState, JobView, Millis, WorkerView};
use web_check::downloads::Download;
use yew::prelude::*;

use super::detail::ChartSvg;
use super::{cls, on, on_inner, on_input, on_link};
use crate::app::{browser, App, Msg};
use crate::chart;
use crate::format::{
    format_clock, format_duration, format_gflops, format_latency, format_when, short_id,
    target_summary,
};
use crate::model::{visible_jobs, SortKey, StateFilter};
use crate::model_runs;

/// Enter on a focused row itself (not on a button in it) opens the row, as
/// a click does.
fn on_row(e: &KeyboardEvent) -> bool {
    e.key() == "Enter"
        && e.target_dyn_into::<web_sys::Element>()
            .is_some_and(|t| t.tag_name() == "TR")
}

#[derive(Properties, PartialEq)]
pub(super) struct TrialsProps {
    pub done: u32,
    pub total: u32,
    /// The state its colour follows (`st-<state>`).
    pub state: &'static str,
    pub label_class: &'static str,
}

/// A progress bar of `done` out of `total` trials, coloured by `state`.
#[function_component]
pub(super) fn TrialsBar(p: &TrialsProps) -> Html {
    let pct = crate::format::trials_percent(p.done, p.total);
    html! {
        <div class="trials">
            <div class="bar small" role="progressbar" aria-valuemin="0"
                aria-valuemax={p.total.to_string()} aria-valuenow={p.done.to_string()}>
                <div class={format!("seg st-{}", p.state)}
                    style={format!("width:{pct:.1}%")}></div>
            </div>
            <span class={p.label_class}>{ format!("{}/{}", p.done, p.total) }</span>
        </div>
    }
}

// ---------------------------------------------------------------------------
// Model runs
// ---------------------------------------------------------------------------

fn model_state_badge(state: ModelState) -> Html {
    let s = state.as_str();
    html! {
        <span class={format!("badge model-state st-{s}")} data-state={s}>{ s }</span>
    }
}

pub(super) fn models_card(app: &App) -> Html {
    let models = app.session.fleet.models();
    if models.is_empty() {
        return Html::default();
    }
    html! {
        <section id="models" class="card models" aria-label="model runs">
            <h2>{ "Models" }<span class="count">{ models.len() }</span>
                <span class="sub">{ " · whole ONNX models, tuned task by task; click a run for its tasks" }</span>
            </h2>
            <div class="scroll">
                <table id="models-table">
                    <thead><tr>
                        <th>{ "Run" }</th><th>{ "State" }</th><th>{ "Trials" }</th>
                        <th class="num">{ "Estimated" }</th><th class="num">{ "Untuned" }</th>
                        <th class="num">{ "Tuned" }</th><th class="num">{ "onnxruntime" }</th>
                        <th>{ "Verified" }</th>
                        <th class="num" title="tuned schedules applied / functions tuned">{ "Applied" }</th>
                    </tr></thead>
                    <tbody>{ for models.iter().map(|m| model_row(app, m)) }</tbody>
                </table>
            </div>
            { model_detail(app) }
        </section>
    }
}

fn model_row(app: &App, m: &ModelView) -> Html {
    let selected = app.selected_model.as_deref() == Some(m.name.as_str());
    let measured = model_runs::measured(m);
    let hint = model_runs::state_hint(m);
    let verified = model_runs::verified(m);
    let name = m.name.clone();
    let open = move || Msg::SelectModel(Some(name.clone()));
    let name = m.name.clone();
    let onkeydown = Callback::from(move |e: KeyboardEvent| {
        if on_row(&e) {
            super::super::send(Msg::SelectModel(Some(name.clone())));
        }
    });
    let cells = match &measured {
        Some(x) => html! {
            <>
                <td class="num">{ x.untuned.clone() }</td>
                <td class="num model-tuned"><b>{ x.tuned.clone() }</b>
                    if let Some(s) = &x.speedup { <div class="sub ok">{ s.clone() }</div> }
                </td>
                <td class="num">{ x.onnxruntime.clone() }
                    if let Some(r) = &x.vs_onnxruntime {
                        <div class={if x.beats_onnxruntime { "sub ok" } else { "sub warnish" }}>{ r.clone() }</div>
                    }
                </td>
            </>
        },
        None => html! {
            <>
                <td class="num">{ "–" }</td><td class="num model-tuned">{ "–" }</td><td class="num">{ "–" }</td>
            </>
        },
    };
    html! {
        <>
            <tr key={format!("model:{}", m.name)}
                class={cls(&[("model-row", true), ("selected", selected)])}
                data-model={m.name.clone()} data-state={m.state.as_str()} tabindex="0"
                aria-expanded={if selected { "true" } else { "false" }}
                onclick={on(open)} {onkeydown}>
                <td class="name">
                    <div>{ m.name.clone() }</div>
                    <div class="sub">{ format!("{} · {} tasks", target_summary(&m.target), m.tasks.len()) }</div>
                </td>
                <td>
                    { model_state_badge(m.state) }
                    if !hint.is_empty() { <div class="sub hint">{ hint }</div> }
                </td>
                <td><TrialsBar done={m.trials_done} total={m.trials_total}
                    state={m.state.as_str()} label_class="sub model-trials" /></td>
                <td class="num model-estimate">{ model_runs::latency(m.estimated_latency_s) }</td>
                { cells }
                <td class={cls(&[("model-verified", true), ("ok", verified == "yes"),
                    ("bad", verified == "no")])}>{ verified }</td>
                <td class="num">{ model_runs::applied(m) }</td>
            </tr>
            if let Some(e) = &m.error {
                <tr key={format!("model-error:{}", m.name)} class="model-error" data-model={m.name.clone()}>
                    <td colspan="9"><span class="bad"><b>{ "error: " }</b>{ e.clone() }</span></td>
                </tr>
            }
        </>
    }
}

fn model_detail(app: &App) -> Html {
    let Some(name) = &app.selected_model else {
        return Html::default();
    };
    let Some(m) = app.session.fleet.models().iter().find(|m| &m.name == name) else {
        return Html::default();
    };
    let tz = browser::tz_offset_min();
    let when = |t| format_when(t, tz);
    let extract = m.extract_job.clone();
    let chart = match chart::estimate_chart(&m.curve, m.trials_total) {
        Some(c) => {
            let caption = format!(
                "x: trials · y: Σ weight × best latency of the tuned tasks, once every task has a first measurement{}",
                if c.log { " (log scale)" } else { "" }
            );
            html! {
                <ChartSvg id="model-chart" label={format!("estimated latency over trials for {}", m.name)}
                    chart={c} {caption} />
            }
        }
        None => html! {
            <p class="empty">{ "No estimate yet: it starts once tasks have measured candidates." }</p>
        },
    };
    let tasks = if m.tasks.is_empty() {
        html! {
            <p class="empty">{ if m.state == ModelState::Extracting { "Not extracted yet." } else { "No tasks." } }</p>
        }
    } else {
        html! {
            <div class="scroll tasks-scroll">
                <table id="model-tasks" class="compact">
                    <thead><tr>
                        <th>{ "Task" }</th><th class="num">{ "Weight" }</th><th class="num">{ "Trials" }</th>
                        <th class="num">{ "Best" }</th><th class="num">{ "Share" }</th><th>{ "Note" }</th>
                    </tr></thead>
                    <tbody>
                        { for m.tasks.iter().map(|t| html! {
                            <tr data-task={t.name.clone()} class={(t.trivial || t.dead).then_some("known")}>
                                <td class="mono task-name" title={t.name.clone()}>{ t.name.clone() }</td>
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
    };
    html! {
        <div id="model-detail" class="model-detail" data-model={m.name.clone()}>
            <div class="drawer-head">
                <h2>{ m.name.clone() }</h2>
                { model_state_badge(m.state) }
                <div class="spacer"></div>
                <button class="icon" aria-label="close" onclick={on(|| Msg::SelectModel(None))}>{ "×" }</button>
            </div>
            <div class="model-detail-body">
                <div>
                    <dl class="facts">
                        <dt>{ "Target" }</dt><dd>{ target_summary(&m.target) }</dd>
                        <dt>{ "Trials" }</dt>
                        <dd>{ format!("{} / {} ({} per round)", m.trials_done, m.trials_total, m.trials_per_round) }</dd>
                        <dt>{ "Estimated" }</dt><dd>{ model_runs::latency(m.estimated_latency_s) }</dd>
                        <dt>{ "Extract job" }</dt>
                        <dd><a class="mono" href="#" onclick={on_link(move || Msg::Select(Some(extract.clone())))}>
                            { short_id(&m.extract_job) }</a></dd>
                        <dt>{ "Created" }</dt><dd>{ when(Some(m.created_at)) }</dd>
                        <dt>{ "Finished" }</dt><dd>{ when(m.finished_at) }</dd>
                        if m.stop_requested {
                            <dt>{ "Stop" }</dt><dd>{ "requested: no more rounds" }</dd>
                        }
                    </dl>
                    <h3>{ "Estimated latency over trials" }</h3>
                    { chart }
                </div>
                <div>
                    <h3>{ format!("Tasks ({})", m.tasks.len()) }</h3>
                    { tasks }
                </div>
            </div>
        </div>
    }
}

// ---------------------------------------------------------------------------
// Workers
// ---------------------------------------------------------------------------

pub(super) fn workers_card(app: &App, now: Millis) -> Html {
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
                            <th>{ "Worker" }</th><th>{ "State" }</th><th class="num">{ "Done" }</th>
                            <th>{ "Connected" }</th>
                        </tr></thead>
                        <tbody>{ for workers.iter().map(|w| worker_row(app, w, now, tz)) }</tbody>
                    </table>
                </div>
            }
        </section>
    }
}

fn worker_row(app: &App, w: &WorkerView, now: Millis, tz: i64) -> Html {
    let busy = w.current_job.is_some();
    let backend = match &w.tvm_version {
        Some(v) => format!("{} (TVM {v})", w.backend),
        None => w.backend.clone(),
    };
    let job = w.current_job.as_ref().map(|id| {
        let name = app
            .session
            .fleet
            .job(id)
            .map_or_else(|| short_id(id), |j| j.name.as_str());
        let id = id.clone();
        html! {
            <a class="sub link" href="#" onclick={on_link(move || Msg::Select(Some(id.clone())))}>{ name }</a>
        }
    });
    html! {
        <tr key={w.session.clone()} data-worker={w.session.clone()} data-name={w.name.clone()}
            data-state={if busy { "busy" } else { "idle" }}>
            <td>
                <div class="name">{ w.name.clone() }</div>
                <div class="sub mono" title={format!("worker id {} · session {}", w.worker_id, w.session)}>
                    { format!("{} · {backend}", short_id(&w.session)) }</div>
                <div class="sub target">{ target_summary(&w.target) }</div>
                if let Some(device) = &w.device {
                    <div class="sub device">{ device.to_string() }</div>
                }
            </td>
            <td>
                if busy {
                    <span class="badge st-running">{ "busy" }</span>
                } else {
                    <span class="badge st-idle">{ "idle" }</span>
                }
                { job }
            </td>
            <td class="num">{ w.jobs_done }</td>
            <td>
                <div>{ format_clock(w.connected_at, tz) }</div>
                <div class="sub">{ "for " }{ format_duration(now.since(w.connected_at)) }</div>
            </td>
        </tr>
    }
}

// ---------------------------------------------------------------------------
// Jobs
// ---------------------------------------------------------------------------

/// A sortable column's header: its label, the key it sorts by and the
/// cell's class.
const COLUMNS: [(&str, SortKey, &str); 8] = [
    ("Name", SortKey::Name, ""),
    ("Op", SortKey::Op, ""),
    ("State", SortKey::State, ""),
    ("Att.", SortKey::Attempts, "num"),
    ("Worker", SortKey::Worker, ""),
    ("Trials", SortKey::Progress, ""),
    ("Best", SortKey::Best, "num"),
    ("GFLOP/s", SortKey::Gflops, "num"),
];

/// Why no download can start now, if one cannot: the files are made from
/// the master's results, one download at a time.
fn downloads_unavailable(app: &App) -> Option<&'static str> {
    if app.session.downloading() {
        Some("Preparing the download…")
    } else if !app.session.link().is_live() {
        Some("Needs the connection to the master: the files are made from its results")
    } else {
        None
    }
}

/// A download button of the jobs card; `unavailable` (from
/// [`downloads_unavailable`]) disables it and replaces its title.
fn download_button(
    unavailable: Option<&'static str>,
    (what, id, label): (Download, &'static str, &'static str),
    title: &'static str,
    off: bool,
) -> Html {
    let title = unavailable.unwrap_or(title);
    let off = off || unavailable.is_some();
    html! {
        <button class="ghost small" {id} {title} disabled={off}
            onclick={on(move || Msg::Download(what))}>{ label }</button>
    }
}

pub(super) fn jobs_card(app: &App) -> Html {
    let fleet = &app.session.fleet;
    // The jobs listed: archived ones are counted in the header, not the chips.
    let o = crate::model::overall(fleet.jobs(), Millis(0));
    let archived = fleet.archived().total;
    let rows = visible_jobs(fleet.jobs(), app.filter, &app.search, app.sort);
    let shown = rows.len().min(app.limit);
    let any_ms = fleet.jobs().iter().any(has_metaschedule_records);
    let no_jobs = fleet.jobs().is_empty();
    let ms_title = if any_ms || archived > 0 {
        "database_workload.json and database_tuning_record.json, for tvm.s_tir.meta_schedule.database.JSONDatabase"
    } else {
        "No job has MetaSchedule records yet (only workers with the tvm backend produce them)"
    };
    // Archived jobs are in the files too (as in the CLI's exports).
    let none = no_jobs && archived == 0;
    let unavailable = downloads_unavailable(app);
    let chips = StateFilter::ALL.into_iter().map(|f| {
        let pressed = app.filter == f;
        html! {
            <button class={if pressed { "chip on" } else { "chip" }} data-filter={f.label()}
                aria-pressed={if pressed { "true" } else { "false" }}
                onclick={on(move || Msg::Filter(f))}>
                { f.label() }<span class="n">{ f.count(&o) }</span>
            </button>
        }
    });
    let body = if no_jobs {
        let text = if !fleet.synced() {
            "Waiting for the master…"
        } else if archived > 0 {
            "Every job has ended and been archived by the master (--job-retention): `tunefleet results --archived` lists them."
        } else {
            "No jobs yet: submit a workload file."
        };
        html! { <p class="empty">{ text }</p> }
    } else if rows.is_empty() {
        html! { <p class="empty">{ "No job matches this filter." }</p> }
    } else {
        let heads = COLUMNS.into_iter().map(|(label, key, class)| {
            let active = app.sort.key == key;
            let (arrow, aria) = match (active, app.sort.descending) {
                (true, false) => (" ▲", "ascending"),
                (true, true) => (" ▼", "descending"),
                _ => ("", "none"),
            };
            html! {
                <th {class} aria-sort={aria}>
                    <button class="sort" data-sort={label} onclick={on(move || Msg::SortBy(key))}>
                        { label }{ arrow }</button>
                </th>
            }
        });
        html! {
            <>
                <div class="scroll jobs-scroll">
                    <table id="jobs">
                        <thead><tr>
                            { for heads }
                            <th><span class="visually-hidden">{ "actions" }</span></th>
                        </tr></thead>
                        <tbody>{ for rows.iter().take(shown).map(|job| job_row(app, job)) }</tbody>
                    </table>
                </div>
                if shown < rows.len() {
                    <button class="ghost more" onclick={on(|| Msg::ShowMore)}>
                        { format!("Show more ({} of {} shown)", shown, rows.len()) }</button>
                }
            </>
        }
    };
    html! {
        <section class="card jobs" aria-label="jobs">
            <div class="card-head">
                <h2>{ "Jobs" }<span class="count">{ o.counts.total }</span>
                    if archived > 0 {
                        <span class="sub" id="archived-count"
                            title="Ended jobs the master archived (--job-retention): counted in the progress bar, listed by `tunefleet results --archived`">
                            { format!(" + {archived} archived") }</span>
                    }
                </h2>
                <div class="downloads">
                    <span class="sub">{ "Download" }</span>
                    { download_button(unavailable, (Download::Json, "dl-json", "JSON"),
                        "Every job, archived ones included, as the protocol's JobView objects", none) }
                    { download_button(unavailable, (Download::Csv, "dl-csv", "CSV"),
                        "One row per job, archived ones included", none) }
                    { download_button(unavailable, (Download::Metaschedule, "dl-metaschedule", "MetaSchedule"),
                        ms_title, !any_ms && archived == 0) }
                </div>
            </div>
            <div class="toolbar">
                <div class="chips" role="group" aria-label="filter by state">{ for chips }</div>
                <input id="job-search" type="search" placeholder="Filter by name, op or id"
                    aria-label="filter jobs" value={app.search.clone()} oninput={on_input(Msg::Search)} />
            </div>
            { body }
        </section>
    }
}

pub(super) fn state_badge(state: JobState) -> Html {
    let s = state.as_str();
    html! { <span class={format!("badge st-{s}")}>{ s }</span> }
}

pub(super) fn job_actions(app: &App, job: &JobView) -> Html {
    if !app.is_admin() {
        return Html::default();
    }
    let id = job.job_id.clone();
    let (verb, class, label) = if job.state.is_terminal() && job.state != JobState::Done {
        ("retry", "ghost small action", "Retry")
    } else if !job.state.is_terminal() {
        ("cancel", "ghost small action danger", "Cancel")
    } else {
        return Html::default();
    };
    let onclick = on_inner(move || {
        if verb == "retry" {
            Msg::Retry(id.clone())
        } else {
            Msg::Cancel(id.clone())
        }
    });
    html! {
        <button {class} data-action={verb} disabled={!app.session.live()} {onclick}>{ label }</button>
    }
}

/// The job's worker, or, for a queued job whose target no connected worker
/// serves (a CUDA job on a farm of CPUs), that it waits for one.
fn worker_cell(app: &App, job: &JobView) -> Html {
    if let Some(worker) = &job.worker {
        return html! { { worker.clone() } };
    }
    let target = &job.workload.target;
    let served = app.session.fleet.workers().iter().any(|w| w.target.serves(target));
    if job.state == JobState::Queued && !served {
        let title = format!("no connected worker serves {target}");
        return html! {
            <span class="sub bad unserved" {title}>{ format!("no {} worker", target.kind()) }</span>
        };
    }
    html! { { "–" } }
}

fn job_row(app: &App, job: &JobView) -> Html {
    let selected = app.selected.as_deref() == Some(job.job_id.as_str());
    let id = job.job_id.clone();
    let open = move || Msg::Select(Some(id.clone()));
    // Rows are focusable: Enter opens the detail, as a click does.
    let id = job.job_id.clone();
    let onkeydown = Callback::from(move |e: KeyboardEvent| {
        if on_row(&e) {
            super::super::send(Msg::Select(Some(id.clone())));
        }
    });
    let warning = (!job.errors.is_empty() && !job.state.is_terminal()).then(|| {
        let title = job
            .errors
            .last()
            .map_or_else(String::new, |e| e.message.clone());
        html! { <span class="sub bad" {title}>{ " ⚠" }</span> }
    });
    html! {
        <tr key={job.job_id.clone()} data-job={job.job_id.clone()} data-name={job.name.clone()}
            data-state={job.state.as_str()} class={if selected { "job selected" } else { "job" }}
            tabindex="0" onclick={on(open)} {onkeydown}>
            <td class="name">
                <div>{ job.name.clone() }</div>
                <div class="sub mono">{ short_id(&job.job_id) }</div>
            </td>
            <td>{ job.workload.op_name() }</td>
            <td>{ state_badge(job.state) }{ warning }</td>
            <td class="num">{ job.attempts }</td>
            <td class="worker">{ worker_cell(app, job) }</td>
            <td><TrialsBar done={job.trials_done} total={job.trials_total}
                state={job.state.as_str()} label_class="sub" /></td>
            <td class="num best">{ job.best_latency_s.map_or_else(|| "–".into(), format_latency) }</td>
            <td class="num">{ job_gflops(job).map_or_else(|| "–".into(), format_gflops) }</td>
            <td class="actions">{ job_actions(app, job) }</td>
        </tr>
    }
}
