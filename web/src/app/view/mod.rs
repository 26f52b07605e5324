//! Rendering: the page is a function of [`App`]'s state, written with Yew's
//! `html!` (text and attribute values are data, never parsed as markup).
//!
//! [`Dashboard`] is the root component. The state it shows lives outside it
//! (the app's queue and [`App`], fed by the socket, timers and callbacks);
//! the component registers its [`use_force_update`] handle so that `send`
//! can ask for a render once a batch of messages changed something, and
//! renders the cards, which are plain functions of the state and small
//! function components (`TrialsBar`, `ChartSvg`, ...) whose props Yew
//! compares before rendering them again.
//!
//! Element ids and `data-*` attributes (`#conn`, `#overall-bar`, `#jobs tr[data-job]`,
//! ...) are stable: the browser tests find things by them.

mod detail;
mod fleet;
mod upload;

use tunefleet_shared::protocol::{Millis, Role};
use yew::prelude::*;

use super::{browser, with_app, App, Msg, Theme};
use crate::format::format_duration;
use crate::model::Link;

/// A callback that sends `msg()` to the app, whatever the event.
pub(super) fn on<E: 'static>(msg: impl Fn() -> Msg + 'static) -> Callback<E> {
    Callback::from(move |_: E| super::send(msg()))
}

/// A click on an element inside a clickable row: sends `msg()` and keeps
/// the click from reaching the row.
pub(super) fn on_inner(msg: impl Fn() -> Msg + 'static) -> Callback<MouseEvent> {
    Callback::from(move |e: MouseEvent| {
        e.stop_propagation();
        super::send(msg())
    })
}

/// A click on a `<a href="#">`: sends `msg()`, leaves the address alone.
pub(super) fn on_link(msg: impl Fn() -> Msg + 'static) -> Callback<MouseEvent> {
    Callback::from(move |e: MouseEvent| {
        e.prevent_default();
        e.stop_propagation();
        super::send(msg())
    })
}

/// The value of the field an input event came from.
pub(super) fn on_input(msg: impl Fn(String) -> Msg + 'static) -> Callback<InputEvent> {
    Callback::from(move |e: InputEvent| {
        let value = e
            .target()
            .and_then(|t| js_sys::Reflect::get(&t, &"value".into()).ok())
            .and_then(|v| v.as_string())
            .unwrap_or_default();
        super::send(msg(value))
    })
}

/// A `class` value from the names whose condition holds. One plain function
/// instead of `classes!`, whose set type and expansions cost the module more.
pub(super) fn cls(names: &[(&str, bool)]) -> String {
    let mut out = String::new();
    for (name, on) in names {
        if *on {
            if !out.is_empty() {
                out.push(' ');
            }
            out.push_str(name);
        }
    }
    out
}

/// The page's root component.
#[function_component]
pub(super) fn Dashboard() -> Html {
    let redraw = use_force_update();
    super::set_redraw(redraw);
    use_effect_with((), |_| {
        // For the browser test's time to first render (performance marks
        // are cheap and visible in the browser's own tools too).
        if let Some(performance) = gloo::utils::window().performance() {
            let _ = performance.mark("tunefleet-first-render");
        }
    });
    with_app(page).unwrap_or_default()
}

fn page(app: &App) -> Html {
    let now = browser::now_ms();
    html! {
        <div class="page">
            { header(app) }
            { banner(app) }
            { storage_banner(app) }
            <main id="main" class={cls(&[("grid", true), ("stale", !app.session.live()),
                ("with-models", !app.session.fleet.models().is_empty())])}>
                { overall(app, now) }
                { fleet::models_card(app) }
                { upload::upload_card(app) }
                { fleet::workers_card(app, now) }
                { fleet::jobs_card(app) }
            </main>
            { detail::detail(app) }
            { notices(app) }
        </div>
    }
}

// ---------------------------------------------------------------------------
// Header, connection, token
// ---------------------------------------------------------------------------

fn header(app: &App) -> Html {
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
    html! {
        <header class="top">
            <div class="brand">
                <svg class="logo" viewBox="0 0 20 20" aria-hidden="true">
                    <path d="M3 14 L7 9 L11 12 L17 4"></path>
                </svg>
                <span>{ "tunefleet" }</span>
            </div>
            <div id="conn" class={format!("conn {state}")} data-state={state} role="status">
                <span class="dot"></span>{ text }
            </div>
            <div class="spacer"></div>
            { token_area(app) }
            <button class="icon" title={theme_label} aria-label={theme_label}
                onclick={on(|| Msg::ToggleTheme)}>{ theme_icon }</button>
        </header>
    }
}

