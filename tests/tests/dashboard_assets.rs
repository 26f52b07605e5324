//! How the master serves the dashboard's files: the precompressed copy the
//! browser accepts, year-long caching for content-hashed names only, the
//! page for paths without an extension, and a 404 (not the page) for a file
//! that is not there.
//!
//! The files here are a stand-in bundle in the layout `web/pack` writes, so
//! the test needs no wasm build; the browser test loads the real one.

use tunefleet_tests::*;

const ASSET: &str = "web_bg-0123456789abcdef.wasm";

fn bundle(dir: &std::path::Path) {
    std::fs::create_dir_all(dir).expect("web dir");
    for (name, body) in [
        (
            "index.html",
            &b"<!doctype html><title>tunefleet</title>"[..],
        ),
        ("index.html.br", b"brotli index"),
        (ASSET, b"\0asm the module"),
        (&format!("{ASSET}.br"), b"brotli module"),
        (&format!("{ASSET}.gz"), b"gzip module"),
        ("favicon.svg", b"<svg/>"),
    ] {
        std::fs::write(dir.join(name), body).expect("write bundle file");
    }
}

#[test]
fn the_dashboard_is_served_precompressed_and_cached_by_content_hash() {
    init_tracing();
    let dir = tempfile::tempdir().expect("tempdir");
    let web = dir.path().join("web");
    bundle(&web);
    let master = Master::start(
        dir.path(),
        &["--web-dir", web.to_str().expect("utf-8 path")],
    );
    let path = format!("/{ASSET}");

    let br = http_request(
        master.addr,
        &path,
        &[("Accept-Encoding", "gzip, deflate, br")],
    );
    assert_eq!(br.status, 200);
    assert_eq!(br.body, b"brotli module");
    assert_eq!(br.header("content-encoding"), Some("br"));
    assert_eq!(br.header("content-type"), Some("application/wasm"));
    assert_eq!(
        br.header("cache-control"),
        Some("public, max-age=31536000, immutable")
    );
    assert!(
        br.header_all("vary")
            .to_ascii_lowercase()
            .contains("accept-encoding"),
        "{:?}",
        br.headers
    );

    let gz = http_request(master.addr, &path, &[("Accept-Encoding", "gzip")]);
    assert_eq!(
        (gz.header("content-encoding"), gz.body.as_slice()),
        (Some("gzip"), &b"gzip module"[..])
    );

    let plain = http_request(master.addr, &path, &[]);
    assert_eq!(plain.status, 200);
    assert_eq!(plain.header("content-encoding"), None);
    assert_eq!(plain.body, b"\0asm the module");

    // The page names the current assets: always revalidated.
    for page in ["/", "/index.html", "/jobs/abc"] {
        let index = http_request(master.addr, page, &[("Accept-Encoding", "br")]);
        assert_eq!(index.status, 200, "{page}");
        assert_eq!(index.header("cache-control"), Some("no-cache"), "{page}");
        assert_eq!(index.body, b"brotli index", "{page}");
    }
    // A file without a hash in its name is revalidated too.
    let icon = http_request(master.addr, "/favicon.svg", &[]);
    assert_eq!(
        (icon.status, icon.header("cache-control")),
        (200, Some("no-cache"))
    );

    // A stale tab asking for an old build's module gets a 404, not the page.
    let old = http_request(master.addr, "/web_bg-fedcba9876543210.wasm", &[]);
    assert_eq!(old.status, 404);
    assert_eq!(old.header("cache-control"), Some("no-cache"));

    // The master still answers its API.
    assert_eq!(http_get(master.addr, "/healthz").0, 200);
}
