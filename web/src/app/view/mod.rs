//! Rendering: the page is a function of [`App`]'s state, written as one HTML
//! string (`crate::html`) that `dom.rs` patches into the document.
//!
//! Element ids and `data-*` attributes (`#conn`, `#overall-bar`, `#jobs tr[data-job]`,
//! ...) are stable: the browser tests find things by them. Elements that
//! react carry `data-click` / `data-field` (`events.rs` reads them).

mod detail;
mod fleet;
mod upload;

use tunefleet_shared::protocol::Role;

use super::{browser, App, Theme};
use crate::action::{Click, TextField};
use crate::format::format_duration;
use crate::html::Html;
use crate::model::Link;

pub(super) fn page(app: &App) -> String {
    let now = browser::now_ms();
    let mut h = Html::new();
    h.raw("<div class=\"page\">");
    header(&mut h, app);
    banner(&mut h, app);
    h.raw("<main id=\"main\"")
        .class(&[
            ("grid", true),
            ("stale", !app.session.live()),
            ("with-models", !app.session.fleet.models().is_empty()),
        ])
        .raw(">");
    overall(&mut h, app, now);
    fleet::models_card(&mut h, app);
    upload::upload_card(&mut h, app);
    fleet::workers_card(&mut h, app, now);
    fleet::jobs_card(&mut h, app);
    h.raw("</main>");
    detail::detail(&mut h, app);
    notices(&mut h, app);
    h.raw("</div>");
    h.into_string()
}

// ---------------------------------------------------------------------------
// Header, connection, token
// ---------------------------------------------------------------------------

fn header(h: &mut Html, app: &App) {
    let (state, text) = match &app.session.link() {
        Link::Live { role } if app.session.live() => (
            "live",
            match role {
                Role::Admin => "Live · admin",
                Role::Read => "Live · read-only",
            },
        ),
        Link::Live { .. } => ("connecting", "Syncing…"),
        Link::Connecting { attempt: 0 } => ("connecting", "Connecting…"),
        Link::Connecting { .. } => ("connecting", "Reconnecting…"),
        Link::Retrying { .. } => ("down", "Disconnected"),
        Link::NeedsToken { .. } => ("auth", "Token needed"),
        Link::Incompatible { .. } => ("down", "Incompatible master"),
    };
    let (theme_label, theme_icon) = match app.theme {
        Theme::Auto => ("Theme: follows the system (click for dark)", "◐"),
        Theme::Dark => ("Theme: dark (click for light)", "☾"),
        Theme::Light => ("Theme: light (click to follow the system)", "☀"),
    };
    h.raw(
        "<header class=\"top\"><div class=\"brand\">\
         <svg class=\"logo\" viewBox=\"0 0 20 20\" aria-hidden=\"true\"><path d=\"M3 14 L7 9 L11 12 L17 4\"></path></svg>\
         <span>tunefleet</span></div>\
         <div id=\"conn\" class=\"conn ",
    )
    .raw(state)
    .raw("\" data-state=\"")
    .raw(state)
    .raw("\" role=\"status\"><span class=\"dot\"></span>")
    .raw(text)
    .raw("</div><div class=\"spacer\"></div>");
    token_area(h, app);
    h.raw("<button class=\"icon\"")
        .click(Click::ToggleTheme)
        .attr("title", theme_label)
        .attr("aria-label", theme_label)
        .raw(">")
        .raw(theme_icon)
        .raw("</button></header>");
}

fn token_area(h: &mut Html, app: &App) {
    let needs = matches!(app.session.link(), Link::NeedsToken { .. });
    if app.token.is_some() && !needs {
        h.raw("<div class=\"token\">");
        if app.session.role() == Some(Role::Admin) {
            h.raw("<span class=\"badge role\">admin</span>");
        }
        h.raw(
            "<button id=\"sign-out\" class=\"ghost\" \
             title=\"Forget the admin token (this tab only keeps it until it closes)\"",
        )
        .click(Click::SignOut)
        .raw(">Sign out</button></div>");
        return;
    }
    h.raw("<form data-submit=\"sign-in\"")
        .class(&[("token", true), ("attention", needs)])
        .raw(
            "><input id=\"token\" type=\"password\" placeholder=\"admin token\" autocomplete=\"off\" \
             aria-label=\"admin token\"",
        )
        .field(TextField::Token)
        .attr("value", &app.token_input)
        .raw("><button type=\"submit\" class=\"primary small\">Sign in</button></form>");
}

