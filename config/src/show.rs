//! The configuration as text: `config show`'s effective configuration, TOML that parses back
//! to the same [`Config`](crate::Config), each key commented with where its value came from
//! and when a change to it applies; what changed between two configurations; and the key
//! table of `docs/config.md`.

use crate::check::Effective;
use crate::keys::{self, AppliesWhen, Kind, Value, KEYS, SECTIONS};
use crate::Config;

/// `value` as TOML source, or `None` when unset.
pub(crate) fn toml_value(value: &Value) -> Option<String> {
    Some(match value {
        Value::Unset => return None,
        Value::Count(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Duration(d) => quote(&keys::format_duration(*d)),
        Value::Size(n) => quote(&keys::format_size(*n)),
        Value::Text(t) => quote(t),
        Value::Path(p) => quote(&p.to_string_lossy()),
        Value::Names(names) => {
            let items: Vec<String> = names.iter().map(|n| quote(n)).collect();
            format!("[{}]", items.join(", "))
        }
        Value::Map(map) if map.is_empty() => "{}".to_string(),
        Value::Map(map) => {
            let items: Vec<String> = map
                .iter()
                .map(|(k, v)| {
                    format!(
                        "{} = {}",
                        toml_edit::Key::new(k.as_str()).display_repr(),
                        quote(v)
                    )
                })
                .collect();
            format!("{{ {} }}", items.join(", "))
        }
    })
}

/// A TOML basic string, escaped as needed.
fn quote(text: &str) -> String {
    toml_edit::Value::from(text).to_string().trim().to_string()
}

/// `section.key: old -> new` for every key whose value differs between two configurations,
/// in table order, values written as in the file (`unset` for an unset optional key): what a
/// reload reports.
pub fn changes(old: &Config, new: &Config) -> Vec<String> {
    let shown = |value: &Value| toml_value(value).unwrap_or_else(|| "unset".to_string());
    KEYS.iter()
        .filter_map(|spec| {
            let (before, after) = ((spec.get)(old), (spec.get)(new));
            (before != after)
                .then(|| format!("{}: {} -> {}", spec.name(), shown(&before), shown(&after)))
        })
        .collect()
}

impl Effective {
    /// Every key with its value, origin (`# default`, `# file PATH:LINE`, `# env VAR`) and
    /// when a change to it applies (`; applies at once`); unset optional keys are shown
    /// commented out.
    pub fn show(&self) -> String {
        let mut out = String::from("# cellvisor's effective configuration\n");
        match &self.path {
            Some(path) => out.push_str(&format!("# config file: {}\n", path.display())),
            None => out.push_str("# no config file; defaults and overrides only\n"),
        }
        out.push_str(&applies_legend());
        for section in SECTIONS {
            out.push_str(&format!("\n[{section}]\n"));
            for (index, spec) in KEYS.iter().enumerate() {
                if spec.section != *section {
                    continue;
                }
                let origin = self
                    .origins
                    .get(index)
                    .map(|o| o.comment())
                    .unwrap_or_else(|| "default".to_string());
                let applies = spec.applies.label();
                match toml_value(&(spec.get)(&self.config)) {
                    Some(value) => out.push_str(&format!(
                        "{} = {value}  # {origin}; applies {applies}\n",
                        spec.key
                    )),
                    None => out.push_str(&format!(
                        "# {} = (unset)  # {origin}; applies {applies}\n",
                        spec.key
                    )),
                }
            }
        }
        out
    }
}

/// What `config show` says under its header about the apply times: the running daemon
/// re-reads its file on `config/reload` and SIGHUP, and not every key takes effect then.
fn applies_legend() -> String {
    let labels: Vec<&str> = AppliesWhen::ALL.iter().map(|when| when.label()).collect();
    format!(
        "# after each key: where its value came from, and when a reload (config/reload or\n\
         # SIGHUP) applies a change to it: {}\n",
        labels.join(", ")
    )
}

/// The key table of `docs/config.md`, generated so the docs cannot drift from the ranges.
pub fn markdown_table() -> String {
    let defaults = Config::default();
    let mut out = String::new();
    for section in SECTIONS {
        out.push_str(&format!("\n### `[{section}]`\n\n"));
        out.push_str("| key | default | allowed | applies | override variable | what it does |\n");
        out.push_str("| --- | --- | --- | --- | --- | --- |\n");
        for spec in keys::section_keys(section) {
            let default = match (spec.get)(&defaults) {
                Value::Unset => "unset".to_string(),
                value => format!("`{}`", toml_value(&value).unwrap_or_default()),
            };
            let env = if spec.kind == Kind::Map {
                "—".to_string()
            } else {
                format!("`{}`", spec.env_var())
            };
            out.push_str(&format!(
                "| `{}` | {} | {} | {} | {} | {} |\n",
                spec.key,
                default,
                spec.kind.describe().replace('|', "\\|"),
                spec.applies.label(),
                env,
                spec.doc
            ));
        }
    }
    out
}
