//! The parts of a case file's case that take more than a field: the `workspace` (a seed
//! directory, or the anchor's workspace options), `timeout_ms`, relative paths that must stay
//! in the workspace, and a judge's `metric`.

use super::scorer::Scorer;
use super::suite::Case;
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// A case's `workspace`: the seed directory alone (`workspace = "seed/sales"`), or the
/// anchor's options (`workspace = { seedDir = "seed/sales", seedTarget = "data", retain =
/// true, capture = ["out"] }`; snake_case names are taken too).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct WorkspaceSpec {
    #[serde(default, alias = "seed_dir")]
    pub seed_dir: Option<PathBuf>,
    #[serde(default, alias = "seed_target")]
    pub seed_target: Option<String>,
    #[serde(default)]
    pub retain: bool,
    #[serde(default)]
    pub capture: Option<Vec<String>>,
}

impl<'de> Deserialize<'de> for WorkspaceSpecOrSeed {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Either;
        impl<'de> serde::de::Visitor<'de> for Either {
            type Value = WorkspaceSpecOrSeed;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str(
                    "a seed directory (a string) or a table of seedDir, seedTarget, retain, \
                     capture",
                )
            }
            fn visit_str<E: serde::de::Error>(self, seed: &str) -> Result<Self::Value, E> {
                Ok(WorkspaceSpecOrSeed(WorkspaceSpec {
                    seed_dir: Some(PathBuf::from(seed)),
                    ..WorkspaceSpec::default()
                }))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<Self::Value, A::Error> {
                WorkspaceSpec::deserialize(serde::de::value::MapAccessDeserializer::new(map))
                    .map(WorkspaceSpecOrSeed)
            }
        }
        deserializer.deserialize_any(Either)
    }
}

/// [`WorkspaceSpec`] as a case file may write it: a string or a table.
pub(super) struct WorkspaceSpecOrSeed(pub WorkspaceSpec);

/// A `timeout_ms` must be a number of milliseconds above 0 (at most a day).
pub(super) fn check_timeout_ms(ms: f64) -> Result<(), String> {
    if ms.is_finite() && ms > 0.0 && ms <= 86_400_000.0 {
        Ok(())
    } else {
        Err(format!(
            "timeout_ms must be above 0 and at most 86400000 (a day), got {ms}"
        ))
    }
}

/// Whether `path` is relative and does not climb out of the directory it is taken from.
pub(super) fn is_inside(path: &str) -> bool {
    let mut depth = 0usize;
    for component in Path::new(path).components() {
        match component {
            std::path::Component::Normal(_) => depth += 1,
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir if depth > 0 => depth -= 1,
            _ => return false,
        }
    }
    true
}

/// What is wrong with a judge's `metric`: it must name a metric the case declares (in the
/// suite or the case) with no `measure`, the value being the judge's. As the anchor's
/// undeclared metric id, a mistake here is an authoring error, refused when read.
pub(super) fn judge_metric_error(case: &Case) -> Option<String> {
    case.scorers.iter().find_map(|scorer| {
        let Scorer::Judge {
            metric: Some(metric),
            ..
        } = scorer
        else {
            return None;
        };
        let declared: Vec<&str> = case.metrics.keys().map(String::as_str).collect();
        match case.metrics.get(metric) {
            None => Some(format!(
                "case {:?}: scorer {}: metric {metric:?} is not declared; declare it under \
                 [metrics.{metric}] or [case.metrics.{metric}] with min, max and direction \
                 (declared: [{}])",
                case.id,
                scorer.name(),
                declared.join(", ")
            )),
            Some(spec) if spec.measure.is_some() => Some(format!(
                "case {:?}: scorer {}: metric {metric:?} has a `measure`; a metric a judge \
                 emits declares none",
                case.id,
                scorer.name()
            )),
            Some(_) => None,
        }
    })
}
