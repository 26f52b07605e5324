//! The fleet's cards: model runs, workers and jobs.

use tunefleet_shared::export::{has_metaschedule_records, job_gflops};
use tunefleet_shared::model::{ModelState, ModelView};
use tunefleet_shared::protocol::{JobState, JobView, WorkerView};

use super::detail::chart_svg;
use crate::action::{Click, Download, TextField};
use crate::app::{browser, App};
use crate::chart;
use crate::format::{
    format_clock, format_duration, format_gflops, format_latency, short_id, target_summary,
};
use crate::html::Html;
use crate::model::{visible_jobs, SortKey, StateFilter};
use crate::model_runs;

/// A progress bar of `done` out of `total`, coloured by `state`.
fn trials(h: &mut Html, done: u32, total: u32, state: &str, label_class: &str) {
    let pct = crate::format::trials_percent(done, total);
    h.raw(
        "<div class=\"trials\"><div class=\"bar small\" role=\"progressbar\" aria-valuemin=\"0\"",
    )
    .attrf("aria-valuemax", format_args!("{total}"))
    .attrf("aria-valuenow", format_args!("{done}"))
    .raw("><div class=\"seg st-")
    .raw(state)
    .raw("\"")
    .attrf("style", format_args!("width:{pct:.1}%"))
    .raw("></div></div><span")
    .attr("class", label_class)
    .raw(">")
    .textf(format_args!("{done}/{total}"))
    .raw("</span></div>");
}

// ---------------------------------------------------------------------------
// Model runs
// ---------------------------------------------------------------------------

fn model_state_badge(h: &mut Html, state: ModelState) {
    h.raw("<span class=\"badge model-state st-")
        .raw(state.as_str())
        .raw("\" data-state=\"")
        .raw(state.as_str())
        .raw("\">")
        .raw(state.as_str())
        .raw("</span>");
}

pub(super) fn models_card(h: &mut Html, app: &App) {
    let models = app.session.fleet.models();
    if models.is_empty() {
        return;
    }
    h.raw("<section id=\"models\" class=\"card models\" aria-label=\"model runs\"><h2>Models<span class=\"count\">")
        .num(models.len())
        .raw(
            "</span><span class=\"sub\"> · whole ONNX models, tuned task by task; click a run for its tasks</span></h2>\
             <div class=\"scroll\"><table id=\"models-table\"><thead><tr>\
             <th>Run</th><th>State</th><th>Trials</th><th class=\"num\">Estimated</th>\
             <th class=\"num\">Untuned</th><th class=\"num\">Tuned</th><th class=\"num\">onnxruntime</th>\
             <th>Verified</th><th class=\"num\" title=\"tuned schedules applied / functions tuned\">Applied</th>\
             </tr></thead><tbody>",
        );
    for m in models {
        model_row(h, app, m);
    }
    h.raw("</tbody></table></div>");
    model_detail(h, app);
    h.raw("</section>");
}

