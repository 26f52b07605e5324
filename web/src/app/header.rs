//! The page's header (the connection's state, the token, the theme) and the
//! banners under it (connection lost, token needed, store degraded).

use tunefleet_shared::fleet::Fleet as FleetView;
use tunefleet_shared::protocol::{Millis, Role};
use yew::prelude::*;

use wasm_bindgen::JsCast;
use web_sys::HtmlInputElement;

use super::browser::{self, Theme};
use super::state::Fleet;
use crate::format::format_duration;
use crate::view_model::{Action, Link, Session};

/// The brand, the connection's state, the token and the theme.
pub(super) fn header(session: &Session, fleet: &Fleet, theme: &UseStateHandle<Theme>) -> Html {
    let (state, text) = connection_state(session);
    let needs = matches!(session.link(), Link::NeedsToken { .. });
    let token = if session.token().is_some() && !needs {
        let sign_out = fleet.dispatcher();
        let sign_out = Callback::from(move |_: MouseEvent| sign_out.dispatch(Action::SignOut));
        html! {
            <div class="token">
                if session.role() == Some(Role::Admin) {
                    <span class="badge role">{ "admin" }</span>
                }
                <button id="sign-out" class="ghost"
                    title="Forget the admin token (this tab only keeps it until it closes)"
                    onclick={sign_out}>{ "Sign out" }</button>
            </div>
        }
    } else {
        token_form(needs, fleet)
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
            { token }
            { theme_toggle(theme) }
        </header>
    }
}

/// The admin token field (`attention`: the master asked for it). The field
/// is the browser's own until the form is submitted: only then is it read,
/// and the page signs in on a new socket.
fn token_form(attention: bool, fleet: &Fleet) -> Html {
    let sign_in = fleet.dispatcher();
    let onsubmit = Callback::from(move |e: SubmitEvent| {
        e.prevent_default();
        let field = e
            .target()
            .and_then(|form| form.dyn_into::<web_sys::Element>().ok())
            .and_then(|form| form.query_selector("#token").ok().flatten())
            .and_then(|field| field.dyn_into::<HtmlInputElement>().ok());
        let Some(field) = field else {
            return;
        };
        let token = field.value().trim().to_string();
        if !token.is_empty() {
            field.set_value("");
            sign_in.dispatch(Action::SignIn(token));
        }
    });
    html! {
        <form class={if attention { "token attention" } else { "token" }} {onsubmit}>
            <input id="token" type="password" placeholder="admin token" autocomplete="off"
                aria-label="admin token" />
            <button type="submit" class="primary small">{ "Sign in" }</button>
        </form>
    }
}

/// The `#conn` badge: its state (what the tests and the style read) and text.
fn connection_state(session: &Session) -> (&'static str, &'static str) {
    match session.link() {
        Link::Live { role } if session.live() => (
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
    }
}

/// The theme button: light, dark or the system's, applied to the document
/// and remembered.
fn theme_toggle(theme: &UseStateHandle<Theme>) -> Html {
    let onclick = {
        let theme = theme.clone();
        Callback::from(move |_: MouseEvent| {
            let next = theme.next();
            browser::apply_theme(next);
            theme.set(next);
        })
    };
    let (label, icon) = match **theme {
        Theme::Auto => ("Theme: follows the system (click for dark)", "◐"),
        Theme::Dark => ("Theme: dark (click for light)", "☾"),
        Theme::Light => ("Theme: light (click to follow the system)", "☀"),
    };
    html! {
        <button class="icon" title={label} aria-label={label} {onclick}>{ icon }</button>
    }
}

/// What is wrong with the connection, if anything, and what the page does
/// about it.
pub(super) fn banner(link: &Link, fleet: &Fleet) -> Html {
    match link {
        Link::Retrying {
            attempt,
            delay_ms,
            reason,
        } => html! {
            <div id="banner" class="banner warn" role="alert">
                <strong>{ "Connection to the master lost" }</strong>
                <span>{ format!(
                    " ({reason}). Reconnecting in {:.1} s (attempt {attempt}); the tables show the last known state.",
                    *delay_ms as f64 / 1000.0
                ) }</span>
                <button class="ghost small" onclick={reconnect(fleet)}>{ "Reconnect now" }</button>
            </div>
        },
        Link::Connecting { attempt } if *attempt > 0 => html! {
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
                <span>{ " " }{ reason.clone() }</span>
            </div>
        },
        _ => Html::default(),
    }
}

fn reconnect(fleet: &Fleet) -> Callback<MouseEvent> {
    let fleet = fleet.dispatcher();
    Callback::from(move |_: MouseEvent| fleet.dispatch(Action::Redial))
}

/// The master cannot commit its state: it still answers reads (what the
/// page shows is current), and refuses changes until it can again.
pub(super) fn storage_banner(fleet: &FleetView, now: Millis) -> Html {
    let Some(problem) = fleet.storage_problem() else {
        return Html::default();
    };
    html! {
        <div id="storage-banner" class="banner bad" role="alert">
            <strong>{ "The master's store is degraded: it cannot commit." }</strong>
            <span>{ format!(
                " {} (for {}). The tables are current; submits, cancels and retries are refused until it commits again.",
                problem.reason,
                format_duration(now.since(problem.since))
            ) }</span>
        </div>
    }
}
