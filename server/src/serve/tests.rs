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
