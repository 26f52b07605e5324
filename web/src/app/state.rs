//! The state the root shares: the fleet with its protocol session (a
//! `use_reducer` handed down by a `ContextProvider`) and the notice area's
//! lines. Each card's own state
//! (the jobs table's filter, the upload box's file, the open model run)
//! lives in that card.

use std::cell::{Ref, RefCell};
use std::rc::Rc;

use yew::prelude::*;

use super::browser;
use crate::notices::{NoticeAction, NoticeList};
use crate::view_model::{Action, Effect, Session};

/// The fleet and the protocol session: the root's reducer state, which
/// every card reads through [`use_fleet`].
///
/// Why a cell: Yew's `use_reducer` keeps the current state's `Rc` while the
/// reducer makes the next one, so a state that owned the fleet would be
/// copied whole, 30,000 jobs, for every batch of frames. The session lives
/// in one cell for the page's life instead. [`Reducible::reduce`] is the
/// only code that changes it, and every action makes a new revision: that
/// is what Yew compares, so the cards that read the fleet render again.
pub(super) struct FleetState {
    cell: Rc<RefCell<Shared>>,
    revision: u64,
}

struct Shared {
    session: Session,
    /// The effects of the actions not yet run by the root (`use_session_effects`).
    outbox: Vec<Effect>,
}

impl FleetState {
    /// The page's first state: no fleet yet, the token of this tab (or of
    /// a sign-in link) to sign in with.
    pub(super) fn first() -> FleetState {
        let session = Session::with_token(browser::stored_token());
        FleetState {
            cell: Rc::new(RefCell::new(Shared {
                session,
                outbox: Vec::new(),
            })),
            revision: 0,
        }
    }

    /// The session, to render from. Held only while a component renders:
    /// the reducer needs it back for the next action.
    pub(super) fn session(&self) -> Ref<'_, Session> {
        Ref::map(self.cell.borrow(), |shared| &shared.session)
    }

    /// The effects of the actions since the last call, in order.
    pub(super) fn take_effects(&self) -> Vec<Effect> {
        std::mem::take(&mut self.cell.borrow_mut().outbox)
    }

    pub(super) fn revision(&self) -> u64 {
        self.revision
    }
}

impl PartialEq for FleetState {
    fn eq(&self, other: &Self) -> bool {
        Rc::ptr_eq(&self.cell, &other.cell) && self.revision == other.revision
    }
}

impl Reducible for FleetState {
    type Action = Action;

    fn reduce(self: Rc<Self>, action: Action) -> Rc<Self> {
        {
            let mut shared = self.cell.borrow_mut();
            let effects = shared.session.apply(action);
            shared.outbox.extend(effects);
        }
        Rc::new(FleetState {
            cell: Rc::clone(&self.cell),
            revision: self.revision + 1,
        })
    }
}

/// The handle the cards get from the context: the state and its dispatch.
pub(super) type Fleet = UseReducerHandle<FleetState>;

/// The fleet, from the root's context.
#[hook]
pub(super) fn use_fleet() -> Fleet {
    // Every component is under the root's provider; outside it is a bug here.
    use_context::<Fleet>().expect("a component outside the root's ContextProvider")
}

impl Reducible for NoticeList {
    type Action = NoticeAction;

    fn reduce(self: Rc<Self>, action: NoticeAction) -> Rc<Self> {
        // At most four short lines: copying them is nothing.
        let mut next = (*self).clone();
        next.apply(action);
        Rc::new(next)
    }
}

/// Puts a line in the notice area.
#[derive(Clone)]
pub(super) struct Notify(pub(super) UseReducerDispatcher<NoticeList>);

impl Notify {
    pub(super) fn show(&self, text: String, error: bool) {
        let now = browser::now_ms();
        self.0.dispatch(NoticeAction::Show { text, error, now });
    }
}
