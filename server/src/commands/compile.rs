//! `tunefleet compile MODEL.onnx --model NAME --out FILE.so`: the user's own
//! model, with its real weights, compiled with a run's records on this
//! machine.
//!
//! Why on the user's machine and not on a worker: the farm never holds the
//! weights (`submit` uploads the graph without them), and a model whose
//! weights are compiled in is what a user wants to run — one input, like
//! onnxruntime — and what lets TVM fold and pre-pack them. The master gives
//! the run's database (every record so far, during a run or after it) and
//! its target; the model driver (`python -m tunefleet._driver.model`, mode
//! `compile` with `"weights": "bound"`) binds the weights as constants,
//! applies every record with the `main`-keyed lookup and counts them,
//! compiles, checks the outputs against onnxruntime with the same weights on
//! seeded random inputs, and times untuned TVM, tuned TVM and onnxruntime
//! with the same threads. A mismatch is an error: the command exits 0 only
//! for a verified library. A run submitted with `--prepack` was tuned for
//! weights in the layouts its kernels choose: the driver folds those layouts
//! into the real weights here (`prepacked` in the report counts them).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::client::repo_files::{find_python, package_missing, PACKAGE_HINT};
use anyhow::{bail, Context};
use serde_json::{json, Value};
use tunefleet_shared::export::format_latency;
use tunefleet_shared::model::{ModelArtifactKind, ModelView};
use tunefleet_shared::onnx;
use tunefleet_shared::protocol::{ClientCommand, ReplyBody};

use super::model::cold_choice_text;
use super::{emit, latency_or_dash, ConnectArgs};

/// The model driver: a module of the `tunefleet` Python package.
pub const MODEL_DRIVER_MODULE: &str = "tunefleet._driver.model";

/// How to get a Python with TVM, for every error that lacks one.
const SETUP_HINT: &str =
    "run scripts/setup-tvm.sh (it creates .venv with TVM 0.27, onnx and onnxruntime) or pass --python";

#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CompileFormat {
    /// A summary for people.
    #[default]
    Text,
    /// One JSON object: `applied`, `tasks`, `verified`, `latency_s`, ...
    Json,
}

#[derive(clap::Args, Debug)]
pub struct CompileArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// The ONNX model with its weights (the file the run was submitted from,
    /// or the same graph with your trained weights).
    #[arg(value_name = "MODEL.onnx")]
    pub model_file: PathBuf,
    /// The model run whose records to apply.
    #[arg(long = "model", value_name = "NAME")]
    pub run: String,
    /// Where to write the compiled model (a shared library).
    #[arg(long, value_name = "FILE.so")]
    pub out: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value_t = CompileFormat::Text)]
    pub format: CompileFormat,
    /// The Python interpreter with TVM (default: .venv/bin/python of this
    /// checkout, else python3).
    #[arg(long, value_name = "PATH", env = "TUNEFLEET_PYTHON")]
    pub python: Option<PathBuf>,
    /// Timed runs of each of the three models (median reported).
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub repeat: u32,
    /// Rounds in which the written library and onnxruntime are timed,
    /// alternated, each in a fresh process; `latency_s` holds the median
    /// of the rounds, `latency_rounds_s` every round. A shared host's load
    /// comes in phases that one timing can fall into. Default: the model
    /// driver's (`compile.TIMING_ROUNDS`, three).
    #[arg(long = "timing-rounds", value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub timing_rounds: Option<u32>,
    /// Of each task's N best records by tuning time, apply the one fastest
    /// timed cold, as kernels run in a model (caches flushed before each
    /// call); 0 applies the best tuning time as it is. Default: the model
    /// driver's (`cold_choice.TOP_K`, six). Without it, a run whose compile
    /// job made that choice on a worker has it applied as it was, untimed.
    #[arg(long = "cold-choice", value_name = "N")]
    pub cold_choice: Option<u32>,
}

