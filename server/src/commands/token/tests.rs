#[test]
fn utc_text_is_a_calendar_date() {
    assert_eq!(super::utc_text(0), "1970-01-01 00:00 UTC");
    assert_eq!(super::utc_text(1_795_480_260_000), "2026-11-24 00:31 UTC");
    assert_eq!(super::utc_text(951_782_400_000), "2000-02-29 00:00 UTC");
}
