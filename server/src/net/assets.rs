//! The dashboard's files (`web/dist`, packed by `web/pack`), served so that
//! the first load is small and a new build is never served stale.
//!
//! - Every text and wasm file has `.br` and `.gz` copies made at build time;
//!   the browser gets the one it accepts (`Content-Encoding`), so the master
//!   never compresses on a request. `Vary: Accept-Encoding` keeps caches from
//!   handing brotli to a client that did not ask for it.
//! - Assets carry a content hash in their names (`web_bg-<16 hex>.wasm`) and
//!   may be cached for a year (`immutable`): a new build has new names.
//!   Everything else — `index.html`, which names the current assets, and the
//!   page served for any path without a file extension — is revalidated on
//!   every load (`no-cache`).
//! - A missing file is a 404, not the page: a stale tab asking for an old
//!   asset must fail loudly, not parse HTML as wasm.

use std::convert::Infallible;
use std::path::Path;

use axum::extract::Request;
use axum::http::header::{CACHE_CONTROL, VARY};
use axum::http::HeaderValue;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::Router;
use tower::ServiceExt;
use tower_http::services::{ServeDir, ServeFile};

/// `Cache-Control` of content-hashed assets.
pub(super) const IMMUTABLE: &str = "public, max-age=31536000, immutable";
/// `Cache-Control` of everything else: use the cache only after revalidating.
pub(super) const REVALIDATE: &str = "no-cache";

/// Serves `dir` (which holds `index.html`) at every path the master does not route.
pub(super) fn router(dir: &Path) -> Router {
    let index = ServeFile::new(dir.join("index.html"))
        .precompressed_br()
        .precompressed_gzip();
    let files = ServeDir::new(dir).precompressed_br().precompressed_gzip();
    Router::new()
        .fallback(move |req: Request| {
            let (index, files) = (index.clone(), files.clone());
            async move {
                let res: Result<_, Infallible> = if is_file_path(req.uri().path()) {
                    files.oneshot(req).await
                } else {
                    index.oneshot(req).await
                };
                match res {
                    Ok(res) => res.into_response(),
                    Err(never) => match never {},
                }
            }
        })
        .layer(middleware::from_fn(cache_headers))
}

async fn cache_headers(req: Request, next: Next) -> Response {
    let hashed = is_hashed_asset(req.uri().path());
    let mut res = next.run(req).await;
    let cache = if hashed && res.status().is_success() {
        IMMUTABLE
    } else {
        REVALIDATE
    };
    let headers = res.headers_mut();
    headers.insert(CACHE_CONTROL, HeaderValue::from_static(cache));
    headers.append(VARY, HeaderValue::from_static("accept-encoding"));
    res
}

/// A path whose last segment has an extension names a file; others are the page.
fn is_file_path(path: &str) -> bool {
    path.rsplit('/')
        .next()
        .is_some_and(|name| name.contains('.'))
}

/// `…/name-<16 lowercase hex>.ext`, as `web/pack` names assets.
pub(super) fn is_hashed_asset(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    let Some((stem, _ext)) = name.rsplit_once('.') else {
        return false;
    };
    let Some((_, hash)) = stem.rsplit_once('-') else {
        return false;
    };
    hash.len() == 16
        && hash
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[cfg(test)]
mod tests;
