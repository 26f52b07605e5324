//! Whole-model tuning: the types a model run is made of, on the wire.
//!
//! A user hands the fleet an ONNX model and a trial budget. The master turns
//! that into ordinary jobs (so every fleet guarantee — durable before
//! acknowledged, recycled when a worker dies, done exactly once — holds for
//! model work too):
//!
//! 1. one **extract** job: a TVM worker imports the model, runs the fusion
//!    passes and extracts MetaSchedule tasks (neither the master nor the
//!    browser has TVM);
//! 2. **rounds**: each task that matters becomes a `tvmscript` job of a few
//!    trials; later rounds of a task warm-start from all of its records so far
//!    ([`WarmStart`]), and which task gets the next round is decided by the
//!    gradient rule in `allocation`;
//! 3. one **compile** job: a worker applies every task's best record to the
//!    model, checks the outputs against onnxruntime and times untuned TVM,
//!    tuned TVM and onnxruntime on the same machine.
//!
//! Extract and compile jobs are workloads with `"op": "model"` ([`ModelStage`]);
//! they never come from a workload file.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::protocol::{JobId, Millis};
use crate::target::Target;

/// Floating-point initializers with more elements than this are sent without
/// their data: weights do not change which kernels a model needs.
pub const STRIP_MIN_ELEMENTS: u64 = 64;

/// Largest model upload (after stripping), base64 excluded.
pub const MAX_MODEL_BYTES: usize = 8 * 1024 * 1024;

/// Defaults of a model run.
pub const DEFAULT_MODEL_TRIALS: u32 = 2000;
pub const DEFAULT_TRIALS_PER_ROUND: u32 = 16;

/// MetaSchedule's tuner settings, per run (and so per task job of it).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TunerSettings {
    /// `evolutionary` (default), `replay-trace` or `replay-func`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<String>,
    /// `xgb` (default), `random` or `mlp`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_model: Option<String>,
    /// Candidates measured per MetaSchedule iteration (`num_trials_per_iter`);
    /// default: the worker's `--trials-per-round`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trials_per_round: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub builder_timeout_s: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runner_timeout_s: Option<u32>,
    /// Measurements per candidate: `number` runs per `repeat`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub number: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeat: Option<u32>,
    /// The schedule rules a CPU round searches ([`RULE_SETS`]): `default`
    /// (TVM's own), `wide` (the innermost tile one vector register of
    /// output channels), `blocked` (the whole reduction around one tile of
    /// outputs held in registers: MLAS's register blocking), or `union`
    /// (`default` and `wide`, the search decides per task). A model run may
    /// also name [`PER_TASK_RULES`].
    /// Absent: `default` for workload files, [`BEST_RULES`] for a model
    /// run's CPU rounds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rules: Option<String>,
}

/// The driver's rule sets (`tunefleet._driver.measure.RULE_SETS`).
pub const RULE_SETS: [&str; 4] = ["default", "wide", "blocked", "union"];
/// What a model run's CPU rounds search when its tuner names no rule set.
pub const BEST_RULES: &str = "union";
/// A model run's choice per task between [`BEST_RULES`] and `blocked`, by
/// what the task's rounds measured (`tunefleet-planner`'s
/// `models/rules.rs`): not a rule set of the driver's, so workload files
/// cannot name it.
pub const PER_TASK_RULES: &str = "per-task";

/// MetaSchedule's search strategies, as the driver spells them.
pub const STRATEGIES: [&str; 3] = ["evolutionary", "replay-trace", "replay-func"];
/// MetaSchedule's cost models.
pub const COST_MODELS: [&str; 3] = ["xgb", "random", "mlp"];
/// The keys of a `tuner:` mapping, in a workload file and on the wire.
pub const TUNER_KEYS: [&str; 8] = [
    "strategy",
    "cost_model",
    "trials_per_round",
    "builder_timeout_s",
    "runner_timeout_s",
    "number",
    "repeat",
    "rules",
];

impl TunerSettings {
    pub fn is_default(&self) -> bool {
        *self == TunerSettings::default()
    }

