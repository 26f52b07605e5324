//! The page's link to the master, as the root's hooks: the socket opened by
//! an effect and closed by its cleanup ([`use_connection`]), and the
//! session's effects run after the render of the action that caused them
//! ([`use_session_effects`]).
//!
//! Nothing polls: the page renders when a batch of frames arrives (frames
//! are batched per 30 ms, so a burst of progress events costs one render)
//! or when the user does something. When the socket drops, the page keeps
//! the last state on screen, marked stale, dials again after the session's
//! backoff and replaces the state with the snapshot of the new subscription.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use gloo::timers::callback::Timeout;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::spawn_local;
use web_check::downloads::Files;
use web_sys::{CloseEvent, MessageEvent, WebSocket};
use yew::prelude::*;

use super::state::{Fleet, FleetState, Notify};
use super::{browser, checker};
use crate::view_model::{Action, Effect};

/// Frames are applied this long after the first of a batch arrived.
const BATCH_MS: u32 = 30;

/// The socket of one dial, shared by the effect that opened it (and closes
/// it) and the effect that sends the session's frames.
type Current = Rc<RefCell<Option<Connection>>>;

/// Opens a socket for each dial of the session (on mount, a retry, a
/// sign-in or out) and closes it in the effect's cleanup; dials again once
/// the session's backoff after a close has passed. Returns the open
/// socket, for sending.
#[hook]
pub(super) fn use_connection(fleet: &Fleet) -> Current {
    let current: Current = use_mut_ref(|| None);
    // Which of `client_urls` to try; moves on when a socket closes before
    // it ever opened (the master that served the page is gone).
    let url_index = use_mut_ref(|| 0usize);
    let (dial, retry) = {
        let session = fleet.session();
        (session.dial(), session.retry())
    };
    {
        let (current, fleet) = (current.clone(), fleet.dispatcher());
        use_effect_with(dial, move |_| {
            let urls = browser::client_urls();
            let url = &urls[*url_index.borrow() % urls.len()];
            let never_opened = move || *url_index.borrow_mut() += 1;
            match Connection::open(url, fleet.clone(), never_opened.clone()) {
                Ok(connection) => *current.borrow_mut() = Some(connection),
                Err(reason) => {
                    // Not even a socket object (a bad URL): a failed attempt.
                    never_opened();
                    fleet.dispatch(Action::Closed { code: 1006, reason });
                }
            }
            move || {
                if let Some(connection) = current.borrow_mut().take() {
                    connection.close();
                }
            }
        });
    }
    let redial = fleet.dispatcher();
    use_effect_with(retry, move |retry| {
        let timer = retry.map(|(_, delay_ms)| {
            let jitter = (js_sys::Math::random() * 0.2 * delay_ms as f64) as u64;
            Timeout::new((delay_ms + jitter) as u32, move || {
                redial.dispatch(Action::Redial)
            })
        });
        // A dial before the timer fires ("Reconnect now", a sign-in) cancels it.
        move || drop(timer)
    });
    current
}

/// Runs the effects of the session's actions after the render they caused:
/// frames to the socket, notices, downloads, the token kept or forgotten.
#[hook]
pub(super) fn use_session_effects(fleet: &Fleet, current: Current, notify: Notify) {
    let state: Fleet = fleet.clone();
    use_effect_with(fleet.revision(), move |_| {
        for effect in state.take_effects() {
            match effect {
                Effect::Send(frame) => {
                    if let Some(connection) = current.borrow().as_ref() {
                        connection.send(&frame);
                    }
                }
                Effect::Notice { text, error } => notify.show(text, error),
                Effect::Download { download, reply } => {
                    let notify = notify.clone();
                    spawn_local(async move {
                        save(checker::make_downloads(download, &reply).await, &notify)
                    });
                }
                Effect::StoreToken(token) => browser::store_token(token.as_deref()),
            }
        }
    });
}

