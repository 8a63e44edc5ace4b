//! The JavaScript worker's snapshots: its user globals written to a payload and read back.
//!
//! User globals are the own properties of `globalThis` (enumerable or not) that were not
//! there once the prelude was installed ([`host_names`]), other than the worker's own
//! `__cellvisor*` ones. Top-level `let`/`const`/`class` of cells are among them: `redeclare`
//! makes them `var`s, which are properties of the global object.
//!
//! `state.js` does the encoding (a tagged JSON of its own, described there) and decoding
//! with four native helpers defined here: the engine class of a value (how a Proxy, a
//! generator or a host object is told from a plain object), the free names of a function's
//! source (a function that refers to names that are not globals is a closure, whose captured
//! variables cannot be saved: it is skipped and named), and base64 for `ArrayBuffer`s.
//!
//! A payload is one JSON text, `{"format": "cellvisor-js-state", "version": 1, "entries":
//! [...]}`. Loading checks it is that JSON before touching the namespace; `replace` then
//! starts a fresh context with the prelude (globals made by `var` cannot be deleted).

use super::JsEngine;
use crate::runtime::{Interrupt, LoadedState, SavedState, StateError};
use base64::Engine as _;
use cellvisor_ipc::state::{NameInfo, SkippedName};
use oxc_allocator::Allocator;
use oxc_ast::ast::{BindingIdentifier, IdentifierReference};
use oxc_ast_visit::Visit;
use oxc_parser::Parser;
use oxc_span::SourceType;
use rquickjs::convert::List;
use rquickjs::{qjs, ArrayBuffer, Coerced, Ctx, Function, Object, Persistent, Value};
use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::path::Path;

/// Encodes and decodes the user's globals; evaluates to a function of the native helpers.
const STATE_SCRIPT: &str = include_str!("state.js");

/// The `format` a payload names itself by.
const FORMAT: &str = "cellvisor-js-state";
/// The payload version this code writes and reads.
const VERSION: u32 = 1;

/// `state.js`'s functions (`save`, `names`, `load`), evaluated the first time a state task
/// runs in a context, so workers that never save pay nothing.
pub(super) type StateScript = Option<Persistent<Object<'static>>>;

/// The global names a fresh context has once the prelude is installed: the host surface.
pub(super) fn host_names(ctx: &Ctx<'_>) -> rquickjs::Result<Vec<String>> {
    let mut names: Vec<String> = ctx.eval("Object.getOwnPropertyNames(globalThis)")?;
    names.extend(PER_CELL_GLOBALS.iter().map(|name| name.to_string()));
    Ok(names)
}

/// Globals the prelude defines when a cell begins rather than at start.
const PER_CELL_GLOBALS: &[&str] = &["ALL_TOOLS"];

/// Writes the user globals into `payload`.
pub(super) fn save(
    engine: &mut JsEngine,
    payload: &Path,
    max_bytes: u64,
    interrupt: &Interrupt,
) -> Result<SavedState, StateError> {
    let (text, saved) = engine.with_state_script(interrupt, |script, host| {
        let save: Function = script.get("save")?;
        // Past 2^53 a cap is as good as none.
        let result: Object = save.call((host, max_bytes as f64))?;
        if let Some(bytes) = result.get::<_, Option<f64>>("tooBig")? {
            return Ok(Err(StateError::TooBig {
                bytes: bytes as u64,
            }));
        }
        let text: String = result.get("text")?;
        let saved = SavedState {
            saved: result.get("saved")?,
            skipped: skipped_names(result.get("skipped")?),
        };
        Ok(Ok((text, saved)))
    })??;
    let bytes = text.len() as u64;
    if bytes > max_bytes {
        return Err(StateError::TooBig { bytes });
    }
    std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(payload)
        .and_then(|mut file| file.write_all(text.as_bytes()))
        .map_err(|err| StateError::Failed(format!("cannot write the snapshot: {err}")))?;
    Ok(saved)
}

