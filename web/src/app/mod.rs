//! The browser side: one [`App`] that owns the WebSocket, feeds its frames
//! to [`Session`], and renders the state (`view/`) as an HTML string that
//! `dom.rs` patches into the document. Events reach it through listeners on
//! the page's root (`events.rs`) as [`Msg`]s, one queue for all of them.
//!
//! Nothing polls: the page renders when a frame arrives (batched per 30 ms so
//! a burst of progress events costs one render) or when the user does
//! something. When the socket drops, the page keeps the last state on screen,
//! marked stale, reconnects with backoff and replaces the state with the
//! snapshot of the new subscription.

mod browser;
mod checker;
mod dom;
mod events;
mod view;

use std::cell::{Cell, RefCell};
use std::collections::{HashSet, VecDeque};

use gloo::file::callbacks::FileReader;
use gloo::timers::callback::Timeout;
use tunefleet_shared::protocol::{ClientCommand, JobId, Role};
use wasm_bindgen::prelude::*;

use crate::action::Download;
use crate::model::{CloseAction, Effect, Session, Sort, SortKey, StateFilter};
use crate::model_upload::{self, LoadedModel, ModelForm};
use crate::upload::Checked;
use browser::Socket;
use wasm_bindgen_futures::spawn_local;
use web_check::downloads::Files;

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
    let root = match document.get_element_by_id("app") {
        Some(root) => root,
        None => {
            // An index.html without the mount point: make one.
            let Ok(root) = document.create_element("div") else {
                return;
            };
            let _ = gloo::utils::body().append_child(&root);
            root
        }
    };
    events::listen(&root);
    ROOT.with(|r| *r.borrow_mut() = Some(root));
    APP.with(|app| *app.borrow_mut() = Some(App::new()));
    send(Msg::Reconnect);
}

thread_local! {
    static APP: RefCell<Option<App>> = const { RefCell::new(None) };
    static ROOT: RefCell<Option<web_sys::Element>> = const { RefCell::new(None) };
    /// Messages not yet handed to [`App::update`].
    static QUEUE: RefCell<VecDeque<Msg>> = const { RefCell::new(VecDeque::new()) };
    /// Set while the queue is being worked off: a message sent from inside
    /// an update waits its turn instead of re-entering the app.
    static BUSY: Cell<bool> = const { Cell::new(false) };
    static RENDERED: Cell<bool> = const { Cell::new(false) };
}

/// Hands `msg` to the app; renders once when the queue is empty, if any
/// message changed what the page shows.
pub(crate) fn send(msg: Msg) {
    QUEUE.with(|q| q.borrow_mut().push_back(msg));
    if BUSY.replace(true) {
        return;
    }
    let mut changed = false;
    while let Some(msg) = QUEUE.with(|q| q.borrow_mut().pop_front()) {
        APP.with(|app| {
            if let Some(app) = app.borrow_mut().as_mut() {
                changed |= app.update(msg);
            }
        });
    }
    if changed {
        render();
    }
    BUSY.set(false);
}