fn model_row(h: &mut Html, app: &App, m: &ModelView) {
    let selected = app.selected_model.as_deref() == Some(m.name.as_str());
    let measured = model_runs::measured(m);
    let hint = model_runs::state_hint(m);
    let verified = model_runs::verified(m);
    h.raw("<tr")
        .attrf("data-key", format_args!("model:{}", m.name))
        .class(&[("model-row", true), ("selected", selected)])
        .attr("data-model", &m.name)
        .attr("data-state", m.state.as_str())
        .raw(" tabindex=\"0\"")
        .attr("aria-expanded", if selected { "true" } else { "false" })
        .click(Click::Model(&m.name))
        .raw("><td class=\"name\"><div>")
        .text(&m.name)
        .raw("</div><div class=\"sub\">")
        .textf(format_args!(
            "{} · {} tasks",
            target_summary(&m.target),
            m.tasks.len()
        ))
        .raw("</div></td><td>");
    model_state_badge(h, m.state);
    if !hint.is_empty() {
        h.raw("<div class=\"sub hint\">").text(hint).raw("</div>");
    }
    h.raw("</td><td>");
    trials(
        h,
        m.trials_done,
        m.trials_total,
        m.state.as_str(),
        "sub model-trials",
    );
    h.raw("</td><td class=\"num model-estimate\">")
        .text(&model_runs::latency(m.estimated_latency_s))
        .raw("</td>");
    if let Some(x) = &measured {
        h.raw("<td class=\"num\">")
            .text(&x.untuned)
            .raw("</td><td class=\"num model-tuned\"><b>")
            .text(&x.tuned)
            .raw("</b>");
        if let Some(s) = &x.speedup {
            h.raw("<div class=\"sub ok\">").text(s).raw("</div>");
        }
        h.raw("</td><td class=\"num\">").text(&x.onnxruntime);
        if let Some(r) = &x.vs_onnxruntime {
            h.raw("<div class=\"sub ")
                .raw(if x.beats_onnxruntime { "ok" } else { "warnish" })
                .raw("\">")
                .text(r)
                .raw("</div>");
        }
        h.raw("</td>");
    } else {
        h.raw(
            "<td class=\"num\">–</td><td class=\"num model-tuned\">–</td><td class=\"num\">–</td>",
        );
    }
    h.raw("<td")
        .class(&[
            ("model-verified", true),
            ("ok", verified == "yes"),
            ("bad", verified == "no"),
        ])
        .raw(">")
        .text(verified)
        .raw("</td><td class=\"num\">")
        .text(&model_runs::applied(m))
        .raw("</td></tr>");
    if let Some(e) = &m.error {
        h.raw("<tr class=\"model-error\"")
            .attrf("data-key", format_args!("model-error:{}", m.name))
            .attr("data-model", &m.name)
            .raw("><td colspan=\"9\"><span class=\"bad\"><b>error: </b>")
            .text(e)
            .raw("</span></td></tr>");
    }
}

fn model_detail(h: &mut Html, app: &App) {
    let Some(name) = &app.selected_model else {
        return;
    };
    let Some(m) = app.session.fleet.models().iter().find(|m| &m.name == name) else {
        return;
    };
    let tz = browser::tz_offset_min();
    let when = |t: Option<u64>| t.map_or_else(|| "–".to_string(), |t| format_clock(t, tz));
    h.raw("<div id=\"model-detail\" class=\"model-detail\"")
        .attr("data-model", &m.name)
        .raw("><div class=\"drawer-head\"><h2>")
        .text(&m.name)
        .raw("</h2>");
    model_state_badge(h, m.state);
    h.raw("<div class=\"spacer\"></div><button class=\"icon\" aria-label=\"close\"")
        .click(Click::CloseModel)
        .raw(
            ">×</button></div><div class=\"model-detail-body\"><div><dl class=\"facts\"><dt>Target</dt><dd>",
        )
    .text(&target_summary(&m.target))
    .raw("</dd><dt>Trials</dt><dd>")
    .textf(format_args!(
        "{} / {} ({} per round)",
        m.trials_done, m.trials_total, m.trials_per_round
    ))
    .raw("</dd><dt>Estimated</dt><dd>")
    .text(&model_runs::latency(m.estimated_latency_s))
    .raw("</dd><dt>Extract job</dt><dd><a class=\"mono\" href=\"#\"")
    .click(Click::Select(&m.extract_job))
    .raw(">")
    .text(short_id(&m.extract_job))
    .raw("</a></dd><dt>Created</dt><dd>")
    .text(&when(Some(m.created_at)))
    .raw("</dd><dt>Finished</dt><dd>")
    .text(&when(m.finished_at))
    .raw("</dd>");
    if m.stop_requested {
        h.raw("<dt>Stop</dt><dd>requested: no more rounds</dd>");
    }
    h.raw("</dl><h3>Estimated latency over trials</h3>");
    match chart::estimate_chart(&m.curve, m.trials_total) {
        Some(c) => chart_svg(
            h,
            "model-chart",
            &format!("estimated latency over trials for {}", m.name),
            &c,
            &format!(
                "x: trials · y: Σ weight × best latency of the tuned tasks, once every task has a first measurement{}",
                if c.log { " (log scale)" } else { "" }
            ),
        ),
        None => {
            h.raw("<p class=\"empty\">No estimate yet: it starts once tasks have measured candidates.</p>");
        }
    }
    h.raw("</div><div><h3>")
        .textf(format_args!("Tasks ({})", m.tasks.len()))
        .raw("</h3>");
    if m.tasks.is_empty() {
        h.raw("<p class=\"empty\">")
            .raw(if m.state == ModelState::Extracting {
                "Not extracted yet."
            } else {
                "No tasks."
            })
            .raw("</p>");
    } else {
        h.raw(
            "<div class=\"scroll tasks-scroll\"><table id=\"model-tasks\" class=\"compact\"><thead><tr>\
             <th>Task</th><th class=\"num\">Weight</th><th class=\"num\">Trials</th>\
             <th class=\"num\">Best</th><th class=\"num\">Share</th><th>Note</th></tr></thead><tbody>",
        );
        for t in &m.tasks {
            h.raw("<tr")
                .attr("data-task", &t.name)
                .class(&[("known", t.trivial || t.dead)])
                .raw("><td class=\"mono task-name\"")
                .attr("title", &t.name)
                .raw(">")
                .text(&t.name)
                .raw("</td><td class=\"num\">")
                .num(t.weight)
                .raw("</td><td class=\"num\">")
                .num(t.trials)
                .raw("</td><td class=\"num\">")
                .text(&model_runs::latency(t.best_latency_s))
                .raw("</td><td class=\"num\">")
                .text(&model_runs::share(t))
                .raw("</td><td class=\"sub\">")
                .text(model_runs::task_note(t))
                .raw("</td></tr>");
        }
        h.raw("</tbody></table></div>");
    }
    h.raw("</div></div></div>");
}

