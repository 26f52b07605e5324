//! The page's JSON reader: text → a small tree ([`Value`]) → the shared
//! types, through serde's derived `Deserialize` impls.
//!
//! Why not serde_json: its reader parses straight into each type, so every
//! type the page reads (~40 of them: job views, workers, model runs,
//! snapshots) gets its own copy of the parser's code for structs, maps,
//! strings and numbers. In the page's module that was ~190 KB of ~880 KB
//! (docs/benchmarks.md, "Web dashboard"). Here the text is parsed once, by
//! code that is not generic, and each type's decoding is only a dispatch on
//! an already parsed node. The wire is the protocol's, unchanged; the tests
//! (here and in `wire`) check this reader against serde_json on every
//! message kind.
//!
//! It reads what serde_json reads (RFC 8259, nesting up to 127 levels) and
//! hands numbers to the visitors the way serde_json does: an integer as
//! `u64` (or `i64` when negative), anything else as `f64`.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeSeed, Visitor};
use serde::Deserialize;

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
    /// Members in the order they came; a repeated key is kept twice, and
    /// the derived decoders report it as a duplicate field, as with
    /// serde_json.
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

    /// Takes the member `key` out of an object, leaving `null`.
    pub fn take(&mut self, key: &str) -> Option<Value<'a>> {
        match self {
            Value::Object(members) => members
                .iter_mut()
                .find(|(k, _)| k == key)
                .map(|(_, v)| std::mem::replace(v, Value::Null)),
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
}

/// Why a text could not be read, or a value not decoded.
#[derive(Clone, Debug, PartialEq)]
pub struct Error(String);

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

impl de::Error for Error {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Error(msg.to_string())
    }
}

/// Parses `text` and decodes a `T` from it.
pub fn from_str<'a, T: Deserialize<'a>>(text: &'a str) -> Result<T, Error> {
    T::deserialize(parse(text)?)
}

/// Decodes a `T` from a parsed value.
pub fn from_value<'a, T: Deserialize<'a>>(value: Value<'a>) -> Result<T, Error> {
    T::deserialize(value)
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
        Error(format!("{what} at byte {}", self.at))
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

/// A number as serde_json hands it to a visitor.
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
        _ => Err(Error(format!("number out of range: {text}"))),
    }
}

fn unexpected<'v>(value: &'v Value<'_>) -> de::Unexpected<'v> {
    match value {
        Value::Null => de::Unexpected::Unit,
        Value::Bool(b) => de::Unexpected::Bool(*b),
        Value::Number(_) => de::Unexpected::Other("number"),
        Value::String(s) => de::Unexpected::Str(s),
        Value::Array(_) => de::Unexpected::Seq,
        Value::Object(_) => de::Unexpected::Map,
    }
}

impl<'de> Value<'de> {
    /// The error for a value of the wrong kind: one copy, not one per type.
    fn wrong(&self, expected: &dyn de::Expected) -> Error {
        de::Error::invalid_type(unexpected(self), expected)
    }

    fn visit_number<V: Visitor<'de>>(text: &str, visitor: V) -> Result<V::Value, Error> {
        match number(text)? {
            Number::Unsigned(n) => visitor.visit_u64(n),
            Number::Negative(n) => visitor.visit_i64(n),
            Number::Float(f) => visitor.visit_f64(f),
        }
    }

    /// A string borrowed from the frame where it had no escape.
    fn visit_text<V: Visitor<'de>>(text: Cow<'de, str>, visitor: V) -> Result<V::Value, Error> {
        match text {
            Cow::Borrowed(s) => visitor.visit_borrowed_str(s),
            Cow::Owned(s) => visitor.visit_string(s),
        }
    }

    fn visit_array<V: Visitor<'de>>(items: Vec<Value<'de>>, visitor: V) -> Result<V::Value, Error> {
        let count = items.len();
        let mut seq = Seq(items.into_iter());
        let value = visitor.visit_seq(&mut seq)?;
        match seq.0.len() {
            0 => Ok(value),
            left => Err(de::Error::invalid_length(count - left, &"fewer elements")),
        }
    }

    fn visit_object<V: Visitor<'de>>(
        members: Vec<(Cow<'de, str>, Value<'de>)>,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_map(Map {
            members: members.into_iter(),
            value: None,
        })
    }
}

