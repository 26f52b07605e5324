//! The YAML fast path: a tree built straight from the parser's events.
//!
//! Why: serde-saphyr gives every value its position through `Spanned`, which
//! deserialises each node as a small map (value, then location) and moves it
//! through several layers of `Result`s. Reading a file of 10,000 one-line
//! workloads took 160–250 ms that way, on the master's submit path; from the
//! events it takes half that, most of it in the parser itself (granit, the
//! one serde-saphyr drives). Figures: docs/benchmarks.md.
//!
//! What it must never do: answer differently from serde-saphyr. It takes
//! only the part of YAML whose meaning is plain (mappings and sequences,
//! strings, decimal integers and fractions, `true` and `false`) and gives
//! up, returning `None`, on anything else: anchors, aliases, tags, merge
//! keys, exponents and other number forms, nulls, a key that repeats, a key
//! that is not a string or integer, a parser error, or half of a limit of
//! [`super::budget`] reached (serde-saphyr may count depth and nodes a little
//! differently, so a file anywhere near a limit is for it to judge). The
//! caller then parses the whole text with serde-saphyr, which decides and
//! words every error. `tests.rs` holds both to the same trees.

use std::borrow::Cow;

use granit_parser::{Event, Parser, ScalarStyle};

use super::{Node, Yaml};

/// Keys a mapping may have on the fast path.
pub(super) const MAX_FAST_MAP_ENTRIES: usize = 64;

/// A collection being filled, and where it starts.
struct Open {
    line: usize,
    column: usize,
    items: Items,
}

enum Items {
    Seq(Vec<Node>),
    /// The entries, and a key waiting for its value.
    Map(Vec<(Node, Node)>, Option<Node>),
}

impl Open {
    fn close(self) -> Option<Node> {
        let value = match self.items {
            Items::Seq(items) => Yaml::Seq(items),
            Items::Map(entries, None) => Yaml::Map(entries),
            Items::Map(_, Some(_)) => return None,
        };
        Some(Node {
            value,
            line: self.line,
            column: self.column,
        })
    }
}

pub(super) fn documents(text: &str, budget: &serde_saphyr::Budget) -> Option<Vec<Node>> {
    let mut options = granit_parser::Options::default();
    options.flow_nesting_limit = budget.flow_nesting_limit;
    options.simple_key_max_lookahead = budget.simple_key_max_lookahead;
    options.block_nesting_limit = options.block_nesting_limit.max(budget.max_depth + 1);
    // On when a crate in the build turns on granit's `comments` feature.
    options.emit_comments = false;
    let mut parser = Parser::new_from_str_with_options(text, options);
    let mut documents = Vec::new();
    let mut open: Vec<Open> = Vec::new();
    let mut nodes = 0usize;
    while let Some(next) = parser.next_event() {
        let (event, span) = next.ok()?;
        let (line, column) = (span.start.line(), span.start.col() + 1);
        let node = match event {
            Event::StreamStart
            | Event::StreamEnd
            | Event::DocumentStart(..)
            | Event::DocumentEnd => continue,
            Event::Scalar(text, style, 0, None) => Node {
                value: scalar(text, style)?,
                line,
                column,
            },
            Event::SequenceStart(_, 0, None) | Event::MappingStart(_, 0, None) => {
                if open.len() >= budget.max_depth / 2 {
                    return None;
                }
                let items = match event {
                    Event::SequenceStart(..) => Items::Seq(Vec::new()),
                    _ => Items::Map(Vec::new(), None),
                };
                open.push(Open {
                    line,
                    column,
                    items,
                });
                continue;
            }
            Event::SequenceEnd | Event::MappingEnd => {
                let closing = open.pop()?;
                let matches = matches!(
                    (&event, &closing.items),
                    (Event::SequenceEnd, Items::Seq(_)) | (Event::MappingEnd, Items::Map(..))
                );
                if !matches {
                    return None;
                }
                closing.close()?
            }
            // Anchors, aliases, tags, and whatever the parser adds later.
            _ => return None,
        };
        nodes += 1;
        if nodes > budget.max_nodes / 2 {
            return None;
        }
        match open.last_mut().map(|o| &mut o.items) {
            None => {
                documents.push(node);
                if documents.len() > budget.max_documents {
                    return None;
                }
            }
            Some(Items::Seq(items)) => items.push(node),
            Some(Items::Map(entries, key)) => match key.take() {
                None => {
                    key_text(&node)?;
                    *key = Some(node);
                }
                Some(k) => {
                    // The repeat check is a scan: a mapping too large for
                    // one stays with serde-saphyr (a workload's has a dozen keys).
                    if entries.len() >= MAX_FAST_MAP_ENTRIES {
                        return None;
                    }
                    let text = key_text(&k)?;
                    if text == "<<"
                        || entries
                            .iter()
                            .any(|(e, _)| key_text(e).as_deref() == Some(&*text))
                    {
                        return None;
                    }
                    entries.push((k, node));
                }
            },
        }
    }
    // An empty stream, or one that ended inside a collection.
    if documents.is_empty() || !open.is_empty() {
        return None;
    }
    Some(documents)
}

/// A key as text, to find repeats the way serde-saphyr might (`11` and
/// `"11"` count as the same): only strings and integers are taken.
fn key_text(node: &Node) -> Option<Cow<'_, str>> {
    match &node.value {
        Yaml::Str(s) => Some(Cow::Borrowed(s)),
        Yaml::Int(i) => Some(Cow::Owned(i.to_string())),
        _ => None,
    }
}

/// serde-saphyr's typing of an untagged scalar (`deserialize_any` with
/// strict booleans), for the cases that are unambiguous; `None` for the rest.
fn scalar(text: Cow<'_, str>, style: ScalarStyle) -> Option<Yaml> {
    if style != ScalarStyle::Plain {
        // Quoted and block scalars are strings, whatever they say.
        return Some(Yaml::Str(text.into_owned()));
    }
    let bytes = text.as_bytes();
    let first = *bytes.first()?;
    if first.is_ascii_alphabetic() || !first.is_ascii() {
        // Numbers start with a digit, a sign or a dot; `inf` and `nan` stay
        // strings. Left: null and the booleans, in any case.
        return match text.as_ref() {
            "true" => Some(Yaml::Bool(true)),
            "false" => Some(Yaml::Bool(false)),
            t if t.eq_ignore_ascii_case("true")
                || t.eq_ignore_ascii_case("false")
                || t.eq_ignore_ascii_case("null") =>
            {
                None
            }
            _ => Some(Yaml::Str(text.into_owned())),
        };
    }
    // Decimal integers without a leading zero, and decimal fractions
    // (`0.5`, `-12.25`); other numbers (hex, `+1`, `1_000`, `1e3`, `.5`, too
    // large) go to serde-saphyr.
    let digits = text.strip_prefix('-').unwrap_or(&text);
    let all_digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if all_digits(digits) {
        if digits.len() > 1 && digits.starts_with('0') {
            return None;
        }
        return if text.starts_with('-') {
            text.parse::<i64>().ok().map(|v| Yaml::Int(v.into()))
        } else {
            text.parse::<u64>().ok().map(|v| Yaml::Int(v.into()))
        };
    }
    let (whole, fraction) = digits.split_once('.')?;
    if !(all_digits(whole) && all_digits(fraction)) {
        return None;
    }
    // serde-saphyr parses these with the same `str::parse`.
    text.parse::<f64>()
        .ok()
        .filter(|v| v.is_finite())
        .map(Yaml::Float)
}
