//! The scorers that read the captured workspace: `file_exists`, `file_exists_one_of`,
//! `file_contains` (a substring or a regular expression) and `file_content_quality`. Paths
//! are relative to the case's workspace and never leave it: a case file naming an absolute
//! path or one that climbs out is refused when read ([`stays_inside`]), and a symbolic link
//! is never followed (the capture lists it without content).

use super::scorer::{excerpt, Pattern, ScoreOutcome};
use super::workspace::{WorkspaceFile, WorkspaceSnapshot};
use std::path::{Component, Path};

/// The score `file_content_quality` passes at.
pub const QUALITY_PASS: f64 = 0.75;

/// Whether `path` is relative, names something below the directory it is taken from, and
/// does not climb above it (`a/../b` stays; `../b`, `/b` and `a/..` do not).
pub fn stays_inside(path: &str) -> bool {
    let mut depth = 0usize;
    for component in Path::new(path).components() {
        match component {
            Component::Normal(_) => depth += 1,
            Component::CurDir => {}
            Component::ParentDir if depth > 0 => depth -= 1,
            _ => return false,
        }
    }
    depth > 0
}

/// The text of the captured file at `path`, or why there is none.
fn text_of<'a>(workspace: &'a WorkspaceSnapshot, path: &str) -> Result<&'a str, String> {
    match workspace.file(path) {
        None => Err(format!("{path} is not in the workspace")),
        Some(WorkspaceFile { symlink: true, .. }) => {
            Err(format!("{path} is a symbolic link; links are not followed"))
        }
        Some(WorkspaceFile {
            content: Some(content),
            ..
        }) => Ok(content),
        Some(_) => Err(format!("{path} is binary")),
    }
}

pub fn exists(name: String, workspace: &WorkspaceSnapshot, path: &str) -> ScoreOutcome {
    let passed = workspace.file(path).is_some();
    let details = if passed {
        format!("{path} is in the workspace")
    } else {
        format!("{path} is not in the workspace")
    };
    ScoreOutcome::binary(name, passed, details)
}

pub fn exists_one_of(
    name: String,
    workspace: &WorkspaceSnapshot,
    paths: &[String],
) -> ScoreOutcome {
    match paths.iter().find(|p| workspace.file(p).is_some()) {
        Some(found) => ScoreOutcome::binary(name, true, format!("{found} is in the workspace")),
        None => ScoreOutcome::binary(
            name,
            false,
            format!("none of {} is in the workspace", paths.join(", ")),
        ),
    }
}

pub fn contains(
    name: String,
    workspace: &WorkspaceSnapshot,
    path: &str,
    text: &Option<String>,
    pattern: &Option<Pattern>,
) -> ScoreOutcome {
    let content = match text_of(workspace, path) {
        Ok(content) => content,
        Err(why) => return ScoreOutcome::binary(name, false, why),
    };
    let passed = match (text, pattern) {
        (Some(text), _) => content.contains(text.as_str()),
        (None, Some(pattern)) => pattern.is_match(content),
        (None, None) => false,
    };
    ScoreOutcome::binary(name, passed, format!("{path} holds {}", excerpt(content)))
}

/// 1 when `content` equals `expected` once both are trimmed, 0.75 when the trimmed content
/// holds `expected`, 0.5 when the raw content does, else 0.
pub fn quality_level(content: &str, expected: &str) -> f64 {
    let trimmed = content.trim();
    if trimmed == expected.trim() {
        1.0
    } else if trimmed.contains(expected) {
        0.75
    } else if content.contains(expected) {
        0.5
    } else {
        0.0
    }
}

