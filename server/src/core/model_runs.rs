//! Model runs on the core: submitted, stopped and shown; their plans applied
//! to the scheduler, their rounds followed, their artifacts stored and read
//! back.

use std::collections::BTreeMap;

use tokio::sync::oneshot;
use tracing::warn;
use tunefleet_shared::model::{
    base64, ArtifactFile, ModelArtifactKind, ModelStage, ModelSubmission, ModelView,
};
use tunefleet_shared::protocol::{JobId, JobResult, JobView, Millis};
use tunefleet_shared::target::Target;
use tunefleet_shared::workload::Op;

use super::{Batch, Core};
use crate::cost_models::CostModelKey;
use crate::models::{FleetFor, ModelError, Plan};
use crate::scheduler::Output;

impl Core {
    /// A new run: its first jobs submitted; the reply names its extraction
    /// job.
    pub(super) fn submit_model(
        &mut self,
        submission: ModelSubmission,
        reply: oneshot::Sender<Result<JobId, ModelError>>,
        now: Millis,
        out: &mut Vec<Output>,
        batch: &mut Batch,
    ) {
        let name = submission.name.clone();
        let r = self
            .models
            .submit(submission, Target::of_kind("llvm"), now)
            .map(|plan| {
                self.apply_plan(plan, now, out, batch);
                // A run with client-extracted tasks is tuning already:
                // plan its first rounds now.
                let rounds = self.models.refill(now, &self.fleet());
                self.apply_plan(rounds, now, out, batch);
                self.models
                    .get(&name)
                    .map(|run| run.extract_job.clone())
                    .unwrap_or_default()
            });
        batch.reply(reply, r);
    }

    pub(super) fn stop_model(
        &mut self,
        name: &str,
        reply: oneshot::Sender<Result<(), ModelError>>,
        now: Millis,
        out: &mut Vec<Output>,
        batch: &mut Batch,
    ) {
        let r = self.models.stop(name, now, &self.fleet());
        let r = r.map(|plan| self.apply_plan(plan, now, out, batch));
        batch.reply(reply, r);
    }

    /// `models`: the run named, or every run.
    pub(super) fn model_views(&self, name: Option<String>) -> Result<Vec<ModelView>, ModelError> {
        match name {
            Some(name) => self
                .models
                .get(&name)
                .map(|run| vec![run.view()])
                .ok_or(ModelError::Unknown(name)),
            None => Ok(self.models.runs().map(|r| r.view()).collect()),
        }
    }

    /// What the planner asks of the fleet per target: how many connected
    /// workers serve it (a run's parallelism), and how much the cost model
    /// a round would start from on one of them has learned (the most, over
    /// the workers: each gets the model of its own effective target and TVM
    /// release, `share_cost_model`).
    /// (Owned: the planner is borrowed mutably while it asks. Workers are
    /// counted per kind, target and TVM, so a key is made once per kind,
    /// not once per worker of a fleet of thousands.)
    pub(super) fn fleet(&self) -> impl Fn(&Target) -> FleetFor {
        let mut kinds: Vec<(Target, Option<String>, usize)> = Vec::new();
        for w in self.scheduler.workers() {
            match kinds
                .iter_mut()
                .find(|(t, tvm, _)| *t == w.target && *tvm == w.tvm_version)
            {
                Some((_, _, n)) => *n += 1,
                None => kinds.push((w.target.clone(), w.tvm_version.clone(), 1)),
            }
        }
        let samples: BTreeMap<CostModelKey, u32> = self
            .cost_models
            .iter()
            .map(|(key, model)| (key.clone(), model.samples))
            .collect();
        move |t: &Target| {
            let mut fleet = FleetFor::default();
            for (target, tvm, n) in kinds.iter().filter(|(w, _, _)| w.serves(t)) {
                fleet.slots += n;
                let key = CostModelKey::of(t, target, tvm.as_deref());
                let held = samples.get(&key).copied().unwrap_or(0);
                fleet.cost_model_samples = fleet.cost_model_samples.max(held);
            }
            fleet
        }
    }

