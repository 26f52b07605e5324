use super::*;
use crate::tree::FromTree;
use proptest::prelude::*;
use serde_json::Value as Json;

/// What this reader makes of `text`, as a serde_json value.
fn ours(text: &str) -> Result<Json, Error> {
    from_str::<Json>(text)
}

/// Why this reader refuses `text` as a `T`.
fn refusal<T: FromTree + std::fmt::Debug>(text: &str) -> String {
    from_str::<T>(text).unwrap_err().to_string()
}

fn theirs(text: &str) -> Option<Json> {
    serde_json::from_str::<Json>(text).ok()
}

#[test]
fn reads_what_serde_json_reads() {
    for text in [
        "null",
        " true ",
        "false",
        "0",
        "-0",
        "12345678901234567890",
        "-9223372036854775808",
        "18446744073709551616",
        "1.5e-5",
        "2.220446049250313e-16",
        "1E+2",
        "0.1",
        "-1.25",
        r#""plain""#,
        r#""esc \" \\ \/ \b \f \n \r \t""#,
        r#""\u00e9 \ud83d\ude00 é 😀""#,
        "[]",
        "[1, [2, [3]], {}]",
        r#"{"a": 1, "b": [true, null], "c": {"d": "e"}}"#,
        "\n\t{ \"k\" : [ ] }\r\n",
    ] {
        assert_eq!(ours(text).ok(), theirs(text), "{text}");
    }
}

#[test]
fn refuses_what_serde_json_refuses() {
    for text in [
        "",
        " ",
        "nul",
        "tru",
        "{",
        "[1,]",
        "[1 2]",
        r#"{"a":1,}"#,
        r#"{"a" 1}"#,
        "{a:1}",
        "01",
        "-",
        "1.",
        ".5",
        "1e",
        "1e+",
        "+1",
        "1e400",
        r#""\x""#,
        "\"\u{1}\"",
        r#""\ud800""#,
        r#""\udc00""#,
        r#""\u12""#,
        r#""open"#,
        "[1] 2",
        "NaN",
    ] {
        assert!(theirs(text).is_none(), "serde_json reads {text:?}");
        assert!(ours(text).is_err(), "{text:?} was read");
    }
}

#[test]
fn nesting_is_limited_like_serde_json() {
    let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
    let limit = (1..200).take_while(|&n| theirs(&deep(n)).is_some()).last();
    assert_eq!(limit, Some(MAX_DEPTH));
    assert!(ours(&deep(MAX_DEPTH)).is_ok());
    let too_deep = deep(MAX_DEPTH + 1);
    assert!(theirs(&too_deep).is_none());
    let error = ours(&too_deep).unwrap_err();
    assert_eq!(error.to_string(), "nested too deeply at byte 127");
}