fn token_area(app: &App) -> Html {
    let needs = matches!(app.session.link(), Link::NeedsToken { .. });
    if app.token.is_some() && !needs {
        return html! {
            <div class="token">
                if app.session.role() == Some(Role::Admin) {
                    <span class="badge role">{ "admin" }</span>
                }
                <button id="sign-out" class="ghost"
                    title="Forget the admin token (this tab only keeps it until it closes)"
                    onclick={on(|| Msg::SignOut)}>{ "Sign out" }</button>
            </div>
        };
    }
    let onsubmit = Callback::from(|e: SubmitEvent| {
        e.prevent_default();
        super::send(Msg::SignIn)
    });
    html! {
        <form class={if needs { "token attention" } else { "token" }} {onsubmit}>
            <input id="token" type="password" placeholder="admin token" autocomplete="off"
                aria-label="admin token" value={app.token_input.clone()}
                oninput={on_input(Msg::TokenInput)} />
            <button type="submit" class="primary small">{ "Sign in" }</button>
        </form>
    }
}

fn banner(app: &App) -> Html {
    match app.session.link() {
        Link::Retrying {
            attempt,
            delay_ms,
            reason,
        } => html! {
            <div id="banner" class="banner warn" role="alert">
                <strong>{ "Connection to the master lost" }</strong>
                <span>{ format!(
                    " ({reason}). Reconnecting in {:.1} s (attempt {attempt}); the tables show the last known state.",
                    delay_ms as f64 / 1000.0
                ) }</span>
                <button class="ghost small" onclick={on(|| Msg::Reconnect)}>{ "Reconnect now" }</button>
            </div>
        },
        Link::Connecting { attempt } if attempt > 0 => html! {
            <div id="banner" class="banner warn" role="alert">
                <strong>{ "Reconnecting to the master…" }</strong>
                <span>{ " the tables show the last known state." }</span>
            </div>
        },
        Link::NeedsToken { reason } => html! {
            <div id="banner" class="banner bad" role="alert">
                <strong>{ "The master wants the admin token." }</strong>
                <span>{ format!(
                    " {reason}. Enter it above (it is kept in this tab's session storage only), or start the master with --public-read for a read-only view."
                ) }</span>
            </div>
        },
        Link::Incompatible { reason } => html! {
            <div id="banner" class="banner bad" role="alert">
                <strong>{ "This dashboard cannot talk to this master." }</strong>
                <span>{ " " }{ reason }</span>
            </div>
        },
        _ => Html::default(),
    }
}

/// The master cannot commit its state: it still answers reads (what the
/// page shows is current), and refuses changes until it can again.
fn storage_banner(app: &App) -> Html {
    let Some(problem) = app.session.fleet.storage_problem() else {
        return Html::default();
    };
    let since = browser::now_ms().since(problem.since);
    html! {
        <div id="storage-banner" class="banner bad" role="alert">
            <strong>{ "The master's store is degraded: it cannot commit." }</strong>
            <span>{ format!(
                " {} (for {}). The tables are current; submits, cancels and retries are refused until it commits again.",
                problem.reason,
                format_duration(since)
            ) }</span>
        </div>
    }
}

fn notices(app: &App) -> Html {
    html! {
        <div class="notices" aria-live="polite">
            { for app.notices.iter().map(|n| {
                let id = n.id;
                html! {
                    <div key={id} class={if n.error { "notice error" } else { "notice" }}>
                        <span>{ n.text.clone() }</span>
                        <button class="icon small" aria-label="dismiss"
                            onclick={on(move || Msg::DismissNotice(id))}>{ "×" }</button>
                    </div>
                }
            }) }
        </div>
    }
}

// ---------------------------------------------------------------------------
// Overall progress
// ---------------------------------------------------------------------------

fn overall(app: &App, now: Millis) -> Html {
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
    let eta = match o.eta_ms {
        Some(ms) if o.finished() < o.counts.total => format!("ETA {}", format_duration(ms)),
        _ if o.counts.total > 0 && o.finished() == o.counts.total => "all finished".to_string(),
        _ => "ETA –".to_string(),
    };
    html! {
        <section class="card overall" aria-label="fleet progress">
            <div class="overall-head">
                <h2>{ "Fleet progress" }</h2>
                <span id="overall-pct" class="pct">{ format!("{pct}%") }</span>
            </div>
            <div id="overall-bar" class="bar big" role="progressbar" aria-valuemin="0"
                aria-valuemax="100" aria-label="jobs finished" aria-valuenow={pct.to_string()}>
                <div class="seg done" style={format!("width:{:.2}%", o.done_share)}></div>
                <div class="seg failed" style={format!("width:{:.2}%", o.failed_share)}></div>
                <div class="seg running" style={format!("width:{running_share:.2}%")}></div>
            </div>
            <div id="overall-text" class="stats">
                <span><b>{ o.counts.done }</b>{ format!(" / {} done", o.counts.total) }</span>
                <span class={(o.counts.failed > 0).then_some("bad")}>
                    <b>{ o.counts.failed }</b>{ " failed" }
                </span>
                <span><b>{ o.counts.running }</b>{ " running" }</span>
                <span><b>{ o.counts.queued }</b>{ " queued" }</span>
                if o.counts.cancelled > 0 {
                    <span><b>{ o.counts.cancelled }</b>{ " cancelled" }</span>
                }
                <span id="eta">{ eta }</span>
                <span class="push">{ format!(
                    "{workers} {} ({busy} busy)",
                    if workers == 1 { "worker" } else { "workers" }
                ) }</span>
            </div>
        </section>
    }
}
