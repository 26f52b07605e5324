//! Checks shared by the YAML reader and `Workload::validate`, and the
//! wording of their errors (quotes, field paths, "did you mean").

use super::{
    conv_axis, Op, DTYPES, MAX_DIM, MAX_NAME_CHARS, MAX_TENSOR_ELEMENTS, MAX_TVMSCRIPT_BYTES,
};
use crate::yaml_tree::{Node, Yaml};

pub(super) fn check_name(name: &str) -> Result<(), String> {
    let chars = name.chars().count();
    if name.trim().is_empty() {
        Err("must not be empty".into())
    } else if chars > MAX_NAME_CHARS {
        Err(format!(
            "must be at most {MAX_NAME_CHARS} characters, got {chars}"
        ))
    } else if name.chars().any(char::is_control) {
        Err("must not contain control characters (tabs, newlines, ...)".into())
    } else {
        Ok(())
    }
}

pub(super) fn check_dtype(dtype: &str) -> Result<(), String> {
    if DTYPES.contains(&dtype) {
        return Ok(());
    }
    Err(format!(
        "unknown dtype {}{} (supported: {})",
        quote_text(dtype),
        did_you_mean(dtype, &DTYPES),
        DTYPES.join(", ")
    ))
}

/// `min` is 1 for sizes, strides and dilations, 0 for padding.
pub(crate) fn check_range(value: i128, min: u32) -> Result<u32, String> {
    if value < i128::from(min) {
        let what = if min == 0 {
            "a non-negative integer"
        } else {
            "a positive integer"
        };
        return Err(format!("must be {what}, got {value}"));
    }
    if value > i128::from(MAX_DIM) {
        return Err(format!("must be at most {MAX_DIM}, got {value}"));
    }
    u32::try_from(value).map_err(|_| format!("must be at most {MAX_DIM}, got {value}"))
}

pub(super) fn check_tvmscript(text: &str) -> Result<(), String> {
    if text.trim().is_empty() {
        return Err(
            "must not be empty: give a PrimFunc in TVMScript (`tvmscript: |` followed by the indented code)"
                .into(),
        );
    }
    if text.len() > MAX_TVMSCRIPT_BYTES {
        return Err(format!(
            "is {} bytes; the limit is {MAX_TVMSCRIPT_BYTES}",
            text.len()
        ));
    }
    if !text.contains("prim_func") {
        return Err("must define a PrimFunc (a `def` decorated with `@T.prim_func`)".into());
    }
    Ok(())
}

pub(super) fn normalise_tvmscript(text: &str) -> String {
    let mut out = text.replace("\r\n", "\n").trim_end().to_string();
    out.push('\n');
    out
}

/// `(field, minimum, value)` for every number of a shape, pairs as `kernel[0]`...
pub(super) fn op_numbers(op: &Op) -> Vec<(String, u32, u32)> {
    let mut out = Vec::new();
    let mut dim = |name: &str, v: u32| out.push((name.to_string(), 1, v));
    match op {
        Op::Matmul { shape: s } => {
            dim("m", s.m);
            dim("n", s.n);
            dim("k", s.k);
        }
        Op::BatchMatmul { shape: s } => {
            dim("batch", s.batch);
            dim("m", s.m);
            dim("n", s.n);
            dim("k", s.k);
        }
        Op::Dense { shape: s } => {
            dim("batch", s.batch);
            dim("in_features", s.in_features);
            dim("out_features", s.out_features);
        }
        Op::Conv2dNchw { shape: s } | Op::Conv2dNhwc { shape: s } => {
            dim("batch", s.batch);
            dim("in_channels", s.in_channels);
            dim("height", s.height);
            dim("width", s.width);
            dim("out_channels", s.out_channels);
            push_pairs(&mut out, s.kernel, s.stride, s.padding, s.dilation);
        }
        Op::DepthwiseConv2dNchw { shape: s } => {
            dim("batch", s.batch);
            dim("channels", s.channels);
            dim("height", s.height);
            dim("width", s.width);
            dim("multiplier", s.multiplier);
            push_pairs(&mut out, s.kernel, s.stride, s.padding, s.dilation);
        }
        Op::Tvmscript { .. } | Op::Model { .. } => {}
    }
    out
}

pub(super) fn push_pairs(
    out: &mut Vec<(String, u32, u32)>,
    kernel: [u32; 2],
    stride: [u32; 2],
    padding: [u32; 2],
    dilation: [u32; 2],
) {
    for (name, min, pair) in [
        ("kernel", 1, kernel),
        ("stride", 1, stride),
        ("padding", 0, padding),
        ("dilation", 1, dilation),
    ] {
        for (i, v) in pair.into_iter().enumerate() {
            out.push((format!("{name}[{i}]"), min, v));
        }
    }
}

