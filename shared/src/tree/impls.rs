//! [`FromTree`] for the standard types the shared types are made of:
//! numbers (range-checked as serde does), strings, options, boxes,
//! sequences, arrays, pairs, maps and `serde_json::Value`.

use std::borrow::Cow;
use std::collections::BTreeMap;

use super::{external_variant, number, Error, FromTree, Number, Value};

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
