//! Patches the document to match freshly rendered markup.
//!
//! The browser parses the markup (into a `<template>`, so nothing in it runs
//! or loads), then the live tree is walked beside the parsed one and brought
//! in line: attributes and text are changed in place, elements are kept
//! where they match, so focus, the caret, scroll positions and references a
//! test holds survive a render. Children are matched by key (`id`, else
//! `data-key`) when they have one, else by position and tag: a sibling that
//! comes and goes should have a key, or the unkeyed ones after it are
//! rebuilt rather than moved.
//!
//! Form fields are controlled: an `<input>` shows its `value` attribute and a
//! `<textarea>` its text, set as the field's value only when they differ (so
//! typing is never interrupted by a render of what was just typed). As in a
//! virtual DOM, a field is written when its markup changes: a subtree whose
//! markup equals the live one (`isEqualNode`, one native call) is skipped.

use std::collections::{HashMap, HashSet};

use wasm_bindgen::JsCast;
use web_sys::{Element, HtmlInputElement, HtmlTemplateElement, HtmlTextAreaElement, Node};

/// Makes `root`'s children what `markup` describes.
pub(super) fn patch(root: &Element, markup: &str) {
    let Ok(template) = gloo::utils::document().create_element("template") else {
        return;
    };
    let template: HtmlTemplateElement = template.unchecked_into();
    template.set_inner_html(markup);
    patch_children(root, &template.content());
}

fn key(node: &Node) -> Option<String> {
    let element = node.dyn_ref::<Element>()?;
    let id = element.id();
    if id.is_empty() {
        element.get_attribute("data-key")
    } else {
        Some(id)
    }
}

fn same_kind(a: &Node, b: &Node) -> bool {
    a.node_type() == b.node_type() && a.node_name() == b.node_name()
}

fn children(parent: &Node) -> Vec<Node> {
    let mut out = Vec::new();
    let mut next = parent.first_child();
    while let Some(node) = next {
        next = node.next_sibling();
        out.push(node);
    }
    out
}

/// Brings `live`'s children in line with `fresh`'s, moving fresh nodes into
/// the document where no live one matches.
fn patch_children(live: &Node, fresh: &Node) {
    // Each node's key is read once: every read is a call out to the browser.
    let with_keys = |parent: &Node| -> Vec<(Node, Option<String>)> {
        children(parent)
            .into_iter()
            .map(|node| {
                let key = key(&node);
                (node, key)
            })
            .collect()
    };
    let wanted = with_keys(fresh);
    let old = with_keys(live);
    let wanted_keys: HashSet<String> = wanted.iter().filter_map(|(_, k)| k.clone()).collect();
    let mut keyed: HashMap<&str, usize> = old
        .iter()
        .enumerate()
        .filter_map(|(i, (_, k))| Some((k.as_deref()?, i)))
        .collect();
    let mut used = vec![false; old.len()];
    // The first live child not matched yet. The live children not matched
    // keep their order; matched and new ones go before the cursor.
    let mut cursor = 0;
    for (new, new_key) in &wanted {
        while cursor < old.len() && used[cursor] {
            cursor += 1;
        }
        // Keyed children the markup no longer has go now, so that they do
        // not stand between the cursor and the next match.
        while let Some((node, Some(k))) = old.get(cursor) {
            if wanted_keys.contains(k) {
                break;
            }
            let _ = live.remove_child(node);
            used[cursor] = true;
            cursor += 1;
            while cursor < old.len() && used[cursor] {
                cursor += 1;
            }
        }
        let found = match new_key {
            Some(k) => keyed
                .remove(k.as_str())
                .filter(|&i| !used[i] && same_kind(&old[i].0, new)),
            None => old
                .get(cursor)
                .filter(|(node, k)| k.is_none() && same_kind(node, new))
                .map(|_| cursor),
        };
        let anchor = old.get(cursor).map(|(node, _)| node);
        match found {
            Some(i) => {
                used[i] = true;
                let node = &old[i].0;
                if i != cursor {
                    let _ = live.insert_before(node, anchor);
                }
                // One native deep comparison spares the walk of a subtree
                // that did not change (most rows of a table, most renders).
                if !node.is_equal_node(Some(new)) {
                    patch_node(node, new);
                }
            }
            None => {
                let _ = live.insert_before(new, anchor);
            }
        }
    }
    for ((node, _), used) in old.iter().zip(used) {
        if !used {
            let _ = live.remove_child(node);
        }
    }
}

fn patch_node(live: &Node, fresh: &Node) {
    let (Some(old), Some(new)) = (live.dyn_ref::<Element>(), fresh.dyn_ref::<Element>()) else {
        // Text (and comments).
        let text = fresh.node_value();
        if live.node_value() != text {
            live.set_node_value(text.as_deref());
        }
        return;
    };
    patch_attributes(old, new);
    if let (Some(old), Some(new)) = (
        old.dyn_ref::<HtmlTextAreaElement>(),
        new.dyn_ref::<HtmlTextAreaElement>(),
    ) {
        // The text too (the field's default value), so that the comparison
        // above sees a field whose markup did not change as equal.
        let value = new.value();
        let _ = old.set_default_value(&value);
        if old.value() != value {
            old.set_value(&value);
        }
        return;
    }
    if let Some(input) = old.dyn_ref::<HtmlInputElement>() {
        if let Some(value) = new.get_attribute("value") {
            if input.value() != value {
                input.set_value(&value);
            }
        }
    }
    patch_children(live, fresh);
}

fn patch_attributes(old: &Element, new: &Element) {
    for name in new.get_attribute_names().iter() {
        let Some(name) = name.as_string() else {
            continue;
        };
        let value = new.get_attribute(&name).unwrap_or_default();
        if old.get_attribute(&name).as_deref() != Some(value.as_str()) {
            let _ = old.set_attribute(&name, &value);
        }
    }
    for name in old.get_attribute_names().iter() {
        if let Some(name) = name.as_string() {
            if !new.has_attribute(&name) {
                let _ = old.remove_attribute(&name);
            }
        }
    }
}
