//! Property tests of the configuration parser: any file text and any override variable give
//! a configuration or typed errors naming what was wrong, never a panic.
//!
//! Cases per property: proptest's `PROPTEST_CASES` (256 unless set).

use cellvisor_config::keys::{ENV_PREFIX, KEYS, SECTIONS};
use cellvisor_config::{parse_str, ConfigError};
use proptest::prelude::*;
use std::path::Path;

fn check(text: &str, env: Vec<(String, String)>) -> Result<(), TestCaseError> {
    match parse_str(text, Path::new("config.toml"), env) {
        Ok(effective) => {
            // What was accepted reads back the same.
            let again = parse_str(&effective.show(), Path::new("config.toml"), Vec::new());
            prop_assert!(
                again.is_ok(),
                "accepted config does not re-read: {:?}",
                again.err()
            );
        }
        Err(ConfigError::Invalid { errors, .. }) => {
            prop_assert!(!errors.is_empty(), "an invalid config with no error");
            for error in errors {
                prop_assert!(!error.to_string().is_empty());
            }
        }
        Err(other) => prop_assert!(false, "parsing text read nothing: {other}"),
    }
    Ok(())
}

fn toml_value() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        any::<f64>().prop_map(|n| format!("{n:?}")),
        any::<bool>().prop_map(|b| b.to_string()),
        prop::sample::select(vec![
            "\"5s\"",
            "\"0\"",
            "\"1MiB\"",
            "\"-1s\"",
            "\"1e400GiB\"",
            "\"\"",
            "\"*\"",
            "\"AWS_*\"",
            "\"*_TOKEN\"",
            "[\"A\", \"*B*\"]",
            "[1, 2]",
            "{ A = \"1\" }",
            "\"10years\"",
            "18446744073709551615",
            "\"18446744073709551616B\"",
            "[]",
            "{}",
        ])
        .prop_map(String::from),
        "\"[^\"\\\\\\n]{0,12}\"".prop_map(|s| s),
    ]
}

fn config_text() -> impl Strategy<Value = String> {
    let known: Vec<(String, String)> = KEYS
        .iter()
        .map(|k| (k.section.to_string(), k.key.to_string()))
        .collect();
    let key = prop_oneof![
        4 => prop::sample::select(known),
        1 => ("[a-z]{1,6}", "[a-z-]{1,12}"),
    ];
    prop::collection::vec((key, toml_value()), 0..8).prop_map(|entries| {
        entries
            .into_iter()
            .map(|((section, key), value)| format!("[{section}]\n{key} = {value}\n"))
            .collect()
    })
}

proptest! {
    #[test]
    fn arbitrary_text_gives_a_config_or_typed_errors(text in "\\PC{0,200}") {
        check(&text, Vec::new())?;
    }

    #[test]
    fn generated_files_give_a_config_or_typed_errors(text in config_text()) {
        check(&text, Vec::new())?;
    }

    #[test]
    fn mutated_files_give_a_config_or_typed_errors(
        text in config_text(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<char>()), 1..4),
    ) {
        let mut chars: Vec<char> = text.chars().collect();
        if !chars.is_empty() {
            for (at, c) in edits {
                let at = at.index(chars.len());
                chars[at] = c;
            }
        }
        check(&chars.into_iter().collect::<String>(), Vec::new())?;
    }

    #[test]
    fn override_variables_give_a_config_or_typed_errors(
        section in prop::sample::select(SECTIONS.to_vec()),
        key in "[A-Z_]{1,16}",
        value in "\\PC{0,24}",
    ) {
        let name = format!("{ENV_PREFIX}{}__{key}", section.to_uppercase());
        check("", vec![(name, value)])?;
    }
}
