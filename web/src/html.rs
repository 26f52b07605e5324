//! The markup writer the views render into.
//!
//! The page is rendered as one HTML string and patched into the document by
//! [`crate::app` (dom.rs)]. A string and a few `push_str` calls are far less code in
//! the module than a virtual DOM: Yew's runtime and the code its `html!`
//! macro generated were two fifths of the page's module (see
//! docs/benchmarks.md, "Web dashboard").
//!
//! Conventions the views follow, which [`crate::app` (dom.rs)] and the event wiring (`app/events.rs`)
//! rely on:
//! - markup literals go through [`Html::raw`]; anything from the master, a
//!   file or the user through [`Html::text`], [`Html::textf`] or
//!   [`Html::attr`], which escape it;
//! - an element that reacts to a click carries `data-click` ([`Html::click`]),
//!   a text field `data-field` ([`Html::field`]): the values are
//!   [`crate::action`]'s, which the page's listeners read back;
//! - an element whose identity matters across renders (focus, scroll, a
//!   browser test holding it) has an `id` or a `data-key`, unique among its
//!   siblings: the patcher matches children by it;
//! - an `<input>`'s `value` attribute is what the field shows: the patcher
//!   sets the field's value from it when they differ (a controlled field).

use std::fmt::{self, Write};

use crate::action::{Click, TextField};

/// An HTML string under construction.
#[derive(Default)]
pub struct Html {
    buf: String,
}

impl Html {
    pub fn new() -> Html {
        Html {
            buf: String::with_capacity(16 * 1024),
        }
    }

    /// Markup written by the view itself (never data).
    pub fn raw(&mut self, markup: &str) -> &mut Html {
        self.buf.push_str(markup);
        self
    }

    /// Text, escaped.
    pub fn text(&mut self, text: &str) -> &mut Html {
        escape_into(&mut self.buf, text);
        self
    }

    /// Formatted text, escaped: `h.textf(format_args!("{n} done"))`.
    pub fn textf(&mut self, args: fmt::Arguments<'_>) -> &mut Html {
        // Writing into a String cannot fail.
        let _ = Escaped(&mut self.buf).write_fmt(args);
        self
    }

    /// A number as text (numbers need no escaping).
    pub fn num(&mut self, n: impl fmt::Display) -> &mut Html {
        let _ = write!(self.buf, "{n}");
        self
    }

    /// ` name="value"`, the value escaped.
    pub fn attr(&mut self, name: &str, value: &str) -> &mut Html {
        self.buf.push(' ');
        self.buf.push_str(name);
        self.buf.push_str("=\"");
        escape_into(&mut self.buf, value);
        self.buf.push('"');
        self
    }

    /// ` name="value"` with a formatted value, escaped.
    pub fn attrf(&mut self, name: &str, args: fmt::Arguments<'_>) -> &mut Html {
        self.buf.push(' ');
        self.buf.push_str(name);
        self.buf.push_str("=\"");
        let _ = Escaped(&mut self.buf).write_fmt(args);
        self.buf.push('"');
        self
    }

    /// ` data-click="…"`: what a click on the element asks for.
    pub fn click(&mut self, action: Click<'_>) -> &mut Html {
        self.attrf("data-click", format_args!("{action}"))
    }

    /// ` data-field="…"`: the text field the element is.
    pub fn field(&mut self, field: TextField<'_>) -> &mut Html {
        self.attrf("data-field", format_args!("{field}"))
    }

    /// A boolean attribute (` disabled`) when `on`.
    pub fn flag(&mut self, name: &str, on: bool) -> &mut Html {
        if on {
            self.buf.push(' ');
            self.buf.push_str(name);
        }
        self
    }

    /// ` class="a b"` from the names whose condition holds.
    pub fn class(&mut self, names: &[(&str, bool)]) -> &mut Html {
        self.buf.push_str(" class=\"");
        let mut first = true;
        for (name, on) in names {
            if *on {
                if !first {
                    self.buf.push(' ');
                }
                first = false;
                escape_into(&mut self.buf, name);
            }
        }
        self.buf.push('"');
        self
    }

    pub fn into_string(self) -> String {
        self.buf
    }

    pub fn as_str(&self) -> &str {
        &self.buf
    }
}

/// A `fmt::Write` that escapes what is written through it.
struct Escaped<'a>(&'a mut String);

impl Write for Escaped<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        escape_into(self.0, s);
        Ok(())
    }
}

fn escape_into(out: &mut String, text: &str) {
    let mut rest = text;
    while let Some(at) = rest.find(['&', '<', '>', '"', '\'']) {
        out.push_str(&rest[..at]);
        out.push_str(match rest.as_bytes()[at] {
            b'&' => "&amp;",
            b'<' => "&lt;",
            b'>' => "&gt;",
            b'"' => "&quot;",
            _ => "&#39;",
        });
        rest = &rest[at + 1..];
    }
    out.push_str(rest);
}

#[cfg(test)]
mod tests;
