//! Hints for unknown names: the closest known one when it is close enough to be a typo,
//! else the names there are.

use crate::keys::{self, KEYS};

/// "; did you mean ..." for an unknown key, or the keys the section has.
pub(super) fn key_hint(section: &str, key: &str) -> String {
    let here = keys::section_keys(section).map(|spec| spec.key);
    if let Some(s) = suggest(key, here) {
        return format!("; did you mean `{s}`?");
    }
    let normalized = normalize(key);
    if let Some(spec) = KEYS.iter().find(|spec| spec.key == normalized) {
        return format!("; did you mean `{}` in [{}]?", spec.key, spec.section);
    }
    format!(
        "; keys of [{section}] are {}",
        list(keys::section_keys(section).map(|spec| spec.key))
    )
}

pub(super) fn list<'a>(names: impl Iterator<Item = &'a str>) -> String {
    names
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

pub(super) fn normalize(name: &str) -> String {
    name.trim().to_ascii_lowercase().replace('_', "-")
}

/// The candidate closest to `input`, if close enough to be a typo of it.
pub(super) fn suggest<'a>(
    input: &str,
    candidates: impl Iterator<Item = &'a str>,
) -> Option<&'a str> {
    let input = normalize(input);
    let limit = (input.chars().count() / 4).max(1);
    candidates
        .map(|c| (strsim::damerau_levenshtein(&input, &normalize(c)), c))
        .filter(|(distance, _)| *distance <= limit)
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, c)| c)
}
