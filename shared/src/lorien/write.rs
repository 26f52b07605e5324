//! Imported workloads written back as a tunefleet workload file (what
//! `tunefleet import-lorien` prints and the dashboard offers to download).

use std::fmt::Write as _;

use serde_json::Value;

use crate::target::Target;
use crate::workload::{Op, Workload};

/// Writes `workloads` as a tunefleet workload file (block style, one entry per
/// workload, every field explicit) that [`crate::workload::parse_workload_file`]
/// reads back as the same workloads, so with the same job ids. The header
/// comment says it was converted from a Lorien file; see
/// [`to_tunefleet_yaml_from`] to name the file.
pub fn to_tunefleet_yaml(workloads: &[Workload]) -> String {
    render(workloads, None)
}

/// [`to_tunefleet_yaml`] with the header naming the Lorien file `source`.
pub fn to_tunefleet_yaml_from(workloads: &[Workload], source: &str) -> String {
    render(workloads, Some(source))
}

pub(super) fn render(workloads: &[Workload], source: Option<&str>) -> String {
    let mut out = String::new();
    let from = match source {
        Some(s) => {
            // A comment ends at a line break: keep the name on one line.
            let s: String = s
                .chars()
                .map(|c| if needs_escape(c) { '?' } else { c })
                .collect();
            format!("{s} (a Lorien workload file)")
        }
        None => "a Lorien workload file".into(),
    };
    let _ = writeln!(out, "# Converted from {from} by `tunefleet import-lorien`.");
    let _ = writeln!(
        out,
        "# {} workload(s). Job ids depend on op, shape, dtype, target and trials, not on names.",
        workloads.len()
    );
    if workloads.is_empty() {
        out.push_str("workloads: []\n");
        return out;
    }
    out.push_str("workloads:\n");
    for w in workloads {
        let _ = writeln!(out, "  - name: {}", scalar(&w.name));
        let _ = writeln!(out, "    op: {}", w.op.name());
        match &w.op {
            Op::Tvmscript { tvmscript } => write_tvmscript(&mut out, tvmscript),
            op => {
                out.push_str("    shape:\n");
                for (key, value) in shape_fields(op) {
                    let _ = writeln!(out, "      {key}: {value}");
                }
            }
        }
        let _ = writeln!(out, "    dtype: {}", scalar(&w.dtype));
        let _ = writeln!(out, "    target: {}", target_flow(&w.target));
        let _ = writeln!(out, "    trials: {}", w.trials);
    }
    out
}

pub(super) fn shape_fields(op: &Op) -> Vec<(&'static str, String)> {
    let pair = |p: [u32; 2]| format!("[{}, {}]", p[0], p[1]);
    let n = |v: u32| v.to_string();
    match op {
        Op::Matmul { shape: s } => vec![("m", n(s.m)), ("n", n(s.n)), ("k", n(s.k))],
        Op::BatchMatmul { shape: s } => vec![
            ("batch", n(s.batch)),
            ("m", n(s.m)),
            ("n", n(s.n)),
            ("k", n(s.k)),
        ],
        Op::Dense { shape: s } => vec![
            ("batch", n(s.batch)),
            ("in_features", n(s.in_features)),
            ("out_features", n(s.out_features)),
        ],
        Op::Conv2dNchw { shape: s } | Op::Conv2dNhwc { shape: s } => vec![
            ("batch", n(s.batch)),
            ("in_channels", n(s.in_channels)),
            ("height", n(s.height)),
            ("width", n(s.width)),
            ("out_channels", n(s.out_channels)),
            ("kernel", pair(s.kernel)),
            ("stride", pair(s.stride)),
            ("padding", pair(s.padding)),
            ("dilation", pair(s.dilation)),
        ],
        Op::DepthwiseConv2dNchw { shape: s } => vec![
            ("batch", n(s.batch)),
            ("channels", n(s.channels)),
            ("height", n(s.height)),
            ("width", n(s.width)),
            ("multiplier", n(s.multiplier)),
            ("kernel", pair(s.kernel)),
            ("stride", pair(s.stride)),
            ("padding", pair(s.padding)),
            ("dilation", pair(s.dilation)),
        ],
        Op::Tvmscript { .. } | Op::Model { .. } => Vec::new(),
    }
}

/// A literal block (`|`) when the text allows one, else a double-quoted string.
pub(super) fn write_tvmscript(out: &mut String, text: &str) {
    let literal_ok = text.ends_with('\n')
        && !text.ends_with("\n\n")
        && text
            .chars()
            .next()
            .is_some_and(|c| !c.is_whitespace() && c != '#')
        && !text
            .chars()
            .any(|c| c != '\n' && c != '\t' && needs_escape(c));
    if !literal_ok {
        let _ = writeln!(out, "    tvmscript: {}", double_quoted(text));
        return;
    }
    out.push_str("    tvmscript: |\n");
    for line in text.lines() {
        if line.is_empty() {
            out.push('\n');
        } else {
            let _ = writeln!(out, "      {line}");
        }
    }
}

/// The target as a flow mapping, `kind` first.
pub(super) fn target_flow(target: &Target) -> String {
    let attrs = target.attrs();
    let entries: Vec<String> = attrs
        .get("kind")
        .map(|kind| ("kind", kind))
        .into_iter()
        .chain(
            attrs
                .iter()
                .filter(|(k, _)| k.as_str() != "kind")
                .map(|(k, v)| (k.as_str(), v)),
        )
        .map(|(k, v)| format!("{}: {}", scalar(k), flow(v)))
        .collect();
    format!("{{{}}}", entries.join(", "))
}

/// A value in YAML flow style (JSON-like, plain scalars where unambiguous).
pub(super) fn flow(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => scalar(s),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(flow).collect();
            format!("[{}]", items.join(", "))
        }
        Value::Object(map) => {
            let entries: Vec<String> = map
                .iter()
                .map(|(k, v)| format!("{}: {}", scalar(k), flow(v)))
                .collect();
            format!("{{{}}}", entries.join(", "))
        }
    }
}

/// A string as a YAML scalar: plain when it can only be read back as that
/// string (in block and flow context alike), else double-quoted.
pub(super) fn scalar(s: &str) -> String {
    const RESERVED: [&str; 13] = [
        "true", "false", "null", "yes", "no", "on", "off", "y", "n", "inf", "nan", "nil", "none",
    ];
    let plain = s.len() <= 200
        && s.chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/'))
        && !RESERVED.contains(&s.to_ascii_lowercase().as_str());
    if plain {
        s.to_string()
    } else {
        double_quoted(s)
    }
}

/// Characters that must not appear raw in YAML text.
pub(super) fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{2028}' | '\u{2029}' | '\u{feff}' | '\u{fffe}' | '\u{ffff}'
        )
}

pub(super) fn double_quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if needs_escape(c) => {
                let code = u32::from(c);
                if code <= 0xffff {
                    let _ = write!(out, "\\u{code:04x}");
                } else {
                    let _ = write!(out, "\\U{code:08x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