#[test]
fn errors_name_the_byte() {
    assert_eq!(
        ours(r#"{"a": [1, 2,]}"#).unwrap_err().to_string(),
        "expected a value at byte 12"
    );
}

#[test]
fn strings_without_escapes_are_borrowed() {
    let value = parse(r#"{"plain": "x", "escaped": "a\nb"}"#).unwrap();
    assert!(matches!(
        value.get("plain"),
        Some(Value::String(Cow::Borrowed("x")))
    ));
    assert_eq!(value.get("escaped").and_then(Value::as_str), Some("a\nb"));
    assert!(matches!(
        value.get("escaped"),
        Some(Value::String(Cow::Owned(_)))
    ));
}

#[derive(Debug, PartialEq, serde::Deserialize, serde::Serialize, FromTree)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Shape {
    Unit,
    Newtype(Inner),
    Struct {
        w: f64,
        h: Option<u16>,
    },
    #[serde(rename = "renamed")]
    Other {
        pair: (i64, String),
        corners: [u32; 2],
    },
}

#[derive(Debug, PartialEq, serde::Deserialize, serde::Serialize, FromTree)]
struct Inner {
    x: i32,
}

#[derive(Debug, PartialEq, serde::Deserialize, serde::Serialize, FromTree)]
#[serde(rename_all = "snake_case")]
enum Level {
    Low,
    VeryHigh,
}

#[derive(Debug, PartialEq, serde::Deserialize, serde::Serialize, FromTree)]
#[serde(untagged)]
enum Dim {
    Fixed(i64),
    Named(String),
    Unknown,
}

/// serde's default form: `"Empty"`, `{"Valid": {...}}`, `{"Invalid": [...]}`.
#[derive(Debug, PartialEq, serde::Deserialize, serde::Serialize, FromTree)]
enum External {
    Empty,
    Valid { rows: Vec<u8> },
    Invalid(Vec<String>),
}

#[derive(Debug, PartialEq, serde::Deserialize, serde::Serialize, FromTree)]
#[serde(transparent)]
struct Secret(String);

#[derive(Debug, PartialEq, serde::Deserialize, serde::Serialize, FromTree)]
struct Typed {
    id: u64,
    shapes: Vec<Shape>,
    by_number: std::collections::BTreeMap<u32, String>,
    missing: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    defaulted: Vec<u8>,
    #[serde(rename = "type")]
    kind: Level,
    dims: Vec<Dim>,
    secret: Secret,
    #[serde(flatten)]
    flat: Shape,
    record: serde_json::Value,
    outcomes: Vec<External>,
    answer: Result<u8, String>,
}

fn typed() -> Typed {
    Typed {
        id: u64::MAX,
        shapes: vec![
            Shape::Unit,
            Shape::Newtype(Inner { x: -7 }),
            Shape::Struct { w: 0.1, h: None },
            Shape::Other {
                pair: (-3, "t".into()),
                corners: [1, 2],
            },
        ],
        by_number: [(3, "three".to_string())].into(),
        missing: None,
        defaulted: Vec::new(),
        kind: Level::VeryHigh,
        dims: vec![Dim::Fixed(4), Dim::Named("batch".into()), Dim::Unknown],
        secret: Secret("s".into()),
        flat: Shape::Struct { w: 2.5, h: Some(3) },
        record: serde_json::json!({"a": [1, -2, 0.5, null, "x"], "b": {}}),
        outcomes: vec![
            External::Empty,
            External::Valid { rows: vec![1, 2] },
            External::Invalid(vec!["bad".into()]),
        ],
        answer: Err("no".into()),
    }
}

#[test]
fn decodes_as_serde_derive_does() {
    let typed = typed();
    let text = serde_json::to_string(&typed).unwrap();
    assert_eq!(from_str::<Typed>(&text).unwrap(), typed);
    assert_eq!(serde_json::from_str::<Typed>(&text).unwrap(), typed);
    // Members in another order, and unknown ones, change nothing.
    let mut reordered: serde_json::Map<String, Json> = serde_json::from_str(&text).unwrap();
    reordered.insert("unknown".into(), Json::from(1));
    let mut members: Vec<_> = reordered.into_iter().collect();
    members.reverse();
    let text = format!(
        "{{{}}}",
        members
            .iter()
            .map(|(k, v)| format!("{}:{v}", Json::from(k.as_str())))
            .collect::<Vec<_>>()
            .join(",")
    );
    assert_eq!(from_str::<Typed>(&text).unwrap(), typed);
    assert_eq!(serde_json::from_str::<Typed>(&text).unwrap(), typed);
}

#[test]
fn refuses_what_serde_derive_refuses_and_says_where() {
    let text = serde_json::to_string(&typed()).unwrap();
    for (from, to, says) in [
        (
            r#""kind":"unit""#,
            r#""kind":"square""#,
            "shapes[0]: unknown variant `square` of Shape",
        ),
        ("18446744073709551615", "-1", "id: -1 is negative"),
        (
            r#""type":"very_high""#,
            r#""type":"VeryHigh""#,
            "type: unknown variant `VeryHigh` of Level",
        ),
        (
            r#""corners":[1,2]"#,
            r#""corners":[1]"#,
            "shapes[3].corners: expected an array of 2, found 1",
        ),
        (
            r#""x":-7"#,
            r#""x":-7.5"#,
            "shapes[1].x: expected an integer, found -7.5",
        ),
        (r#""h":3"#, r#""h":70000"#, "h: 70000 is out of range"),
        (
            r#""secret":"s""#,
            r#""secret":null"#,
            "secret: expected a string, found null",
        ),
        (r#""id":18446744073709551615,"#, "", "missing field `id`"),
        (
            r#""Empty""#,
            r#""Full""#,
            "outcomes[0]: unknown variant `Full` of External",
        ),
        (
            r#"{"Err":"no"}"#,
            r#"{"Err":1}"#,
            "answer.Err: expected a string, found a number",
        ),
    ] {
        assert!(text.contains(from), "{from}");
        let wrong = text.replacen(from, to, 1);
        assert!(
            serde_json::from_str::<Typed>(&wrong).is_err(),
            "serde reads {wrong}"
        );
        assert_eq!(refusal::<Typed>(&wrong), says);
    }
}

#[test]
fn integers_out_of_their_type_s_range_are_refused() {
    for (text, says) in [
        ("9223372036854775808", "9223372036854775808 is out of range"),
        (
            "-9223372036854775809",
            "expected an integer, found -9223372036854775809",
        ),
    ] {
        assert!(serde_json::from_str::<i64>(text).is_err());
        assert_eq!(refusal::<i64>(text), says);
    }
    assert_eq!(from_str::<i64>("9223372036854775807").unwrap(), i64::MAX);
    assert_eq!(from_str::<i64>("-9223372036854775808").unwrap(), i64::MIN);
    assert_eq!(from_str::<u8>("255").unwrap(), 255);
    assert!(serde_json::from_str::<u8>("256").is_err());
    assert_eq!(refusal::<u8>("256"), "256 is out of range");
    assert_eq!(refusal::<i32>("-2147483649"), "-2147483649 is out of range");
}

#[test]
fn a_missing_tag_or_a_wrong_kind_of_value_is_named() {
    assert_eq!(refusal::<Shape>(r#"{"w": 1}"#), "missing field `kind`");
    assert_eq!(
        refusal::<Typed>("[1]"),
        "expected an object (Typed), found an array"
    );
    assert_eq!(
        refusal::<Dim>("[]"),
        "data did not match any variant of untagged enum Dim"
    );
}

fn json_value() -> impl Strategy<Value = Json> {
    let leaf = prop_oneof![
        Just(Json::Null),
        any::<bool>().prop_map(Json::Bool),
        any::<u64>().prop_map(Json::from),
        any::<i64>().prop_map(Json::from),
        any::<f64>()
            .prop_filter("JSON has no NaN or infinity", |f| f.is_finite())
            .prop_map(Json::from),
        any::<String>().prop_map(Json::String),
    ];
    leaf.prop_recursive(4, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Json::Array),
            prop::collection::vec((any::<String>(), inner), 0..8)
                .prop_map(|members| Json::Object(members.into_iter().collect())),
        ]
    })
}

proptest! {
    /// Any document serde_json writes reads back the same, numbers exactly.
    #[test]
    fn reads_back_what_serde_json_writes(value in json_value(), pretty in any::<bool>()) {
        let text = if pretty {
            serde_json::to_string_pretty(&value).unwrap()
        } else {
            serde_json::to_string(&value).unwrap()
        };
        prop_assert_eq!(ours(&text).unwrap(), value);
    }

    /// On any text, this reader and serde_json agree on whether it is JSON,
    /// and on what it says when it is.
    #[test]
    fn agrees_with_serde_json_on_any_text(text in "[ \\[\\]{}:,\"\\\\a-f0-9.eE+-]{0,24}|(null|true|false|-?[0-9]{1,3}(\\.[0-9]{0,2})?)") {
        prop_assert_eq!(ours(&text).ok(), theirs(&text));
    }
}
