//! The jobs card: the downloads, the state chips, the search and the table.
//! What the user chose to see (filter, search, sort, rows shown) is the
//! card's own state; which job's drawer is open is the root's, since the
//! workers and Models cards open it too.

use std::rc::Rc;

use tunefleet_shared::export::{has_metaschedule_records, job_gflops};
use tunefleet_shared::fleet::Fleet as FleetView;
use tunefleet_shared::protocol::{ClientCommand, JobId, JobState, JobView, Millis, Role};
use web_check::downloads::Download;
use yew::prelude::*;

use super::state::{use_fleet, Fleet};
use super::widgets::{num_cell, on_input, row_opener, state_badge, trials_bar};
use crate::format::{format_gflops, format_latency, short_id};
use crate::view_model::{overall, visible_jobs, Action, Session, SortKey, StateFilter};
use crate::view_model::{TableAction, TableView};

impl Reducible for TableView {
    type Action = TableAction;

    fn reduce(self: Rc<Self>, action: TableAction) -> Rc<Self> {
        let mut next = (*self).clone();
        next.apply(action);
        Rc::new(next)
    }
}

#[derive(Properties, PartialEq)]
pub(super) struct JobsProps {
    /// The job whose drawer is open: its row is marked.
    pub selected: Option<JobId>,
    pub on_select: Callback<Option<JobId>>,
}

#[function_component]
pub(super) fn JobsCard(p: &JobsProps) -> Html {
    let fleet = use_fleet();
    let view = use_reducer(TableView::default);
    let session = fleet.session();
    let jobs = session.fleet.jobs();
    // The jobs listed: archived ones are counted in the header, not the chips.
    let o = overall(jobs, Millis(0));
    let archived = session.fleet.archived().total;
    let on_search = {
        let view = view.dispatcher();
        on_input(move |text| view.dispatch(TableAction::Search(text)))
    };
    let chips = StateFilter::ALL.into_iter().map(|f| {
        let pressed = view.filter == f;
        let onclick = view.dispatcher();
        let onclick = Callback::from(move |_: MouseEvent| onclick.dispatch(TableAction::Filter(f)));
        html! {
            <button class={if pressed { "chip on" } else { "chip" }} data-filter={f.label()}
                aria-pressed={if pressed { "true" } else { "false" }} {onclick}>
                { f.label() }<span class="n">{ f.count(&o) }</span>
            </button>
        }
    });
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
                { downloads(&fleet, &session) }
            </div>
            <div class="toolbar">
                <div class="chips" role="group" aria-label="filter by state">{ for chips }</div>
                <input id="job-search" type="search" placeholder="Filter by name, op or id"
                    aria-label="filter jobs" value={view.search.clone()} oninput={on_search} />
            </div>
            { table(&fleet, &session, &view, p) }
        </section>
    }
}

/// The download buttons: the files are made from the master's results, one
/// download at a time, archived jobs included (as in the CLI's exports).
fn downloads(fleet: &Fleet, session: &Session) -> Html {
    let jobs = session.fleet.jobs();
    let archived = session.fleet.archived().total;
    let none = jobs.is_empty() && archived == 0;
    let any_ms = jobs.iter().any(has_metaschedule_records) || archived > 0;
    let ms_title = if any_ms {
        "database_workload.json and database_tuning_record.json, for tvm.s_tir.meta_schedule.database.JSONDatabase"
    } else {
        "No job has MetaSchedule records yet (only workers with the tvm backend produce them)"
    };
    let unavailable = if session.downloading() {
        Some("Preparing the download…")
    } else if !session.link().is_live() {
        Some("Needs the connection to the master: the files are made from its results")
    } else {
        None
    };
    let button = |(what, id, label): (Download, &'static str, &'static str), title, off: bool| {
        let onclick = fleet.dispatcher();
        let onclick = Callback::from(move |_: MouseEvent| onclick.dispatch(Action::Download(what)));
        html! {
            <button class="ghost small" {id} title={unavailable.unwrap_or(title)}
                disabled={off || unavailable.is_some()} {onclick}>{ label }</button>
        }
    };
    html! {
        <div class="downloads">
            <span class="sub">{ "Download" }</span>
            { button((Download::Json, "dl-json", "JSON"),
                "Every job, archived ones included, as the protocol's JobView objects", none) }
            { button((Download::Csv, "dl-csv", "CSV"),
                "One row per job, archived ones included", none) }
            { button((Download::Metaschedule, "dl-metaschedule", "MetaSchedule"), ms_title, !any_ms) }
        </div>
    }
}

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