    /// Each field set in `self` wins over `base`'s.
    pub fn over(&self, base: &TunerSettings) -> TunerSettings {
        TunerSettings {
            strategy: self.strategy.clone().or_else(|| base.strategy.clone()),
            cost_model: self.cost_model.clone().or_else(|| base.cost_model.clone()),
            trials_per_round: self.trials_per_round.or(base.trials_per_round),
            builder_timeout_s: self.builder_timeout_s.or(base.builder_timeout_s),
            runner_timeout_s: self.runner_timeout_s.or(base.runner_timeout_s),
            number: self.number.or(base.number),
            repeat: self.repeat.or(base.repeat),
            rules: self.rules.clone().or_else(|| base.rules.clone()),
        }
    }

    /// [`Self::problems`] for a model run, whose `rules` may also be
    /// [`PER_TASK_RULES`].
    pub fn model_problems(&self) -> Vec<(&'static str, String)> {
        let mut rule_sets = RULE_SETS.to_vec();
        rule_sets.push(PER_TASK_RULES);
        self.problems_with(&rule_sets)
    }

    /// Problems as (field, message), e.g. `("strategy", "unknown strategy ...")`.
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        self.problems_with(&RULE_SETS)
    }

    /// The problems, with `rules` one of `rule_sets`.
    fn problems_with(&self, rule_sets: &[&str]) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        if let Some(s) = &self.strategy {
            if !STRATEGIES.contains(&s.as_str()) {
                out.push((
                    "strategy",
                    format!("unknown strategy `{s}` (known: {})", STRATEGIES.join(", ")),
                ));
            }
        }
        if let Some(r) = &self.rules {
            if !rule_sets.contains(&r.as_str()) {
                out.push((
                    "rules",
                    format!("unknown rule set `{r}` (known: {})", rule_sets.join(", ")),
                ));
            }
        }
        if let Some(c) = &self.cost_model {
            if !COST_MODELS.contains(&c.as_str()) {
                out.push((
                    "cost_model",
                    format!(
                        "unknown cost model `{c}` (known: {})",
                        COST_MODELS.join(", ")
                    ),
                ));
            }
        }
        for (field, value) in [
            ("trials_per_round", self.trials_per_round),
            ("builder_timeout_s", self.builder_timeout_s),
            ("runner_timeout_s", self.runner_timeout_s),
            ("number", self.number),
            ("repeat", self.repeat),
        ] {
            if let Some(v) = value {
                if !(1..=100_000).contains(&v) {
                    out.push((field, format!("must be between 1 and 100000, got {v}")));
                }
            }
        }
        out
    }
}

/// The model as the worker receives it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ModelSource {
    /// Base64 of the ONNX bytes (weights stripped, see [`STRIP_MIN_ELEMENTS`]).
    pub onnx_b64: String,
    /// Sizes for dynamic input dimensions: input name → shape.
    #[serde(default)]
    pub input_shapes: BTreeMap<String, Vec<i64>>,
    /// Seed of the random weights and inputs used for verification.
    #[serde(default)]
    pub seed: u64,
    /// Weight pre-packing: tasks are extracted with the weights compiled in
    /// as constants and marked layout-free, so MetaSchedule may choose their
    /// layout, and `tunefleet compile` folds that layout into the user's
    /// weights. The compiled model then takes its inputs alone; a run with
    /// it has no weights-as-arguments library (`export --format library`).
    /// Absent (false) in runs submitted before it existed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub prepack: bool,
    /// The data layout the run's kernels are tuned in (pre-packed runs
    /// only). Absent (NCHW, the ONNX layout) in runs submitted before it
    /// existed.
    #[serde(default, skip_serializing_if = "DataLayout::is_default")]
    pub layout: DataLayout,
    /// With a layout other than NCHW: a model the layout conversion cannot
    /// carry is tuned in NCHW instead of failing its extraction (the
    /// default mode asks for NHWC on every model). Absent (false) in runs
    /// submitted before it existed, and when a user named the layout.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub auto_layout: bool,
    /// How operators are lowered (`tunefleet.relax.RECIPES`): 1, TVM's own
    /// legalization (every run before recipes were named, so absent means
    /// 1: [`ModelSource::recipe`]); 2, concatenations as one copy loop per
    /// input; 3, as 2 with channels-last convolutions padded to whole vector
    /// registers of output channels; 4, as 3 with a concatenation's inputs
    /// written in place by the kernels that make them; 5, as 4 with batch
    /// norms folded into their convolutions' weights. A run is compiled with
    /// the recipe it was extracted with: its records are keyed by the
    /// PrimFuncs it made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recipe: Option<u32>,
}

