use super::parse_duration;
use std::time::Duration;

#[test]
fn durations() {
    assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
    assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
    assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
    assert_eq!(parse_duration("30d"), Ok(Duration::from_secs(30 * 86400)));
    assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
    assert!(parse_duration("fast").is_err());
    assert!(parse_duration("5y").is_err());
    assert!(parse_duration("-1s").is_err());
}

#[test]
fn a_token_in_the_sign_in_link() {
    use super::fragment_escape;
    assert_eq!(fragment_escape("0123abcdef"), "0123abcdef");
    assert_eq!(fragment_escape("test-admin-token"), "test-admin-token");
    assert_eq!(fragment_escape("a b&c#d%"), "a%20b%26c%23d%25");
    assert_eq!(fragment_escape("é"), "%C3%A9");
}