/// Saves the files the checker module made for a download.
fn save(made: Result<Files, String>, notify: &Notify) {
    let saved = made.and_then(|made| {
        for file in &made.files {
            browser::download(&file.name, &file.mime, &file.text)?;
        }
        Ok(made.notice)
    });
    match saved {
        Ok(Some(notice)) => notify.show(notice, false),
        Ok(None) => {}
        Err(e) => notify.show(format!("download failed: {e}"), true),
    }
}

/// One socket and the frames it received since the last batch. Dropped or
/// closed, it calls nothing any more: a late event of an old socket cannot
/// reach the session of a new one.
pub(super) struct Connection {
    ws: WebSocket,
    _on_open: Closure<dyn FnMut()>,
    _on_message: Closure<dyn FnMut(MessageEvent)>,
    _on_close: Closure<dyn FnMut(CloseEvent)>,
}

/// The frames waiting for the batch's timer.
#[derive(Default)]
struct Inbox {
    frames: Vec<String>,
    timer: Option<Timeout>,
}

type Dispatch = UseReducerDispatcher<FleetState>;

impl Connection {
    fn open(
        url: &str,
        fleet: Dispatch,
        never_opened: impl Fn() + 'static,
    ) -> Result<Connection, String> {
        let ws = WebSocket::new(url).map_err(|e| format!("{e:?}"))?;
        let inbox = Rc::new(RefCell::new(Inbox::default()));
        let opened = Rc::new(Cell::new(false));
        let on_open = {
            let (fleet, opened) = (fleet.clone(), opened.clone());
            Closure::<dyn FnMut()>::new(move || {
                opened.set(true);
                fleet.dispatch(Action::Opened);
            })
        };
        let on_message = {
            let (fleet, inbox) = (fleet.clone(), inbox.clone());
            Closure::<dyn FnMut(MessageEvent)>::new(move |e: MessageEvent| {
                // The master only sends text; a binary frame would be a bug there.
                if let Some(text) = e.data().as_string() {
                    received(&inbox, text, &fleet);
                }
            })
        };
        let on_close = Closure::<dyn FnMut(CloseEvent)>::new(move |e: CloseEvent| {
            // Frames that arrived before the close still count.
            flush(&inbox, &fleet);
            if !opened.get() {
                never_opened();
            }
            fleet.dispatch(Action::Closed {
                code: e.code(),
                reason: e.reason(),
            });
        });
        ws.set_onopen(Some(on_open.as_ref().unchecked_ref()));
        ws.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
        ws.set_onclose(Some(on_close.as_ref().unchecked_ref()));
        Ok(Connection {
            ws,
            _on_open: on_open,
            _on_message: on_message,
            _on_close: on_close,
        })
    }

    fn send(&self, text: &str) {
        // A send on a closing socket fails; its close event follows.
        let _ = self.ws.send_with_str(text);
    }

    /// Closes without telling anyone (the page has moved on to a new dial).
    fn close(self) {
        let _ = self.ws.close_with_code(1000);
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        // The closures die with us; make sure the socket no longer calls them.
        self.ws.set_onopen(None);
        self.ws.set_onmessage(None);
        self.ws.set_onclose(None);
    }
}

/// A frame joins the batch; the first of a batch starts its timer.
fn received(inbox: &Rc<RefCell<Inbox>>, text: String, fleet: &Dispatch) {
    let mut waiting = inbox.borrow_mut();
    waiting.frames.push(text);
    if waiting.timer.is_none() {
        let (inbox, fleet) = (inbox.clone(), fleet.clone());
        waiting.timer = Some(Timeout::new(BATCH_MS, move || flush(&inbox, &fleet)));
    }
}

/// The batch goes to the session at once.
fn flush(inbox: &RefCell<Inbox>, fleet: &Dispatch) {
    let frames = {
        let mut waiting = inbox.borrow_mut();
        waiting.timer = None;
        std::mem::take(&mut waiting.frames)
    };
    if !frames.is_empty() {
        fleet.dispatch(Action::Frames(frames));
    }
}
