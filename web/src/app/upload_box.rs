//! The upload box: YAML typed, pasted or dropped (checked by the checker
//! module, then submitted), or an ONNX model with its form.

use std::collections::HashSet;

use tunefleet_shared::protocol::ClientCommand;
use wasm_bindgen_futures::spawn_local;

use super::{checker, send, App, ModelUpload, Msg, MAX_EDITABLE_BYTES};
use crate::model_upload::{self, LoadedModel, ModelForm};
use crate::upload::Checked;

impl App {
    pub(super) fn upload_text(&mut self, text: String) -> bool {
        self.model = None;
        self.upload_text = text;
        self.upload_name = "pasted.yaml".into();
        self.upload_hidden_bytes = None;
        self.submit_outcome = None;
        self.recheck();
        true
    }

    pub(super) fn file_picked(&mut self, file: web_sys::File) -> bool {
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
                move |result| send(Msg::ModelLoaded(name, result.map_err(|e| e.to_string()))),
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

    pub(super) fn file_loaded(&mut self, name: String, result: Result<String, String>) -> bool {
        self.reader = None;
        self.submit_outcome = None;
        match result {
            Ok(text) => {
                self.upload_hidden_bytes = (text.len() > MAX_EDITABLE_BYTES).then_some(text.len());
                self.upload_text = text;
                self.upload_name = name;
                self.model = None;
                self.recheck();
            }
            Err(e) => self.notice(format!("cannot read {name}: {e}"), true),
        }
        true
    }

    pub(super) fn model_loaded(&mut self, name: String, result: Result<Vec<u8>, String>) -> bool {
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

    pub(super) fn on_checked(&mut self, generation: u64, checked: Checked) -> bool {
        if generation != self.check_generation {
            return false;
        }
        self.checking = false;
        self.checked = checked;
        self.mark_known();
        true
    }

    pub(super) fn on_model_checked(
        &mut self,
        generation: u64,
        name: String,
        size: usize,
        loaded: Result<LoadedModel, String>,
    ) -> bool {
        if generation != self.check_generation {
            return false;
        }
        self.checking = false;
        self.show_model(name, size, loaded);
        true
    }

    pub(super) fn submit_model(&mut self) -> bool {
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

    pub(super) fn submit(&mut self) -> bool {
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

    pub(super) fn clear_upload(&mut self) -> bool {
        self.check_generation += 1;
        self.checking = false;
        self.model = None;
        self.upload_text.clear();
        self.upload_hidden_bytes = None;
        self.checked = Checked::Empty;
        self.submit_outcome = None;
        true
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
    pub(super) fn mark_known(&mut self) {
        let known = self
            .known_ids()
            .into_iter()
            .map(String::from)
            .collect::<HashSet<_>>();
        self.checked.mark_known(|id| known.contains(id));
    }

    /// Puts a model file in the upload box in place of any YAML.
    pub(super) fn show_model(
        &mut self,
        file: String,
        size: usize,
        loaded: Result<LoadedModel, String>,
    ) {
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
}