/// Whole-shape problems (empty convolution output, absurd tensor sizes), assuming
/// every number is already in range. `(sub-field of shape, message)`.
pub(super) fn geometry_problems(op: &Op) -> Vec<(Option<&'static str>, String)> {
    let mut out = Vec::new();
    let conv = match op {
        Op::Conv2dNchw { shape: s } | Op::Conv2dNhwc { shape: s } => Some((
            [s.height, s.width],
            s.kernel,
            s.stride,
            s.padding,
            s.dilation,
        )),
        Op::DepthwiseConv2dNchw { shape: s } => Some((
            [s.height, s.width],
            s.kernel,
            s.stride,
            s.padding,
            s.dilation,
        )),
        _ => None,
    };
    if let Some((input, kernel, stride, padding, dilation)) = conv {
        let mut empty = Vec::new();
        for (axis, name) in [(0, "height"), (1, "width")] {
            if conv_axis(
                input[axis],
                kernel[axis],
                stride[axis],
                padding[axis],
                dilation[axis],
            )
            .is_none()
            {
                let effective =
                    u64::from(dilation[axis]) * u64::from(kernel[axis].saturating_sub(1)) + 1;
                empty.push((name, effective, axis));
            }
        }
        if !empty.is_empty() {
            let names: Vec<&str> = empty.iter().map(|(name, _, _)| *name).collect();
            let details: Vec<String> = empty
                .iter()
                .map(|&(name, effective, axis)| {
                    format!(
                        "the kernel spans {effective} (kernel {}, dilation {}) but the padded \
                         input {name} is only {} ({name} {} + 2 * padding {})",
                        kernel[axis],
                        dilation[axis],
                        u64::from(input[axis]) + 2 * u64::from(padding[axis]),
                        input[axis],
                        padding[axis],
                    )
                })
                .collect();
            out.push((
                Some("kernel"),
                format!(
                    "the output {} would be empty: {}",
                    names.join(" and "),
                    details.join("; ")
                ),
            ));
            return out;
        }
    }
    for (role, elements) in op.tensor_elements().unwrap_or_default() {
        if elements > u128::from(MAX_TENSOR_ELEMENTS) {
            out.push((
                None,
                format!(
                    "the {role} tensor would have {elements} elements; the limit is \
                     {MAX_TENSOR_ELEMENTS} (2^34)"
                ),
            ));
        }
    }
    out
}

/// How a value is shown in "got ..." messages.
pub(super) fn describe(node: &Node) -> String {
    match &node.value {
        Yaml::Null => "an empty value".into(),
        Yaml::Bool(b) => b.to_string(),
        Yaml::Int(i) => i.to_string(),
        Yaml::Float(x) => format!("{x:?}"),
        Yaml::Str(s) => quote_text(s),
        Yaml::Seq(items) => format!("a list of {} item(s)", items.len()),
        Yaml::Map(_) => "a mapping".into(),
    }
}

/// Characters of user text quoted in this parser's messages.
pub(super) const QUOTE_CHARS: usize = 40;

/// `"text"` with escapes, shortened to about 40 characters.
pub(super) fn quote_text(s: &str) -> String {
    quote_at_most(s, QUOTE_CHARS)
}

/// `"text"` with escapes, shortened to `max` characters.
pub(crate) fn quote_at_most(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        format!("{s:?}")
    } else {
        let short: String = s.chars().take(max).collect();
        format!("{short:?}…")
    }
}

/// A map key as it appears in a field path.
pub(super) fn key_for_path(key: &str) -> String {
    path_key(key, QUOTE_CHARS)
}

/// A map key as it appears in a field path: bare when simple, else quoted
/// (shortened to `max` characters).
pub(crate) fn path_key(key: &str, max: usize) -> String {
    let simple = !key.is_empty()
        && key.len() <= 64
        && key
            .chars()
            .all(|c| c.is_alphanumeric() || c == '_' || c == '-');
    if simple {
        key.to_string()
    } else {
        quote_at_most(key, max)
    }
}

pub(super) fn join_field(path: &str, key: &str) -> String {
    match (path.is_empty(), key.is_empty()) {
        (true, _) => key.to_string(),
        (false, true) => path.to_string(),
        (false, false) => format!("{path}.{key}"),
    }
}

/// Optimal string alignment distance (a transposition counts as one edit).
pub(super) fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut prev2: Vec<usize> = vec![0; b.len() + 1];
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur: Vec<usize> = vec![0; b.len() + 1];
    for i in 1..=a.len() {
        cur[0] = i;
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (prev[j] + 1).min(cur[j - 1] + 1).min(prev[j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(prev2[j - 2] + 1);
            }
            cur[j] = best;
        }
        std::mem::swap(&mut prev2, &mut prev);
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

pub(super) fn suggest<'c>(word: &str, candidates: &[&'c str]) -> Option<&'c str> {
    if word.is_empty() || word.len() > 64 {
        return None;
    }
    let lower = word.to_lowercase();
    let limit = match word.chars().count() {
        0..=2 => 0,
        3..=4 => 1,
        _ => 2,
    };
    candidates
        .iter()
        .map(|c| (edit_distance(&lower, c), *c))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

pub(super) fn did_you_mean(word: &str, candidates: &[&str]) -> String {
    suggest(word, candidates)
        .map(|s| format!("; did you mean `{s}`?"))
        .unwrap_or_default()
}

/// A parser's message with its control characters escaped, so that a file
/// cannot write terminal escapes into a log or a reply.
pub(crate) fn escape_controls(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_debug().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}