/// The newest lowering recipe: what new ONNX submissions ask for.
pub const LATEST_RECIPE: u32 = 5;

impl ModelSource {
    /// The run's lowering recipe (absent: 1).
    pub fn recipe(&self) -> u32 {
        self.recipe.unwrap_or(1)
    }

    /// A model to tune in `mode`.
    pub fn new(
        onnx_b64: String,
        input_shapes: BTreeMap<String, Vec<i64>>,
        mode: ModelMode,
    ) -> ModelSource {
        ModelSource {
            onnx_b64,
            input_shapes,
            seed: 0,
            prepack: mode.prepack,
            layout: mode.layout,
            auto_layout: mode.auto_layout,
            recipe: Some(LATEST_RECIPE),
        }
    }

    /// The master's check of what a client sent.
    pub fn check(&self) -> Result<(), String> {
        self.layout.check(self.prepack)?;
        if !(1..=LATEST_RECIPE).contains(&self.recipe()) {
            return Err(format!(
                "recipe must be 1 to {LATEST_RECIPE}, got {}",
                self.recipe()
            ));
        }
        Ok(())
    }
}

/// How a model is tuned: the weights' handling and the convolutions' layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModelMode {
    pub prepack: bool,
    pub layout: DataLayout,
    pub auto_layout: bool,
}

impl ModelMode {
    /// What measures fastest (docs/benchmarks.md), and what a submission
    /// that names no mode gets: weights pre-packed, convolutions
    /// channels-last, NCHW where a model cannot be converted.
    pub const BEST: ModelMode = ModelMode {
        prepack: true,
        layout: DataLayout::Nhwc,
        auto_layout: true,
    };

    /// The mode a user's flags force (`--prepack`, `--no-prepack`,
    /// `--layout`), or [`ModelMode::BEST`] when none is given. `--prepack`
    /// alone keeps the model's NCHW; a layout alone pre-packs (NHWC needs
    /// it); a named layout is never swapped for another.
    pub fn from_flags(
        prepack: Option<bool>,
        layout: Option<DataLayout>,
    ) -> Result<ModelMode, String> {
        if prepack.is_none() && layout.is_none() {
            return Ok(ModelMode::BEST);
        }
        let prepack = prepack.unwrap_or(true);
        let layout = layout.unwrap_or_default();
        layout.check(prepack)?;
        Ok(ModelMode {
            prepack,
            layout,
            auto_layout: false,
        })
    }
}

/// The data layout of a model's convolutions while it is tuned and
/// compiled. ONNX models are NCHW; NHWC puts the channels innermost, so a
/// convolution's vector loop runs over its 64–2048 channels rather than an
/// image row of 7–56 (see the `tunefleet.relax.LAYOUTS` docs). The weights'
/// transposes fold into the constants, so only pre-packed runs may ask for
/// it ([`DataLayout::check`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum DataLayout {
    #[default]
    #[serde(rename = "NCHW")]
    Nchw,
    #[serde(rename = "NHWC")]
    Nhwc,
}

impl DataLayout {
    pub fn as_str(self) -> &'static str {
        match self {
            DataLayout::Nchw => "NCHW",
            DataLayout::Nhwc => "NHWC",
        }
    }

    pub fn is_default(&self) -> bool {
        *self == DataLayout::Nchw
    }

    /// Parses `nchw`/`nhwc` in any case (the CLI's `--layout`).
    pub fn parse(text: &str) -> Result<DataLayout, String> {
        match text.to_ascii_uppercase().as_str() {
            "NCHW" => Ok(DataLayout::Nchw),
            "NHWC" => Ok(DataLayout::Nhwc),
            _ => Err(format!("layout must be NCHW or NHWC, got `{text}`")),
        }
    }

    /// A layout other than NCHW transposes the weights; that folds away
    /// only when they are compile-time constants (`prepack`).
    pub fn check(self, prepack: bool) -> Result<(), String> {
        if self != DataLayout::Nchw && !prepack {
            return Err(format!(
                "layout {} needs weight pre-packing (--prepack): the weights' transposes fold away only when they are constants",
                self.as_str()
            ));
        }
        Ok(())
    }
}

