//! The page's link to the master: the socket (opened, frames batched per
//! render, closed and retried with backoff) and the token it signs in with.

use gloo::timers::callback::Timeout;

use super::{browser, send, App, Msg};
use crate::model::{CloseAction, Link, Session};
use browser::Socket;

impl App {
    pub(super) fn connect(&mut self) {
        self.retry = None;
        if let Some(old) = self.socket.take() {
            old.close();
        }
        self.generation += 1;
        let generation = self.generation;
        self.session.connecting();
        let urls = browser::client_urls();
        let url = &urls[self.url_index % urls.len().max(1)];
        let socket = Socket::open(
            url,
            move || send(Msg::Opened(generation)),
            move |text| send(Msg::Frame(generation, text)),
            move |code, reason| send(Msg::Closed(generation, code, reason)),
        );
        match socket {
            Ok(socket) => self.socket = Some(socket),
            Err(e) => {
                // Not even a socket object (bad URL): treat as a failed attempt.
                send(Msg::Closed(generation, 1006, e));
            }
        }
    }

    pub(super) fn send(&self, frame: String) {
        if let Some(socket) = &self.socket {
            socket.send(&frame);
        }
    }

    pub(super) fn on_opened(&mut self, generation: u64) -> bool {
        if generation != self.generation {
            return false;
        }
        self.opened = true;
        let hello = self.session.opened(self.token.as_deref());
        self.send(hello);
        true
    }

    pub(super) fn on_frame(&mut self, generation: u64, text: String) -> bool {
        if generation != self.generation {
            return false;
        }
        self.inbox.push(text);
        if self.flush.is_none() {
            self.flush = Some(Timeout::new(30, move || send(Msg::Flush)));
        }
        false
    }

    /// The frames received since the last render, applied at once.
    pub(super) fn on_flush(&mut self) -> bool {
        self.flush = None;
        let had_jobs = self.session.fleet.jobs().len();
        for frame in std::mem::take(&mut self.inbox) {
            let effects = self.session.received(&frame);
            self.handle_effects(effects);
        }
        if self.session.fleet.jobs().len() != had_jobs {
            // The duplicate marks of the preview depend on the known jobs.
            if self.checked.is_valid() {
                self.mark_known();
            }
        }
        true
    }

    pub(super) fn on_closed(&mut self, generation: u64, code: u16, reason: String) -> bool {
        if generation != self.generation {
            return false;
        }
        // Frames that arrived before the close still count.
        for frame in std::mem::take(&mut self.inbox) {
            let effects = self.session.received(&frame);
            self.handle_effects(effects);
        }
        self.flush = None;
        self.socket = None;
        if !std::mem::take(&mut self.opened) {
            self.url_index = self.url_index.wrapping_add(1);
        }
        let (action, effects) = self.session.closed(code, &reason);
        self.handle_effects(effects);
        if matches!(self.session.link(), Link::NeedsToken { .. }) {
            // A refused token is not worth keeping for the next load.
            browser::store_token(None);
            self.token = None;
        }
        if let CloseAction::Reconnect { delay_ms } = action {
            let jitter = (js_sys::Math::random() * 0.2 * delay_ms as f64) as u64;
            self.retry = Some(Timeout::new((delay_ms + jitter) as u32, move || {
                send(Msg::Reconnect)
            }));
        }
        true
    }

    pub(super) fn sign_in(&mut self) -> bool {
        let token = self.token_input.trim().to_string();
        if token.is_empty() {
            return false;
        }
        browser::store_token(Some(&token));
        self.token = Some(token);
        self.token_input.clear();
        self.session = Session::new();
        self.connect();
        true
    }

    pub(super) fn sign_out(&mut self) -> bool {
        browser::store_token(None);
        self.token = None;
        self.session = Session::new();
        self.connect();
        true
    }
}