pub async fn run(args: CompileArgs) -> anyhow::Result<()> {
    let model_file = std::path::absolute(&args.model_file)
        .with_context(|| format!("cannot resolve {}", args.model_file.display()))?;
    check_model_file(&model_file)?;
    let out = std::path::absolute(&args.out)
        .with_context(|| format!("cannot resolve {}", args.out.display()))?;
    let python = args.python.clone().unwrap_or_else(find_python);

    let (view, database) = fetch_run(&args.connect, &args.run).await?;
    let work = tempfile::Builder::new()
        .prefix("tunefleet-compile-")
        .tempdir()
        .context("cannot create a temporary directory")?;
    let db_dir = work.path().join("db");
    std::fs::create_dir_all(&db_dir).context("cannot create the database directory")?;
    for (name, text) in &database {
        std::fs::write(db_dir.join(name), text)
            .with_context(|| format!("cannot write {}", db_dir.join(name).display()))?;
    }
    let job = driver_job(&view, &model_file, &db_dir, &out, &args);
    let job_path = work.path().join("job.json");
    std::fs::write(&job_path, serde_json::to_vec(&job)?).context("cannot write the job file")?;

    let quiet = args.format == CompileFormat::Json;
    let result = run_driver(&python, &job_path, &work.path().join("work"), quiet)?;
    let report = report(&view, &result);
    match args.format {
        CompileFormat::Json => emit(&format!("{}\n", serde_json::to_string_pretty(&report)?)),
        CompileFormat::Text => emit(&to_text(&report)),
    }
}

/// A readable ONNX file with nothing stripped that the farm cannot compile:
/// checked here so a wrong path is an error before Python starts.
fn check_model_file(path: &Path) -> anyhow::Result<()> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let summary =
        onnx::summarize(&bytes).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    onnx::check_ops(&summary).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    Ok(())
}

/// The run's view and its database files (name, text). A run with no records
/// yet compiles untuned (said in the report), so a user can check the whole
/// path before the first round ends.
async fn fetch_run(
    connect: &ConnectArgs,
    name: &str,
) -> anyhow::Result<(ModelView, Vec<(String, String)>)> {
    let mut client = connect.connect().await?;
    client.set_request_timeout(Duration::from_secs(300));
    let view = super::model::view_on(&mut client, connect, name).await?;
    if view.io.get("inputs").is_none() {
        bail!(
            "model run `{name}` has not extracted its tasks yet (it is {}): wait for its first rounds",
            view.state
        );
    }
    let reply = client
        .request(ClientCommand::ModelArtifact {
            name: name.to_string(),
            artifact: ModelArtifactKind::Database,
        })
        .await;
    let _ = client.close().await;
    let files = match reply {
        Ok(ReplyBody::Artifact { files, .. }) => files
            .into_iter()
            .map(|f| (f.name, f.text.unwrap_or_default()))
            .collect(),
        Ok(_) => bail!("unexpected reply to model_artifact"),
        Err(e) if e.to_string().contains("no tuning records yet") => {
            eprintln!("model run `{name}` has no tuning records yet: compiling untuned");
            vec![
                ("database_workload.json".into(), String::new()),
                ("database_tuning_record.json".into(), String::new()),
            ]
        }
        Err(e) => return Err(connect.explain(e)),
    };
    Ok((view, files))
}

