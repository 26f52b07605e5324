use super::*;

fn stage(boot: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let big_js = "export function f() { return 1; }\n".repeat(100);
    for (name, text) in [
        ("web_bg.wasm", "\0asm fake main module".to_string()),
        ("web.js", big_js.clone()),
        ("check_bg.wasm", "\0asm fake checker".to_string()),
        ("check.js", big_js.replace('1', "2")),
        ("style.css", "body { color: red }\n".repeat(50)),
        ("boot.js", boot.to_string()),
        (
            "index.html",
            r#"<link rel="stylesheet" href="/style.css"><script type="module" src="/boot.js"></script>"#
                .to_string(),
        ),
        ("favicon.svg", "<svg/>".to_string()),
    ] {
        fs::write(dir.path().join(name), text).expect("write stage file");
    }
    dir
}

const BOOT: &str = "import init from '/web.js'; init({ module_or_path: '/web_bg.wasm' });\n\
                    const checker = () => import('/check.js').then((m) => m.default({ module_or_path: '/check_bg.wasm' }));\n";

#[test]
fn assets_get_hashed_names_and_every_reference_follows() {
    let stage = stage(BOOT);
    let out = tempfile::tempdir().expect("tempdir");
    let out = out.path().join("dist");
    let served = pack(stage.path(), &out).expect("pack");

    let web_js = &served["web.js"];
    assert!(
        web_js.starts_with("web-") && web_js.ends_with(".js"),
        "{web_js}"
    );
    assert_eq!(served["index.html"], "index.html");
    assert_eq!(served["favicon.svg"], "favicon.svg");
    let boot = fs::read_to_string(out.join(&served["boot.js"])).expect("boot");
    for name in ["web.js", "web_bg.wasm", "check.js", "check_bg.wasm"] {
        assert!(boot.contains(&format!("'/{}'", served[name])), "{boot}");
        assert!(!boot.contains(&format!("'/{name}'")), "{boot}");
        assert!(out.join(&served[name]).is_file());
    }
    let index = fs::read_to_string(out.join("index.html")).expect("index");
    assert!(
        index.contains(&format!("\"/{}\"", served["boot.js"])),
        "{index}"
    );
    assert!(
        index.contains(&format!("\"/{}\"", served["style.css"])),
        "{index}"
    );
    let manifest: BTreeMap<String, String> =
        serde_json::from_slice(&fs::read(out.join("assets.json")).expect("manifest"))
            .expect("manifest JSON");
    assert_eq!(manifest, served);
}

#[test]
fn a_changed_file_gets_a_new_name_and_an_unchanged_one_keeps_its_name() {
    let first = tempfile::tempdir().expect("tempdir");
    let second = tempfile::tempdir().expect("tempdir");
    let a = pack(stage(BOOT).path(), &first.path().join("d")).expect("pack");
    let changed = stage(BOOT);
    fs::write(changed.path().join("web_bg.wasm"), "\0asm a new build").expect("write");
    let b = pack(changed.path(), &second.path().join("d")).expect("pack");
    assert_ne!(a["web_bg.wasm"], b["web_bg.wasm"]);
    // boot.js names the new module, so it is new too; the checker is not.
    assert_ne!(a["boot.js"], b["boot.js"]);
    assert_eq!(a["check_bg.wasm"], b["check_bg.wasm"]);
}

#[test]
fn compressed_copies_decompress_to_the_original() {
    let stage = stage(BOOT);
    let out = tempfile::tempdir().expect("tempdir");
    let out = out.path().join("dist");
    let served = pack(stage.path(), &out).expect("pack");
    let original = fs::read(out.join(&served["web.js"])).expect("web.js");
    let br = fs::read(out.join(format!("{}.br", served["web.js"]))).expect(".br");
    let mut unbr = Vec::new();
    brotli::BrotliDecompress(&mut &br[..], &mut unbr).expect("brotli");
    assert_eq!(unbr, original);
    let gz = fs::read(out.join(format!("{}.gz", served["web.js"]))).expect(".gz");
    let mut ungz = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&gz[..]), &mut ungz)
        .expect("gunzip");
    assert_eq!(ungz, original);
    assert!(br.len() < original.len() && gz.len() < original.len());
    // Too small to be worth it: no compressed copy.
    assert!(!out.join("favicon.svg.br").exists());
}

#[test]
fn a_missing_reference_is_an_error_that_names_the_file() {
    let stage = stage("import init from '/web.js';\n");
    let out = tempfile::tempdir().expect("tempdir");
    let err = pack(stage.path(), &out.path().join("dist")).expect_err("must fail");
    let text = format!("{err:#}");
    assert!(
        text.contains("boot.js") && text.contains("/web_bg.wasm"),
        "{text}"
    );
}
