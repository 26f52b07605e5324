//! The browser side: a Yew application of function components and hooks.
//!
//! The root, [`App`], holds what the whole page shares: the fleet and its
//! protocol session in a `use_reducer` ([`state::FleetState`] over
//! [`crate::view_model::Session`]), given to the cards by a
//! `ContextProvider`; the socket, opened by a `use_effect_with` for each
//! dial of the session and closed by its cleanup (`connection.rs`); the
//! notices; and which job's drawer is open. Each card is a component with its own state: the jobs table its
//! filter, search, sort and page ([`jobs::JobsCard`]), the upload box its
//! file and check ([`upload_box::UploadBox`]), the Models card the run it
//! shows ([`models::ModelsCard`]).
//!
//! State flows one way: a socket event or a click becomes an action for a
//! reducer (the fleet's, or the card's own); the reducer returns the next
//! state, Yew renders the components that read it, diffing its virtual DOM
//! against the last one (focus, the caret and scroll positions survive the
//! live updates), and the effects the session asked for (frames to send,
//! notices, downloads) run after that render.

mod browser;
mod checker;
mod connection;
mod detail;
mod header;
mod jobs;
mod model_form;
mod models;
mod notices;
mod overall;
mod state;
mod upload_box;
mod widgets;
mod workers;

use tunefleet_shared::protocol::JobId;
use wasm_bindgen::prelude::*;
use yew::prelude::*;

use crate::notices::NoticeList;
use connection::{use_connection, use_session_effects};
use state::{Fleet, FleetState, Notify};
use widgets::cls;

#[wasm_bindgen(start)]
pub(crate) fn start() {
    let document = gloo::utils::document();
    if let Some(boot) = document.get_element_by_id("boot") {
        boot.remove();
    }
    match document.get_element_by_id("app") {
        Some(root) => yew::Renderer::<App>::with_root(root).render(),
        // An index.html without the mount point: Yew mounts on the body.
        None => yew::Renderer::<App>::new().render(),
    };
}

/// The page's root component.
#[function_component]
fn App() -> Html {
    let fleet = use_reducer(FleetState::first);
    let notices = use_reducer(NoticeList::default);
    let notify = Notify(notices.dispatcher());
    let current = use_connection(&fleet);
    use_session_effects(&fleet, current, notify.clone());
    use_first_render_mark();
    let selected = use_state_eq(|| None::<JobId>);
    let theme = use_state(browser::current_theme);

    let on_select = {
        let selected = selected.setter();
        Callback::from(move |job| selected.set(job))
    };
    let session = fleet.session();
    let now = browser::now_ms();
    let main_class = cls(&[
        ("grid", true),
        ("stale", !session.live()),
        ("with-models", !session.fleet.models().is_empty()),
    ]);
    let on_close = {
        let selected = selected.setter();
        Callback::from(move |()| selected.set(None))
    };
    let on_error = Callback::from(move |text| notify.show(text, true));
    let context: Fleet = fleet.clone();
    html! {
        <ContextProvider<Fleet> {context}>
            <div class="page">
                { header::header(&session, &fleet, &theme) }
                { header::banner(&session.link(), &fleet) }
                { header::storage_banner(&session.fleet, now) }
                <main id="main" class={main_class}>
                    { overall::overall(&session.fleet, now) }
                    <models::ModelsCard on_select_job={on_select.clone()} />
                    <upload_box::UploadBox {on_error} />
                    <workers::WorkersCard on_select_job={on_select.clone()} />
                    <jobs::JobsCard selected={(*selected).clone()} {on_select} />
                </main>
                if let Some(job_id) = &*selected {
                    { detail::detail(&fleet, &session, job_id, on_close) }
                }
                <notices::Notices {notices} />
            </div>
        </ContextProvider<Fleet>>
    }
}

/// Marks the first render for the browser test's time to first render
/// (performance marks are cheap, and visible in the browser's own tools).
#[hook]
fn use_first_render_mark() {
    use_effect_with((), |_| {
        if let Some(performance) = gloo::utils::window().performance() {
            let _ = performance.mark("tunefleet-first-render");
        }
    });
}
