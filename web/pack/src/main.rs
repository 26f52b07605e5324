//! `web-pack STAGE OUT`: turns the staged dashboard (wasm-bindgen output and
//! `web/static/`) into what the master serves.
//!
//! Why: the dashboard's first load must be small and never stale.
//! - Assets get content-hashed names (`web_bg-<16 hex>.wasm`), so the master
//!   can let browsers cache them for a year (`immutable`) and a new build is
//!   never served from an old cache: `index.html`, the one file fetched by a
//!   fixed name, is revalidated on every load and names the new files.
//! - Every text and wasm file gets a brotli (`.br`) and a gzip (`.gz`) copy,
//!   compressed once at the strongest settings, so the master only picks the
//!   copy the browser accepts instead of compressing on every request.
//!
//! - CSS and JavaScript lose their comments (and CSS its layout) first
//!   (`minify.rs`): bytes every visit downloads and nobody reads there.
//!
//! References are rewritten by exact string (`'/web.js'` in `boot.js`); a
//! reference that is not found is an error, so a renamed file cannot ship
//! with a dangling name. `assets.json` maps each logical name to the served
//! one, for tests and tools.

#![forbid(unsafe_code)]
#![warn(unreachable_pub)]

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::Path;

use anyhow::{bail, Context, Result};
use sha2::{Digest, Sha256};

mod minify;

/// Assets that are only referenced by other files, in the order that lets
/// every file's references be rewritten before it is hashed itself.
const HASHED_LEAVES: &[&str] = &[
    "web_bg.wasm",
    "web.js",
    "check_bg.wasm",
    "check.js",
    "style.css",
];
/// Files that name the leaves: rewritten, then hashed too.
const HASHED_REFERRERS: &[(&str, &[&str])] = &[(
    "boot.js",
    &["web.js", "web_bg.wasm", "check.js", "check_bg.wasm"],
)];
/// The entry point keeps its name; it names the hashed files.
const ENTRY: (&str, &[&str]) = ("index.html", &["style.css", "boot.js"]);
/// Files compressed when at least this many bytes: below, the headers of a
/// compressed response outweigh the savings.
const MIN_COMPRESS_BYTES: usize = 512;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [stage, out] = args.as_slice() else {
        bail!("usage: web-pack STAGE_DIR OUT_DIR");
    };
    let names = pack(Path::new(stage), Path::new(out))?;
    for (logical, served) in &names {
        println!("web-pack: {logical} -> {served}");
    }
    Ok(())
}

/// Packs `stage` into `out` (created, must not exist); returns logical → served names.
fn pack(stage: &Path, out: &Path) -> Result<BTreeMap<String, String>> {
    if out.exists() {
        bail!("{}: already exists", out.display());
    }
    fs::create_dir_all(out).with_context(|| format!("create {}", out.display()))?;
    let read = |name: &str| -> Result<Vec<u8>> {
        let path = stage.join(name);
        let bytes = fs::read(&path).with_context(|| format!("read {}", path.display()))?;
        Ok(minified(name, bytes))
    };
    let mut served: BTreeMap<String, String> = BTreeMap::new();
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();

    for &name in HASHED_LEAVES {
        let bytes = read(name)?;
        let hashed = hashed_name(name, &bytes);
        served.insert(name.to_string(), hashed.clone());
        files.push((hashed, bytes));
    }
    for &(name, refs) in HASHED_REFERRERS {
        let bytes = rewrite(name, &read(name)?, refs, &served)?;
        let hashed = hashed_name(name, &bytes);
        served.insert(name.to_string(), hashed.clone());
        files.push((hashed, bytes));
    }
    let (entry, refs) = ENTRY;
    files.push((
        entry.to_string(),
        rewrite(entry, &read(entry)?, refs, &served)?,
    ));
    served.insert(entry.to_string(), entry.to_string());

    // Anything else staged (favicon.svg) keeps its name.
    let mut others = Vec::new();
    for dirent in fs::read_dir(stage).with_context(|| format!("list {}", stage.display()))? {
        let name = dirent?.file_name().to_string_lossy().into_owned();
        if !served.contains_key(&name) {
            others.push(name);
        }
    }
    others.sort();
    for name in others {
        let bytes = read(&name)?;
        served.insert(name.clone(), name.clone());
        files.push((name, bytes));
    }

    for (name, bytes) in &files {
        write(&out.join(name), bytes)?;
        if bytes.len() >= MIN_COMPRESS_BYTES && !is_compressed_format(name) {
            let br = brotli_best(bytes)?;
            if br.len() < bytes.len() {
                write(&out.join(format!("{name}.br")), &br)?;
            }
            let gz = gzip_best(bytes)?;
            if gz.len() < bytes.len() {
                write(&out.join(format!("{name}.gz")), &gz)?;
            }
        }
    }
    let manifest = serde_json::to_vec_pretty(&served)?;
    write(&out.join("assets.json"), &manifest)?;
    Ok(served)
}