/// Reads the first `len` bytes of `payload` back into the globals.
pub(super) fn load(
    engine: &mut JsEngine,
    payload: &Path,
    len: u64,
    replace: bool,
    interrupt: &Interrupt,
) -> Result<LoadedState, StateError> {
    let text = read_payload(payload, len)?;
    check_payload(&text)?;
    if replace {
        engine.fresh_context()?;
    }
    engine.with_state_script(interrupt, |script, host| {
        let load: Function = script.get("load")?;
        let result: Object = load.call((host, text))?;
        if let Some(why) = result.get::<_, Option<String>>("failed")? {
            return Ok(Err(StateError::Failed(format!("bad snapshot: {why}"))));
        }
        Ok(Ok(LoadedState {
            restored: result.get("restored")?,
            skipped: skipped_names(result.get("skipped")?),
        }))
    })?
}

/// The user globals with their kind, encoded size and whether a snapshot keeps them.
pub(super) fn list_names(
    engine: &mut JsEngine,
    interrupt: &Interrupt,
) -> Result<Vec<NameInfo>, StateError> {
    engine.with_state_script(interrupt, |script, host| {
        let names: Function = script.get("names")?;
        let infos: Vec<Object> = names.call((host,))?;
        infos
            .into_iter()
            .map(|info| {
                Ok(NameInfo {
                    name: info.get("name")?,
                    kind: info.get("kind")?,
                    size_bytes: info.get::<_, Option<f64>>("size")?.map(|n| n as u64),
                    saveable: info.get("saveable")?,
                    note: info.get("note")?,
                })
            })
            .collect()
    })
}

fn skipped_names(pairs: Vec<List<(String, String)>>) -> Vec<SkippedName> {
    pairs
        .into_iter()
        .map(|List((name, why))| SkippedName { name, why })
        .collect()
}

/// Exactly the payload's `len` bytes (a trailer follows them in the file), as text.
fn read_payload(payload: &Path, len: u64) -> Result<String, StateError> {
    let file = std::fs::File::open(payload)
        .map_err(|err| StateError::Failed(format!("cannot open the snapshot: {err}")))?;
    let mut bytes = Vec::new();
    file.take(len)
        .read_to_end(&mut bytes)
        .map_err(|err| StateError::Failed(format!("cannot read the snapshot: {err}")))?;
    if (bytes.len() as u64) < len {
        return Err(StateError::Failed(
            "the snapshot is shorter than it says".into(),
        ));
    }
    String::from_utf8(bytes)
        .map_err(|_| StateError::Failed("bad snapshot: the payload is not UTF-8 text".into()))
}

/// Refuses a payload that is not this format's JSON before anything of the namespace goes.
fn check_payload(text: &str) -> Result<(), StateError> {
    #[derive(serde::Deserialize)]
    struct Header {
        format: String,
        version: u32,
        #[allow(dead_code)]
        entries: Vec<serde::de::IgnoredAny>,
    }
    let header: Header = serde_json::from_str(text).map_err(|err| {
        StateError::Failed(format!("bad snapshot: not a JavaScript state ({err})"))
    })?;
    if header.format != FORMAT {
        return Err(StateError::Failed(format!(
            "bad snapshot: its format is {:?}, not {FORMAT:?}",
            header.format
        )));
    }
    if header.version != VERSION {
        return Err(StateError::Failed(format!(
            "bad snapshot: version {}, this worker reads version {VERSION}",
            header.version
        )));
    }
    Ok(())
}

impl JsEngine {
    /// Runs `work` with `state.js`'s functions and the host names (a `Set`), with the task's
    /// interrupt armed; a JavaScript exception becomes a `Failed`.
    fn with_state_script<T>(
        &mut self,
        interrupt: &Interrupt,
        work: impl for<'js> FnOnce(Object<'js>, Value<'js>) -> rquickjs::Result<T>,
    ) -> Result<T, StateError> {
        *self.cell.interrupt.borrow_mut() = Some(interrupt.flag());
        self.cell.interrupted.set(false);
        let host_names = &self.host_names;
        let script_slot = &mut self.state_script;
        let result = self.context.with(|ctx| {
            let outcome = (|| {
                let script = match script_slot {
                    Some(script) => script.clone().restore(&ctx)?,
                    None => {
                        let script = install_state_script(&ctx)?;
                        *script_slot = Some(Persistent::save(&ctx, script.clone()));
                        script
                    }
                };
                let host: Value = ctx
                    .eval::<Function, _>("(names) => new Set(names)")?
                    .call((host_names.clone(),))?;
                work(script, host)
            })();
            outcome.map_err(|err| match err {
                rquickjs::Error::Exception => {
                    let thrown = ctx.catch();
                    let text = thrown
                        .get::<Coerced<String>>()
                        .map(|text| text.0)
                        .unwrap_or_else(|_| "an exception".into());
                    StateError::Failed(format!("the JavaScript state code threw {text}"))
                }
                other => StateError::Failed(format!("JavaScript state: {other}")),
            })
        });
        let interrupted = self.cell.interrupted.get() || interrupt.is_raised();
        self.cell.interrupt.borrow_mut().take();
        self.cell.interrupted.set(false);
        match result {
            Err(_) if interrupted => Err(StateError::Failed("interrupted".into())),
            other => other,
        }
    }
}

