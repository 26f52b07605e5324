//! The browser side: [`App`] owns the WebSocket, feeds its frames to
//! [`Session`] and holds what the page shows; the Yew component
//! [`view::Dashboard`] renders it. Events reach the app from the views'
//! callbacks, the socket and timers as [`Msg`]s, through one queue
//! ([`send`]); once the queue is empty and a message changed something, the
//! component is asked to render (Yew renders on its next turn, diffing its
//! virtual DOM against the last one).
//!
//! Nothing polls: the page renders when a frame arrives (batched per 30 ms so
//! a burst of progress events costs one render) or when the user does
//! something. When the socket drops, the page keeps the last state on screen,
//! marked stale, reconnects with backoff and replaces the state with the
//! snapshot of the new subscription.

mod browser;
mod checker;
mod link;
mod upload_box;
mod view;

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;

use gloo::file::callbacks::FileReader;
use gloo::timers::callback::Timeout;
use tunefleet_shared::protocol::{ClientCommand, JobId, Role};
use wasm_bindgen::prelude::*;
use yew::functional::UseForceUpdateHandle;

use crate::model::{Effect, Session, Sort, SortKey, StateFilter};
use crate::model_upload::{self, LoadedModel, ModelForm};
use crate::upload::Checked;
use browser::Socket;
use wasm_bindgen_futures::spawn_local;
use web_check::downloads::{Download, Files};

/// Jobs table rows rendered at first (and added per "show more").
const PAGE_ROWS: usize = 200;
/// Files larger than this are not copied into the text area.
const MAX_EDITABLE_BYTES: usize = 512 * 1024;

#[wasm_bindgen(start)]
pub(crate) fn start() {
    let document = gloo::utils::document();
    if let Some(boot) = document.get_element_by_id("boot") {
        boot.remove();
    }
    APP.with(|app| *app.borrow_mut() = Some(App::new()));
    match document.get_element_by_id("app") {
        Some(root) => yew::Renderer::<view::Dashboard>::with_root(root).render(),
        // An index.html without the mount point: Yew mounts on the body.
        None => yew::Renderer::<view::Dashboard>::new().render(),
    };
    send(Msg::Reconnect);
}

thread_local! {
    static APP: RefCell<Option<App>> = const { RefCell::new(None) };
    /// Messages not yet handed to [`App::update`].
    static QUEUE: RefCell<VecDeque<Msg>> = const { RefCell::new(VecDeque::new()) };
    /// Set while the queue is being worked off: a message sent from inside
    /// an update waits its turn instead of re-entering the app.
    static BUSY: Cell<bool> = const { Cell::new(false) };
    /// The root component's handle to ask for a render.
    static REDRAW: RefCell<Option<UseForceUpdateHandle>> = const { RefCell::new(None) };
}

/// Hands `msg` to the app; asks for a render once the queue is empty, if
/// any message changed what the page shows.
pub(crate) fn send(msg: Msg) {
    QUEUE.with(|q| q.borrow_mut().push_back(msg));
    if BUSY.replace(true) {
        return;
    }
    let mut changed = false;
    loop {
        // An event the browser dispatches while Yew renders (the views hold
        // the state then) waits in the queue for the next task.
        if APP.with(|app| app.try_borrow_mut().is_err()) {
            Timeout::new(0, || send(Msg::Wake)).forget();
            break;
        }
        let Some(msg) = QUEUE.with(|q| q.borrow_mut().pop_front()) else {
            break;
        };
        APP.with(|app| {
            if let Some(app) = app.borrow_mut().as_mut() {
                changed |= app.update(msg);
            }
        });
    }
    if changed {
        REDRAW.with(|r| {
            if let Some(redraw) = r.borrow().as_ref() {
                redraw.force_update();
            }
        });
    }
    BUSY.set(false);
}

/// Called by the root component on each render with its handle.
fn set_redraw(handle: UseForceUpdateHandle) {
    REDRAW.with(|r| *r.borrow_mut() = Some(handle));
}

