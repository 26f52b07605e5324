//! The fast path against serde-saphyr: wherever it answers, it answers the
//! same tree; and it does answer for the files people submit.

use super::*;
use proptest::prelude::*;

const DOCS: usize = 4;

fn fast(text: &str) -> Option<Vec<Node>> {
    fast::documents(text, &budget(DOCS))
}

/// The fast path either declines or agrees with serde-saphyr.
fn agrees(text: &str) -> bool {
    if let Err(disagreement) = fast_path_agrees(text, DOCS) {
        panic!("{disagreement}");
    }
    true
}

#[test]
fn typical_workload_files_take_the_fast_path_and_agree() {
    let mut generated = String::from("target: {kind: llvm, num-cores: 2}\ntrials: 1\nworkloads:\n");
    for i in 0..50 {
        generated.push_str(&format!(
            "  - {{name: r1j{i}, op: matmul, shape: {{m: {}, n: 7, k: 8}}}}\n",
            i + 1
        ));
    }
    let block = "# a comment\ntarget:\n  kind: llvm\n  mcpu: skylake-avx512\n  num-cores: -1\n\
                 trials: 64\ndtype: float16\nworkloads:\n  - name: 'conv 3x3'\n    op: conv2d\n    \
                 shape: {n: 1, c: 64, h: 56, w: 56, k: 64, r: 3, s: 3, stride: 1, pad: 1}\n  \
                 - name: \"dense \\u00e9\"\n    op: dense\n    shape: [1, 2, 3]\n    \
                 note: |\n      two\n      lines\n---\nworkloads: []\n";
    for text in [
        generated.as_str(),
        block,
        include_str!("../../../examples/workloads.yaml"),
        include_str!("../../../examples/flow-style.yaml"),
    ] {
        assert!(fast(text).is_some(), "fast path declined:\n{text}");
        assert!(agrees(text));
    }
}

#[test]
fn declines_what_it_does_not_know() {
    for text in [
        "a: &x 1\nb: *x\n",
        "a: !!str 5\n",
        "base: &b {m: 1}\nmore:\n  <<: *b\n  n: 2\n",
        "a: 1\na: 2\n",
        "a: 1\n'a': 2\n",
        "11: x\n'11': y\n",
        "a: 1e3\n",
        "a: 1.\n",
        "a: .inf\n",
        "a: null\n",
        "a: ~\n",
        "a:\n",
        "a: True\n",
        "a: 0x10\n",
        "a: 010\n",
        "a: +5\n",
        "a: 1_000\n",
        "a: 18446744073709551616\n",
        "? [a, b]\n: c\n",
        "",
        "# only a comment\n",
        "a: [1, 2\n",
        "a: b: c\n",
    ] {
        assert!(fast(text).is_none(), "fast path took:\n{text}");
        agrees(text);
    }
}

#[test]
fn positions_match_serde_saphyr() {
    for text in [
        "a: 1\nb:\n  - x\n  - {c: 2, d: [3, 4]}\n",
        "- a\n-   b\n- - c\n  - d\n",
        "\n\n  k:   'v'\n  l: \"w\"\n",
        "é: ü\nname: \"μs\"\nμ: [ä, {ö: ü}]\n",
        "---\na: 1\n---\n- 2\n",
        "a: |\n  x\n  y\nb: >\n  z\n",
    ] {
        assert!(fast(text).is_some(), "fast path declined:\n{text}");
        assert!(agrees(text));
    }
}

#[test]
fn a_large_mapping_is_left_to_serde_saphyr() {
    let keys = |n: usize| (0..n).map(|i| format!("k{i}: {i}\n")).collect::<String>();
    assert!(fast(&keys(fast::MAX_FAST_MAP_ENTRIES)).is_some());
    assert!(fast(&keys(fast::MAX_FAST_MAP_ENTRIES + 1)).is_none());
    // A hostile file of many keys costs a scan of at most that many per key
    // (a quadratic check would not finish this).
    assert!(fast(&keys(200_000)).is_none());
}

#[test]
fn deep_nesting_is_declined_not_overflowed() {
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    assert!(fast(&deep).is_none());
    let block: String = (0..200)
        .map(|i| format!("{}k{i}:\n", "  ".repeat(i)))
        .collect();
    assert!(fast(&block).is_none());
    // Half the depth limit is the fast path's: serde-saphyr judges the rest.
    let nested = |depth: usize| format!("{}1{}\n", "[".repeat(depth), "]".repeat(depth));
    assert!(fast(&nested(MAX_YAML_DEPTH / 2)).is_some());
    assert!(agrees(&nested(MAX_YAML_DEPTH / 2)));
    assert!(fast(&nested(MAX_YAML_DEPTH / 2 + 1)).is_none());
}

