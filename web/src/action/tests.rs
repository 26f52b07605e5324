use proptest::prelude::*;

use super::*;

fn round_trip(click: Click<'_>) {
    let written = click.to_string();
    assert_eq!(Click::parse(&written), Some(click), "{written}");
}

#[test]
fn every_click_reads_back_as_written() {
    for click in [
        Click::ToggleTheme,
        Click::SignOut,
        Click::Reconnect,
        Click::DismissNotice(0),
        Click::DismissNotice(u64::MAX),
        Click::ClearUpload,
        Click::Submit,
        Click::SubmitModel,
        Click::ShowMore,
        Click::Select("0123abcd"),
        Click::CloseDetail,
        // A model run's name may hold the separator itself.
        Click::Model("resnet:v2 \"big\""),
        Click::Model(""),
        Click::CloseModel,
        Click::Cancel("f00d"),
        Click::Retry("beef"),
    ] {
        round_trip(click);
    }
    for filter in StateFilter::ALL {
        round_trip(Click::Filter(filter));
    }
    for (key, _) in SORT_NAMES {
        round_trip(Click::Sort(key));
    }
    for (what, _) in Download::NAMES {
        round_trip(Click::Download(what));
    }
}

#[test]
fn every_field_reads_back_as_written() {
    for field in [
        TextField::Token,
        TextField::UploadText,
        TextField::Search,
        TextField::ModelName,
        TextField::ModelTrials,
        TextField::Shape("data_0"),
        TextField::Shape("in:put"),
    ] {
        let written = field.to_string();
        assert_eq!(TextField::parse(&written), Some(field), "{written}");
    }
}

#[test]
fn values_the_page_never_writes_are_refused() {
    for value in [
        "",
        "nope",
        "dismiss",
        "dismiss:x",
        "filter:",
        "filter:paused",
        "sort:colour",
        "download:pdf",
    ] {
        assert_eq!(Click::parse(value), None, "{value}");
    }
    for value in ["", "shape", "token:x", "search:"] {
        assert_eq!(TextField::parse(value), None, "{value}");
    }
}

/// The views write these attributes only through `Html::click` and
/// `Html::field`, so that every one of them is a value read back above.
#[test]
fn the_views_write_no_action_by_hand() {
    for (file, source) in [
        ("view/mod.rs", include_str!("../app/view/mod.rs")),
        ("view/upload.rs", include_str!("../app/view/upload.rs")),
        ("view/fleet.rs", include_str!("../app/view/fleet.rs")),
        ("view/detail.rs", include_str!("../app/view/detail.rs")),
    ] {
        for attribute in [
            "data-click=",
            "data-field=",
            "\"data-click\"",
            "\"data-field\"",
        ] {
            assert!(
                !source.contains(attribute),
                "{file} writes {attribute} itself: use Html::click / Html::field"
            );
        }
    }
}

proptest! {
    #[test]
    fn any_job_id_or_name_reads_back(text in "\\PC*") {
        for click in [Click::Select(&text), Click::Model(&text), Click::Cancel(&text), Click::Retry(&text)] {
            let written = click.to_string();
            prop_assert_eq!(Click::parse(&written), Some(click));
        }
        let field = TextField::Shape(&text);
        let written = field.to_string();
        prop_assert_eq!(TextField::parse(&written), Some(field));
    }
}
