//! Thin wrappers over the browser APIs the app uses: the master's address,
//! session and local storage, downloads, the clock and the theme attribute.
//! (The WebSocket is `connection.rs`'s.)

use tunefleet_shared::protocol::Millis;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

const TOKEN_KEY: &str = "tunefleet.token";
const THEME_KEY: &str = "tunefleet.theme";

/// The masters the page may talk to, tried in turn: `ws://HOST/ws/client`
/// (or `wss://` on an https page) for the master that served the page, then
/// those named in the address as `?server=ws://A,ws://B` (a leader and its
/// standby), so that the page follows the fleet when the master that served
/// it dies.
pub(super) fn client_urls() -> Vec<String> {
    let location = gloo::utils::window().location();
    let scheme = match location.protocol().as_deref() {
        Ok("https:") => "wss",
        _ => "ws",
    };
    let host = location.host().unwrap_or_default();
    let mut urls = vec![format!("{scheme}://{host}/ws/client")];
    let search = location.search().unwrap_or_default();
    let servers = web_sys::UrlSearchParams::new_with_str(&search)
        .ok()
        .and_then(|params| params.get("server"))
        .unwrap_or_default();
    for server in tunefleet_shared::server_urls(&servers) {
        let base = server.trim_end_matches('/').trim_end_matches("/ws/client");
        let url = format!("{base}/ws/client");
        if !urls.contains(&url) {
            urls.push(url);
        }
    }
    urls
}

fn session_storage() -> Option<web_sys::Storage> {
    gloo::utils::window().session_storage().ok().flatten()
}

fn local_storage() -> Option<web_sys::Storage> {
    gloo::utils::window().local_storage().ok().flatten()
}

/// The admin token of this tab (session storage: gone when the tab closes).
/// A sign-in link's `#token=…` (as `tunefleet serve` prints it) is stored
/// first, as a typed token is, and taken out of the address bar.
pub(super) fn stored_token() -> Option<String> {
    if let Some(token) = token_from_address() {
        store_token(Some(&token));
    }
    stored_token_only()
}

/// The token of a sign-in link (`#token=…`), removed from the address (and
/// so from the history and any bookmark) with `history.replaceState`.
fn token_from_address() -> Option<String> {
    let window = gloo::utils::window();
    let location = window.location();
    let hash = location.hash().ok()?;
    let token = crate::view_model::token_from_fragment(&hash)?;
    let path = format!(
        "{}{}",
        location.pathname().unwrap_or_default(),
        location.search().unwrap_or_default()
    );
    if let Ok(history) = window.history() {
        let _ = history.replace_state_with_url(&JsValue::NULL, "", Some(&path));
    }
    Some(token)
}

fn stored_token_only() -> Option<String> {
    session_storage()?
        .get_item(TOKEN_KEY)
        .ok()
        .flatten()
        .filter(|t| !t.is_empty())
}

pub(super) fn store_token(token: Option<&str>) {
    if let Some(storage) = session_storage() {
        let _ = match token {
            Some(t) => storage.set_item(TOKEN_KEY, t),
            None => storage.remove_item(TOKEN_KEY),
        };
    }
}

/// Light, dark, or what the system says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Theme {
    Auto,
    Light,
    Dark,
}

impl Theme {
    /// The one the toggle moves to.
    pub(super) fn next(self) -> Theme {
        match self {
            Theme::Auto => Theme::Dark,
            Theme::Dark => Theme::Light,
            Theme::Light => Theme::Auto,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Theme::Auto => "auto",
            Theme::Light => "light",
            Theme::Dark => "dark",
        }
    }
}

/// The theme `boot.js` applied (from `?theme=` or the saved choice).
pub(super) fn current_theme() -> Theme {
    let root = gloo::utils::document().document_element();
    match root.and_then(|r| r.get_attribute("data-theme")).as_deref() {
        Some("dark") => Theme::Dark,
        Some("light") => Theme::Light,
        _ => Theme::Auto,
    }
}

pub(super) fn apply_theme(theme: Theme) {
    if let Some(root) = gloo::utils::document().document_element() {
        let _ = match theme {
            Theme::Auto => root.remove_attribute("data-theme"),
            t => root.set_attribute("data-theme", t.name()),
        };
    }
    if let Some(storage) = local_storage() {
        let _ = storage.set_item(THEME_KEY, theme.name());
    }
}

/// Milliseconds since the epoch (the browser's clock).
pub(super) fn now_ms() -> Millis {
    Millis(js_sys::Date::now() as u64)
}

/// `Date.getTimezoneOffset()`: UTC minus local time, in minutes.
pub(super) fn tz_offset_min() -> i64 {
    js_sys::Date::new_0().get_timezone_offset() as i64
}

/// Saves `text` as a file called `name` through a temporary object URL.
pub(super) fn download(name: &str, mime: &str, text: &str) -> Result<(), String> {
    let err = |e: JsValue| format!("{e:?}");
    let parts = js_sys::Array::of1(&JsValue::from_str(text));
    let options = web_sys::BlobPropertyBag::new();
    options.set_type(mime);
    let blob = web_sys::Blob::new_with_str_sequence_and_options(&parts, &options).map_err(err)?;
    let url = web_sys::Url::create_object_url_with_blob(&blob).map_err(err)?;
    let document = gloo::utils::document();
    let anchor: web_sys::HtmlAnchorElement = document
        .create_element("a")
        .map_err(err)?
        .dyn_into()
        .map_err(|_| "not an anchor".to_string())?;
    anchor.set_href(&url);
    anchor.set_download(name);
    let body = gloo::utils::body();
    body.append_child(&anchor).map_err(err)?;
    anchor.click();
    anchor.remove();
    // Revoke once the browser has started the download.
    gloo::timers::callback::Timeout::new(10_000, move || {
        let _ = web_sys::Url::revoke_object_url(&url);
    })
    .forget();
    Ok(())
}
