//! The JSON reader: one value with nothing but whitespace around it, as
//! serde_json reads it (RFC 8259, nesting up to [`MAX_DEPTH`] levels).

use std::borrow::Cow;

use super::{Error, Value, MAX_DEPTH};

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
pub(super) enum Number {
    Unsigned(u64),
    Negative(i64),
    Float(f64),
}

/// Not generic on purpose: one copy for every type that reads a number.
pub(super) fn number(text: &str) -> Result<Number, Error> {
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
