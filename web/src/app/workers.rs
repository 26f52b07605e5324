//! The workers card: who is connected, on what, and doing what. A worker's
//! current job opens the root's job drawer.

use tunefleet_shared::fleet::Fleet as FleetView;
use tunefleet_shared::protocol::{JobId, Millis, WorkerView};
use yew::prelude::*;

use super::browser;
use super::state::use_fleet;
use super::widgets::{head, num_cell, on_link};
use crate::format::{format_clock, format_duration, short_id, target_summary};

#[derive(Properties, PartialEq)]
pub(super) struct WorkersProps {
    pub on_select_job: Callback<Option<JobId>>,
}

#[function_component]
pub(super) fn WorkersCard(p: &WorkersProps) -> Html {
    let fleet = use_fleet();
    let session = fleet.session();
    let workers = session.fleet.workers();
    let (now, tz) = (browser::now_ms(), browser::tz_offset_min());
    html! {
        <section class="card workers" aria-label="workers">
            <h2>{ "Workers" }<span class="count">{ workers.len() }</span></h2>
            if workers.is_empty() {
                <p class="empty">{ "No worker is connected. Start one with " }
                    <code>{ "tunefleet-worker --server ws://HOST:PORT --target …" }</code></p>
            } else {
                <div class="scroll">
                    <table id="workers" class="compact">
                        { head(&[("Worker", false, None), ("State", false, None), ("Done", true, None),
                            ("Connected", false, None)]) }
                        <tbody>{ for workers.iter().map(|w| {
                            worker_row(&session.fleet, w, (now, tz), &p.on_select_job)
                        }) }</tbody>
                    </table>
                </div>
            }
        </section>
    }
}

fn worker_row(
    fleet: &FleetView,
    w: &WorkerView,
    (now, tz): (Millis, i64),
    on_select_job: &Callback<Option<JobId>>,
) -> Html {
    let busy = w.current_job.is_some();
    let backend = match &w.tvm_version {
        Some(v) => format!("{} (TVM {v})", w.backend),
        None => w.backend.clone(),
    };
    let job = w.current_job.as_ref().map(|id| {
        let name = fleet
            .job(id)
            .map_or_else(|| short_id(id), |j| j.name.as_str());
        let (id, on_select_job) = (id.clone(), on_select_job.clone());
        let onclick = on_link(move || on_select_job.emit(Some(id.clone())));
        html! { <a class="sub link" href="#" {onclick}>{ name }</a> }
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
            { num_cell(w.jobs_done.to_string()) }
            <td>
                <div>{ format_clock(w.connected_at, tz) }</div>
                <div class="sub">{ "for " }{ format_duration(now.since(w.connected_at)) }</div>
            </td>
        </tr>
    }
}
