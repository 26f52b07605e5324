//! The job drawer: facts, the tuning curve, errors and top records; and the
//! SVG chart the Models card's detail shares.

use tunefleet_shared::export::job_gflops;
use tunefleet_shared::protocol::JobView;
use yew::prelude::*;

use super::browser;
use super::jobs::job_actions;
use super::state::Fleet;
use super::widgets::{head, num_cell, state_badge};
use crate::chart::{self, Chart};
use crate::format::{
    format_clock, format_duration, format_flops, format_gflops, format_latency, format_when,
    short_id, target_summary,
};
use crate::view_model::Session;

fn fact(label: &'static str, value: String) -> Html {
    html! { <><dt>{ label }</dt><dd>{ value }</dd></> }
}

/// The drawer of one job, open until closed (×, or Escape anywhere in it).
/// A job the fleet no longer holds says so instead of vanishing.
pub(super) fn detail(
    fleet: &Fleet,
    session: &Session,
    job_id: &str,
    on_close: Callback<()>,
) -> Html {
    let close = html! {
        <button class="icon" aria-label="close" onclick={on_close.reform(|_: MouseEvent| ())}>{ "×" }</button>
    };
    let onkeydown = Callback::from(move |e: KeyboardEvent| {
        if e.key() == "Escape" {
            on_close.emit(());
        }
    });
    let Some(job) = session.fleet.job(job_id) else {
        return html! {
            <aside id="job-detail" class="drawer" aria-label="job detail" {onkeydown}>
                <div class="drawer-head"><h2>{ short_id(job_id) }</h2>{ close }</div>
                <p class="empty">{ "This job is not known (any more)." }</p>
            </aside>
        };
    };
    let tz = browser::tz_offset_min();
    html! {
        <aside id="job-detail" class="drawer" aria-label="job detail" data-job={job.job_id.clone()}
            {onkeydown}>
            <div class="drawer-head">
                <h2>{ job.name.clone() }</h2>
                { state_badge(job.state) }
                <div class="spacer"></div>
                { job_actions(fleet, session, job) }
                { close }
            </div>
            { facts(job, tz) }
            <h3>{ "Best latency over trials" }</h3>
            { curve(job) }
            <h3>{ format!("Errors ({})", job.errors.len()) }</h3>
            { errors(job, tz) }
            <h3>{ format!("Top records ({})", job.records.len()) }</h3>
            { records(job) }
        </aside>
    }
}

fn dash() -> String {
    "–".to_string()
}

fn facts(job: &JobView, tz: i64) -> Html {
    let when = |t| format_when(t, tz);
    let w = &job.workload;
    let result = job.result.as_ref();
    let worker = job
        .worker
        .clone()
        .or_else(|| result.map(|r| r.worker.clone()));
    let backend = result.map(|r| {
        let backend = match &r.tvm_version {
            Some(v) => format!("{} (TVM {v})", r.backend),
            None => r.backend.clone(),
        };
        html! {
            <>
                { fact("Backend", backend) }
                { fact("Tuning time", format_duration((r.wall_time_s * 1000.0) as u64)) }
            </>
        }
    });
    let cache = (job.cache_hit || job.cached_from.is_some()).then(|| {
        let label = if job.cache_hit {
            "Answered from"
        } else {
            "Warm-started from"
        };
        fact(label, job.cached_from.clone().unwrap_or_default())
    });
    let by = (!job.actions.is_empty()).then(|| {
        let by: Vec<String> = job
            .actions
            .iter()
            .map(|a| format!("{} by {} at {}", a.action, a.by, format_clock(a.at, tz)))
            .collect();
        html! { <><dt>{ "By" }</dt><dd id="job-actions">{ by.join("; ") }</dd></> }
    });
    html! {
        <dl class="facts">
            <dt>{ "Job id" }</dt><dd class="mono">{ job.job_id.clone() }</dd>
            { fact("Op", w.op_name().to_string()) }
            { fact("Shape", w.shape_summary()) }
            { fact("Dtype", w.dtype.clone()) }
            { fact("Target", target_summary(&w.target)) }
            { fact("Trials", format!("{} / {}", job.trials_done, job.trials_total)) }
            { fact("Attempts", job.attempts.to_string()) }
            { fact("Worker", worker.unwrap_or_else(dash)) }
            { fact("Best latency", job.best_latency_s.map_or_else(dash, format_latency)) }
            { fact("GFLOP/s", job_gflops(job).map_or_else(dash, format_gflops)) }
            { for w.flops().map(|f| fact("Work per run", format_flops(f))) }
            { backend }
            { cache }
            { fact("Created", when(Some(job.created_at))) }
            { by }
            { fact("Started", when(job.started_at)) }
            { fact("Finished", when(job.finished_at)) }
        </dl>
    }
}

