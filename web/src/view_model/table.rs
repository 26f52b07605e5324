//! The jobs table: which rows a filter and a search show, and in which
//! order a clicked column sorts them.

use tunefleet_shared::protocol::{JobState, JobView};

use super::job_order;
use super::progress::trials_fraction;
use super::Overall;

/// The state filter chips above the jobs table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StateFilter {
    #[default]
    All,
    Queued,
    /// Assigned or running.
    Running,
    Done,
    Failed,
    Cancelled,
}

impl StateFilter {
    pub const ALL: [StateFilter; 6] = [
        StateFilter::All,
        StateFilter::Queued,
        StateFilter::Running,
        StateFilter::Done,
        StateFilter::Failed,
        StateFilter::Cancelled,
    ];

    pub fn label(self) -> &'static str {
        match self {
            StateFilter::All => "all",
            StateFilter::Queued => "queued",
            StateFilter::Running => "running",
            StateFilter::Done => "done",
            StateFilter::Failed => "failed",
            StateFilter::Cancelled => "cancelled",
        }
    }

    pub fn matches(self, state: JobState) -> bool {
        match self {
            StateFilter::All => true,
            StateFilter::Queued => state == JobState::Queued,
            StateFilter::Running => state.is_in_flight(),
            StateFilter::Done => state == JobState::Done,
            StateFilter::Failed => state == JobState::Failed,
            StateFilter::Cancelled => state == JobState::Cancelled,
        }
    }

    /// How many of `overall`'s jobs the chip selects.
    pub fn count(self, o: &Overall) -> usize {
        match self {
            StateFilter::All => o.counts.total,
            StateFilter::Queued => o.counts.queued,
            StateFilter::Running => o.counts.running,
            StateFilter::Done => o.counts.done,
            StateFilter::Failed => o.counts.failed,
            StateFilter::Cancelled => o.counts.cancelled,
        }
    }
}

/// Sortable columns of the jobs table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SortKey {
    /// Submission order (the master's).
    #[default]
    Created,
    Name,
    Op,
    State,
    Attempts,
    Worker,
    Progress,
    Best,
    Gflops,
}

/// Current sort of the jobs table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sort {
    pub key: SortKey,
    pub descending: bool,
}

impl Sort {
    /// Clicking a header: the same column flips direction, another starts ascending.
    pub fn clicked(self, key: SortKey) -> Sort {
        if self.key == key {
            Sort {
                key,
                descending: !self.descending,
            }
        } else {
            Sort {
                key,
                descending: false,
            }
        }
    }
}

fn state_rank(state: JobState) -> u8 {
    // Most interesting first: what is happening, then waiting, then finished.
    match state {
        JobState::Running => 0,
        JobState::Assigned => 1,
        JobState::Queued => 2,
        JobState::Failed => 3,
        JobState::Done => 4,
        JobState::Cancelled => 5,
    }
}

fn cmp_opt_f64(a: Option<f64>, b: Option<f64>) -> std::cmp::Ordering {
    // Unknown values last in ascending order.
    match (a, b) {
        (Some(x), Some(y)) => x.total_cmp(&y),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => std::cmp::Ordering::Equal,
    }
}

/// The rows of the jobs table: those matching `filter` and whose name, op or
/// id contains `search` (case-insensitive), in `sort` order (ties in
/// submission order).
pub fn visible_jobs<'a>(
    jobs: &'a [JobView],
    filter: StateFilter,
    search: &str,
    sort: Sort,
) -> Vec<&'a JobView> {
    let needle = search.trim().to_lowercase();
    let mut rows: Vec<&JobView> = jobs
        .iter()
        .filter(|j| filter.matches(j.state))
        .filter(|j| {
            needle.is_empty()
                || j.name.to_lowercase().contains(&needle)
                || j.workload.op_name().contains(&needle)
                || j.job_id.starts_with(&needle)
        })
        .collect();
    use tunefleet_shared::export::job_gflops;
    rows.sort_by(|a, b| {
        let primary = match sort.key {
            SortKey::Created => std::cmp::Ordering::Equal,
            SortKey::Name => a.name.to_lowercase().cmp(&b.name.to_lowercase()),
            SortKey::Op => a.workload.op_name().cmp(b.workload.op_name()),
            SortKey::State => state_rank(a.state).cmp(&state_rank(b.state)),
            SortKey::Attempts => a.attempts.cmp(&b.attempts),
            SortKey::Worker => a.worker.cmp(&b.worker),
            SortKey::Progress => trials_fraction(a).total_cmp(&trials_fraction(b)),
            SortKey::Best => cmp_opt_f64(a.best_latency_s, b.best_latency_s),
            SortKey::Gflops => cmp_opt_f64(job_gflops(a), job_gflops(b)),
        };
        let primary = if sort.descending {
            primary.reverse()
        } else {
            primary
        };
        primary.then_with(|| job_order(a, b))
    });
    rows
}

/// Rows of the jobs table rendered at first, and added per "show more":
/// 30,000 rows would take seconds to lay out.
pub const PAGE_ROWS: usize = 200;

/// What the user chose to see of the jobs table: the jobs card's own state.
#[derive(Clone, Debug, PartialEq)]
pub struct TableView {
    pub filter: StateFilter,
    pub search: String,
    pub sort: Sort,
    /// Rows shown: [`PAGE_ROWS`] more per "show more".
    pub limit: usize,
}

impl Default for TableView {
    fn default() -> Self {
        TableView {
            filter: StateFilter::All,
            search: String::new(),
            sort: Sort::default(),
            limit: PAGE_ROWS,
        }
    }
}

/// A click or a keystroke on the jobs table's controls.
#[derive(Clone, Debug, PartialEq)]
pub enum TableAction {
    Filter(StateFilter),
    Search(String),
    SortBy(SortKey),
    ShowMore,
}

impl TableView {
    /// A new filter or search starts again from the first page of rows; a
    /// new sort keeps the rows shown.
    pub fn apply(&mut self, action: TableAction) {
        match action {
            TableAction::Filter(filter) => {
                self.filter = filter;
                self.limit = PAGE_ROWS;
            }
            TableAction::Search(search) => {
                self.search = search;
                self.limit = PAGE_ROWS;
            }
            TableAction::SortBy(key) => self.sort = self.sort.clicked(key),
            TableAction::ShowMore => self.limit += PAGE_ROWS,
        }
    }
}
