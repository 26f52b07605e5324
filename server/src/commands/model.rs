//! Whole-model commands: `submit MODEL.onnx`, `results --model`, `export
//! --model`, `stop RUN`.
//!
//! The upload carries the model's graph, not its weights: floating-point
//! initializers above [`STRIP_MIN_ELEMENTS`] elements lose their data here
//! (names, shapes and types stay), because weights do not change which
//! kernels a model needs, and ResNet-50's 100 MB would otherwise cross the
//! wire for nothing. The worker fills them with random values for tuning and
//! verification; the compiled model takes the weights as inputs, so it runs
//! with the user's own.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context};
use tunefleet_shared::export::format_latency;
use tunefleet_shared::model::{
    base64, DataLayout, ModelArtifactKind, ModelMode, ModelSource, ModelSubmission, ModelTaskView,
    ModelView, TunerSettings, MAX_MODEL_BYTES, STRIP_MIN_ELEMENTS,
};
use tunefleet_shared::onnx;
use tunefleet_shared::protocol::{ClientCommand, ReplyBody};
use tunefleet_shared::target::Target;

use super::{emit, latency_or_dash, render_table, Align, ConnectArgs};
use crate::client::Client;

/// Settings of `submit MODEL.onnx` (flags of `submit`).
#[derive(clap::Args, Debug, Default, Clone)]
pub struct ModelFlags {
    /// Name of the model run (default: the file's stem).
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// Total trial budget, spread over the model's tasks (default 2000).
    #[arg(long, value_name = "N")]
    pub trials: Option<u32>,
    /// Trials per round of one task (default 16; a task's first round is 4
    /// when the fleet's cost model for the target has learned from 256
    /// schedules or more).
    #[arg(long, value_name = "N")]
    pub trials_per_round: Option<u32>,
    /// Target as a JSON dict; attributes left open are filled from the
    /// worker's host (default `{"kind":"llvm"}`).
    #[arg(long, value_name = "JSON")]
    pub target: Option<String>,
    /// Size of a dynamic input: `NAME=1,3,224,224` (repeatable).
    #[arg(long = "input-shape", value_name = "NAME=DIMS")]
    pub input_shapes: Vec<String>,
    /// Wait until the run has ended; exit non-zero unless it is `done`.
    #[arg(long)]
    pub wait: bool,
    /// Search strategy: evolutionary, replay-trace or replay-func.
    #[arg(long)]
    pub strategy: Option<String>,
    /// Cost model: xgb, random or mlp.
    #[arg(long)]
    pub cost_model: Option<String>,
    /// Seconds before a candidate's build is abandoned.
    #[arg(long, value_name = "S")]
    pub builder_timeout: Option<u32>,
    /// Seconds before a candidate's run is abandoned.
    #[arg(long, value_name = "S")]
    pub runner_timeout: Option<u32>,
    /// Runs per measurement of a candidate.
    #[arg(long)]
    pub number: Option<u32>,
    /// Measurements per candidate.
    #[arg(long)]
    pub repeat: Option<u32>,
    /// Schedule rules the CPU rounds search: default (TVM's), wide (the
    /// innermost tile one vector register of output channels), blocked
    /// (the whole reduction around one tile of outputs held in registers)
    /// or union (default and wide; the search decides per task); or
    /// per-task: each task's first round union, its second blocked, then
    /// the rule set that tiled its best record. Default: union.
    #[arg(long, value_name = "default|wide|blocked|union|per-task")]
    pub rules: Option<String>,
    /// Pre-pack the weights: tune kernels that may choose the weights'
    /// layout, folded into the real weights by `tunefleet compile` (the run
    /// then has no `export --format library`). Part of the default mode;
    /// alone it keeps the model's NCHW layout.
    #[arg(long, conflicts_with = "no_prepack")]
    pub prepack: bool,
    /// Weights as arguments of the compiled model, NCHW: the mode with an
    /// `export --format library` that takes your weights at run time.
    #[arg(long)]
    pub no_prepack: bool,
    /// Data layout to tune the convolutions in: NCHW (the model's own) or
    /// NHWC (channels innermost, what the CPU's vector units want; it
    /// pre-packs, since the weights' transposes fold into the constants).
    /// Without --prepack, --no-prepack and --layout a run gets the best
    /// mode: pre-packed, NHWC, and NCHW for a model NHWC cannot carry.
    #[arg(long, value_name = "NCHW|NHWC", value_parser = DataLayout::parse)]
    pub layout: Option<DataLayout>,
}