pub fn quality(
    name: String,
    workspace: &WorkspaceSnapshot,
    path: &str,
    expected: &str,
) -> ScoreOutcome {
    let content = match text_of(workspace, path) {
        Ok(content) => content,
        Err(why) => return ScoreOutcome::binary(name, false, why),
    };
    let score = quality_level(content, expected);
    let how = match score {
        s if s >= 1.0 => "equals it (trimmed)",
        s if s >= 0.75 => "holds it (trimmed)",
        s if s > 0.0 => "holds it only with the surrounding whitespace",
        _ => "does not hold it",
    };
    ScoreOutcome {
        name,
        passed: score >= QUALITY_PASS,
        score,
        details: format!(
            "expected {}: {path} {how}; it holds {}",
            excerpt(expected),
            excerpt(content)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, content: Option<&str>, symlink: bool) -> WorkspaceFile {
        WorkspaceFile {
            path: path.into(),
            size: content.map_or(0, |c| c.len() as u64),
            binary: content.is_none() && !symlink,
            truncated: false,
            content: content.map(str::to_string),
            symlink,
        }
    }

    fn workspace() -> WorkspaceSnapshot {
        WorkspaceSnapshot {
            cwd: String::new(),
            files: vec![
                file("answer.txt", Some("  42\n"), false),
                file("blob.bin", None, false),
                file("leak.txt", None, true),
                file("notes.md", Some("# Notes\nthe answer is 42\n"), false),
            ],
        }
    }

    #[test]
    fn quality_levels_follow_trimmed_equality_then_containment() {
        assert_eq!(quality_level("  42\n", "42"), 1.0);
        assert_eq!(quality_level("42", " 42 "), 1.0);
        assert_eq!(quality_level("the answer is 42\n", "42"), 0.75);
        assert_eq!(quality_level("the answer is 42\n", "42\n"), 0.5);
        assert_eq!(quality_level("forty-two", "42"), 0.0);
        assert_eq!(quality_level("", "42"), 0.0);
    }

    #[test]
    fn quality_passes_at_three_quarters() {
        let ws = workspace();
        let exact = quality("q".into(), &ws, "answer.txt", "42");
        assert_eq!((exact.score, exact.passed), (1.0, true));
        let holds = quality("q".into(), &ws, "notes.md", "answer is 42");
        assert_eq!((holds.score, holds.passed), (0.75, true));
        let raw = quality("q".into(), &ws, "notes.md", "42\n");
        assert_eq!((raw.score, raw.passed), (0.5, false));
        assert!(raw.details.contains("surrounding whitespace"), "{raw:?}");
        let none = quality("q".into(), &ws, "notes.md", "43");
        assert_eq!((none.score, none.passed), (0.0, false));
        let missing = quality("q".into(), &ws, "gone.txt", "42");
        assert_eq!(missing.details, "gone.txt is not in the workspace");
    }

    #[test]
    fn links_and_binaries_have_no_content_to_score() {
        let ws = workspace();
        let link = contains("c".into(), &ws, "leak.txt", &Some("s".into()), &None);
        assert!(!link.passed);
        assert_eq!(
            link.details,
            "leak.txt is a symbolic link; links are not followed"
        );
        let link = quality("q".into(), &ws, "leak.txt", "secret");
        assert_eq!((link.score, link.passed), (0.0, false));
        let binary = contains("c".into(), &ws, "blob.bin", &Some("x".into()), &None);
        assert_eq!(binary.details, "blob.bin is binary");
    }

    #[test]
    fn contains_takes_a_substring_or_a_pattern() {
        let ws = workspace();
        let pattern = Some(Pattern::from(r"(?m)^the answer is \d+$".to_string()));
        assert!(contains("c".into(), &ws, "notes.md", &None, &pattern).passed);
        let other = Some(Pattern::from(r"^\d+$".to_string()));
        assert!(!contains("c".into(), &ws, "notes.md", &None, &other).passed);
        assert!(contains("c".into(), &ws, "notes.md", &Some("is 42".into()), &None).passed);
    }

    #[test]
    fn one_of_passes_on_any_path() {
        let ws = workspace();
        let paths = ["missing.txt".to_string(), "notes.md".to_string()];
        let found = exists_one_of("e".into(), &ws, &paths);
        assert!(found.passed);
        assert_eq!(found.details, "notes.md is in the workspace");
        let none = exists_one_of("e".into(), &ws, &paths[..1]);
        assert!(!none.passed);
        assert_eq!(none.details, "none of missing.txt is in the workspace");
    }

    #[test]
    fn paths_must_stay_inside() {
        for ok in ["a.txt", "./a.txt", "dir/a.txt", "dir/../a.txt"] {
            assert!(stays_inside(ok), "{ok}");
        }
        for bad in [
            "",
            ".",
            "/etc/passwd",
            "../a.txt",
            "dir/../../a.txt",
            "a/..",
        ] {
            assert!(!stays_inside(bad), "{bad}");
        }
    }
}