/// `f` on the app's state (for the views); `None` before it exists.
fn with_app<R>(f: impl FnOnce(&App) -> R) -> Option<R> {
    APP.with(|app| app.borrow().as_ref().map(f))
}

/// Light, dark, or what the system says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Theme {
    Auto,
    Light,
    Dark,
}

impl Theme {
    fn next(self) -> Theme {
        match self {
            Theme::Auto => Theme::Dark,
            Theme::Dark => Theme::Light,
            Theme::Light => Theme::Auto,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Theme::Auto => "auto",
            Theme::Light => "light",
            Theme::Dark => "dark",
        }
    }
}

/// The result of the last submit, for the upload box.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum SubmitOutcome {
    Accepted {
        summary: String,
        new_names: Vec<String>,
        duplicate_names: Vec<String>,
    },
    /// A model run was accepted: its extract job is queued.
    ModelAccepted {
        name: String,
        extract_job: JobId,
    },
    Rejected(String),
}

/// An ONNX file in the upload box: the model (or why it cannot be used) and
/// the form to submit it with.
pub(crate) struct ModelUpload {
    file: String,
    size: usize,
    loaded: Result<LoadedModel, String>,
    form: ModelForm,
}

impl ModelUpload {
    /// The form checked against the model and the master's run names;
    /// `None` when the file itself is not usable.
    fn check(
        &self,
        app: &App,
    ) -> Option<Result<model_upload::Checked, Vec<model_upload::Problem>>> {
        let model = self.loaded.as_ref().ok()?;
        let existing: Vec<&str> = app
            .session
            .fleet
            .models()
            .iter()
            .map(|m| m.name.as_str())
            .collect();
        Some(model_upload::check_form(model, &self.form, &existing))
    }
}

pub(crate) enum Msg {
    // The socket, tagged with its generation so late callbacks of an old one are ignored.
    Opened(u64),
    Frame(u64, String),
    Closed(u64, u16, String),
    Flush,
    /// Works off messages that had to wait (see [`send`]).
    Wake,
    Reconnect,
    // Token
    TokenInput(String),
    SignIn,
    SignOut,
    // Upload
    UploadText(String),
    FilePicked(web_sys::File),
    FileLoaded(String, Result<String, String>),
    ModelLoaded(String, Result<Vec<u8>, String>),
    /// The checker's answer for the upload text of this generation.
    Checked(u64, Checked),
    /// The checker's reading of a model file (name, size, result).
    ModelChecked(u64, String, usize, Result<LoadedModel, String>),
    ModelName(String),
    ModelTrials(String),
    ModelShape(String, String),
    SubmitModel,
    Dragging(bool),
    Submit,
    ClearUpload,
    // Fleet
    Filter(StateFilter),
    Search(String),
    SortBy(SortKey),
    ShowMore,
    Select(Option<JobId>),
    /// Opens a model run's detail (closes it when it is the open one).
    SelectModel(Option<String>),
    Cancel(JobId),
    Retry(JobId),
    Download(Download),
    /// The checker module's files for a download, or why there are none.
    Saved(Result<Files, String>),
    ToggleTheme,
    DismissNotice(u64),
}

pub(crate) struct Notice {
    id: u64,
    text: String,
    error: bool,
}