impl ModelFlags {
    /// Flags that mean nothing for workload files.
    pub fn model_only_flags(&self) -> Vec<&'static str> {
        let mut set = Vec::new();
        for (flag, given) in [
            ("--name", self.name.is_some()),
            ("--trials", self.trials.is_some()),
            ("--trials-per-round", self.trials_per_round.is_some()),
            ("--target", self.target.is_some()),
            ("--input-shape", !self.input_shapes.is_empty()),
            ("--wait", self.wait),
            ("--strategy", self.strategy.is_some()),
            ("--cost-model", self.cost_model.is_some()),
            ("--builder-timeout", self.builder_timeout.is_some()),
            ("--runner-timeout", self.runner_timeout.is_some()),
            ("--number", self.number.is_some()),
            ("--repeat", self.repeat.is_some()),
            ("--rules", self.rules.is_some()),
            ("--prepack", self.prepack),
            ("--no-prepack", self.no_prepack),
            ("--layout", self.layout.is_some()),
        ] {
            if given {
                set.push(flag);
            }
        }
        set
    }
}

/// True for a path that names an ONNX model.
pub fn is_model_path(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("onnx"))
}

/// Reads, checks and strips a model file into what the master is sent.
pub fn prepare(path: &Path, flags: &ModelFlags) -> anyhow::Result<(ModelSubmission, String)> {
    let file = path.display().to_string();
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {file}"))?;
    let summary = onnx::summarize(&bytes).map_err(|e| anyhow::anyhow!("{file}: {e}"))?;
    let mut shapes = BTreeMap::new();
    for arg in &flags.input_shapes {
        let (name, dims) =
            onnx::parse_input_shape(arg).map_err(|e| anyhow::anyhow!("--input-shape: {e}"))?;
        shapes.insert(name, dims);
    }
    let forced = match (flags.prepack, flags.no_prepack) {
        (true, _) => Some(true),
        (_, true) => Some(false),
        _ => None,
    };
    let mode = ModelMode::from_flags(forced, flags.layout)
        .map_err(|e| anyhow::anyhow!("--layout: {e}"))?;
    onnx::check_ops(&summary).map_err(|e| anyhow::anyhow!("{file}: {e}"))?;
    onnx::check_inputs(&summary, &shapes).map_err(|e| anyhow::anyhow!("{file}: {e}"))?;
    let (stripped, report) = onnx::strip_weights(&bytes, STRIP_MIN_ELEMENTS)
        .map_err(|e| anyhow::anyhow!("{file}: {e}"))?;
    if stripped.len() > MAX_MODEL_BYTES {
        bail!(
            "{file}: {} bytes without weights is over the {MAX_MODEL_BYTES}-byte upload limit",
            stripped.len()
        );
    }
    let note = if report.tensors > 0 {
        format!(
            "{file}: uploading the graph without weights ({} tensors, {} → {}); the fleet tunes with random weights",
            report.tensors,
            human_bytes(report.bytes_before),
            human_bytes(report.bytes_after)
        )
    } else {
        format!(
            "{file}: {} (no weights to strip)",
            human_bytes(report.bytes_after)
        )
    };
    let name = match &flags.name {
        Some(n) => n.clone(),
        None => path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "model".into()),
    };
    let target = flags
        .target
        .as_deref()
        .map(Target::parse)
        .transpose()
        .map_err(|e| anyhow::anyhow!("--target: {e}"))?;
    let mode = gpu_mode(
        target.as_ref(),
        mode,
        forced.is_some() || flags.layout.is_some(),
    )?;
    let submission = ModelSubmission {
        name,
        source: ModelSource::new(base64::encode(&stripped), shapes, mode),
        trials: flags.trials,
        trials_per_round: flags.trials_per_round,
        target,
        tuner: TunerSettings {
            strategy: flags.strategy.clone(),
            cost_model: flags.cost_model.clone(),
            // A round is one MetaSchedule iteration (the planner sets it).
            trials_per_round: None,
            builder_timeout_s: flags.builder_timeout,
            runner_timeout_s: flags.runner_timeout,
            number: flags.number,
            repeat: flags.repeat,
            rules: flags.rules.clone(),
        },
        extracted: None,
    };
    Ok((submission, note))
}