// ---------------------------------------------------------------------------
// Workers
// ---------------------------------------------------------------------------

pub(super) fn workers_card(h: &mut Html, app: &App, now: u64) {
    let workers = app.session.fleet.workers();
    let tz = browser::tz_offset_min();
    h.raw(
        "<section class=\"card workers\" aria-label=\"workers\"><h2>Workers<span class=\"count\">",
    )
    .num(workers.len())
    .raw("</span></h2>");
    if workers.is_empty() {
        h.raw(
            "<p class=\"empty\">No worker is connected. Start one with \
             <code>tunefleet-worker --server ws://HOST:PORT --target …</code></p>",
        );
    } else {
        h.raw(
            "<div class=\"scroll\"><table id=\"workers\" class=\"compact\"><thead><tr>\
             <th>Worker</th><th>State</th><th class=\"num\">Done</th><th>Connected</th>\
             </tr></thead><tbody>",
        );
        for w in workers {
            worker_row(h, app, w, now, tz);
        }
        h.raw("</tbody></table></div>");
    }
    h.raw("</section>");
}

fn worker_row(h: &mut Html, app: &App, w: &WorkerView, now: u64, tz: i64) {
    let busy = w.current_job.is_some();
    let backend = match &w.tvm_version {
        Some(v) => format!("{} (TVM {v})", w.backend),
        None => w.backend.clone(),
    };
    h.raw("<tr")
        .attr("data-key", &w.session)
        .attr("data-worker", &w.session)
        .attr("data-name", &w.name)
        .attr("data-state", if busy { "busy" } else { "idle" })
        .raw("><td><div class=\"name\">")
        .text(&w.name)
        .raw("</div><div class=\"sub mono\"")
        .attrf(
            "title",
            format_args!("worker id {} · session {}", w.worker_id, w.session),
        )
        .raw(">")
        .textf(format_args!("{} · {backend}", short_id(&w.session)))
        .raw("</div><div class=\"sub target\">")
        .text(&target_summary(&w.target))
        .raw("</div></td><td><span class=\"badge ")
        .raw(if busy {
            "st-running\">busy"
        } else {
            "st-idle\">idle"
        })
        .raw("</span>");
    if let Some(id) = &w.current_job {
        let name = app
            .session
            .fleet
            .job(id)
            .map_or_else(|| short_id(id), |j| j.name.as_str());
        h.raw("<a class=\"sub link\" href=\"#\"")
            .click(Click::Select(id))
            .raw(">")
            .text(name)
            .raw("</a>");
    }
    h.raw("</td><td class=\"num\">")
        .num(w.jobs_done)
        .raw("</td><td><div>")
        .text(&format_clock(w.connected_at, tz))
        .raw("</div><div class=\"sub\">for ")
        .text(&format_duration(now.saturating_sub(w.connected_at)))
        .raw("</div></td></tr>");
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
    h: &mut Html,
    unavailable: Option<&str>,
    (what, id, label): (Download, &str, &str),
    title: &str,
    off: bool,
) {
    let title = unavailable.unwrap_or(title);
    let off = off || unavailable.is_some();
    h.raw("<button class=\"ghost small\"")
        .attr("id", id)
        .attr("title", title)
        .click(Click::Download(what))
        .flag("disabled", off)
        .raw(">")
        .raw(label)
        .raw("</button>");
}