fn banner(h: &mut Html, app: &App) {
    match app.session.link() {
        Link::Retrying {
            attempt,
            delay_ms,
            reason,
        } => {
            h.raw("<div id=\"banner\" class=\"banner warn\" role=\"alert\"><strong>Connection to the master lost</strong><span>")
                .textf(format_args!(
                    " ({reason}). Reconnecting in {:.1} s (attempt {attempt}); the tables show the last known state.",
                    delay_ms as f64 / 1000.0
                ))
                .raw("</span><button class=\"ghost small\"")
                .click(Click::Reconnect)
                .raw(">Reconnect now</button></div>");
        }
        Link::Connecting { attempt } if attempt > 0 => {
            h.raw(
                "<div id=\"banner\" class=\"banner warn\" role=\"alert\"><strong>Reconnecting to the master…</strong>\
                 <span> the tables show the last known state.</span></div>",
            );
        }
        Link::NeedsToken { reason } => {
            h.raw("<div id=\"banner\" class=\"banner bad\" role=\"alert\"><strong>The master wants the admin token.</strong><span>")
                .textf(format_args!(
                    " {reason}. Enter it above (it is kept in this tab's session storage only), or start the master with --public-read for a read-only view."
                ))
                .raw("</span></div>");
        }
        Link::Incompatible { reason } => {
            h.raw("<div id=\"banner\" class=\"banner bad\" role=\"alert\"><strong>This dashboard cannot talk to this master.</strong><span> ")
                .text(&reason)
                .raw("</span></div>");
        }
        _ => {}
    }
}

fn notices(h: &mut Html, app: &App) {
    h.raw("<div class=\"notices\" aria-live=\"polite\">");
    for n in &app.notices {
        h.raw("<div")
            .attrf("data-key", format_args!("{}", n.id))
            .class(&[("notice", true), ("error", n.error)])
            .raw("><span>")
            .text(&n.text)
            .raw("</span><button class=\"icon small\" aria-label=\"dismiss\"")
            .click(Click::DismissNotice(n.id))
            .raw(">×</button></div>");
    }
    h.raw("</div>");
}

// ---------------------------------------------------------------------------
// Overall progress
// ---------------------------------------------------------------------------

fn overall(h: &mut Html, app: &App, now: u64) {
    let fleet = &app.session.fleet;
    let o = crate::model::fleet_overall(fleet, now);
    let workers = fleet.workers().len();
    let busy = fleet
        .workers()
        .iter()
        .filter(|w| w.current_job.is_some())
        .count();
    let pct = o.percent.floor() as u32;
    let running_share = (o.percent - o.done_share - o.failed_share).max(0.0);
    h.raw(
        "<section class=\"card overall\" aria-label=\"fleet progress\"><div class=\"overall-head\">\
         <h2>Fleet progress</h2><span id=\"overall-pct\" class=\"pct\">",
    )
    .num(pct)
    .raw(
        "%</span></div><div id=\"overall-bar\" class=\"bar big\" role=\"progressbar\" \
         aria-valuemin=\"0\" aria-valuemax=\"100\" aria-label=\"jobs finished\"",
    )
    .attrf("aria-valuenow", format_args!("{pct}"))
    .raw("><div class=\"seg done\"")
    .attrf("style", format_args!("width:{:.2}%", o.done_share))
    .raw("></div><div class=\"seg failed\"")
    .attrf("style", format_args!("width:{:.2}%", o.failed_share))
    .raw("></div><div class=\"seg running\"")
    .attrf("style", format_args!("width:{running_share:.2}%"))
    .raw("></div></div><div id=\"overall-text\" class=\"stats\"><span><b>")
    .num(o.counts.done)
    .raw("</b>")
    .textf(format_args!(" / {} done", o.counts.total))
    .raw("</span>");
    h.raw("<span")
        .class(&[("bad", o.counts.failed > 0)])
        .raw("><b>")
        .num(o.counts.failed)
        .raw("</b> failed</span><span><b>")
        .num(o.counts.running)
        .raw("</b> running</span><span><b>")
        .num(o.counts.queued)
        .raw("</b> queued</span>");
    if o.counts.cancelled > 0 {
        h.raw("<span><b>")
            .num(o.counts.cancelled)
            .raw("</b> cancelled</span>");
    }
    h.raw("<span id=\"eta\">");
    match o.eta_ms {
        Some(ms) if o.finished() < o.counts.total => {
            h.raw("ETA ").text(&format_duration(ms));
        }
        _ if o.counts.total > 0 && o.finished() == o.counts.total => {
            h.raw("all finished");
        }
        _ => {
            h.raw("ETA –");
        }
    }
    h.raw("</span><span class=\"push\">")
        .textf(format_args!(
            "{workers} {} ({busy} busy)",
            if workers == 1 { "worker" } else { "workers" }
        ))
        .raw("</span></div></section>");
}