/// Scalars the fast path reads.
const PLAIN: &[&str] = &[
    "8",
    "0",
    "-0",
    "-5",
    "true",
    "false",
    "r1j1",
    "matmul",
    "llvm -mcpu=x",
    "a b",
    "'q'",
    "\"d\"",
    "\"11\"",
    "'true'",
    "inf",
    "nan",
    "NaN",
    "yes",
    "no",
    "n",
    "y",
    "on",
    "off",
    "é",
    "x:y",
    "18446744073709551615",
    "-9223372036854775808",
    "|\n  block\n",
];
/// Scalars where YAML's typing is subtle, which it leaves to serde-saphyr.
const SUBTLE: &[&str] = &[
    "08",
    "+5",
    "1_000",
    "0x1f",
    "0o7",
    "1.5",
    "1e3",
    ".5",
    ".inf",
    "-.inf",
    ".nan",
    "null",
    "Null",
    "~",
    "True",
    "FALSE",
    "18446744073709551616",
    "-9223372036854775809",
    "&a 1",
    "*a",
    "!!str 5",
    "2024-01-01",
    "1:20",
];
const KEYS: &[&str] = &["a", "b", "c", "d", "e", "f", "n", "11", "y"];
const SUBTLE_KEYS: &[&str] = &["'11'", "\"a\"", "<<", "true", "null", "1.5", "? x"];

fn scalar() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => prop::sample::select(PLAIN).prop_map(str::to_owned),
        1 => prop::sample::select(SUBTLE).prop_map(str::to_owned),
    ]
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        12 => prop::sample::select(KEYS).prop_map(str::to_owned),
        1 => prop::sample::select(SUBTLE_KEYS).prop_map(str::to_owned),
    ]
}

/// A flow value: a scalar, `[..]` or `{..}`.
fn flow() -> impl Strategy<Value = String> {
    scalar().prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(|v| format!("[{}]", v.join(", "))),
            prop::collection::vec((key(), inner), 0..4).prop_map(|v| {
                let entries: Vec<String> = v.iter().map(|(k, v)| format!("{k}: {v}")).collect();
                format!("{{{}}}", entries.join(", "))
            }),
        ]
    })
}

/// A block mapping of flow values and nested block mappings and lists.
fn block(indent: usize) -> BoxedStrategy<String> {
    let pad = " ".repeat(indent);
    let leaf = (key(), flow()).prop_map({
        let pad = pad.clone();
        move |(k, v)| format!("{pad}{k}: {v}\n")
    });
    if indent >= 6 {
        return prop::collection::vec(leaf, 1..4)
            .prop_map(|v| v.concat())
            .boxed();
    }
    let nested_map = (key(), block(indent + 2)).prop_map({
        let pad = pad.clone();
        move |(k, body)| format!("{pad}{k}:\n{body}")
    });
    let list = (key(), prop::collection::vec(flow(), 1..3)).prop_map({
        let pad = pad.clone();
        move |(k, items)| {
            let items: String = items.iter().map(|i| format!("{pad}  - {i}\n")).collect();
            format!("{pad}{k}:\n{items}")
        }
    });
    prop::collection::vec(prop_oneof![3 => leaf, 1 => nested_map, 1 => list], 1..5)
        .prop_map(|v| v.concat())
        .boxed()
}

fn document() -> impl Strategy<Value = String> {
    prop::collection::vec(block(0), 1..3).prop_map(|docs| docs.join("---\n"))
}

/// Guards the generator: were the fast path never taken, the property
/// below would hold trivially.
#[test]
fn generated_documents_often_take_the_fast_path() {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = document();
    let taken = (0..400)
        .filter(|_| {
            let text = strategy.new_tree(&mut runner).map(|t| t.current());
            text.is_ok_and(|text| fast(&text).is_some())
        })
        .count();
    assert!(
        taken >= 40,
        "only {taken} of 400 generated documents took the fast path"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn fast_path_never_disagrees(text in document()) {
        let same = agrees(&text);
        prop_assert!(same);
    }

    #[test]
    fn fast_path_never_disagrees_on_flow(value in flow()) {
        let (in_map, in_list) = (format!("v: {value}\n"), format!("- {value}\n"));
        prop_assert!(agrees(&in_map));
        prop_assert!(agrees(&in_list));
    }
}