/// One tuned task handed to the compile job.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct CompileTask {
    pub name: String,
    /// MetaSchedule's database workload line `[hash, base64 IRModule]`.
    pub workload: serde_json::Value,
    /// Best records first, MetaSchedule's record form without the workload index.
    pub records: Vec<serde_json::Value>,
}

/// What an `"op": "model"` job does.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "stage", rename_all = "snake_case")]
pub enum ModelStage {
    Extract {
        run: String,
        source: ModelSource,
    },
    Compile {
        run: String,
        source: ModelSource,
        tasks: Vec<CompileTask>,
    },
}

impl ModelStage {
    pub fn run(&self) -> &str {
        match self {
            ModelStage::Extract { run, .. } | ModelStage::Compile { run, .. } => run,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            ModelStage::Extract { .. } => "extract",
            ModelStage::Compile { .. } => "compile",
        }
    }
}

/// Records a round starts from: the task's database workload line and every
/// record measured for it so far.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct WarmStart {
    pub workload: serde_json::Value,
    pub records: Vec<serde_json::Value>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum ModelState {
    Extracting,
    Tuning,
    Compiling,
    Done,
    Failed,
}

impl ModelState {
    pub fn as_str(self) -> &'static str {
        match self {
            ModelState::Extracting => "extracting",
            ModelState::Tuning => "tuning",
            ModelState::Compiling => "compiling",
            ModelState::Done => "done",
            ModelState::Failed => "failed",
        }
    }

    pub fn is_terminal(self) -> bool {
        matches!(self, ModelState::Done | ModelState::Failed)
    }
}

impl std::fmt::Display for ModelState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One task of a model run, as users see it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ModelTaskView {
    /// The task's first-round job (later rounds are listed in `rounds`).
    pub job_id: Option<JobId>,
    pub name: String,
    /// How many times the model calls this function.
    pub weight: u32,
    /// Trials measured so far, over all rounds.
    pub trials: u32,
    pub best_latency_s: Option<f64>,
    /// weight × best / Σ weight × best over the tuned tasks.
    pub share: Option<f64>,
    #[serde(default)]
    pub flops: Option<f64>,
    /// Share of the untuned model's time (every function timed once at
    /// extraction): what a trivial task costs on TVM's default schedule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub untuned_share: Option<f64>,
    /// Under 0.5% of the untuned model's time and of its FLOPs (0.01% for a
    /// convolution or a matmul; FLOPs alone when it could not be timed):
    /// compiled with the generic schedule, no trials.
    pub trivial: bool,
    /// No valid candidate after its first round: gets no more rounds.
    pub dead: bool,
    pub rounds: Vec<JobId>,
    /// The tiling structure of the task's best record, as its trace
    /// annotates it (`meta_schedule.tiling_structure`): `SRS` when the
    /// `blocked` rules tiled it, `SSRSRS` for MetaSchedule's own
    /// (`default`, `wide`, `union`). Absent before a record, and for a
    /// schedule with no tiled block.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub best_tiling: Option<String>,
}

impl ModelTaskView {
    /// `best tiled SRS`: the note that `results` and the dashboard give a
    /// tuned task (`SRS` is the `blocked` rules' tiling); empty without one.
    pub fn tiling_note(&self) -> String {
        self.best_tiling
            .as_deref()
            .map_or_else(String::new, |t| format!("best tiled {t}"))
    }
}

/// The estimated model latency after some trials.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct EstimatePoint {
    pub trials: u32,
    pub at: Millis,
    pub estimated_latency_s: f64,
}

/// Whole-model latencies, measured on one worker with the same inputs and threads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ModelLatencies {
    pub untuned: Option<f64>,
    pub tuned: Option<f64>,
    pub onnxruntime: Option<f64>,
}