/// The model driver's job: the user's file, its weights bound, the run's
/// target and input shapes (the records were tuned for exactly those).
fn driver_job(
    view: &ModelView,
    model: &Path,
    db_dir: &Path,
    out: &Path,
    args: &CompileArgs,
) -> Value {
    let input_shapes: serde_json::Map<String, Value> = view.io["inputs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| Some((i["name"].as_str()?.to_string(), i["shape"].clone())))
        .collect();
    json!({
        "mode": "compile",
        "weights": "bound",
        "model_path": model,
        "input_shapes": input_shapes,
        "target": view.target,
        "seed": 0,
        // The run's tasks were extracted this way: every record applies.
        "prepack": view.prepack,
        "layout": view.layout,
        // A master from before recipes sends no mode (recipe 0): its runs are recipe 1.
        "recipe": view.mode.recipe.max(1),
        "database_dir": db_dir,
        "out": out,
        "repeat": args.repeat.max(1),
        // None (null): the driver's own default, as for `cold_choice`.
        "timing_rounds": args.timing_rounds,
        // None (null): the driver's own default, defined there once.
        "cold_choice": args.cold_choice,
        "chosen_records": chosen_records(view, args),
    })
}

/// What the run's compile job chose, task by task, when it timed each
/// task's best records cold on a worker: applied here untimed, since
/// timing the same records again costs half a minute on SqueezeNet and
/// would choose the same kernels. Null during a run (no compile job yet),
/// and with `--cold-choice N`, which chooses again here.
fn chosen_records(view: &ModelView, args: &CompileArgs) -> Value {
    match args.cold_choice {
        Some(_) => Value::Null,
        None => view.verification["cold_choice"]["chosen"].clone(),
    }
}

/// Runs the model driver to its end: progress to stderr (unless `quiet`),
/// its own log kept for the error message; the `result` line, or an error
/// that says what went wrong and how to get TVM when that is what's missing.
fn run_driver(python: &Path, job: &Path, work_dir: &Path, quiet: bool) -> anyhow::Result<Value> {
    let log_path = work_dir.with_extension("log");
    let log = std::fs::File::create(&log_path)
        .with_context(|| format!("cannot create {}", log_path.display()))?;
    let mut child = Command::new(python)
        .args(["-m", MODEL_DRIVER_MODULE])
        .arg("--job")
        .arg(job)
        .arg("--work-dir")
        .arg(work_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .map_err(|e| {
            anyhow::anyhow!(
                "cannot run the Python interpreter {}: {e} — {SETUP_HINT}",
                python.display()
            )
        })?;
    let stdout = child.stdout.take().context("no stdout from the driver")?;
    let mut result = None;
    let mut error = None;
    for line in BufReader::new(stdout).lines() {
        let line = line.context("cannot read the driver's output")?;
        let Ok(event) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        match event["event"].as_str() {
            Some("result") => result = Some(event),
            Some("error") => error = Some(event["message"].as_str().unwrap_or("").to_string()),
            Some("progress") if !quiet => {
                if let Some(stage) = event["stage"].as_str() {
                    eprintln!(
                        "compile: {} ({:.0} s)",
                        stage.replace('_', " "),
                        event["elapsed_s"].as_f64().unwrap_or(0.0)
                    );
                }
            }
            _ => {}
        }
    }
    let status = child.wait().context("cannot wait for the driver")?;
    if let Some(result) = result.filter(|_| status.success()) {
        return Ok(result);
    }
    let tail = log_tail(&log_path, 20);
    match error {
        Some(msg) if msg.starts_with("cannot import tvm") => {
            bail!("{msg} (Python {}) — {SETUP_HINT}", python.display())
        }
        Some(msg) => bail!("{msg}"),
        None if package_missing(&tail) => {
            bail!(
                "the model driver `{MODEL_DRIVER_MODULE}` is not installed for {}: {PACKAGE_HINT}",
                python.display()
            )
        }
        None => {
            bail!("the model driver ended with {status} and no result; its last lines:\n{tail}")
        }
    }
}

fn log_tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// The command's JSON: the driver's figures under the names the contract
/// gives, plus the run they came from. `tasks` counts the run's tasks with at
/// least one measured trial (what was tuned); `applied` the model's functions
/// that got a tuned schedule.
fn report(view: &ModelView, result: &Value) -> Value {
    let tasks = view.tasks.iter().filter(|t| t.trials > 0).count();
    let untuned_tasks: Vec<&str> = view
        .tasks
        .iter()
        .filter(|t| t.trials == 0)
        .map(|t| t.name.as_str())
        .collect();
    let mut report = json!({
        "model": view.name,
        "run_state": view.state,
        "trials_done": view.trials_done,
        "tasks": tasks,
        "tasks_total": view.tasks.len(),
        "untuned_tasks": untuned_tasks,
    });
    for key in [
        "applied",
        "tuned_functions",
        "functions",
        "records",
        "verified",
        "max_abs_err",
        "tolerance",
        "latency_s",
        "latency_rounds_s",
        "repeat",
        "library",
        "library_bytes",
        "target",
        "host_cpu",
        "inputs",
        "outputs",
        "timings",
        "default_schedule",
        "default_schedule_share",
        "prepack",
        "prepacked",
        "layout",
        "recipe",
        "threads",
        "generic_schedules",
        "cold_choice",
    ] {
        report[key] = result[key].clone();
    }
    report
}

/// The spread of the alternated rounds, when there were several: a reader
/// sees how much the host moved the figures above.
fn rounds_text(rounds: &Value) -> Option<String> {
    let spread = |k: &str| -> Option<(usize, f64, f64)> {
        let v: Vec<f64> = rounds[k]
            .as_array()?
            .iter()
            .filter_map(Value::as_f64)
            .collect();
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(0.0, f64::max);
        (v.len() > 1).then_some((v.len(), lo, hi))
    };
    let (n, t_lo, t_hi) = spread("tuned")?;
    let (_, o_lo, o_hi) = spread("onnxruntime")?;
    Some(format!(
        "  (medians of {n} rounds, tuned and onnxruntime alternated, each in a fresh process: \
         tuned {}–{}, onnxruntime {}–{})\n",
        format_latency(t_lo),
        format_latency(t_hi),
        format_latency(o_lo),
        format_latency(o_hi),
    ))
}

fn to_text(report: &Value) -> String {
    let lat = |k: &str| report["latency_s"][k].as_f64();
    let mut out = format!(
        "compiled `{}` ({}, {} trials) with its own weights → {} ({} bytes)\n\
         schedules applied: {} of {} tuned functions ({} in the model; {} of {} tasks tuned)\n\
         verified against onnxruntime: {} (max abs err {})\n\
         latency on this machine: untuned {}  tuned {}  onnxruntime {}",
        report["model"].as_str().unwrap_or(""),
        report["run_state"].as_str().unwrap_or(""),
        report["trials_done"],
        report["library"].as_str().unwrap_or(""),
        report["library_bytes"],
        report["applied"],
        report["tuned_functions"],
        report["functions"],
        report["tasks"],
        report["tasks_total"],
        if report["verified"] == true {
            "yes"
        } else {
            "no"
        },
        report["max_abs_err"],
        latency_or_dash(lat("untuned")),
        latency_or_dash(lat("tuned")),
        latency_or_dash(lat("onnxruntime")),
    );
    if let (Some(tuned), Some(ort)) = (lat("tuned"), lat("onnxruntime")) {
        out.push_str(&format!(" ({:.2}x onnxruntime's time)", tuned / ort));
    }
    out.push('\n');
    if let Some(line) = rounds_text(&report["latency_rounds_s"]) {
        out.push_str(&line);
    }
    if let Some(line) = cold_choice_text(&report["cold_choice"]) {
        out.push_str(&line);
    }
    for line in [
        prepacked_text(report),
        default_schedule_text(report),
        other_host_text(report),
    ]
    .into_iter()
    .flatten()
    {
        out.push_str(&line);
    }
    out
}

/// The line for a pre-packed compile: how many kernels had their weights
/// re-laid out, and in which layout the run was tuned.
fn prepacked_text(report: &Value) -> Option<String> {
    let n = report["prepacked"].as_u64()?;
    let layout = match report["layout"].as_str() {
        Some(l) if l != "NCHW" => format!(", tuned in {l}"),
        _ => String::new(),
    };
    Some(format!(
        "weights pre-packed at compile time for {n} kernels (the run was submitted with --prepack{layout})\n"
    ))
}

/// The line for the functions no record covers: how many, how many on the
/// generic parallel schedule, their share of the tuned model and the three
/// largest.
fn default_schedule_text(report: &Value) -> Option<String> {
    let share = report["default_schedule_share"].as_f64()?;
    let funcs = report["default_schedule"].as_array()?;
    let top: Vec<String> = funcs
        .iter()
        .take(3)
        .map(|f| {
            format!(
                "{} {:.1}%",
                f["name"].as_str().unwrap_or("?"),
                f["share"].as_f64().unwrap_or(0.0) * 100.0
            )
        })
        .collect();
    let top = if top.is_empty() {
        String::new()
    } else {
        format!(" ({})", top.join(", "))
    };
    // Of the listed (timed) functions; `generic_schedules` also counts the
    // ones a run never calls, such as folded reshapes.
    let generic = funcs.iter().filter(|f| f["generic"] == true).count();
    Some(format!(
        "no record for {} functions ({generic} of them on the generic parallel schedule), {:.1}% of the tuned model's time{top}\n",
        funcs.len(),
        share * 100.0,
    ))
}

/// A note when the run tuned for another CPU than this one: its timings
/// here are not the ones it will have where it runs.
fn other_host_text(report: &Value) -> Option<String> {
    let mcpu = report["target"]["mcpu"].as_str()?;
    let host = report["host_cpu"].as_str()?;
    (mcpu != host).then(|| {
        format!(
            "note: the run tuned for {mcpu}, this machine is {host}: time it where it will run\n"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_text_shows_the_spread_of_several_rounds_only() {
        let three =
            json!({"tuned": [0.0052, 0.0061, 0.0055], "onnxruntime": [0.0030, 0.0029, 0.0031]});
        let line = rounds_text(&three).expect("three rounds have a spread");
        assert!(line.contains("medians of 3 rounds"), "{line}");
        assert!(
            line.contains(&format_latency(0.0052)) && line.contains(&format_latency(0.0061)),
            "{line}"
        );
        assert!(
            line.contains(&format_latency(0.0029)) && line.contains(&format_latency(0.0031)),
            "{line}"
        );
        let one = json!({"tuned": [0.005], "onnxruntime": [0.003]});
        assert_eq!(rounds_text(&one), None);
        assert_eq!(rounds_text(&Value::Null), None);
    }

    #[test]
    fn the_report_names_prepacking_untuned_functions_and_another_cpu() {
        let report = json!({
            "model": "squeezenet", "verified": true,
            "latency_s": {"tuned": 0.004, "onnxruntime": 0.004},
            "prepacked": 18, "layout": "NHWC",
            "default_schedule_share": 0.031,
            "default_schedule": [
                {"name": "max_pool2d3", "share": 0.02, "generic": true},
                {"name": "mean1", "share": 0.011, "generic": false},
            ],
            "target": {"mcpu": "znver4"}, "host_cpu": "emeraldrapids",
        });
        let text = to_text(&report);
        assert!(
            text.contains("pre-packed at compile time for 18 kernels"),
            "{text}"
        );
        assert!(text.contains("--prepack, tuned in NHWC"), "{text}");
        assert!(
            text.contains(
                "no record for 2 functions (1 of them on the generic parallel schedule), 3.1%"
            ),
            "{text}"
        );
        assert!(text.contains("(max_pool2d3 2.0%, mean1 1.1%)"), "{text}");
        assert!(
            text.contains("tuned for znver4, this machine is emeraldrapids"),
            "{text}"
        );

        let same_cpu = json!({"target": {"mcpu": "znver4"}, "host_cpu": "znver4"});
        assert_eq!(other_host_text(&same_cpu), None);
        assert_eq!(prepacked_text(&same_cpu), None);
        assert_eq!(default_schedule_text(&same_cpu), None);
    }
}
