use super::*;

fn model(id: &str, samples: u32) -> CostModel {
    CostModel {
        id: id.into(),
        samples,
        tvm_version: Some("0.27.0.post1".into()),
        data_b64: format!("bytes of {id}"),
        updated_at: Millis(1),
    }
}

fn returned(id: &str, samples: u32, base: Option<&str>, used: bool) -> Returned {
    Returned {
        model: model(id, samples),
        base: base.map(str::to_string),
        used,
    }
}

fn key() -> CostModelKey {
    let job = Target::of_kind("llvm");
    let worker: Target =
        serde_json::from_str(r#"{"kind":"llvm","mcpu":"znver5","num-cores":2}"#).unwrap();
    CostModelKey::of(&job, &worker, Some("0.27.0.post1"))
}

#[test]
fn the_key_is_the_effective_target_and_the_tvm_release() {
    let k = key();
    assert_eq!(k.target, r#"{"kind":"llvm","mcpu":"znver5","num-cores":2}"#);
    assert_eq!(k.tvm, "0.27");
    let pinned: Target = serde_json::from_str(r#"{"kind":"llvm","mcpu":"skylake"}"#).unwrap();
    let worker: Target =
        serde_json::from_str(r#"{"kind":"llvm","mcpu":"znver5","num-cores":2}"#).unwrap();
    assert_eq!(
        CostModelKey::of(&pinned, &worker, Some("0.27.0")).target,
        r#"{"kind":"llvm","mcpu":"skylake","num-cores":2}"#,
        "what the job pins wins"
    );
    assert_ne!(CostModelKey::of(&pinned, &worker, Some("0.28.0")), k);
}

#[test]
fn a_round_that_extends_the_held_model_replaces_it() {
    let mut models = CostModels::default();
    assert_eq!(
        models.offer(key(), returned("a", 16, None, false)),
        Verdict::First
    );
    assert_eq!(
        models.offer(key(), returned("b", 32, Some("a"), true)),
        Verdict::Extends
    );
    assert_eq!(models.get(&key()).unwrap().id, "b");
    let share = models.share(&key());
    assert_eq!(share.model.unwrap().data_b64, "bytes of b");
}

#[test]
fn parallel_rounds_keep_the_one_that_knows_more() {
    let mut models = CostModels::default();
    models.offer(key(), returned("a", 100, None, false));
    // Three rounds start from `a`; the first back wins, the rest are older
    // unless they hold as many samples.
    assert!(models
        .offer(key(), returned("b", 116, Some("a"), true))
        .kept());
    assert_eq!(
        models.offer(key(), returned("c", 108, Some("a"), true)),
        Verdict::Older
    );
    assert_eq!(
        models.offer(key(), returned("d", 116, Some("a"), true)),
        Verdict::AsLarge,
        "at the cap every model holds as many samples: the newest wins"
    );
    assert_eq!(models.get(&key()).unwrap().id, "d");
}

#[test]
fn a_held_model_no_round_can_read_is_replaced() {
    let mut models = CostModels::default();
    models.offer(key(), returned("a", 2048, None, false));
    assert_eq!(
        models.offer(key(), returned("b", 16, Some("a"), false)),
        Verdict::HeldUnreadable
    );
    assert_eq!(models.get(&key()).unwrap().id, "b");
}

#[test]
fn an_empty_share_when_the_fleet_has_no_model() {
    let models = CostModels::restore([(key(), model("a", 1))]);
    let other = CostModelKey::effective(&Target::of_kind("cuda"), Some("0.27.0"));
    assert_eq!(models.share(&other), CostModelShare::default());
    assert_eq!(models.len(), 1);
}
