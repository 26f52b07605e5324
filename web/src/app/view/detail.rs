//! The job drawer: facts, the tuning curve, errors and top records; and the
//! SVG chart the Models card's detail shares.

use tunefleet_shared::export::job_gflops;
use tunefleet_shared::protocol::JobView;

use super::fleet::{job_actions, state_badge};
use crate::action::Click;
use crate::app::{browser, App};
use crate::chart::{self, Chart};
use crate::format::{
    format_clock, format_duration, format_flops, format_gflops, format_latency, short_id,
    target_summary,
};
use crate::html::Html;

fn fact(h: &mut Html, label: &str, value: &str) {
    h.raw("<dt>")
        .raw(label)
        .raw("</dt><dd>")
        .text(value)
        .raw("</dd>");
}

pub(super) fn detail(h: &mut Html, app: &App) {
    let Some(id) = &app.selected else {
        return;
    };
    let Some(job) = app.session.fleet.job(id) else {
        h.raw("<aside id=\"job-detail\" class=\"drawer\" aria-label=\"job detail\"><div class=\"drawer-head\"><h2>")
            .text(short_id(id))
            .raw(
                "</h2><button class=\"icon\" aria-label=\"close\"",
            )
            .click(Click::CloseDetail)
            .raw(">×</button></div><p class=\"empty\">This job is not known (any more).</p></aside>");
        return;
    };
    let tz = browser::tz_offset_min();
    let when = |t: Option<u64>| t.map_or_else(|| "–".to_string(), |t| format_clock(t, tz));
    let dash = || "–".to_string();
    let w = &job.workload;
    let flops = w.flops();
    let result = job.result.as_ref();
    h.raw("<aside id=\"job-detail\" class=\"drawer\" aria-label=\"job detail\"")
        .attr("data-job", &job.job_id)
        .raw("><div class=\"drawer-head\"><h2>")
        .text(&job.name)
        .raw("</h2>");
    state_badge(h, job.state);
    h.raw("<div class=\"spacer\"></div>");
    job_actions(h, app, job);
    h.raw("<button class=\"icon\" aria-label=\"close\"")
        .click(Click::CloseDetail)
        .raw(">×</button></div><dl class=\"facts\"><dt>Job id</dt><dd class=\"mono\">")
        .text(&job.job_id)
        .raw("</dd>");
    fact(h, "Op", w.op_name());
    fact(h, "Shape", &w.shape_summary());
    fact(h, "Dtype", &w.dtype);
    fact(h, "Target", &target_summary(&w.target));
    fact(
        h,
        "Trials",
        &format!("{} / {}", job.trials_done, job.trials_total),
    );
    fact(h, "Attempts", &job.attempts.to_string());
    let worker = job
        .worker
        .clone()
        .or_else(|| result.map(|r| r.worker.clone()));
    fact(h, "Worker", worker.as_deref().unwrap_or("–"));
    fact(
        h,
        "Best latency",
        &job.best_latency_s.map_or_else(dash, format_latency),
    );
    fact(
        h,
        "GFLOP/s",
        &job_gflops(job).map_or_else(dash, format_gflops),
    );
    if let Some(f) = flops {
        fact(h, "Work per run", &format_flops(f));
    }
    if let Some(r) = result {
        let backend = match &r.tvm_version {
            Some(v) => format!("{} (TVM {v})", r.backend),
            None => r.backend.clone(),
        };
        fact(h, "Backend", &backend);
        fact(
            h,
            "Tuning time",
            &format_duration((r.wall_time_s * 1000.0) as u64),
        );
    }
    if job.cache_hit || job.cached_from.is_some() {
        fact(
            h,
            if job.cache_hit {
                "Answered from"
            } else {
                "Warm-started from"
            },
            job.cached_from.as_deref().unwrap_or_default(),
        );
    }
    fact(h, "Created", &when(Some(job.created_at)));
    if !job.actions.is_empty() {
        let by: Vec<String> = job
            .actions
            .iter()
            .map(|a| format!("{} by {} at {}", a.action, a.by, format_clock(a.at, tz)))
            .collect();
        h.raw("<dt>By</dt><dd id=\"job-actions\">")
            .text(&by.join("; "))
            .raw("</dd>");
    }
    fact(h, "Started", &when(job.started_at));
    fact(h, "Finished", &when(job.finished_at));
    h.raw("</dl><h3>Best latency over trials</h3>");
    curve(h, job);
    h.raw("<h3>")
        .textf(format_args!("Errors ({})", job.errors.len()))
        .raw("</h3>");
    if job.errors.is_empty() {
        h.raw("<p class=\"empty\">None.</p>");
    } else {
        h.raw("<ol id=\"job-errors\" class=\"error-history\">");
        for e in job.errors.iter().rev() {
            h.raw("<li><div class=\"sub\">")
                .textf(format_args!(
                    "attempt {} · {} · {}",
                    e.attempt,
                    e.worker.as_deref().unwrap_or("no worker"),
                    format_clock(e.at, tz)
                ))
                .raw("</div><div class=\"msg\">")
                .text(&e.message)
                .raw("</div></li>");
        }
        h.raw("</ol>");
    }
    h.raw("<h3>")
        .textf(format_args!("Top records ({})", job.records.len()))
        .raw("</h3>");
    if job.records.is_empty() {
        h.raw("<p class=\"empty\">No records yet.</p>");
    } else {
        h.raw(
            "<table id=\"job-records\" class=\"compact\"><thead><tr><th class=\"num\">#</th>\
             <th class=\"num\">Latency</th><th class=\"num\">GFLOP/s</th><th>Record</th></tr></thead><tbody>",
        );
        for (i, r) in job.records.iter().enumerate() {
            let text = r.record.to_string();
            let short: String = text.chars().take(90).collect();
            let gflops = flops
                .filter(|_| r.latency_s > 0.0)
                .map(|f| f / r.latency_s / 1e9);
            h.raw("<tr")
                .attrf("data-key", format_args!("{i}"))
                .raw("><td class=\"num\">")
                .num(i + 1)
                .raw("</td><td class=\"num\">")
                .text(&format_latency(r.latency_s))
                .raw("</td><td class=\"num\">")
                .text(&gflops.map_or_else(dash, format_gflops))
                .raw("</td><td><code class=\"record\"")
                .attr("title", &text)
                .raw(">")
                .text(&short);
            if short.len() < text.len() {
                h.raw("…");
            }
            h.raw("</code></td></tr>");
        }
        h.raw("</tbody></table>");
    }
    h.raw("</aside>");
}

