use super::*;
use proptest::prelude::*;
use serde_json::Value as Json;

/// What this reader makes of `text`, as a serde_json value.
fn ours(text: &str) -> Result<Json, Error> {
    from_str::<Json>(text)
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

#[derive(Debug, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
enum Shape {
    Unit,
    Newtype(u32),
    Tuple(i8, String),
    Struct { w: f64, h: Option<u16> },
}

#[derive(Debug, PartialEq, serde::Deserialize, serde::Serialize)]
struct Typed {
    id: u64,
    shapes: Vec<Shape>,
    by_number: std::collections::BTreeMap<u32, String>,
    missing: Option<String>,
}

#[test]
fn decodes_enums_and_numeric_keys_as_serde_json_does() {
    let typed = Typed {
        id: u64::MAX,
        shapes: vec![
            Shape::Unit,
            Shape::Newtype(7),
            Shape::Tuple(-3, "t".into()),
            Shape::Struct { w: 0.1, h: None },
        ],
        by_number: [(3, "three".to_string())].into(),
        missing: None,
    };
    let text = serde_json::to_string(&typed).unwrap();
    assert_eq!(from_str::<Typed>(&text).unwrap(), typed);
    let wrong = text.replace("\"unit\"", "\"square\"");
    assert!(serde_json::from_str::<Typed>(&wrong).is_err());
    let error = from_str::<Typed>(&wrong).unwrap_err().to_string();
    assert!(error.contains("unknown variant `square`"), "{error}");
    let negative = text.replace("18446744073709551615", "-1");
    assert!(from_str::<Typed>(&negative).is_err());
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