/// A model run, as `results --model` and the dashboard show it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ModelView {
    pub name: String,
    pub state: ModelState,
    /// The effective target once a worker has completed it (extraction), else
    /// the one asked for.
    pub target: Target,
    pub trials_total: u32,
    pub trials_done: u32,
    pub trials_per_round: u32,
    pub tasks: Vec<ModelTaskView>,
    /// Σ weight × best latency over the tuned tasks (trivial tasks excluded).
    pub estimated_latency_s: Option<f64>,
    /// True only when the tuned model's outputs matched onnxruntime.
    pub verified: bool,
    pub latency_s: ModelLatencies,
    /// Functions of the compiled model that got a tuned schedule, out of the
    /// tuned tasks' functions.
    pub records_applied: Option<u32>,
    pub functions_tuned: Option<u32>,
    pub error: Option<String>,
    /// The estimate after each round, from the round that gave every live
    /// task a first measurement on.
    pub curve: Vec<EstimatePoint>,
    pub extract_job: JobId,
    pub compile_job: Option<JobId>,
    pub stop_requested: bool,
    /// Inputs, weights (in the order the compiled model takes them after the
    /// inputs) and outputs: `[{"name", "shape", "dtype"}]`.
    #[serde(default)]
    pub io: serde_json::Value,
    #[serde(default)]
    pub tuner: TunerSettings,
    /// Verification details from the compile job (tolerance, max error).
    #[serde(default)]
    pub verification: serde_json::Value,
    /// The run's tasks were extracted for pre-packed weights
    /// ([`ModelSource::prepack`]): compile the same way.
    #[serde(default)]
    pub prepack: bool,
    /// The data layout the run was tuned in ([`ModelSource::layout`]).
    #[serde(default)]
    pub layout: DataLayout,
    /// How the run is tuned, and why, in one place (`results --model
    /// --format json`'s `mode`).
    #[serde(default)]
    pub mode: ModeView,
    pub created_at: Millis,
    pub updated_at: Millis,
    pub finished_at: Option<Millis>,
}

/// A run's mode as users see it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ModeView {
    /// The layout the run's tasks were extracted in (after a fallback, the
    /// one it fell back to).
    pub layout: DataLayout,
    pub prepack: bool,
    /// How operators are lowered ([`ModelSource::recipe`]).
    pub recipe: u32,
    /// The mode was chosen by the farm (none was asked for).
    pub auto: bool,
    /// Why the layout is not the one asked for, when it is not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// `tunefleet submit MODEL.onnx`: what the client sends.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ModelSubmission {
    pub name: String,
    pub source: ModelSource,
    #[serde(default)]
    pub trials: Option<u32>,
    #[serde(default)]
    pub trials_per_round: Option<u32>,
    #[serde(default)]
    pub target: Option<Target>,
    #[serde(default)]
    pub tuner: TunerSettings,
    /// Tasks the client extracted itself (the Python package's `tune_module`
    /// of a Relax module): the run starts tuning at once, with no extract
    /// job, and ends when its budget is spent, with no compile job (there
    /// is no model file for a worker to compile; the client applies the
    /// records). `source.onnx_b64` must then be empty. Absent for ONNX runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extracted: Option<ExtractedModel>,
}

/// Most tasks in a client-extracted run (a large model has a few hundred).
pub const MAX_EXTRACTED_TASKS: usize = 10_000;

/// A model's tasks as its client extracted them: what an extract job's
/// result carries in `extra.tasks`, and the same rules apply to it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ExtractedModel {
    pub tasks: Vec<ExtractedTask>,
}

/// One extracted task: a fused PrimFunc to tune.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ExtractedTask {
    pub name: String,
    /// How many times the model calls this function (at least 1).
    pub weight: u32,
    /// The PrimFunc as TVMScript, which a worker's `tvmscript` job parses.
    pub tvmscript: String,
    #[serde(default)]
    pub flops: Option<f64>,
    /// Too small to be worth trials: no rounds.
    #[serde(default)]
    pub trivial: bool,
    /// MetaSchedule's database workload line `[hash, base64 IRModule]` of
    /// the module the rounds tune (seeds rounds with imported records).
    #[serde(default)]
    pub workload: Option<serde_json::Value>,
}

