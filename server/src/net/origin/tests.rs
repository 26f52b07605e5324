use super::*;
use axum::http::HeaderValue;

fn headers(origin: Option<&str>, host: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(HOST, HeaderValue::from_str(host).unwrap());
    if let Some(o) = origin {
        h.insert(ORIGIN, HeaderValue::from_str(o).unwrap());
    }
    h
}

#[test]
fn origins_are_normalised() {
    assert_eq!(
        normalise_origin("HTTPS://Dash.Example.com:443/").as_deref(),
        Some("https://dash.example.com")
    );
    assert_eq!(
        normalise_origin("http://127.0.0.1:18871").as_deref(),
        Some("http://127.0.0.1:18871")
    );
    assert_eq!(
        normalise_origin("http://[::1]:80").as_deref(),
        Some("http://[::1]")
    );
    for bad in ["null", "example.com", "http://", "http://a/b", "http://u@h"] {
        assert_eq!(normalise_origin(bad), None, "{bad}");
    }
}

#[test]
fn same_origin_and_no_origin_pass_by_default() {
    let p = OriginPolicy::new(&[]).unwrap();
    assert!(p.check(&headers(None, "127.0.0.1:18871")).is_ok());
    assert!(p
        .check(&headers(Some("http://127.0.0.1:18871"), "127.0.0.1:18871"))
        .is_ok());
    assert!(p
        .check(&headers(Some("https://farm.example"), "farm.example"))
        .is_ok());
    assert!(p
        .check(&headers(Some("https://farm.example"), "farm.example:443"))
        .is_ok());
    assert!(p
        .check(&headers(Some("https://FARM.example:443"), "farm.example"))
        .is_ok());
}

#[test]
fn foreign_origins_are_refused_unless_listed() {
    let p = OriginPolicy::new(&[]).unwrap();
    for origin in [
        "http://evil.example",
        "http://127.0.0.1:9999",
        "null",
        "http://127.0.0.1:18871.evil.example",
    ] {
        let err = p
            .check(&headers(Some(origin), "127.0.0.1:18871"))
            .unwrap_err();
        assert!(err.contains(origin), "{err}");
    }
    let p = OriginPolicy::new(&["https://dash.example.com/".into()]).unwrap();
    assert!(p
        .check(&headers(Some("https://dash.example.com"), "10.0.0.5:18871"))
        .is_ok());
    assert!(p
        .check(&headers(Some("http://dash.example.com"), "10.0.0.5:18871"))
        .is_err());
    let any = OriginPolicy::new(&["*".into()]).unwrap();
    assert!(any
        .check(&headers(Some("http://evil.example"), "h:1"))
        .is_ok());
    assert!(OriginPolicy::new(&["dash.example.com".into()]).is_err());
}