/// The table, or why there is none.
fn table(
    fleet: &Fleet,
    session: &Session,
    view: &UseReducerHandle<TableView>,
    p: &JobsProps,
) -> Html {
    let jobs = session.fleet.jobs();
    if jobs.is_empty() {
        let text = if !session.fleet.synced() {
            "Waiting for the master…"
        } else if session.fleet.archived().total > 0 {
            "Every job has ended and been archived by the master (--job-retention): `tunefleet results --archived` lists them."
        } else {
            "No jobs yet: submit a workload file."
        };
        return html! { <p class="empty">{ text }</p> };
    }
    let rows = visible_jobs(jobs, view.filter, &view.search, view.sort);
    if rows.is_empty() {
        return html! { <p class="empty">{ "No job matches this filter." }</p> };
    }
    let shown = rows.len().min(view.limit);
    let heads = COLUMNS.into_iter().map(|(label, key, class)| {
        let (arrow, aria) = match (view.sort.key == key, view.sort.descending) {
            (true, false) => (" ▲", "ascending"),
            (true, true) => (" ▼", "descending"),
            _ => ("", "none"),
        };
        let onclick = view.dispatcher();
        let onclick =
            Callback::from(move |_: MouseEvent| onclick.dispatch(TableAction::SortBy(key)));
        html! {
            <th {class} aria-sort={aria}>
                <button class="sort" data-sort={label} {onclick}>{ label }{ arrow }</button>
            </th>
        }
    });
    let more = view.dispatcher();
    let more = Callback::from(move |_: MouseEvent| more.dispatch(TableAction::ShowMore));
    let row = |job: &&JobView| {
        let selected = p.selected.as_deref() == Some(job.job_id.as_str());
        job_row(fleet, session, job, selected, &p.on_select)
    };
    html! {
        <>
            <div class="scroll jobs-scroll">
                <table id="jobs">
                    <thead><tr>
                        { for heads }
                        <th><span class="visually-hidden">{ "actions" }</span></th>
                    </tr></thead>
                    <tbody>{ for rows.iter().take(shown).map(row) }</tbody>
                </table>
            </div>
            if shown < rows.len() {
                <button class="ghost more" onclick={more}>
                    { format!("Show more ({} of {} shown)", shown, rows.len()) }</button>
            }
        </>
    }
}

fn job_row(
    fleet: &Fleet,
    session: &Session,
    job: &JobView,
    selected: bool,
    on_select: &Callback<Option<JobId>>,
) -> Html {
    let id = job.job_id.clone();
    // Rows are focusable: Enter opens the detail, as a click does.
    let (onclick, onkeydown) = row_opener(on_select.reform(move |()| Some(id.clone())));
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
            tabindex="0" {onclick} {onkeydown}>
            <td class="name">
                <div>{ job.name.clone() }</div>
                <div class="sub mono">{ short_id(&job.job_id) }</div>
            </td>
            <td>{ job.workload.op_name() }</td>
            <td>{ state_badge(job.state) }{ warning }</td>
            { num_cell(job.attempts.to_string()) }
            <td class="worker">{ worker_cell(&session.fleet, job) }</td>
            <td>{ trials_bar(job.trials_done, job.trials_total, job.state.as_str(), "sub") }</td>
            <td class="num best">{ job.best_latency_s.map_or_else(|| "–".into(), format_latency) }</td>
            { num_cell(job_gflops(job).map_or_else(|| "–".into(), format_gflops)) }
            <td class="actions">{ job_actions(fleet, session, job) }</td>
        </tr>
    }
}

/// The job's worker, or, for a queued job whose target no connected worker
/// serves (a CUDA job on a farm of CPUs), that it waits for one.
fn worker_cell(fleet: &FleetView, job: &JobView) -> Html {
    if let Some(worker) = &job.worker {
        return html! { { worker.clone() } };
    }
    let target = &job.workload.target;
    let served = fleet.workers().iter().any(|w| w.target.serves(target));
    if job.state == JobState::Queued && !served {
        let title = format!("no connected worker serves {target}");
        return html! {
            <span class="sub bad unserved" {title}>{ format!("no {} worker", target.kind()) }</span>
        };
    }
    html! { { "–" } }
}

/// Cancel for an open job, retry for one that failed or was cancelled:
/// for admins, enabled while the page is live.
pub(super) fn job_actions(fleet: &Fleet, session: &Session, job: &JobView) -> Html {
    if session.role() != Some(Role::Admin) {
        return Html::default();
    }
    let job_id = job.job_id.clone();
    let (command, class, label) = if job.state.is_terminal() && job.state != JobState::Done {
        (
            ClientCommand::Retry { job_id },
            "ghost small action",
            "Retry",
        )
    } else if !job.state.is_terminal() {
        (
            ClientCommand::Cancel { job_id },
            "ghost small action danger",
            "Cancel",
        )
    } else {
        return Html::default();
    };
    let verb = if label == "Retry" { "retry" } else { "cancel" };
    let fleet = fleet.dispatcher();
    let onclick = Callback::from(move |e: MouseEvent| {
        // Not a click on the row: the drawer stays as it is.
        e.stop_propagation();
        fleet.dispatch(Action::Request(command.clone()))
    });
    html! {
        <button {class} data-action={verb} disabled={!session.live()} {onclick}>{ label }</button>
    }
}