/// Each `deserialize_*` that a type asks for calls only the visits that its
/// kind of value can give. Forwarding them all to `deserialize_any`, as
/// self-describing formats may, would compile every visit (and its error
/// path) for every type: twice the code, for decoders that never see it.
impl<'de> de::Deserializer<'de> for Value<'de> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self {
            Value::Null => visitor.visit_unit(),
            Value::Bool(b) => visitor.visit_bool(b),
            Value::Number(text) => Self::visit_number(text, visitor),
            Value::String(text) => Self::visit_text(text, visitor),
            Value::Array(items) => Self::visit_array(items, visitor),
            Value::Object(members) => Self::visit_object(members, visitor),
        }
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self {
            Value::Bool(b) => visitor.visit_bool(b),
            other => Err(other.wrong(&visitor)),
        }
    }

    fn deserialize_u64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self {
            Value::Number(text) => Self::visit_number(text, visitor),
            other => Err(other.wrong(&visitor)),
        }
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self {
            Value::String(text) => Self::visit_text(text, visitor),
            other => Err(other.wrong(&visitor)),
        }
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_str(visitor)
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_str(visitor)
    }

    fn deserialize_char<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_str(visitor)
    }

    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self {
            Value::Null => visitor.visit_unit(),
            other => Err(other.wrong(&visitor)),
        }
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_unit(visitor)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self {
            Value::Array(items) => Self::visit_array(items, visitor),
            other => Err(other.wrong(&visitor)),
        }
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self {
            Value::Object(members) => Self::visit_object(members, visitor),
            other => Err(other.wrong(&visitor)),
        }
    }

    /// An object only. serde_json also takes a struct written as an array of
    /// its fields; no message is, and reading them would compile a second
    /// decoder for every struct.
    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_map(visitor)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self {
            Value::Null => visitor.visit_none(),
            value => visitor.visit_some(value),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match self {
            Value::String(name) => visitor.visit_enum(Variant { name, value: None }),
            Value::Object(members) if members.len() == 1 => {
                let mut members = members.into_iter();
                match members.next() {
                    Some((name, value)) => visitor.visit_enum(Variant {
                        name,
                        value: Some(value),
                    }),
                    None => Err(de::Error::invalid_length(0, &"one member")),
                }
            }
            other => Err(other.wrong(&visitor)),
        }
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_unit()
    }

    serde::forward_to_deserialize_any! {
        i8 i16 i32 i64 i128 u8 u16 u32 u128 f32 f64 bytes byte_buf
    }
}

struct Seq<'de>(std::vec::IntoIter<Value<'de>>);

impl<'de> de::SeqAccess<'de> for Seq<'de> {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Error> {
        self.0
            .next()
            .map(|value| seed.deserialize(value))
            .transpose()
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.0.len())
    }
}

struct Map<'de> {
    members: std::vec::IntoIter<(Cow<'de, str>, Value<'de>)>,
    value: Option<Value<'de>>,
}

impl<'de> de::MapAccess<'de> for Map<'de> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        match self.members.next() {
            Some((key, value)) => {
                self.value = Some(value);
                seed.deserialize(Key(key)).map(Some)
            }
            None => Ok(None),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        match self.value.take() {
            Some(value) => seed.deserialize(value),
            None => Err(Error("a value asked for before its key".into())),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.members.len())
    }
}

/// An object's key. A map keyed by numbers reads them from the key's text,
/// as serde_json does.
struct Key<'de>(Cow<'de, str>);

impl<'de> de::Deserializer<'de> for Key<'de> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        Value::visit_text(self.0, visitor)
    }

    fn deserialize_u64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0.parse() {
            Ok(n) => visitor.visit_u64(n),
            Err(_) => Err(de::Error::invalid_type(
                de::Unexpected::Str(&self.0),
                &visitor,
            )),
        }
    }

    fn deserialize_u32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_u64(visitor)
    }

    fn deserialize_i64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0.parse() {
            Ok(n) => visitor.visit_i64(n),
            Err(_) => Err(de::Error::invalid_type(
                de::Unexpected::Str(&self.0),
                &visitor,
            )),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_enum(Variant {
            name: self.0,
            value: None,
        })
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i128 u8 u16 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct seq tuple tuple_struct map struct
        identifier ignored_any
    }
}

/// An enum's variant: a bare string (a unit variant) or the one member of
/// an object (`{"variant": value}`), serde's external tagging.
struct Variant<'de> {
    name: Cow<'de, str>,
    value: Option<Value<'de>>,
}

impl<'de> de::EnumAccess<'de> for Variant<'de> {
    type Error = Error;
    type Variant = VariantValue<'de>;

    fn variant_seed<T: DeserializeSeed<'de>>(
        self,
        seed: T,
    ) -> Result<(T::Value, Self::Variant), Error> {
        let variant = seed.deserialize(Value::String(self.name))?;
        Ok((variant, VariantValue(self.value)))
    }
}

struct VariantValue<'de>(Option<Value<'de>>);

impl<'de> VariantValue<'de> {
    fn value(self, expected: &str) -> Result<Value<'de>, Error> {
        self.0
            .ok_or_else(|| de::Error::invalid_type(de::Unexpected::UnitVariant, &expected))
    }
}

impl<'de> de::VariantAccess<'de> for VariantValue<'de> {
    type Error = Error;

    fn unit_variant(self) -> Result<(), Error> {
        match self.0 {
            None | Some(Value::Null) => Ok(()),
            Some(other) => Err(de::Error::invalid_type(unexpected(&other), &"unit variant")),
        }
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, Error> {
        seed.deserialize(self.value("newtype variant")?)
    }

    fn tuple_variant<V: Visitor<'de>>(self, _len: usize, visitor: V) -> Result<V::Value, Error> {
        de::Deserializer::deserialize_any(self.value("tuple variant")?, visitor)
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        de::Deserializer::deserialize_any(self.value("struct variant")?, visitor)
    }
}

#[cfg(test)]
mod tests;
