//! The notice area's lines: what a cancel, a retry, a download or a file
//! read came to. Short-lived: each goes when its time is up (later for an
//! error, which the user may want to read twice) or when dismissed, and
//! only the last few are kept, so a burst of replies cannot fill the page.
//! Times are the page's clock, given with each action: the list itself
//! never reads one, so it is tested without waiting.

use tunefleet_shared::protocol::Millis;

/// Notices shown at once; an older one goes when one more arrives.
pub const MAX_NOTICES: usize = 4;

/// One line of the notice area.
#[derive(Clone, Debug, PartialEq)]
pub struct Notice {
    /// Unique in the page's life: what a dismissal names.
    pub id: u64,
    pub text: String,
    pub error: bool,
    /// When it goes by itself.
    pub until: Millis,
}

/// How long a notice stays unless dismissed.
pub fn lifetime_ms(error: bool) -> u64 {
    if error {
        12_000
    } else {
        5_000
    }
}

/// A new notice, a dismissal, or the clock moving on.
#[derive(Clone, Debug, PartialEq)]
pub enum NoticeAction {
    Show {
        text: String,
        error: bool,
        now: Millis,
    },
    Dismiss(u64),
    /// The notices whose time is up at `now` go.
    Expire(Millis),
}

/// The notices on screen, oldest first.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NoticeList {
    items: Vec<Notice>,
    last_id: u64,
}

impl NoticeList {
    pub fn items(&self) -> &[Notice] {
        &self.items
    }

    /// When the next notice goes by itself, if any is shown.
    pub fn next_expiry(&self) -> Option<Millis> {
        self.items.iter().map(|n| n.until).min()
    }

    pub fn apply(&mut self, action: NoticeAction) {
        match action {
            NoticeAction::Show { text, error, now } => {
                self.last_id += 1;
                self.items.push(Notice {
                    id: self.last_id,
                    text,
                    error,
                    until: Millis(now.0 + lifetime_ms(error)),
                });
                if self.items.len() > MAX_NOTICES {
                    self.items.remove(0);
                }
            }
            NoticeAction::Dismiss(id) => self.items.retain(|n| n.id != id),
            NoticeAction::Expire(now) => self.items.retain(|n| n.until > now),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn show(list: &mut NoticeList, text: &str, error: bool, now: u64) {
        list.apply(NoticeAction::Show {
            text: text.into(),
            error,
            now: Millis(now),
        });
    }

    fn texts(list: &NoticeList) -> Vec<&str> {
        list.items().iter().map(|n| n.text.as_str()).collect()
    }

    #[test]
    fn the_last_four_stay_and_a_dismissal_removes_only_its_own() {
        let mut list = NoticeList::default();
        for text in ["a", "b", "c", "d", "e"] {
            show(&mut list, text, false, 0);
        }
        assert_eq!(texts(&list), ["b", "c", "d", "e"]);
        let c = list.items()[1].id;
        list.apply(NoticeAction::Dismiss(c));
        assert_eq!(texts(&list), ["b", "d", "e"]);
        // A dismissal that comes late (its notice already gone) changes nothing.
        list.apply(NoticeAction::Dismiss(c));
        assert_eq!(texts(&list), ["b", "d", "e"]);
        show(&mut list, "f", false, 0);
        let ids: Vec<u64> = list.items().iter().map(|n| n.id).collect();
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "ids never repeat: {ids:?}"
        );
    }

    #[test]
    fn each_goes_when_its_time_is_up_and_errors_stay_longer() {
        let mut list = NoticeList::default();
        show(&mut list, "download failed", true, 1_000);
        show(&mut list, "cancelled job a", false, 2_000);
        assert_eq!(list.next_expiry(), Some(Millis(7_000)));
        list.apply(NoticeAction::Expire(Millis(7_000)));
        assert_eq!(texts(&list), ["download failed"]);
        assert_eq!(list.next_expiry(), Some(Millis(13_000)));
        list.apply(NoticeAction::Expire(Millis(12_999)));
        assert_eq!(texts(&list), ["download failed"]);
        list.apply(NoticeAction::Expire(Millis(13_000)));
        assert_eq!(list.next_expiry(), None);
    }
}