/// The errors of every attempt, the last first.
fn errors(job: &JobView, tz: i64) -> Html {
    if job.errors.is_empty() {
        return html! { <p class="empty">{ "None." }</p> };
    }
    html! {
        <ol id="job-errors" class="error-history">
            { for job.errors.iter().rev().map(|e| html! {
                <li>
                    <div class="sub">{ format!(
                        "attempt {} · {} · {}",
                        e.attempt,
                        e.worker.as_deref().unwrap_or("no worker"),
                        format_clock(e.at, tz)
                    ) }</div>
                    <div class="msg">{ e.message.clone() }</div>
                </li>
            }) }
        </ol>
    }
}

/// The best records, each shortened to a line (the whole in its title).
fn records(job: &JobView) -> Html {
    if job.records.is_empty() {
        return html! { <p class="empty">{ "No records yet." }</p> };
    }
    let flops = job.workload.flops();
    let row = |(i, r): (usize, &tunefleet_shared::protocol::TuningRecord)| {
        let text = r.record.to_string();
        let mut short: String = text.chars().take(90).collect();
        if short.len() < text.len() {
            short.push('…');
        }
        let gflops = flops
            .filter(|_| r.latency_s > 0.0)
            .map(|f| f / r.latency_s / 1e9);
        html! {
            <tr key={i}>
                { num_cell((i + 1).to_string()) }
                { num_cell(format_latency(r.latency_s)) }
                { num_cell(gflops.map_or_else(dash, format_gflops)) }
                <td><code class="record" title={text}>{ short }</code></td>
            </tr>
        }
    };
    html! {
        <table id="job-records" class="compact">
            { head(&[("#", true, None), ("Latency", true, None), ("GFLOP/s", true, None),
                ("Record", false, None)]) }
            <tbody>{ for job.records.iter().enumerate().map(row) }</tbody>
        </table>
    }
}

fn curve(job: &JobView) -> Html {
    let Some(c) = chart::latency_chart(&job.history, job.trials_total) else {
        return html! { <p class="empty">{ "No measurements yet." }</p> };
    };
    chart_svg(
        "job-chart",
        format!("best latency over trials for {}", job.name),
        &c,
        "x: trials · y: best latency so far",
    )
}

/// A step curve with its axes, `label` for screen readers, `caption` under
/// it (with "(log scale)" where the y axis is logarithmic).
pub(super) fn chart_svg(id: &'static str, label: String, c: &Chart, caption: &str) -> Html {
    let caption = format!("{caption}{}", if c.log { " (log scale)" } else { "" });
    let (x0, x1) = (chart::LEFT, chart::WIDTH - chart::RIGHT);
    let y_axis = chart::HEIGHT - chart::BOTTOM;
    html! {
        <figure class="chart">
            <svg {id} viewBox={format!("0 0 {} {}", chart::WIDTH, chart::HEIGHT)} role="img"
                aria-label={label}>
                { for c.y_ticks.iter().map(|t| html! {
                    <>
                        <line class="gridline" x1={x0.to_string()} x2={x1.to_string()}
                            y1={t.at.to_string()} y2={t.at.to_string()}></line>
                        <text class="tick" text-anchor="end" x={(x0 - 6.0).to_string()}
                            y={(t.at + 4.0).to_string()}>{ t.label.clone() }</text>
                    </>
                }) }
                { for c.x_ticks.iter().map(|t| html! {
                    <text class="tick" text-anchor="middle" x={t.at.to_string()}
                        y={(y_axis + 16.0).to_string()}>{ t.label.clone() }</text>
                }) }
                <line class="axis" x1={x0.to_string()} x2={x1.to_string()}
                    y1={y_axis.to_string()} y2={y_axis.to_string()}></line>
                <path class="curve" d={c.path.clone()}></path>
                <circle class="last" r="3.5" cx={c.last.0.to_string()} cy={c.last.1.to_string()}></circle>
            </svg>
            <figcaption class="sub">{ caption }</figcaption>
        </figure>
    }
}