fn render() {
    let markup = APP.with(|app| app.borrow().as_ref().map(view::page));
    let Some(markup) = markup else {
        return;
    };
    ROOT.with(|root| {
        if let Some(root) = root.borrow().as_ref() {
            dom::patch(root, &markup);
        }
    });
    if !RENDERED.replace(true) {
        // For the browser test's time to first render (performance marks
        // are cheap and visible in the browser's own tools too).
        if let Some(performance) = gloo::utils::window().performance() {
            let _ = performance.mark("tunefleet-first-render");
        }
    }
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
    fn connect(&mut self) {
        self.retry = None;
        if let Some(old) = self.socket.take() {
            old.close();
        }
        self.generation += 1;
        let generation = self.generation;
        self.session.connecting();
        let urls = browser::client_urls();
        let url = &urls[self.url_index % urls.len().max(1)];
        let socket = Socket::open(
            url,
            move || send(Msg::Opened(generation)),
            move |text| send(Msg::Frame(generation, text)),
            move |code, reason| send(Msg::Closed(generation, code, reason)),
        );
        match socket {
            Ok(socket) => self.socket = Some(socket),
            Err(e) => {
                // Not even a socket object (bad URL): treat as a failed attempt.
                send(Msg::Closed(generation, 1006, e));
            }
        }
    }

    fn send(&self, frame: String) {
        if let Some(socket) = &self.socket {
            socket.send(&frame);
        }
    }

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

    fn known_ids(&self) -> HashSet<&str> {
        self.session
            .fleet
            .jobs()
            .iter()
            .map(|j| j.job_id.as_str())
            .collect()
    }

    /// Asks the checker about the upload text; the answer comes back as
    /// [`Msg::Checked`]. The last preview stays on screen meanwhile.
    fn recheck(&mut self) {
        self.check_generation += 1;
        if self.upload_text.trim().is_empty() {
            self.checked = Checked::Empty;
            self.checking = false;
            return;
        }
        self.checking = true;
        let generation = self.check_generation;
        let (text, name) = (self.upload_text.clone(), self.upload_name.clone());
        spawn_local(async move {
            let checked = checker::check_workloads(&text, &name).await;
            send(Msg::Checked(generation, checked));
        });
    }

    /// Marks the preview rows whose jobs the master already has.
    fn mark_known(&mut self) {
        let known = self
            .known_ids()
            .into_iter()
            .map(String::from)
            .collect::<HashSet<_>>();
        self.checked.mark_known(|id| known.contains(id));
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

    /// Puts a model file in the upload box in place of any YAML.
    fn show_model(&mut self, file: String, size: usize, loaded: Result<LoadedModel, String>) {
        self.check_generation += 1;
        self.checking = false;
        self.upload_text.clear();
        self.upload_hidden_bytes = None;
        self.checked = Checked::Empty;
        self.model = Some(ModelUpload {
            form: ModelForm::for_file(&file),
            file,
            size,
            loaded,
        });
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
            Msg::Opened(generation) => {
                if generation != self.generation {
                    return false;
                }
                self.opened = true;
                let hello = self.session.opened(self.token.as_deref());
                self.send(hello);
                true
            }
            Msg::Frame(generation, text) => {
                if generation != self.generation {
                    return false;
                }
                self.inbox.push(text);
                if self.flush.is_none() {
                    self.flush = Some(Timeout::new(30, move || send(Msg::Flush)));
                }
                false
            }
            Msg::Flush => {
                self.flush = None;
                let had_jobs = self.session.fleet.jobs().len();
                for frame in std::mem::take(&mut self.inbox) {
                    let effects = self.session.received(&frame);
                    self.handle_effects(effects);
                }
                if self.session.fleet.jobs().len() != had_jobs {
                    // The duplicate marks of the preview depend on the known jobs.
                    if self.checked.is_valid() {
                        self.mark_known();
                    }
                }
                true
            }
            Msg::Closed(generation, code, reason) => {
                if generation != self.generation {
                    return false;
                }
                // Frames that arrived before the close still count.
                for frame in std::mem::take(&mut self.inbox) {
                    let effects = self.session.received(&frame);
                    self.handle_effects(effects);
                }
                self.flush = None;
                self.socket = None;
                if !std::mem::take(&mut self.opened) {
                    self.url_index = self.url_index.wrapping_add(1);
                }
                let (action, effects) = self.session.closed(code, &reason);
                self.handle_effects(effects);
                if matches!(self.session.link(), crate::model::Link::NeedsToken { .. }) {
                    // A refused token is not worth keeping for the next load.
                    browser::store_token(None);
                    self.token = None;
                }
                if let CloseAction::Reconnect { delay_ms } = action {
                    let jitter = (js_sys::Math::random() * 0.2 * delay_ms as f64) as u64;
                    self.retry = Some(Timeout::new((delay_ms + jitter) as u32, move || {
                        send(Msg::Reconnect)
                    }));
                }
                true
            }
            Msg::Reconnect => {
                self.connect();
                true
            }
            Msg::TokenInput(text) => {
                self.token_input = text;
                false
            }
            Msg::SignIn => {
                let token = self.token_input.trim().to_string();
                if token.is_empty() {
                    return false;
                }
                browser::store_token(Some(&token));
                self.token = Some(token);
                self.token_input.clear();
                self.session = Session::new();
                self.connect();
                true
            }
            Msg::SignOut => {
                browser::store_token(None);
                self.token = None;
                self.session = Session::new();
                self.connect();
                true
            }
            Msg::UploadText(text) => {
                self.model = None;
                self.upload_text = text;
                self.upload_name = "pasted.yaml".into();
                self.upload_hidden_bytes = None;
                self.submit_outcome = None;
                self.recheck();
                true
            }
            Msg::FilePicked(file) => {
                let name = file.name();
                self.dragging = false;
                if model_upload::is_model_file(&name) {
                    self.submit_outcome = None;
                    if file.size() > model_upload::MAX_ONNX_FILE_BYTES {
                        // Protobuf stops at 2 GiB: such a file keeps its weights outside.
                        self.reader = None;
                        self.show_model(
                            name.clone(),
                            file.size() as usize,
                            Err(format!(
                                "{name}: not an ONNX model: larger than 2 GiB, the most a self-contained .onnx file can hold"
                            )),
                        );
                        return true;
                    }
                    let gloo_file = gloo::file::File::from(file);
                    self.reader = Some(gloo::file::callbacks::read_as_bytes(
                        &gloo_file,
                        move |result| {
                            send(Msg::ModelLoaded(name, result.map_err(|e| e.to_string())))
                        },
                    ));
                    return true;
                }
                let gloo_file = gloo::file::File::from(file);
                self.reader = Some(gloo::file::callbacks::read_as_text(
                    &gloo_file,
                    move |result| send(Msg::FileLoaded(name, result.map_err(|e| e.to_string()))),
                ));
                self.dragging = false;
                true
            }
            Msg::FileLoaded(name, result) => {
                self.reader = None;
                self.submit_outcome = None;
                match result {
                    Ok(text) => {
                        self.upload_hidden_bytes =
                            (text.len() > MAX_EDITABLE_BYTES).then_some(text.len());
                        self.upload_text = text;
                        self.upload_name = name;
                        self.model = None;
                        self.recheck();
                    }
                    Err(e) => self.notice(format!("cannot read {name}: {e}"), true),
                }
                true
            }
            Msg::ModelLoaded(name, result) => {
                self.reader = None;
                self.submit_outcome = None;
                match result {
                    Ok(bytes) => {
                        self.check_generation += 1;
                        self.checking = true;
                        let generation = self.check_generation;
                        spawn_local(async move {
                            let loaded = checker::load_model(&name, &bytes).await;
                            send(Msg::ModelChecked(generation, name, bytes.len(), loaded));
                        });
                    }
                    Err(e) => self.notice(format!("cannot read {name}: {e}"), true),
                }
                true
            }
            Msg::Checked(generation, checked) => {
                if generation != self.check_generation {
                    return false;
                }
                self.checking = false;
                self.checked = checked;
                self.mark_known();
                true
            }
            Msg::ModelChecked(generation, name, size, loaded) => {
                if generation != self.check_generation {
                    return false;
                }
                self.checking = false;
                self.show_model(name, size, loaded);
                true
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
            Msg::SubmitModel => {
                let Some(upload) = &self.model else {
                    return false;
                };
                let (Ok(model), Some(Ok(checked))) = (&upload.loaded, upload.check(self)) else {
                    return false;
                };
                let command = ClientCommand::SubmitModel {
                    model: Box::new(model_upload::submission(model, &checked)),
                };
                if let Some(frame) = self.session.request(command) {
                    self.submit_outcome = None;
                    self.send(frame);
                }
                true
            }
            Msg::Dragging(on) => {
                let changed = self.dragging != on;
                self.dragging = on;
                changed
            }
            Msg::Submit => {
                if self.checking {
                    return false;
                }
                if let Checked::Valid { yaml, .. } = &self.checked {
                    let command = ClientCommand::Submit {
                        yaml: yaml.clone(),
                        filename: Some(self.upload_name.clone()),
                        fresh: false,
                    };
                    if let Some(frame) = self.session.request(command) {
                        self.submit_outcome = None;
                        self.send(frame);
                    }
                }
                true
            }
            Msg::ClearUpload => {
                self.check_generation += 1;
                self.checking = false;
                self.model = None;
                self.upload_text.clear();
                self.upload_hidden_bytes = None;
                self.checked = Checked::Empty;
                self.submit_outcome = None;
                true
            }
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
