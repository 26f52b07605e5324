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
use std::collections::BTreeMap;
use std::fmt;

pub use tunefleet_derive::FromTree;

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

fn number_of(value: &Value<'_>) -> Result<Number, Error> {
    match value {
        Value::Number(text) => number(text),
        other => Err(Error::expected("a number", other)),
    }
}

/// Not generic on purpose: one copy for every integer type.
fn unsigned(value: &Value<'_>, max: u64) -> Result<u64, Error> {
    match number_of(value)? {
        Number::Unsigned(n) if n <= max => Ok(n),
        Number::Unsigned(n) => Err(Error::custom(format_args!("{n} is out of range"))),
        Number::Negative(n) => Err(Error::custom(format_args!("{n} is negative"))),
        Number::Float(_) => Err(not_an_integer(value)),
    }
}

fn not_an_integer(value: &Value<'_>) -> Error {
    match value {
        Value::Number(text) => Error::custom(format_args!("expected an integer, found {text}")),
        other => Error::expected("an integer", other),
    }
}

fn signed(value: &Value<'_>, min: i64, max: i64) -> Result<i64, Error> {
    let n = match number_of(value)? {
        Number::Unsigned(n) => {
            i64::try_from(n).map_err(|_| Error::custom(format_args!("{n} is out of range")))?
        }
        Number::Negative(n) => n,
        Number::Float(_) => return Err(not_an_integer(value)),
    };
    if n < min || n > max {
        return Err(Error::custom(format_args!("{n} is out of range")));
    }
    Ok(n)
}

macro_rules! unsigned_from_tree {
    ($($t:ty),*) => {$(
        impl FromTree for $t {
            fn from_tree(value: &Value<'_>) -> Result<Self, Error> {
                // The range check above makes the cast exact.
                unsigned(value, <$t>::MAX as u64).map(|n| n as $t)
            }
        }
    )*};
}
unsigned_from_tree!(u8, u16, u32, u64, usize);

macro_rules! signed_from_tree {
    ($($t:ty),*) => {$(
        impl FromTree for $t {
            fn from_tree(value: &Value<'_>) -> Result<Self, Error> {
                signed(value, <$t>::MIN as i64, <$t>::MAX as i64).map(|n| n as $t)
            }
        }
    )*};
}
signed_from_tree!(i32, i64);

impl FromTree for f64 {
    fn from_tree(value: &Value<'_>) -> Result<Self, Error> {
        Ok(match number_of(value)? {
            Number::Unsigned(n) => n as f64,
            Number::Negative(n) => n as f64,
            Number::Float(f) => f,
        })
    }
}

impl FromTree for f32 {
    fn from_tree(value: &Value<'_>) -> Result<Self, Error> {
        f64::from_tree(value).map(|f| f as f32)
    }
}

impl FromTree for bool {
    fn from_tree(value: &Value<'_>) -> Result<Self, Error> {
        match value {
            Value::Bool(b) => Ok(*b),
            other => Err(Error::expected("a boolean", other)),
        }
    }
}

impl FromTree for String {
    fn from_tree(value: &Value<'_>) -> Result<Self, Error> {
        match value {
            Value::String(s) => Ok(s.to_string()),
            other => Err(Error::expected("a string", other)),
        }
    }
}

impl<T: FromTree> FromTree for Option<T> {
    fn from_tree(value: &Value<'_>) -> Result<Self, Error> {
        match value {
            Value::Null => Ok(None),
            other => T::from_tree(other).map(Some),
        }
    }

    fn when_missing() -> Option<Self> {
        Some(None)
    }
}

impl<T: FromTree> FromTree for Box<T> {
    fn from_tree(value: &Value<'_>) -> Result<Self, Error> {
        T::from_tree(value).map(Box::new)
    }
}