pub(super) fn jobs_card(h: &mut Html, app: &App) {
    let fleet = &app.session.fleet;
    // The jobs listed: archived ones are counted in the header, not the chips.
    let o = crate::model::overall(fleet.jobs(), 0);
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
    h.raw("<section class=\"card jobs\" aria-label=\"jobs\"><div class=\"card-head\"><h2>Jobs<span class=\"count\">")
        .num(o.counts.total)
        .raw("</span>");
    if archived > 0 {
        h.raw(
            "<span class=\"sub\" id=\"archived-count\" title=\"Ended jobs the master archived (--job-retention): \
             counted in the progress bar, listed by `tunefleet results --archived`\">",
        )
        .textf(format_args!(" + {archived} archived"))
        .raw("</span>");
    }
    h.raw("</h2><div class=\"downloads\"><span class=\"sub\">Download</span>");
    // Archived jobs are in the files too (as in the CLI's exports).
    let none = no_jobs && archived == 0;
    let unavailable = downloads_unavailable(app);
    download_button(
        h,
        unavailable,
        (Download::Json, "dl-json", "JSON"),
        "Every job, archived ones included, as the protocol's JobView objects",
        none,
    );
    download_button(
        h,
        unavailable,
        (Download::Csv, "dl-csv", "CSV"),
        "One row per job, archived ones included",
        none,
    );
    download_button(
        h,
        unavailable,
        (Download::Metaschedule, "dl-metaschedule", "MetaSchedule"),
        ms_title,
        !any_ms && archived == 0,
    );
    h.raw(
        "</div></div><div class=\"toolbar\"><div class=\"chips\" role=\"group\" aria-label=\"filter by state\">",
    );
    for f in StateFilter::ALL {
        let pressed = app.filter == f;
        h.raw("<button")
            .class(&[("chip", true), ("on", pressed)])
            .attr("data-filter", f.label())
            .attr("aria-pressed", if pressed { "true" } else { "false" })
            .click(Click::Filter(f))
            .raw(">")
            .raw(f.label())
            .raw("<span class=\"n\">")
            .num(f.count(&o))
            .raw("</span></button>");
    }
    h.raw(
        "</div><input id=\"job-search\" type=\"search\" placeholder=\"Filter by name, op or id\" \
         aria-label=\"filter jobs\"",
    )
    .field(TextField::Search)
    .attr("value", &app.search)
    .raw("></div>");
    if no_jobs {
        h.raw("<p class=\"empty\">").raw(if !fleet.synced() {
            "Waiting for the master…"
        } else if archived > 0 {
            "Every job has ended and been archived by the master (--job-retention): `tunefleet results --archived` lists them."
        } else {
            "No jobs yet: submit a workload file."
        });
        h.raw("</p>");
    } else if rows.is_empty() {
        h.raw("<p class=\"empty\">No job matches this filter.</p>");
    } else {
        h.raw("<div class=\"scroll jobs-scroll\"><table id=\"jobs\"><thead><tr>");
        for (label, key, class) in COLUMNS {
            let active = app.sort.key == key;
            let (arrow, aria) = match (active, app.sort.descending) {
                (true, false) => (" ▲", "ascending"),
                (true, true) => (" ▼", "descending"),
                _ => ("", "none"),
            };
            h.raw("<th")
                .attr("class", class)
                .attr("aria-sort", aria)
                .raw("><button class=\"sort\"")
                .attr("data-sort", label)
                .click(Click::Sort(key))
                .raw(">")
                .raw(label)
                .raw(arrow)
                .raw("</button></th>");
        }
        h.raw("<th><span class=\"visually-hidden\">actions</span></th></tr></thead><tbody>");
        for job in rows.iter().take(shown) {
            job_row(h, app, job);
        }
        h.raw("</tbody></table></div>");
        if shown < rows.len() {
            h.raw("<button class=\"ghost more\"")
                .click(Click::ShowMore)
                .raw(">")
                .textf(format_args!(
                    "Show more ({} of {} shown)",
                    shown,
                    rows.len()
                ))
                .raw("</button>");
        }
    }
    h.raw("</section>");
}

