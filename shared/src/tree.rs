//! A parsed JSON tree, and decoding the shared types from it
//! ([`FromTree`], derived by `tunefleet-derive` from the types' serde
//! attributes). Used by the web page only (feature `tree`).
//!
//! Why not serde_json and the derived `Deserialize` in the page: serde_json
//! parses straight into each type, so every type the page reads gets its own
//! copy of the parser's code; and serde's derived decoders are written for
//! streaming input, so each type gets visitors, and every internally tagged
//! enum or `flatten` a copy into serde's private buffer and a second decode.
//! In the page's wasm module that was ~30% of the code (docs/benchmarks.md,
//! "Web dashboard"). Here the text is parsed once, by code that is not
//! generic, and a type's decoder is a list of member lookups in the parsed
//! object. The wire is the protocol's, unchanged: the tests check this reader
//! against serde_json, and the two derives against each other, on every
//! message kind.
//!
//! It reads what serde_json reads (RFC 8259, nesting up to 127 levels), and
//! decodes as serde's derive does: unknown members are ignored, a missing
//! `Option` is `None`, `#[serde(default)]` members take their default. One
//! difference: a repeated member is not an error here (the first one
//! counts); the master never writes one.

use std::borrow::Cow;
use std::fmt;

pub use tunefleet_derive::FromTree;

mod impls;
mod parse;
pub use impls::FromKey;
pub use parse::parse;
use parse::{number, Number};

/// How deep arrays and objects may nest: serde_json's default limit too.
const MAX_DEPTH: usize = 127;

/// A parsed JSON value. Strings without escapes borrow from the text.
#[derive(Clone, Debug, PartialEq)]
pub enum Value<'a> {
    Null,
    Bool(bool),
    /// The number's text, checked against the JSON grammar.
    Number(&'a str),
    String(Cow<'a, str>),
    Array(Vec<Value<'a>>),
    /// Members in the order they came.
    Object(Vec<(Cow<'a, str>, Value<'a>)>),
}

impl<'a> Value<'a> {
    /// The member `key` of an object.
    pub fn get(&self, key: &str) -> Option<&Value<'a>> {
        match self {
            Value::Object(members) => members.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_u64(&self) -> Option<u64> {
        match self {
            Value::Number(n) => n.parse().ok(),
            _ => None,
        }
    }

    /// What kind of value this is, for error messages.
    fn kind(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Number(_) => "a number",
            Value::String(_) => "a string",
            Value::Array(_) => "an array",
            Value::Object(_) => "an object",
        }
    }
}

/// Why a text could not be read, or a value not decoded: the message, and
/// where in the value (`jobs[3].state`).
#[derive(Clone, Debug, PartialEq)]
pub struct Error {
    path: String,
    message: String,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

impl std::error::Error for Error {}

impl Error {
    pub fn custom(message: impl fmt::Display) -> Error {
        Error {
            path: String::new(),
            message: message.to_string(),
        }
    }

    pub fn unknown_variant(found: &str, what: &str) -> Error {
        Error::custom(format_args!("unknown variant `{found}` of {what}"))
    }

    fn expected(what: &str, found: &Value<'_>) -> Error {
        Error::custom(format_args!("expected {what}, found {}", found.kind()))
    }

    /// The same error, one level further out: inside member `key`.
    fn within(mut self, key: &str) -> Error {
        self.path = match (self.path.is_empty(), self.path.starts_with('[')) {
            (true, _) => key.to_string(),
            (false, true) => format!("{key}{}", self.path),
            (false, false) => format!("{key}.{}", self.path),
        };
        self
    }

    fn at_index(mut self, index: usize) -> Error {
        self.path = if self.path.is_empty() || self.path.starts_with('[') {
            format!("[{index}]{}", self.path)
        } else {
            format!("[{index}].{}", self.path)
        };
        self
    }
}

/// Parses `text` and decodes a `T` from it.
pub fn from_str<T: FromTree>(text: &str) -> Result<T, Error> {
    T::from_tree(&parse(text)?)
}

/// A type that can be read from a parsed JSON value. Derive it with
/// `#[derive(FromTree)]` beside `Deserialize`; the derive follows the same
/// `#[serde(...)]` attributes.
pub trait FromTree: Sized {
    fn from_tree(value: &Value<'_>) -> Result<Self, Error>;

    /// The value of a member that is absent: an error, except for `Option`.
    fn when_missing() -> Option<Self> {
        None
    }
}

/// The members of an object, looked up by name. Lookups start after the
/// previous hit, so members in declaration order (as the master writes
/// them) are found in one pass.
pub struct Members<'v, 'a> {
    members: &'v [(Cow<'a, str>, Value<'a>)],
    next: usize,
}

impl<'v, 'a> Members<'v, 'a> {
    pub fn of(value: &'v Value<'a>, what: &str) -> Result<Self, Error> {
        match value {
            Value::Object(members) => Ok(Members { members, next: 0 }),
            other => Err(Error::expected(&format!("an object ({what})"), other)),
        }
    }

    fn find(&mut self, key: &str) -> Option<&'v Value<'a>> {
        let n = self.members.len();
        (0..n)
            .map(|i| (self.next + i) % n)
            .find(|&i| self.members[i].0 == key)
            .map(|i| {
                self.next = i + 1;
                &self.members[i].1
            })
    }

    pub fn required<T: FromTree>(&mut self, key: &str) -> Result<T, Error> {
        match self.find(key) {
            Some(value) => T::from_tree(value).map_err(|e| e.within(key)),
            None => T::when_missing()
                .ok_or_else(|| Error::custom(format_args!("missing field `{key}`"))),
        }
    }

    pub fn or_default<T: FromTree + Default>(&mut self, key: &str) -> Result<T, Error> {
        match self.find(key) {
            Some(value) => T::from_tree(value).map_err(|e| e.within(key)),
            None => Ok(T::default()),
        }
    }
}

/// The tag member of an internally tagged enum's object.
pub fn tag_of<'v>(value: &'v Value<'_>, tag: &str, what: &str) -> Result<&'v str, Error> {
    match value {
        Value::Object(_) => match value.get(tag) {
            Some(Value::String(s)) => Ok(s),
            Some(other) => Err(Error::expected("a string", other).within(tag)),
            None => Err(Error::custom(format_args!("missing field `{tag}`"))),
        },
        other => Err(Error::expected(&format!("an object ({what})"), other)),
    }
}

/// An externally tagged enum's variant name and content: `"Unit"` (content
/// null) or `{"Variant": content}`.
pub fn external_variant<'v, 'a>(
    value: &'v Value<'a>,
    what: &str,
) -> Result<(&'v str, &'v Value<'a>), Error> {
    static NULL: Value<'static> = Value::Null;
    match value {
        Value::String(s) => Ok((s, &NULL)),
        Value::Object(members) if members.len() == 1 => Ok((&members[0].0, &members[0].1)),
        other => Err(Error::expected(
            &format!("a string or an object with one member ({what})"),
            other,
        )),
    }
}

#[cfg(test)]
mod tests;