/// Each item decoded, an error naming the index of the first that fails.
fn decode_items<T: FromTree>(items: &[Value<'_>]) -> Result<Vec<T>, Error> {
    items
        .iter()
        .enumerate()
        .map(|(i, item)| T::from_tree(item).map_err(|e| e.at_index(i)))
        .collect()
}

impl<T: FromTree> FromTree for Vec<T> {
    fn from_tree(value: &Value<'_>) -> Result<Self, Error> {
        match value {
            Value::Array(items) => decode_items(items),
            other => Err(Error::expected("an array", other)),
        }
    }
}

/// serde's form of a `Result`: `{"Ok": value}` or `{"Err": error}`.
impl<T: FromTree, E: FromTree> FromTree for Result<T, E> {
    fn from_tree(value: &Value<'_>) -> Result<Self, Error> {
        match external_variant(value, "Result")? {
            ("Ok", inner) => T::from_tree(inner).map(Ok).map_err(|e| e.within("Ok")),
            ("Err", inner) => E::from_tree(inner).map(Err).map_err(|e| e.within("Err")),
            (other, _) => Err(Error::unknown_variant(other, "Result")),
        }
    }
}

fn array_items<'v, 'a>(value: &'v Value<'a>, len: usize) -> Result<&'v [Value<'a>], Error> {
    match value {
        Value::Array(items) if items.len() == len => Ok(items),
        Value::Array(items) => Err(Error::custom(format_args!(
            "expected an array of {len}, found {}",
            items.len()
        ))),
        other => Err(Error::expected("an array", other)),
    }
}

impl<T: FromTree, const N: usize> FromTree for [T; N] {
    fn from_tree(value: &Value<'_>) -> Result<Self, Error> {
        decode_items::<T>(array_items(value, N)?)?
            .try_into()
            .map_err(|_| Error::custom("array length changed"))
    }
}

impl<A: FromTree, B: FromTree> FromTree for (A, B) {
    fn from_tree(value: &Value<'_>) -> Result<Self, Error> {
        let items = array_items(value, 2)?;
        Ok((
            A::from_tree(&items[0]).map_err(|e| e.at_index(0))?,
            B::from_tree(&items[1]).map_err(|e| e.at_index(1))?,
        ))
    }
}

/// A map key: JSON keys are strings, and integer keys are written as text.
pub trait FromKey: Sized {
    fn from_key(key: &str) -> Result<Self, Error>;
}

impl FromKey for String {
    fn from_key(key: &str) -> Result<Self, Error> {
        Ok(key.to_string())
    }
}

macro_rules! integer_key {
    ($($t:ty),*) => {$(
        impl FromKey for $t {
            fn from_key(key: &str) -> Result<Self, Error> {
                key.parse().map_err(|_| Error::custom(format_args!("`{key}` is not an integer key")))
            }
        }
    )*};
}
integer_key!(u32, u64, usize, i64);

fn object_entries<'v, 'a>(value: &'v Value<'a>) -> Result<&'v [(Cow<'a, str>, Value<'a>)], Error> {
    match value {
        Value::Object(members) => Ok(members),
        other => Err(Error::expected("an object", other)),
    }
}

impl<K: FromKey + Ord, V: FromTree> FromTree for BTreeMap<K, V> {
    fn from_tree(value: &Value<'_>) -> Result<Self, Error> {
        object_entries(value)?
            .iter()
            .map(|(k, v)| Ok((K::from_key(k)?, V::from_tree(v).map_err(|e| e.within(k))?)))
            .collect()
    }
}

impl FromTree for serde_json::Value {
    fn from_tree(value: &Value<'_>) -> Result<Self, Error> {
        Ok(match value {
            Value::Null => serde_json::Value::Null,
            Value::Bool(b) => serde_json::Value::Bool(*b),
            Value::Number(text) => serde_json::Value::Number(match number(text)? {
                Number::Unsigned(n) => n.into(),
                Number::Negative(n) => n.into(),
                Number::Float(f) => serde_json::Number::from_f64(f)
                    .ok_or_else(|| Error::custom("number out of range"))?,
            }),
            Value::String(s) => serde_json::Value::String(s.to_string()),
            Value::Array(items) => serde_json::Value::Array(
                items
                    .iter()
                    .map(serde_json::Value::from_tree)
                    .collect::<Result<_, _>>()?,
            ),
            Value::Object(_) => serde_json::Value::Object(serde_json::Map::from_tree(value)?),
        })
    }
}

