use super::*;

const GOOD: &str = "target: {kind: llvm}\nworkloads:\n  - name: mm64\n    op: matmul\n    shape: {m: 64, n: 64, k: 64}\n  - name: mm32\n    op: matmul\n    shape: {m: 32, n: 32, k: 32}\n";

#[test]
fn known_jobs_are_marked_as_duplicates() {
    let Checked::Valid { rows, .. } = check(GOOD, "good.yaml", &HashSet::new()) else {
        panic!()
    };
    assert!(rows.iter().all(|r| !r.known));
    let known: HashSet<&str> = [rows[1].job_id.as_str()].into();
    let Checked::Valid { rows, .. } = check(GOOD, "good.yaml", &known) else {
        panic!()
    };
    assert_eq!(
        rows.iter().map(|r| r.known).collect::<Vec<_>>(),
        [false, true]
    );
}

fn checked_rows(state: &UploadState) -> Vec<&str> {
    match &*state.checked {
        Checked::Valid { rows, .. } => rows.iter().map(|r| r.name.as_str()).collect(),
        _ => Vec::new(),
    }
}

/// What the page does with the checker's answer, here without the checker.
fn answer(state: &mut UploadState) {
    assert_eq!(state.to_check, Some(ToCheck::Workloads));
    let checked = check(&state.text, &state.name, &HashSet::new());
    state.apply(UploadAction::Checked {
        generation: state.generation,
        checked,
    });
}

#[test]
fn typing_asks_the_checker_and_a_late_answer_for_older_text_is_dropped() {
    let mut state = UploadState::default();
    state.apply(UploadAction::Typed(GOOD.into()));
    assert!(state.checking());
    let old = state.generation;
    // The user clears the box and types again before the checker answers.
    state.apply(UploadAction::Clear);
    state.apply(UploadAction::Typed("target: {kind: llvm}\n".into()));
    state.apply(UploadAction::Checked {
        generation: old,
        checked: check(GOOD, PASTED, &HashSet::new()),
    });
    assert!(state.checking(), "the late answer does not count");
    assert!(checked_rows(&state).is_empty());
    // Blank text needs no checker.
    state.apply(UploadAction::Typed("  \n".into()));
    assert!(!state.checking());
    assert_eq!(*state.checked, Checked::Empty);
}

#[test]
fn an_accepted_file_leaves_the_box_and_a_refused_one_stays() {
    let mut state = UploadState::default();
    state.apply(UploadAction::FileRead {
        name: "good.yaml".into(),
        text: GOOD.into(),
    });
    answer(&mut state);
    assert_eq!(checked_rows(&state), ["mm64", "mm32"]);
    state.apply(UploadAction::Answered(SubmitOutcome::Rejected("no".into())));
    assert_eq!(state.text, GOOD);
    assert_eq!(state.name, "good.yaml");
    state.apply(UploadAction::Submitting);
    assert_eq!(state.outcome, None);
    let accepted = SubmitOutcome::Accepted {
        summary: "2 new jobs, 0 duplicates skipped".into(),
        new_names: vec!["mm64".into(), "mm32".into()],
        duplicate_names: vec![],
    };
    state.apply(UploadAction::Answered(accepted.clone()));
    assert_eq!(state.text, "");
    assert_eq!(*state.checked, Checked::Empty);
    assert_eq!(state.outcome, Some(accepted));
    // The outcome stays until the box changes.
    state.apply(UploadAction::Typed("x".into()));
    assert_eq!(state.outcome, None);
}

#[test]
fn a_big_file_is_checked_but_not_shown_in_the_text_area() {
    let mut state = UploadState::default();
    let mut text = GOOD.to_string();
    text.push_str(&format!("# {}\n", "x".repeat(MAX_EDITABLE_BYTES)));
    state.apply(UploadAction::FileRead {
        name: "big.yaml".into(),
        text: text.clone(),
    });
    assert_eq!(state.hidden_bytes, Some(text.len()));
    answer(&mut state);
    assert_eq!(checked_rows(&state), ["mm64", "mm32"]);
}

#[test]
fn a_model_replaces_the_yaml_once_the_checker_has_read_it() {
    let mut state = UploadState::default();
    state.apply(UploadAction::Typed(GOOD.into()));
    state.apply(UploadAction::ModelRead {
        name: "net.onnx".into(),
        bytes: vec![1, 2, 3],
    });
    let generation = state.generation;
    assert!(matches!(&state.to_check, Some(ToCheck::Model { name, .. }) if name == "net.onnx"));
    assert_eq!(state.text, GOOD, "the text stays while the model is read");
    state.apply(UploadAction::ModelChecked {
        generation,
        name: "net.onnx".into(),
        size: 3,
        loaded: Box::new(Err("net.onnx: not an ONNX model".into())),
    });
    assert!(!state.checking());
    assert_eq!(state.text, "");
    let model = state.model.as_ref().expect("the model is shown");
    assert_eq!(model.form.name, "net");
    assert!(
        model.check(&Fleet::default()).is_none(),
        "nothing to check in a bad file"
    );
    state.apply(UploadAction::ModelName("other".into()));
    assert_eq!(
        state.model.as_ref().map(|m| m.form.name.as_str()),
        Some("other")
    );
}

#[test]
fn an_answer_is_told_in_the_files_names() {
    let checked = check(GOOD, "good.yaml", &HashSet::new());
    let Checked::Valid { rows, .. } = &checked else {
        panic!()
    };
    let report = tunefleet_shared::protocol::SubmitReport {
        new_jobs: vec![rows[0].job_id.clone()],
        duplicates: vec!["0123456789abcdef".into()],
        ..Default::default()
    };
    let outcome = SubmitOutcome::of(&SubmitAnswer::Accepted(report), &checked, &Fleet::default());
    let SubmitOutcome::Accepted {
        new_names,
        duplicate_names,
        ..
    } = outcome
    else {
        panic!("{outcome:?}")
    };
    assert_eq!(new_names, ["mm64"]);
    assert_eq!(
        duplicate_names,
        ["01234567"],
        "unknown jobs by their short id"
    );
}