fn curve(h: &mut Html, job: &JobView) {
    let Some(c) = chart::latency_chart(&job.history, job.trials_total) else {
        h.raw("<p class=\"empty\">No measurements yet.</p>");
        return;
    };
    chart_svg(
        h,
        "job-chart",
        &format!("best latency over trials for {}", job.name),
        &c,
        &format!(
            "x: trials · y: best latency so far{}",
            if c.log { " (log scale)" } else { "" }
        ),
    );
}

pub(super) fn chart_svg(h: &mut Html, id: &str, label: &str, c: &Chart, caption: &str) {
    let (x0, x1) = (chart::LEFT, chart::WIDTH - chart::RIGHT);
    let y_axis = chart::HEIGHT - chart::BOTTOM;
    h.raw("<figure class=\"chart\"><svg")
        .attr("id", id)
        .attrf(
            "viewBox",
            format_args!("0 0 {} {}", chart::WIDTH, chart::HEIGHT),
        )
        .raw(" role=\"img\"")
        .attr("aria-label", label)
        .raw(">");
    for t in &c.y_ticks {
        h.raw("<line class=\"gridline\"")
            .attrf("x1", format_args!("{x0}"))
            .attrf("x2", format_args!("{x1}"))
            .attrf("y1", format_args!("{}", t.at))
            .attrf("y2", format_args!("{}", t.at))
            .raw("></line><text class=\"tick\" text-anchor=\"end\"")
            .attrf("x", format_args!("{}", x0 - 6.0))
            .attrf("y", format_args!("{}", t.at + 4.0))
            .raw(">")
            .text(&t.label)
            .raw("</text>");
    }
    for t in &c.x_ticks {
        h.raw("<text class=\"tick\" text-anchor=\"middle\"")
            .attrf("x", format_args!("{}", t.at))
            .attrf("y", format_args!("{}", y_axis + 16.0))
            .raw(">")
            .text(&t.label)
            .raw("</text>");
    }
    h.raw("<line class=\"axis\"")
        .attrf("x1", format_args!("{x0}"))
        .attrf("x2", format_args!("{x1}"))
        .attrf("y1", format_args!("{y_axis}"))
        .attrf("y2", format_args!("{y_axis}"))
        .raw("></line><path class=\"curve\"")
        .attr("d", &c.path)
        .raw("></path><circle class=\"last\" r=\"3.5\"")
        .attrf("cx", format_args!("{}", c.last.0))
        .attrf("cy", format_args!("{}", c.last.1))
        .raw("></circle></svg><figcaption class=\"sub\">")
        .text(caption)
        .raw("</figcaption></figure>");
}