    /// Submits a plan's jobs and marks its runs for the batch's commit.
    pub(super) fn apply_plan(
        &mut self,
        plan: Plan,
        now: Millis,
        out: &mut Vec<Output>,
        batch: &mut Batch,
    ) {
        batch.dirty_models.extend(plan.changed);
        if plan.jobs.is_empty() {
            return;
        }
        self.bring_back(plan.jobs.iter().map(|(w, _)| w.job_id()), batch);
        let (_, duplicates) = self.scheduler.submit_with(plan.jobs, now, out);
        // A job another run already finished (a shared task): its result is
        // news to this run, so report it as a change.
        for id in duplicates {
            if self
                .scheduler
                .job(&id)
                .is_some_and(|j| j.state().is_terminal())
            {
                out.push(Output::JobChanged(id));
            }
        }
    }

    /// Feeds every model job that ended in `out` to the planner, and the jobs
    /// it plans back to the scheduler, until nothing new ends.
    pub(super) fn follow_models(&mut self, out: &mut Vec<Output>, now: Millis, batch: &mut Batch) {
        let mut seen = 0;
        let mut told = std::collections::HashSet::new();
        while seen < out.len() {
            let ended: Vec<JobView> = out[seen..]
                .iter()
                .filter_map(|o| match o {
                    Output::JobChanged(id) if self.models.runs_of_job(id) => self.scheduler.job(id),
                    _ => None,
                })
                .filter(|j| j.state().is_terminal())
                .map(|j| JobView::clone(&j.view))
                .collect();
            seen = out.len();
            for view in ended {
                if !told.insert(view.job_id.clone()) {
                    continue;
                }
                let plan = self.models.job_ended(&view, now, &self.fleet());
                self.apply_plan(plan, now, out, batch);
            }
        }
    }

    /// A compile result carries the library; it is stored apart from the job
    /// (views go to every subscriber, the library only to who asks for it).
    pub(super) fn take_library(
        &self,
        job_id: &str,
        result: &mut JobResult,
    ) -> Option<(String, &'static str, Vec<u8>)> {
        let job = self.scheduler.job(job_id)?;
        let Op::Model { model } = &job.view.workload.op else {
            return None;
        };
        let ModelStage::Compile { run, .. } = model.as_ref() else {
            return None;
        };
        let text = result.extra.as_object_mut()?.remove("library_b64")?;
        match text.as_str().map(base64::decode) {
            Some(Ok(bytes)) => Some((run.clone(), "library", bytes)),
            _ => {
                warn!(job = %job_id, "compile result has an unreadable library; not stored");
                None
            }
        }
    }

    pub(super) fn artifact(
        &mut self,
        name: &str,
        kind: ModelArtifactKind,
    ) -> Result<Vec<ArtifactFile>, String> {
        let run = self
            .models
            .get(name)
            .ok_or_else(|| format!("no model run named `{name}`"))?;
        match kind {
            ModelArtifactKind::Database => {
                let (workloads, records) = run
                    .database()
                    .ok_or_else(|| format!("model run `{name}` has no tuning records yet"))?;
                Ok(vec![
                    ArtifactFile {
                        name: "database_workload.json".into(),
                        text: Some(workloads),
                        base64: None,
                    },
                    ArtifactFile {
                        name: "database_tuning_record.json".into(),
                        text: Some(records),
                        base64: None,
                    },
                ])
            }
            // A pre-packed run's compile job binds random weights: its
            // library is for timing, never for a user.
            ModelArtifactKind::Library if run.source.prepack => Err(format!(
                "model run `{name}` pre-packs its weights, so it has no weights-as-arguments library: \
                 run `tunefleet compile MODEL.onnx --model {name} --out FILE.so` with your model file"
            )),
            ModelArtifactKind::Library => {
                let bytes = self
                    .store
                    .load_artifact(name, "library")
                    .map_err(|e| e.to_string())?
                    .ok_or_else(|| {
                        format!(
                            "model run `{name}` has no compiled library yet (it is {})",
                            run.state
                        )
                    })?;
                Ok(vec![ArtifactFile {
                    name: format!("{name}.so"),
                    text: None,
                    base64: Some(base64::encode(&bytes)),
                }])
            }
        }
    }
}
