//! What the page's elements ask for when used: the values of their
//! `data-click` and `data-field` attributes.
//!
//! The views write them (`Html::click`, `Html::field`) and the page's event
//! listeners read them back (`app/events.rs`) through the one type here, so
//! a button cannot name an action the listener does not know: the tests
//! below read back every value written.

use std::fmt;

use crate::model::{SortKey, StateFilter};

/// A file the jobs card offers for download; the checker module makes it.
pub use web_check::downloads::Download;

/// What a click (or Enter on a focusable row) on an element asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Click<'a> {
    ToggleTheme,
    SignOut,
    Reconnect,
    DismissNotice(u64),
    ClearUpload,
    Submit,
    SubmitModel,
    Filter(StateFilter),
    Sort(SortKey),
    ShowMore,
    /// Opens a job's detail.
    Select(&'a str),
    CloseDetail,
    /// Opens a model run's detail (or closes it, when open).
    Model(&'a str),
    CloseModel,
    Cancel(&'a str),
    Retry(&'a str),
    Download(Download),
}

/// A text field whose every change the page follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TextField<'a> {
    Token,
    UploadText,
    Search,
    ModelName,
    ModelTrials,
    /// The shape given for this input of the model.
    Shape(&'a str),
}

const SORT_NAMES: [(SortKey, &str); 9] = [
    (SortKey::Created, "created"),
    (SortKey::Name, "name"),
    (SortKey::Op, "op"),
    (SortKey::State, "state"),
    (SortKey::Attempts, "attempts"),
    (SortKey::Worker, "worker"),
    (SortKey::Progress, "progress"),
    (SortKey::Best, "best"),
    (SortKey::Gflops, "gflops"),
];

fn name_of<T: PartialEq + Copy>(names: &[(T, &'static str)], value: T) -> &'static str {
    names
        .iter()
        .find(|(v, _)| *v == value)
        .map_or("", |(_, name)| name)
}

fn value_of<T: Copy>(names: &[(T, &str)], name: &str) -> Option<T> {
    names.iter().find(|(_, n)| *n == name).map(|(v, _)| *v)
}

impl<'a> Click<'a> {
    /// Reads a `data-click` value: `verb` or `verb:argument`.
    pub fn parse(value: &'a str) -> Option<Click<'a>> {
        let (verb, arg) = value.split_once(':').unwrap_or((value, ""));
        Some(match verb {
            "theme" => Click::ToggleTheme,
            "sign-out" => Click::SignOut,
            "reconnect" => Click::Reconnect,
            "dismiss" => Click::DismissNotice(arg.parse().ok()?),
            "clear-upload" => Click::ClearUpload,
            "submit" => Click::Submit,
            "submit-model" => Click::SubmitModel,
            "filter" => Click::Filter(StateFilter::ALL.into_iter().find(|f| f.label() == arg)?),
            "sort" => Click::Sort(value_of(&SORT_NAMES, arg)?),
            "more" => Click::ShowMore,
            "select" => Click::Select(arg),
            "close-detail" => Click::CloseDetail,
            "model" => Click::Model(arg),
            "close-model" => Click::CloseModel,
            "cancel" => Click::Cancel(arg),
            "retry" => Click::Retry(arg),
            "download" => Click::Download(Download::from_name(arg)?),
            _ => return None,
        })
    }
}

impl fmt::Display for Click<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (verb, arg): (&str, Option<&str>) = match self {
            Click::ToggleTheme => ("theme", None),
            Click::SignOut => ("sign-out", None),
            Click::Reconnect => ("reconnect", None),
            Click::DismissNotice(id) => return write!(f, "dismiss:{id}"),
            Click::ClearUpload => ("clear-upload", None),
            Click::Submit => ("submit", None),
            Click::SubmitModel => ("submit-model", None),
            Click::Filter(filter) => ("filter", Some(filter.label())),
            Click::Sort(key) => ("sort", Some(name_of(&SORT_NAMES, *key))),
            Click::ShowMore => ("more", None),
            Click::Select(job) => ("select", Some(job)),
            Click::CloseDetail => ("close-detail", None),
            Click::Model(name) => ("model", Some(name)),
            Click::CloseModel => ("close-model", None),
            Click::Cancel(job) => ("cancel", Some(job)),
            Click::Retry(job) => ("retry", Some(job)),
            Click::Download(what) => ("download", Some(what.name())),
        };
        f.write_str(verb)?;
        if let Some(arg) = arg {
            f.write_str(":")?;
            f.write_str(arg)?;
        }
        Ok(())
    }
}

impl<'a> TextField<'a> {
    /// Reads a `data-field` value.
    pub fn parse(value: &'a str) -> Option<TextField<'a>> {
        Some(match value.split_once(':') {
            Some(("shape", input)) => TextField::Shape(input),
            Some(_) => return None,
            None => match value {
                "token" => TextField::Token,
                "upload-text" => TextField::UploadText,
                "search" => TextField::Search,
                "model-name" => TextField::ModelName,
                "model-trials" => TextField::ModelTrials,
                _ => return None,
            },
        })
    }
}

impl fmt::Display for TextField<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TextField::Token => "token",
            TextField::UploadText => "upload-text",
            TextField::Search => "search",
            TextField::ModelName => "model-name",
            TextField::ModelTrials => "model-trials",
            TextField::Shape(input) => return write!(f, "shape:{input}"),
        })
    }
}

#[cfg(test)]
mod tests;
