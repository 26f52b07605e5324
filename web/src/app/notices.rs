//! The notice area: the lines the root keeps ([`crate::notices`]), and the
//! one timer that takes each away when its time is up.

use gloo::timers::callback::Timeout;
use yew::prelude::*;

use super::browser;
use crate::notices::{NoticeAction, NoticeList};

#[derive(Properties, PartialEq)]
pub(super) struct NoticesProps {
    /// The root's list: shown here, written by the root's `Notify`.
    pub notices: UseReducerHandle<NoticeList>,
}

#[function_component]
pub(super) fn Notices(p: &NoticesProps) -> Html {
    let list = p.notices.dispatcher();
    use_effect_with(p.notices.next_expiry(), move |until| {
        // A timer for the next to go; the next render sets the one after.
        let timer = until.map(|until| {
            let wait = until.0.saturating_sub(browser::now_ms().0);
            Timeout::new(wait as u32, move || {
                list.dispatch(NoticeAction::Expire(until))
            })
        });
        move || drop(timer)
    });
    let dismiss = p.notices.dispatcher();
    html! {
        <div class="notices" aria-live="polite">
            { for p.notices.items().iter().map(|notice| {
                let (id, dismiss) = (notice.id, dismiss.clone());
                let onclick = Callback::from(move |_: MouseEvent| {
                    dismiss.dispatch(NoticeAction::Dismiss(id))
                });
                html! {
                    <div key={id} class={if notice.error { "notice error" } else { "notice" }}>
                        <span>{ notice.text.clone() }</span>
                        <button class="icon small" aria-label="dismiss" {onclick}>{ "×" }</button>
                    </div>
                }
            }) }
        </div>
    }
}