/// Evaluates `state.js` with its native helpers.
fn install_state_script<'js>(ctx: &Ctx<'js>) -> rquickjs::Result<Object<'js>> {
    let native = Object::new(ctx.clone())?;
    native.set(
        "classOf",
        Function::new(ctx.clone(), |value: Value| {
            // SAFETY: JS_GetClassID only reads the tag and, for objects, the class field of
            // a live value the caller holds.
            unsafe { qjs::JS_GetClassID(value.as_raw()) }
        })?,
    )?;
    native.set("freeNames", Function::new(ctx.clone(), free_names)?)?;
    native.set(
        "toBase64",
        Function::new(ctx.clone(), |buffer: ArrayBuffer| {
            buffer
                .as_bytes()
                .map(|bytes| base64::engine::general_purpose::STANDARD.encode(bytes))
                .unwrap_or_default()
        })?,
    )?;
    native.set(
        "fromBase64",
        Function::new(ctx.clone(), |ctx: Ctx<'js>, text: String| {
            match base64::engine::general_purpose::STANDARD.decode(text) {
                Ok(bytes) => ArrayBuffer::new(ctx, bytes),
                Err(_) => Err(rquickjs::Exception::throw_type(
                    &ctx,
                    "an ArrayBuffer's bytes are not base64",
                )),
            }
        })?,
    )?;
    let setup: Function = ctx.eval(STATE_SCRIPT)?;
    setup.call((native,))
}

/// The names a function's source refers to without declaring them (`None` when the source
/// parses neither as an expression nor as a method). Scope-blind: a name declared anywhere
/// in the source counts as declared.
fn free_names(source: String) -> Option<Vec<String>> {
    [format!("({source}\n)"), format!("({{{source}\n}})")]
        .iter()
        .find_map(|wrapped| {
            let allocator = Allocator::default();
            let parsed = Parser::new(&allocator, wrapped, SourceType::cjs()).parse();
            if parsed.panicked || !parsed.errors.is_empty() {
                return None;
            }
            let mut names = Names::default();
            names.visit_program(&parsed.program);
            Some(
                names
                    .referenced
                    .difference(&names.declared)
                    .cloned()
                    .collect(),
            )
        })
}

#[derive(Default)]
struct Names {
    declared: BTreeSet<String>,
    referenced: BTreeSet<String>,
}

impl<'a> Visit<'a> for Names {
    fn visit_binding_identifier(&mut self, identifier: &BindingIdentifier<'a>) {
        self.declared.insert(identifier.name.to_string());
    }

    fn visit_identifier_reference(&mut self, identifier: &IdentifierReference<'a>) {
        self.referenced.insert(identifier.name.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::free_names;

    #[test]
    fn free_names_are_the_ones_a_function_does_not_declare() {
        let free = |source: &str| free_names(source.into());
        assert_eq!(free("() => ++n"), Some(vec!["n".to_string()]));
        assert_eq!(
            free("function f(a) { let b = a; return f(b) + Math.max(c) }"),
            Some(vec!["Math".to_string(), "c".to_string()])
        );
        assert_eq!(free("m(x) { return this.y + x }"), Some(vec![]));
        assert_eq!(
            free("class B extends A { m() { return new B() } }"),
            Some(vec!["A".to_string()])
        );
        assert_eq!(free("function ("), None);
    }
}