/// A GPU run's mode: weights as arguments, NCHW. Pre-packing and NHWC are
/// CPU levers (weight layouts for LLVM's vector units); asked for with a
/// cuda target they are refused, and the default mode is this one.
fn gpu_mode(target: Option<&Target>, mode: ModelMode, named: bool) -> anyhow::Result<ModelMode> {
    if target.is_none_or(|t| t.kind() != "cuda") {
        return Ok(mode);
    }
    if named && (mode.prepack || mode.layout != DataLayout::Nchw) {
        bail!("--prepack and --layout are CPU levers; a GPU run takes the weights as arguments, in NCHW (pass --no-prepack or nothing)");
    }
    Ok(ModelMode {
        prepack: false,
        layout: DataLayout::Nchw,
        auto_layout: false,
    })
}

fn human_bytes(n: u64) -> String {
    match n {
        n if n >= 1 << 20 => format!("{:.1} MiB", n as f64 / f64::from(1 << 20)),
        n if n >= 1 << 10 => format!("{:.1} KiB", n as f64 / 1024.0),
        n => format!("{n} B"),
    }
}

/// `tunefleet submit MODEL.onnx ...`
pub async fn submit(connect: &ConnectArgs, path: &Path, flags: &ModelFlags) -> anyhow::Result<()> {
    let (submission, note) = prepare(path, flags)?;
    eprintln!("{note}");
    let name = submission.name.clone();
    let mut client = connect.connect().await?;
    let reply = client
        .request(ClientCommand::SubmitModel {
            model: Box::new(submission),
        })
        .await
        .map_err(|e| connect.explain(e))?;
    let ReplyBody::ModelSubmitted { extract_job, .. } = reply else {
        bail!("unexpected reply to submit_model");
    };
    emit(&format!(
        "model run `{name}` accepted: extracting tasks (job {extract_job})\n"
    ))?;
    if !flags.wait {
        let _ = client.close().await;
        return Ok(());
    }
    let view = wait_for_end(&mut client, &name)
        .await
        .map_err(|e| connect.explain(e))?;
    let _ = client.close().await;
    emit(&to_table(&view))?;
    match view.error {
        Some(e) => bail!("model run `{name}` failed: {e}"),
        None => Ok(()),
    }
}

/// Follows the event stream until the run is done or failed.
async fn wait_for_end(
    client: &mut Client,
    name: &str,
) -> Result<ModelView, crate::client::ClientError> {
    use crate::client::Update;
    use tunefleet_shared::protocol::FleetEvent;
    let (_, snapshot) = client.subscribe().await?;
    // Events can take hours; the connection's own keepalive covers silence.
    client.set_request_timeout(Duration::from_secs(3600 * 24 * 365));
    let mut last = snapshot.models.into_iter().find(|m| m.name == name);
    loop {
        if let Some(view) = &last {
            if view.state.is_terminal() {
                return Ok(view.clone());
            }
        }
        match client.next_update().await? {
            Some(Update::Event(_, FleetEvent::ModelUpdated { model })) if model.name == name => {
                last = Some(*model);
            }
            Some(Update::Snapshot(_, snapshot)) => {
                last = snapshot.models.into_iter().find(|m| m.name == name);
            }
            Some(_) => {}
            None => {
                return Err(crate::client::ClientError::Closed {
                    code: 1000,
                    reason: "the master closed the connection before the run ended".into(),
                })
            }
        }
    }
}

pub async fn fetch(connect: &ConnectArgs, name: &str) -> anyhow::Result<ModelView> {
    let mut client = connect.connect().await?;
    let view = view_on(&mut client, connect, name).await;
    let _ = client.close().await;
    view
}