impl ExtractedModel {
    /// The master's check of client-extracted tasks.
    pub fn check(&self) -> Result<(), String> {
        if self.tasks.is_empty() || self.tasks.len() > MAX_EXTRACTED_TASKS {
            return Err(format!(
                "extracted.tasks must hold 1 to {MAX_EXTRACTED_TASKS} tasks, got {}",
                self.tasks.len()
            ));
        }
        for (i, t) in self.tasks.iter().enumerate() {
            let at = format!("extracted.tasks[{i}]");
            let chars = t.name.chars().count();
            if chars == 0 || chars > crate::workload::MAX_NAME_CHARS {
                return Err(format!(
                    "{at}.name must be 1 to {} characters, got {chars}",
                    crate::workload::MAX_NAME_CHARS
                ));
            }
            if t.weight == 0 {
                return Err(format!("{at}.weight must be at least 1"));
            }
            if t.tvmscript.trim().is_empty()
                || t.tvmscript.len() > crate::workload::MAX_TVMSCRIPT_BYTES
            {
                return Err(format!(
                    "{at}.tvmscript must be TVMScript of 1 to {} bytes, got {}",
                    crate::workload::MAX_TVMSCRIPT_BYTES,
                    t.tvmscript.len()
                ));
            }
            if t.flops.is_some_and(|f| !f.is_finite() || f < 0.0) {
                return Err(format!("{at}.flops must be a non-negative number"));
            }
            if let Some(line) = &t.workload {
                crate::import::check_workload_line(line)
                    .map_err(|e| format!("{at}.workload: {e}"))?;
            }
        }
        Ok(())
    }
}

impl ModelSubmission {
    /// The master's own check of an upload (the CLI and the page strip and
    /// check too, but a script may send anything): base64, size, a readable
    /// ONNX graph, supported operators, input shapes; or, for a run with
    /// client-extracted tasks, those tasks.
    pub fn check_upload(&self) -> Result<(), String> {
        let name = &self.name;
        if let Some(extracted) = &self.extracted {
            if !self.source.onnx_b64.is_empty() {
                return Err(format!(
                    "model `{name}`: send either an ONNX model (source.onnx_b64) or extracted tasks, not both"
                ));
            }
            return extracted
                .check()
                .map_err(|e| format!("model `{name}`: {e}"));
        }
        let bytes = base64::decode(&self.source.onnx_b64)
            .map_err(|e| format!("model `{name}`: onnx_b64 is not base64: {e}"))?;
        if bytes.len() > MAX_MODEL_BYTES {
            return Err(format!(
                "model `{name}`: {} bytes after stripping weights is over the {MAX_MODEL_BYTES}-byte limit",
                bytes.len()
            ));
        }
        let summary = crate::onnx::summarize(&bytes).map_err(|e| format!("model `{name}`: {e}"))?;
        crate::onnx::check_ops(&summary).map_err(|e| format!("model `{name}`: {e}"))?;
        crate::onnx::check_inputs(&summary, &self.source.input_shapes)
            .map_err(|e| format!("model `{name}`: {e}"))?;
        Ok(())
    }
}

/// A downloadable artefact of a model run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum ModelArtifactKind {
    /// The compiled tuned model, a shared library (base64 in the reply).
    Library,
    /// Every measured record of every task: MetaSchedule's JSONDatabase files.
    Database,
}

/// A file of an artefact; `base64` for binary content, `text` otherwise.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "tree", derive(crate::tree::FromTree))]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ArtifactFile {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base64: Option<String>,
}

/// Checks a run name: it names files and URLs, so keep it plain.
pub fn check_model_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 64 {
        return Err(format!(
            "model name must be 1 to 64 characters, got {}",
            name.len()
        ));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Err(format!(
            "model name `{name}` may only hold letters, digits, `-`, `_` and `.`"
        ));
    }
    Ok(())
}

/// Standard base64 (RFC 4648, with padding); the model upload and library
/// download travel inside JSON.
pub mod base64;

/// The fleet's cost model per effective target, sent with a model's rounds.
pub mod cost_model;
pub use cost_model::{CostModelShare, SharedCostModel};