/// A CSS or JavaScript file without its comments; other files (and text
/// that is not UTF-8) as they are.
fn minified(name: &str, bytes: Vec<u8>) -> Vec<u8> {
    let minify: fn(&str) -> String = if name.ends_with(".css") {
        minify::css
    } else if name.ends_with(".js") {
        minify::js
    } else {
        return bytes;
    };
    match std::str::from_utf8(&bytes) {
        Ok(text) => minify(text).into_bytes(),
        Err(_) => bytes,
    }
}

/// `web_bg.wasm` → `web_bg-0123456789abcdef.wasm` (the first 64 bits of its SHA-256).
fn hashed_name(name: &str, bytes: &[u8]) -> String {
    let digest = hex::encode(&Sha256::digest(bytes)[..8]);
    match name.rsplit_once('.') {
        Some((stem, ext)) => format!("{stem}-{digest}.{ext}"),
        None => format!("{name}-{digest}"),
    }
}

/// Replaces every `/NAME` that `file` must contain by the served name.
fn rewrite(
    file: &str,
    bytes: &[u8],
    refs: &[&str],
    served: &BTreeMap<String, String>,
) -> Result<Vec<u8>> {
    let mut text = std::str::from_utf8(bytes)
        .with_context(|| format!("{file}: not UTF-8"))?
        .to_string();
    for &name in refs {
        let from = format!("/{name}");
        let target = served
            .get(name)
            .with_context(|| format!("{file}: {name} is not packed before it"))?;
        // Quoted, so `/web.js` does not also match inside `/web_bg.wasm`'s neighbours.
        let mut found = false;
        for quote in ['\'', '"'] {
            let quoted = format!("{quote}{from}{quote}");
            if text.contains(&quoted) {
                found = true;
                text = text.replace(&quoted, &format!("{quote}/{target}{quote}"));
            }
        }
        if !found {
            bail!("{file}: no quoted reference to {from}");
        }
    }
    Ok(text.into_bytes())
}

fn is_compressed_format(name: &str) -> bool {
    [".png", ".jpg", ".gif", ".webp", ".woff2", ".br", ".gz"]
        .iter()
        .any(|ext| name.ends_with(ext))
}

fn brotli_best(bytes: &[u8]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    let params = brotli::enc::BrotliEncoderParams {
        quality: 11,
        lgwin: 24,
        ..Default::default()
    };
    brotli::BrotliCompress(&mut &bytes[..], &mut out, &params).context("brotli")?;
    Ok(out)
}

fn gzip_best(bytes: &[u8]) -> Result<Vec<u8>> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    encoder.write_all(bytes).context("gzip")?;
    encoder.finish().context("gzip")
}

fn write(path: &Path, bytes: &[u8]) -> Result<()> {
    fs::write(path, bytes).with_context(|| format!("write {}", path.display()))
}

#[cfg(test)]
mod tests;