pub(super) fn state_badge(h: &mut Html, state: JobState) {
    h.raw("<span class=\"badge st-")
        .raw(state.as_str())
        .raw("\">")
        .raw(state.as_str())
        .raw("</span>");
}

pub(super) fn job_actions(h: &mut Html, app: &App, job: &JobView) {
    if !app.is_admin() {
        return;
    }
    let id = job.job_id.as_str();
    let (click, verb, class, label) = if job.state.is_terminal() && job.state != JobState::Done {
        (Click::Retry(id), "retry", "ghost small action", "Retry")
    } else if !job.state.is_terminal() {
        (
            Click::Cancel(id),
            "cancel",
            "ghost small action danger",
            "Cancel",
        )
    } else {
        return;
    };
    h.raw("<button")
        .attr("class", class)
        .attr("data-action", verb)
        .click(click)
        .flag("disabled", !app.session.live())
        .raw(">")
        .raw(label)
        .raw("</button>");
}

fn job_row(h: &mut Html, app: &App, job: &JobView) {
    let selected = app.selected.as_deref() == Some(job.job_id.as_str());
    // Rows are focusable: Enter opens the detail, as a click does (events.rs).
    h.raw("<tr")
        .attr("data-key", &job.job_id)
        .attr("data-job", &job.job_id)
        .attr("data-name", &job.name)
        .attr("data-state", job.state.as_str())
        .class(&[("job", true), ("selected", selected)])
        .raw(" tabindex=\"0\"")
        .click(Click::Select(&job.job_id))
        .raw("><td class=\"name\"><div>")
        .text(&job.name)
        .raw("</div><div class=\"sub mono\">")
        .text(short_id(&job.job_id))
        .raw("</div></td><td>")
        .text(job.workload.op_name())
        .raw("</td><td>");
    state_badge(h, job.state);
    if !job.errors.is_empty() && !job.state.is_terminal() {
        h.raw("<span class=\"sub bad\"")
            .attr(
                "title",
                job.errors.last().map_or("", |e| e.message.as_str()),
            )
            .raw("> ⚠</span>");
    }
    h.raw("</td><td class=\"num\">")
        .num(job.attempts)
        .raw("</td><td class=\"worker\">")
        .text(job.worker.as_deref().unwrap_or("–"))
        .raw("</td><td>");
    trials(
        h,
        job.trials_done,
        job.trials_total,
        job.state.as_str(),
        "sub",
    );
    h.raw("</td><td class=\"num best\">")
        .text(
            &job.best_latency_s
                .map_or_else(|| "–".into(), format_latency),
        )
        .raw("</td><td class=\"num\">")
        .text(&job_gflops(job).map_or_else(|| "–".into(), format_gflops))
        .raw("</td><td class=\"actions\">");
    job_actions(h, app, job);
    h.raw("</td></tr>");
}