/// The run's view, asked on a connection the caller holds.
pub async fn view_on(
    client: &mut Client,
    connect: &ConnectArgs,
    name: &str,
) -> anyhow::Result<ModelView> {
    let reply = client
        .request(ClientCommand::Models {
            name: Some(name.to_string()),
        })
        .await
        .map_err(|e| connect.explain(e))?;
    match reply {
        ReplyBody::Models { mut models } if !models.is_empty() => Ok(models.remove(0)),
        _ => bail!("no model run named `{name}`"),
    }
}

/// `NHWC, weights pre-packed (chosen by the farm)`, and the fallback's reason.
fn mode_text(mode: &tunefleet_shared::model::ModeView) -> String {
    let mut text = format!(
        "{}, weights {}{}",
        mode.layout.as_str(),
        if mode.prepack {
            "pre-packed"
        } else {
            "as arguments"
        },
        if mode.auto {
            " (chosen by the farm)"
        } else {
            ""
        },
    );
    if let Some(note) = &mode.note {
        text.push_str(&format!("; {note}"));
    }
    text
}

/// `results --model NAME --format json`: the run's view as one object.
pub fn to_json(view: &ModelView) -> anyhow::Result<String> {
    Ok(format!("{}\n", serde_json::to_string_pretty(view)?))
}

/// The cold choice in one line: what it timed, what it changed, and the
/// tuned kernels' cold time (what they cost in the model) before and after.
pub fn cold_choice_text(choice: &serde_json::Value) -> Option<String> {
    let cold = &choice["kernels_cold_s"];
    let (chosen, warm_best) = (cold["chosen"].as_f64()?, cold["warm_best"].as_f64()?);
    let reused = choice["reused"].as_u64().unwrap_or(0);
    let timed = choice["tasks"].as_u64().unwrap_or(0).saturating_sub(reused);
    let mut what = Vec::new();
    if reused > 0 {
        what.push(format!(
            "{reused} tasks' records as the run's compile job chose them (--cold-choice N times them here)"
        ));
    }
    if timed > 0 || reused == 0 {
        what.push(format!(
            "the {} best records of {timed} tasks timed cold ({} records, {:.0} s)",
            choice["top_k"],
            choice["records_timed"],
            choice["wall_s"].as_f64().unwrap_or(0.0),
        ));
    }
    Some(format!(
        "cold choice: {}, {} tasks changed record; tuned kernels' cold time {} (warm-fastest records: {})\n",
        what.join(" and "),
        choice["changed"],
        format_latency(chosen),
        format_latency(warm_best),
    ))
}