impl FromTree for serde_json::Map<String, serde_json::Value> {
    fn from_tree(value: &Value<'_>) -> Result<Self, Error> {
        object_entries(value)?
            .iter()
            .map(|(k, v)| Ok((k.to_string(), serde_json::Value::from_tree(v)?)))
            .collect()
    }
}

/// Parses one JSON value, with nothing but whitespace around it.
pub fn parse(text: &str) -> Result<Value<'_>, Error> {
    let mut parser = Parser { text, at: 0 };
    let value = parser.value(0)?;
    parser.skip_whitespace();
    if parser.at < text.len() {
        return Err(parser.error("trailing characters"));
    }
    Ok(value)
}

struct Parser<'a> {
    text: &'a str,
    at: usize,
}

impl<'a> Parser<'a> {
    fn error(&self, what: &str) -> Error {
        Error::custom(format_args!("{what} at byte {}", self.at))
    }

    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.at).copied()
    }

    fn skip_whitespace(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    fn eat(&mut self, byte: u8) -> bool {
        self.skip_whitespace();
        let found = self.peek() == Some(byte);
        if found {
            self.at += 1;
        }
        found
    }

    fn literal(&mut self, word: &str, value: Value<'a>) -> Result<Value<'a>, Error> {
        if self.text[self.at..].starts_with(word) {
            self.at += word.len();
            Ok(value)
        } else {
            Err(self.error("expected a value"))
        }
    }

    fn value(&mut self, depth: usize) -> Result<Value<'a>, Error> {
        self.skip_whitespace();
        match self.peek() {
            Some(b'n') => self.literal("null", Value::Null),
            Some(b't') => self.literal("true", Value::Bool(true)),
            Some(b'f') => self.literal("false", Value::Bool(false)),
            Some(b'"') => self.string().map(Value::String),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(b'[') => {
                let depth = self.nested(depth)?;
                let mut items = Vec::new();
                if !self.eat(b']') {
                    loop {
                        items.push(self.value(depth)?);
                        if self.eat(b']') {
                            break;
                        }
                        if !self.eat(b',') {
                            return Err(self.error("expected `,` or `]`"));
                        }
                    }
                }
                Ok(Value::Array(items))
            }
            Some(b'{') => {
                let depth = self.nested(depth)?;
                let mut members = Vec::new();
                if !self.eat(b'}') {
                    loop {
                        self.skip_whitespace();
                        if self.peek() != Some(b'"') {
                            return Err(self.error("expected a key"));
                        }
                        let key = self.string()?;
                        if !self.eat(b':') {
                            return Err(self.error("expected `:`"));
                        }
                        members.push((key, self.value(depth)?));
                        if self.eat(b'}') {
                            break;
                        }
                        if !self.eat(b',') {
                            return Err(self.error("expected `,` or `}`"));
                        }
                    }
                }
                Ok(Value::Object(members))
            }
            Some(_) => Err(self.error("expected a value")),
            None => Err(self.error("unexpected end")),
        }
    }

    /// Steps over `[` or `{`, counting the level.
    fn nested(&mut self, depth: usize) -> Result<usize, Error> {
        if depth >= MAX_DEPTH {
            return Err(self.error("nested too deeply"));
        }
        self.at += 1;
        Ok(depth + 1)
    }

    fn digits(&mut self) -> usize {
        let start = self.at;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.at += 1;
        }
        self.at - start
    }

    fn number(&mut self) -> Result<Value<'a>, Error> {
        let start = self.at;
        if self.peek() == Some(b'-') {
            self.at += 1;
        }
        let leading_zero = self.peek() == Some(b'0');
        match self.digits() {
            0 => return Err(self.error("expected a digit")),
            n if leading_zero && n > 1 => return Err(self.error("a number with a leading zero")),
            _ => {}
        }
        if self.peek() == Some(b'.') {
            self.at += 1;
            if self.digits() == 0 {
                return Err(self.error("expected a digit after `.`"));
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.at += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.at += 1;
            }
            if self.digits() == 0 {
                return Err(self.error("expected a digit in the exponent"));
            }
        }
        Ok(Value::Number(&self.text[start..self.at]))
    }

    /// Reads a string at `"`; borrows it from the text when it has no escape.
    fn string(&mut self) -> Result<Cow<'a, str>, Error> {
        self.at += 1;
        let start = self.at;
        let bytes = self.text.as_bytes();
        loop {
            match self.peek() {
                None => return Err(self.error("unterminated string")),
                Some(b'"') => {
                    self.at += 1;
                    return Ok(Cow::Borrowed(&self.text[start..self.at - 1]));
                }
                Some(b'\\') => break,
                Some(0..=0x1f) => return Err(self.error("a control character in a string")),
                Some(_) => self.at += 1,
            }
        }
        let mut out = String::from(&self.text[start..self.at]);
        loop {
            let run = self.at;
            while !matches!(bytes.get(self.at), None | Some(b'"' | b'\\' | 0..=0x1f)) {
                self.at += 1;
            }
            out.push_str(&self.text[run..self.at]);
            match self.peek() {
                Some(b'"') => {
                    self.at += 1;
                    return Ok(Cow::Owned(out));
                }
                Some(b'\\') => {
                    self.at += 1;
                    let escaped = match self.peek() {
                        Some(b'"') => '"',
                        Some(b'\\') => '\\',
                        Some(b'/') => '/',
                        Some(b'b') => '\u{8}',
                        Some(b'f') => '\u{c}',
                        Some(b'n') => '\n',
                        Some(b'r') => '\r',
                        Some(b't') => '\t',
                        Some(b'u') => {
                            self.at += 1;
                            out.push(self.unicode_escape()?);
                            continue;
                        }
                        _ => return Err(self.error("an invalid escape")),
                    };
                    self.at += 1;
                    out.push(escaped);
                }
                None => return Err(self.error("unterminated string")),
                Some(_) => return Err(self.error("a control character in a string")),
            }
        }
    }

    fn hex4(&mut self) -> Result<u32, Error> {
        let code = self
            .text
            .get(self.at..self.at + 4)
            .filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))
            .and_then(|h| u32::from_str_radix(h, 16).ok())
            .ok_or_else(|| self.error("an invalid \\u escape"))?;
        self.at += 4;
        Ok(code)
    }

    /// After `\u`: one code point, from a surrogate pair where there is one.
    fn unicode_escape(&mut self) -> Result<char, Error> {
        let first = self.hex4()?;
        let code = match first {
            0xD800..=0xDBFF => {
                if !self.text[self.at..].starts_with("\\u") {
                    return Err(self.error("a lone surrogate"));
                }
                self.at += 2;
                let second = self.hex4()?;
                if !(0xDC00..=0xDFFF).contains(&second) {
                    return Err(self.error("a lone surrogate"));
                }
                0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00)
            }
            0xDC00..=0xDFFF => return Err(self.error("a lone surrogate")),
            code => code,
        };
        char::from_u32(code).ok_or_else(|| self.error("an invalid \\u escape"))
    }
}

/// A number as serde_json reads it: an integer as `u64` (or `i64` when
/// negative), anything else as `f64`.
#[derive(Clone, Copy)]
enum Number {
    Unsigned(u64),
    Negative(i64),
    Float(f64),
}

/// Not generic on purpose: one copy for every type that reads a number.
fn number(text: &str) -> Result<Number, Error> {
    if !text.bytes().any(|b| matches!(b, b'.' | b'e' | b'E')) {
        if text.starts_with('-') {
            match text.parse() {
                // serde_json reads `-0` as the float -0.0
                Ok(0) => return Ok(Number::Float(-0.0)),
                Ok(n) => return Ok(Number::Negative(n)),
                Err(_) => {}
            }
        } else if let Ok(n) = text.parse() {
            return Ok(Number::Unsigned(n));
        }
    }
    match text.parse::<f64>() {
        Ok(f) if f.is_finite() => Ok(Number::Float(f)),
        _ => Err(Error::custom(format_args!("number out of range: {text}"))),
    }
}

#[cfg(test)]
mod tests;