pub(crate) struct App {
    session: Session,
    socket: Option<Socket>,
    generation: u64,
    /// Which of [`browser::client_urls`] the next connection tries; moves on
    /// when one closes before it ever opened.
    url_index: usize,
    opened: bool,
    retry: Option<Timeout>,
    /// Frames received since the last render.
    inbox: Vec<String>,
    flush: Option<Timeout>,
    token: Option<String>,
    token_input: String,
    // Upload box
    upload_text: String,
    upload_name: String,
    /// Set when the loaded file is too big to show in the text area.
    upload_hidden_bytes: Option<usize>,
    checked: Checked,
    /// Bumped whenever the upload box changes, so a late answer from the
    /// checker for older content is dropped.
    check_generation: u64,
    /// The checker has not yet answered for the current content: submit waits.
    checking: bool,
    submit_outcome: Option<SubmitOutcome>,
    reader: Option<FileReader>,
    dragging: bool,
    /// An ONNX file in the upload box (instead of YAML).
    model: Option<ModelUpload>,
    // Fleet views
    filter: StateFilter,
    search: String,
    sort: Sort,
    limit: usize,
    selected: Option<JobId>,
    /// The model run whose detail the Models card shows.
    selected_model: Option<String>,
    notices: Vec<Notice>,
    next_notice: u64,
    theme: Theme,
}

impl App {
    fn notice(&mut self, text: String, error: bool) {
        self.next_notice += 1;
        let id = self.next_notice;
        self.notices.push(Notice { id, text, error });
        if self.notices.len() > 4 {
            self.notices.remove(0);
        }
        Timeout::new(if error { 12_000 } else { 5_000 }, move || {
            send(Msg::DismissNotice(id))
        })
        .forget();
    }

    fn handle_effects(&mut self, effects: Vec<Effect>) {
        for effect in effects {
            match effect {
                Effect::Send(frame) => self.send(frame),
                Effect::Submitted(report) => {
                    let name_of = |id: &String| -> String {
                        if let Checked::Valid { rows, .. } = &self.checked {
                            if let Some(row) = rows.iter().find(|r| &r.job_id == id) {
                                return row.name.clone();
                            }
                        }
                        match self.session.fleet.job(id) {
                            Some(job) => job.name.clone(),
                            None => crate::format::short_id(id).to_string(),
                        }
                    };
                    let outcome = SubmitOutcome::Accepted {
                        summary: report.summary(),
                        new_names: report.new_jobs.iter().map(name_of).collect(),
                        duplicate_names: report.duplicates.iter().map(name_of).collect(),
                    };
                    self.submit_outcome = Some(outcome);
                    self.upload_text.clear();
                    self.upload_hidden_bytes = None;
                    self.checked = Checked::Empty;
                }
                Effect::ModelSubmitted { name, extract_job } => {
                    self.submit_outcome = Some(SubmitOutcome::ModelAccepted { name, extract_job });
                    self.model = None;
                }
                Effect::SubmitRejected(message) => {
                    self.submit_outcome = Some(SubmitOutcome::Rejected(message))
                }
                Effect::Notice { text, error } => self.notice(text, error),
                Effect::Download { download, reply } => spawn_local(async move {
                    send(Msg::Saved(checker::make_downloads(download, &reply).await));
                }),
            }
        }
    }

    /// Asks the master for `results`; [`Effect::Download`] takes it from there.
    fn download(&mut self, what: Download) {
        match self.session.download(what) {
            Some(frame) => self.send(frame),
            // The buttons are disabled meanwhile; a click already queued lands here.
            None if self.session.downloading() => {}
            None => self.notice(
                "download failed: not connected to the master (the files are made from its results)"
                    .into(),
                true,
            ),
        }
    }

    /// Saves the files the checker module made for a download.
    fn save(&mut self, made: Result<Files, String>) {
        let saved = made.and_then(|made| {
            for file in &made.files {
                browser::download(&file.name, &file.mime, &file.text)?;
            }
            Ok(made.notice)
        });
        match saved {
            Ok(Some(notice)) => self.notice(notice, false),
            Ok(None) => {}
            Err(e) => self.notice(format!("download failed: {e}"), true),
        }
    }
}

