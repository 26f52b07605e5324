//! Small pieces the cards share: the trials bar, the state badge, table
//! headers and number cells, the class builder and the event adapters.
//! Plain functions, not components: each component costs the page's module
//! ~0.5 KB in brotli (its lifecycle is compiled per type), and these have
//! no state of their own.

use tunefleet_shared::protocol::JobState;
use yew::prelude::*;

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

/// Calls `f` with the value of the field an input event came from.
pub(super) fn on_input(f: impl Fn(String) + 'static) -> Callback<InputEvent> {
    Callback::from(move |e: InputEvent| {
        let value = e
            .target()
            .and_then(|t| js_sys::Reflect::get(&t, &"value".into()).ok())
            .and_then(|v| v.as_string())
            .unwrap_or_default();
        f(value)
    })
}

/// A click on a `<a href="#">`: calls `f`, leaves the address alone, and
/// keeps the click from the row around the link.
pub(super) fn on_link(f: impl Fn() + 'static) -> Callback<MouseEvent> {
    Callback::from(move |e: MouseEvent| {
        e.prevent_default();
        e.stop_propagation();
        f()
    })
}

/// A clickable table row that the keyboard opens too: a click, or Enter on
/// the focused row itself (not on a button in it), calls `open`.
pub(super) fn row_opener(open: Callback<()>) -> (Callback<MouseEvent>, Callback<KeyboardEvent>) {
    let onclick = open.reform(|_: MouseEvent| ());
    let onkeydown = Callback::from(move |e: KeyboardEvent| {
        let on_row = e
            .target_dyn_into::<web_sys::Element>()
            .is_some_and(|t| t.tag_name() == "TR");
        if e.key() == "Enter" && on_row {
            open.emit(());
        }
    });
    (onclick, onkeydown)
}

/// A table's header row: each column's label, whether it holds numbers
/// (right-aligned), and what its header's tooltip explains, if anything.
pub(super) fn head(cols: &[(&'static str, bool, Option<&'static str>)]) -> Html {
    let th = |&(label, num, title): &(&'static str, bool, Option<&'static str>)| {
        html! { <th class={num.then_some("num")} {title}>{ label }</th> }
    };
    html! { <thead><tr>{ for cols.iter().map(th) }</tr></thead> }
}

/// A table cell that holds a number (right-aligned).
pub(super) fn num_cell(text: String) -> Html {
    html! { <td class="num">{ text }</td> }
}

pub(super) fn state_badge(state: JobState) -> Html {
    let s = state.as_str();
    html! { <span class={format!("badge st-{s}")}>{ s }</span> }
}

/// A progress bar of `done` out of `total` trials, coloured by `state`
/// (`st-<state>`).
pub(super) fn trials_bar(
    done: u32,
    total: u32,
    state: &'static str,
    label_class: &'static str,
) -> Html {
    let pct = crate::format::trials_percent(done, total);
    html! {
        <div class="trials">
            <div class="bar small" role="progressbar" aria-valuemin="0"
                aria-valuemax={total.to_string()} aria-valuenow={done.to_string()}>
                <div class={format!("seg st-{state}")}
                    style={format!("width:{pct:.1}%")}></div>
            </div>
            <span class={label_class}>{ format!("{done}/{total}") }</span>
        </div>
    }
}
