//! The upload box's state: a workload file (typed, pasted or read) and its
//! check, or an ONNX model and its form, and what the master said about the
//! last submit. The check itself (the master's parser, the Lorien reader,
//! the ONNX reader) lives in the checker module `web-check`, which the page
//! fetches when the upload box is first used; here is what the box holds
//! while the checker works, which answer still counts, and the texts
//! around a submit.
//!
//! Plain Rust: the box (`app/upload_box.rs`) keeps an [`UploadState`] in a
//! Yew reducer, asks the checker for [`UploadState::to_check`] and hands
//! the answer back as an [`UploadAction`].

use std::collections::HashSet;
use std::rc::Rc;

use tunefleet_shared::fleet::Fleet;
use tunefleet_shared::protocol::JobId;

use crate::model_upload::{self, LoadedModel, ModelForm};
use crate::view_model::SubmitAnswer;
pub use web_check::workloads::{Checked, ErrorRow, PreviewRow};

/// Files larger than this are not copied into the text area (the browser
/// would crawl); they are checked and submitted all the same.
pub const MAX_EDITABLE_BYTES: usize = 512 * 1024;

/// The name a typed or pasted file is checked and submitted under.
pub const PASTED: &str = "pasted.yaml";

/// [`web_check::workloads::check`] with the rows the master already has
/// marked (`known` holds its job ids). The page gets the check from the
/// checker module and marks the rows itself; tests use this.
pub fn check(text: &str, filename: &str, known: &HashSet<&str>) -> Checked {
    let mut checked = web_check::workloads::check(text, filename);
    checked.mark_known(|id| known.contains(id));
    checked
}

/// The result of the last submit, as the upload box shows it.
#[derive(Clone, Debug, PartialEq)]
pub enum SubmitOutcome {
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

impl SubmitOutcome {
    /// The master's `answer` in names: a job is named as the file named it
    /// (the preview's rows), else as the fleet knows it, else by its id.
    pub fn of(answer: &SubmitAnswer, checked: &Checked, fleet: &Fleet) -> SubmitOutcome {
        let name_of = |id: &String| -> String {
            if let Checked::Valid { rows, .. } = checked {
                if let Some(row) = rows.iter().find(|r| &r.job_id == id) {
                    return row.name.clone();
                }
            }
            match fleet.job(id) {
                Some(job) => job.name.clone(),
                None => crate::format::short_id(id).to_string(),
            }
        };
        match answer {
            SubmitAnswer::Accepted(report) => SubmitOutcome::Accepted {
                summary: report.summary(),
                new_names: report.new_jobs.iter().map(name_of).collect(),
                duplicate_names: report.duplicates.iter().map(name_of).collect(),
            },
            SubmitAnswer::ModelAccepted { name, extract_job } => SubmitOutcome::ModelAccepted {
                name: name.clone(),
                extract_job: extract_job.clone(),
            },
            SubmitAnswer::Rejected(message) => SubmitOutcome::Rejected(message.clone()),
        }
    }
}

/// An ONNX file in the upload box: the model (or why it cannot be used) and
/// the form to submit it with.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelUpload {
    pub file: String,
    pub size: usize,
    /// Shared, not copied, on each keystroke in the form: the stripped
    /// model can be megabytes.
    pub loaded: Rc<Result<LoadedModel, String>>,
    pub form: ModelForm,
}

impl ModelUpload {
    /// The form checked against the model and the master's run names;
    /// `None` when the file itself is not usable.
    pub fn check(
        &self,
        fleet: &Fleet,
    ) -> Option<Result<model_upload::Checked, Vec<model_upload::Problem>>> {
        let model = self.loaded.as_ref().as_ref().ok()?;
        let existing: Vec<&str> = fleet.models().iter().map(|m| m.name.as_str()).collect();
        Some(model_upload::check_form(model, &self.form, &existing))
    }
}

/// What the checker is to look at: the box's text (under its name), or a
/// model file's bytes.
#[derive(Clone, Debug, PartialEq)]
pub enum ToCheck {
    Workloads,
    Model { name: String, bytes: Rc<Vec<u8>> },
}

/// The upload box's content, its check and the last submit's outcome.
#[derive(Clone, Debug, PartialEq)]
pub struct UploadState {
    /// The workload YAML (empty while a model is shown).
    pub text: String,
    /// The file it came from, or [`PASTED`].
    pub name: String,
    /// Set when the text is too big to show in the text area: its size.
    pub hidden_bytes: Option<usize>,
    /// The checker's answer for the text.
    pub checked: Rc<Checked>,
    /// An ONNX model instead of YAML.
    pub model: Option<ModelUpload>,
    /// Bumped on every change of what is to be checked, so that a late
    /// answer for older content is dropped.
    pub generation: u64,
    /// What the checker is asked about for this generation, until it answers
    /// (submit waits meanwhile; the last preview stays on screen).
    pub to_check: Option<ToCheck>,
    pub outcome: Option<SubmitOutcome>,
}

