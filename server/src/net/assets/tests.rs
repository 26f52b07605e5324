use super::*;

#[test]
fn hashed_names_are_recognised() {
    assert!(is_hashed_asset("/web_bg-0123456789abcdef.wasm"));
    assert!(is_hashed_asset("/check-fedcba9876543210.js"));
    assert!(!is_hashed_asset("/index.html"));
    assert!(!is_hashed_asset("/favicon.svg"));
    assert!(!is_hashed_asset("/web_bg-0123456789ABCDEF.wasm"));
    assert!(!is_hashed_asset("/web_bg-0123456789abcde.wasm"));
    assert!(!is_hashed_asset("/x-0123456789abcdef"));
    assert!(!is_hashed_asset("/"));
}

#[test]
fn only_paths_with_an_extension_are_files() {
    assert!(is_file_path("/web.js"));
    assert!(is_file_path("/a/b/c.wasm"));
    assert!(!is_file_path("/"));
    assert!(!is_file_path("/jobs/abc"));
}