/// The per-task table and the run's summary, for people.
pub fn to_table(view: &ModelView) -> String {
    let mut out = format!(
        "model {}  {}  target {}\nmode {}\ntrials {}/{}  estimated {}",
        view.name,
        view.state,
        view.target.canonical_json(),
        mode_text(&view.mode),
        view.trials_done,
        view.trials_total,
        latency_or_dash(view.estimated_latency_s),
    );
    if let Some(measured) = measured_text(view) {
        out.push_str(&measured);
    }
    if let Some(e) = &view.error {
        out.push_str(&format!("\nerror: {e}"));
    }
    out.push_str("\n\n");
    // The tasks that cost the most model time first; trivial ones last.
    let mut tasks: Vec<_> = view.tasks.iter().collect();
    tasks.sort_by(|a, b| {
        let key = |t: &&ModelTaskView| (t.trivial, -(t.share.unwrap_or(-1.0)));
        key(a)
            .partial_cmp(&key(b))
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    let rows: Vec<Vec<String>> = tasks.into_iter().map(task_row).collect();
    let header = [
        ("task", Align::Left),
        ("weight", Align::Right),
        ("trials", Align::Right),
        ("best", Align::Right),
        ("share", Align::Right),
        ("note", Align::Left),
    ];
    out.push_str(&render_table(&header, &rows));
    out
}

/// What the compile job measured (the whole model, verified, the records
/// applied, the cold choice), once it has; `None` before.
fn measured_text(view: &ModelView) -> Option<String> {
    let tuned = view.latency_s.tuned?;
    let mut out = format!(
        "\nmeasured: untuned {}  tuned {}  onnxruntime {}",
        latency_or_dash(view.latency_s.untuned),
        format_latency(tuned),
        latency_or_dash(view.latency_s.onnxruntime)
    );
    if let Some(untuned) = view.latency_s.untuned {
        out.push_str(&format!("  ({:.1}x over untuned", untuned / tuned));
        if let Some(ort) = view.latency_s.onnxruntime {
            out.push_str(&format!(", {:.2}x onnxruntime's time", tuned / ort));
        }
        out.push(')');
    }
    out.push_str(&format!(
        "\nverified against onnxruntime: {}; tuned schedules applied: {}/{}",
        if view.verified { "yes" } else { "no" },
        view.records_applied.map_or("-".into(), |n| n.to_string()),
        view.functions_tuned.map_or("-".into(), |n| n.to_string()),
    ));
    if let Some(line) = cold_choice_text(&view.verification["cold_choice"]) {
        out.push('\n');
        out.push_str(line.trim_end());
    }
    Some(out)
}

/// One task's row: name, weight, trials, best, share of the model, and a
/// note (trivial, dead, or how its best record is tiled).
fn task_row(t: &ModelTaskView) -> Vec<String> {
    let note = if t.trivial {
        match t.untuned_share {
            Some(s) => format!(
                "trivial: default schedule ({:.2}% of the untuned model's time)",
                s * 100.0
            ),
            None => "trivial: default schedule".into(),
        }
    } else if t.dead {
        "no valid candidate".into()
    } else {
        t.tiling_note()
    };
    vec![
        t.name.clone(),
        t.weight.to_string(),
        t.trials.to_string(),
        latency_or_dash(t.best_latency_s),
        t.share
            .map_or_else(|| "-".into(), |s| format!("{:.1}%", s * 100.0)),
        note,
    ]
}

/// `export --model NAME --format metaschedule|library --out PATH`.
pub async fn export(
    connect: &ConnectArgs,
    name: &str,
    artifact: ModelArtifactKind,
    out: &Path,
) -> anyhow::Result<()> {
    let mut client = connect.connect().await?;
    // A compiled model can be tens of MB: give the transfer time.
    client.set_request_timeout(Duration::from_secs(300));
    let reply = client
        .request(ClientCommand::ModelArtifact {
            name: name.to_string(),
            artifact,
        })
        .await
        .map_err(|e| connect.explain(e))?;
    let _ = client.close().await;
    let ReplyBody::Artifact { files, .. } = reply else {
        bail!("unexpected reply to model_artifact");
    };
    match artifact {
        ModelArtifactKind::Library => {
            let file = files.first().context("the master sent no library")?;
            let bytes = base64::decode(file.base64.as_deref().unwrap_or_default())
                .map_err(|e| anyhow::anyhow!("the library is not valid base64: {e}"))?;
            super::export::write_atomically(out, &bytes)?;
            eprintln!(
                "wrote the tuned model of `{name}` to {} ({})",
                out.display(),
                human_bytes(bytes.len() as u64)
            );
        }
        ModelArtifactKind::Database => {
            std::fs::create_dir_all(out)
                .with_context(|| format!("cannot create {}", out.display()))?;
            for file in &files {
                let text = file.text.as_deref().unwrap_or_default();
                super::export::write_atomically(&out.join(&file.name), text.as_bytes())?;
            }
            let records = files
                .iter()
                .find(|f| f.name.contains("record"))
                .and_then(|f| f.text.as_deref())
                .map_or(0, |t| t.lines().count());
            eprintln!(
                "exported {records} records of `{name}` to {} as a MetaSchedule database",
                out.display()
            );
        }
    }
    Ok(())
}

#[derive(clap::Args, Debug)]
pub struct StopArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// The model run to stop tuning; it is then compiled with its records so far.
    #[arg(value_name = "RUN")]
    pub name: String,
}

/// `tunefleet stop RUN`
pub async fn stop(args: StopArgs) -> anyhow::Result<()> {
    let mut client = args.connect.connect().await?;
    client
        .request(ClientCommand::StopModel {
            name: args.name.clone(),
        })
        .await
        .map_err(|e| args.connect.explain(e))?;
    let _ = client.close().await;
    emit(&format!(
        "model run `{}`: no more rounds; compiling once the rounds in flight end\n",
        args.name
    ))
}