impl Default for UploadState {
    fn default() -> Self {
        UploadState {
            text: String::new(),
            name: PASTED.into(),
            hidden_bytes: None,
            checked: Rc::new(Checked::Empty),
            model: None,
            generation: 0,
            to_check: None,
            outcome: None,
        }
    }
}

/// What happens to the upload box.
#[derive(Clone, Debug, PartialEq)]
pub enum UploadAction {
    /// Text typed or pasted into the text area.
    Typed(String),
    /// A file was chosen or dropped: the last outcome goes.
    Picked,
    /// A YAML file was read.
    FileRead {
        name: String,
        text: String,
    },
    /// An ONNX file was read: the checker reads the model.
    ModelRead {
        name: String,
        bytes: Vec<u8>,
    },
    /// An ONNX file that cannot be used before it is read (too big).
    ModelRefused {
        name: String,
        size: usize,
        reason: String,
    },
    /// The checker's answer about the text of `generation`.
    Checked {
        generation: u64,
        checked: Checked,
    },
    /// The checker's reading of the model file of `generation`.
    ModelChecked {
        generation: u64,
        name: String,
        size: usize,
        loaded: Box<Result<LoadedModel, String>>,
    },
    ModelName(String),
    ModelTrials(String),
    /// The shape typed for a dynamic input (its name, the text).
    ModelShape(String, String),
    /// A submit went out: the last outcome goes.
    Submitting,
    /// The master answered the submit.
    Answered(SubmitOutcome),
    Clear,
}

impl UploadState {
    /// Whether the checker has yet to answer for the current content.
    pub fn checking(&self) -> bool {
        self.to_check.is_some()
    }

    pub fn apply(&mut self, action: UploadAction) {
        match action {
            UploadAction::Typed(text) => self.set_text(text, PASTED.into(), None),
            UploadAction::Picked | UploadAction::Submitting => self.outcome = None,
            UploadAction::FileRead { name, text } => {
                let hidden = (text.len() > MAX_EDITABLE_BYTES).then_some(text.len());
                self.set_text(text, name, hidden);
            }
            UploadAction::ModelRead { name, bytes } => {
                self.generation += 1;
                self.outcome = None;
                let bytes = Rc::new(bytes);
                self.to_check = Some(ToCheck::Model { name, bytes });
            }
            UploadAction::ModelRefused { name, size, reason } => {
                self.show_model(name, size, Err(reason))
            }
            UploadAction::Checked {
                generation,
                checked,
            } if generation == self.generation => {
                self.to_check = None;
                self.checked = Rc::new(checked);
            }
            UploadAction::ModelChecked {
                generation,
                name,
                size,
                loaded,
            } if generation == self.generation => self.show_model(name, size, *loaded),
            UploadAction::Checked { .. } | UploadAction::ModelChecked { .. } => {}
            UploadAction::ModelName(text) => self.edit_form(|f| f.name = text),
            UploadAction::ModelTrials(text) => self.edit_form(|f| f.trials = text),
            UploadAction::ModelShape(input, text) => self.edit_form(|f| {
                f.shapes.insert(input, text);
            }),
            UploadAction::Answered(outcome) => self.answered(outcome),
            UploadAction::Clear => {
                *self = UploadState {
                    generation: self.generation + 1,
                    ..UploadState::default()
                }
            }
        }
    }

    /// New text: any model goes, the last outcome too, and the text is
    /// checked again (nothing to check when it is blank).
    fn set_text(&mut self, text: String, name: String, hidden_bytes: Option<usize>) {
        self.generation += 1;
        self.model = None;
        self.outcome = None;
        self.hidden_bytes = hidden_bytes;
        self.to_check = (!text.trim().is_empty()).then_some(ToCheck::Workloads);
        if self.to_check.is_none() {
            self.checked = Rc::new(Checked::Empty);
        }
        self.text = text;
        self.name = name;
    }

    /// A model file in place of any YAML.
    fn show_model(&mut self, file: String, size: usize, loaded: Result<LoadedModel, String>) {
        let outcome = self.outcome.take();
        *self = UploadState {
            generation: self.generation + 1,
            model: Some(ModelUpload {
                form: ModelForm::for_file(&file),
                file,
                size,
                loaded: Rc::new(loaded),
            }),
            outcome,
            ..UploadState::default()
        };
    }

    fn edit_form(&mut self, edit: impl FnOnce(&mut ModelForm)) {
        if let Some(model) = &mut self.model {
            edit(&mut model.form);
        }
    }

    /// An accepted file leaves the box (the jobs table shows its jobs); a
    /// refused one stays, to be fixed.
    fn answered(&mut self, outcome: SubmitOutcome) {
        match &outcome {
            SubmitOutcome::Accepted { .. } => {
                self.text.clear();
                self.hidden_bytes = None;
                self.checked = Rc::new(Checked::Empty);
            }
            SubmitOutcome::ModelAccepted { .. } => self.model = None,
            SubmitOutcome::Rejected(_) => {}
        }
        self.outcome = Some(outcome);
    }
}

#[cfg(test)]
mod tests;
