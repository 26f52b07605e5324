//! The fleet progress card: the overall bar, the jobs by state, the time
//! left and the workers. A plain function of the fleet: it has no state of
//! its own, and the root renders it with every change anyway.

use tunefleet_shared::fleet::Fleet;
use tunefleet_shared::protocol::Millis;
use yew::prelude::*;

use crate::format::format_duration;
use crate::view_model::fleet_overall;

pub(super) fn overall(fleet: &Fleet, now: Millis) -> Html {
    let o = fleet_overall(fleet, now);
    let workers = fleet.workers().len();
    let busy = fleet.workers_busy();
    let pct = o.percent.floor() as u32;
    let running_share = (o.percent - o.done_share - o.failed_share).max(0.0);
    let eta = match o.eta_ms {
        Some(ms) if o.finished() < o.counts.total => format!("ETA {}", format_duration(ms)),
        _ if o.counts.total > 0 && o.finished() == o.counts.total => "all finished".to_string(),
        _ => "ETA –".to_string(),
    };
    html! {
        <section class="card overall" aria-label="fleet progress">
            <div class="overall-head">
                <h2>{ "Fleet progress" }</h2>
                <span id="overall-pct" class="pct">{ format!("{pct}%") }</span>
            </div>
            <div id="overall-bar" class="bar big" role="progressbar" aria-valuemin="0"
                aria-valuemax="100" aria-label="jobs finished" aria-valuenow={pct.to_string()}>
                <div class="seg done" style={format!("width:{:.2}%", o.done_share)}></div>
                <div class="seg failed" style={format!("width:{:.2}%", o.failed_share)}></div>
                <div class="seg running" style={format!("width:{running_share:.2}%")}></div>
            </div>
            <div id="overall-text" class="stats">
                <span><b>{ o.counts.done }</b>{ format!(" / {} done", o.counts.total) }</span>
                <span class={(o.counts.failed > 0).then_some("bad")}>
                    <b>{ o.counts.failed }</b>{ " failed" }
                </span>
                <span><b>{ o.counts.running }</b>{ " running" }</span>
                <span><b>{ o.counts.queued }</b>{ " queued" }</span>
                if o.counts.cancelled > 0 {
                    <span><b>{ o.counts.cancelled }</b>{ " cancelled" }</span>
                }
                <span id="eta">{ eta }</span>
                <span class="push">{ format!(
                    "{workers} {} ({busy} busy)",
                    if workers == 1 { "worker" } else { "workers" }
                ) }</span>
            </div>
        </section>
    }
}