impl App {
    fn new() -> App {
        App {
            session: Session::new(),
            socket: None,
            generation: 0,
            url_index: 0,
            opened: false,
            retry: None,
            inbox: Vec::new(),
            flush: None,
            token: browser::stored_token(),
            token_input: String::new(),
            upload_text: String::new(),
            upload_name: "pasted.yaml".into(),
            upload_hidden_bytes: None,
            checked: Checked::Empty,
            check_generation: 0,
            checking: false,
            submit_outcome: None,
            reader: None,
            dragging: false,
            model: None,
            filter: StateFilter::All,
            search: String::new(),
            sort: Sort::default(),
            limit: PAGE_ROWS,
            selected: None,
            selected_model: None,
            notices: Vec::new(),
            next_notice: 0,
            theme: browser::current_theme(),
        }
    }

    fn update(&mut self, msg: Msg) -> bool {
        match msg {
            Msg::Opened(generation) => self.on_opened(generation),
            Msg::Frame(generation, text) => self.on_frame(generation, text),
            Msg::Flush => self.on_flush(),
            Msg::Wake => false,
            Msg::Closed(generation, code, reason) => self.on_closed(generation, code, reason),
            Msg::Reconnect => {
                self.connect();
                true
            }
            Msg::TokenInput(text) => {
                self.token_input = text;
                false
            }
            Msg::SignIn => self.sign_in(),
            Msg::SignOut => self.sign_out(),
            Msg::UploadText(text) => self.upload_text(text),
            Msg::FilePicked(file) => self.file_picked(file),
            Msg::FileLoaded(name, result) => self.file_loaded(name, result),
            Msg::ModelLoaded(name, result) => self.model_loaded(name, result),
            Msg::Checked(generation, checked) => self.on_checked(generation, checked),
            Msg::ModelChecked(generation, name, size, loaded) => {
                self.on_model_checked(generation, name, size, loaded)
            }
            Msg::ModelName(text) => {
                if let Some(m) = &mut self.model {
                    m.form.name = text;
                }
                true
            }
            Msg::ModelTrials(text) => {
                if let Some(m) = &mut self.model {
                    m.form.trials = text;
                }
                true
            }
            Msg::ModelShape(input, text) => {
                if let Some(m) = &mut self.model {
                    m.form.shapes.insert(input, text);
                }
                true
            }
            Msg::SubmitModel => self.submit_model(),
            Msg::Dragging(on) => {
                let changed = self.dragging != on;
                self.dragging = on;
                changed
            }
            Msg::Submit => self.submit(),
            Msg::ClearUpload => self.clear_upload(),
            Msg::Filter(filter) => {
                self.filter = filter;
                self.limit = PAGE_ROWS;
                true
            }
            Msg::Search(text) => {
                self.search = text;
                self.limit = PAGE_ROWS;
                true
            }
            Msg::SortBy(key) => {
                self.sort = self.sort.clicked(key);
                true
            }
            Msg::ShowMore => {
                self.limit += PAGE_ROWS;
                true
            }
            Msg::Select(job) => {
                self.selected = job;
                true
            }
            Msg::SelectModel(name) => {
                // A click on the open run's row closes its detail.
                self.selected_model = name.filter(|n| self.selected_model.as_ref() != Some(n));
                true
            }
            Msg::Cancel(job_id) => {
                if let Some(frame) = self.session.request(ClientCommand::Cancel { job_id }) {
                    self.send(frame);
                }
                false
            }
            Msg::Retry(job_id) => {
                if let Some(frame) = self.session.request(ClientCommand::Retry { job_id }) {
                    self.send(frame);
                }
                false
            }
            Msg::Saved(made) => {
                self.save(made);
                true
            }
            Msg::Download(what) => {
                self.download(what);
                true
            }
            Msg::ToggleTheme => {
                self.theme = self.theme.next();
                browser::apply_theme(self.theme);
                true
            }
            Msg::DismissNotice(id) => {
                let before = self.notices.len();
                self.notices.retain(|n| n.id != id);
                before != self.notices.len()
            }
        }
    }
}

impl App {
    fn is_admin(&self) -> bool {
        self.session.role() == Some(Role::Admin)
    }
}
