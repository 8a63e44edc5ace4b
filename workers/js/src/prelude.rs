//! The globals cells see: `prelude.js` defines them on native hooks defined here (the
//! Node-style ones come from `node`), after `json_guard.js` has made `JSON.stringify`
//! refuse values nested too deep for the stack. [`install_prelude`] returns the hooks the
//! worker drives cells with.

use super::event_loop::PendingCall;
use super::{node, RunningCell, MIB, STACK_SAFETY_MARGIN};
use crate::helpers::{self, HostDirs};
use cellvisor_ipc::OutputStream;
use rquickjs::convert::List;
use rquickjs::function::Opt;
use rquickjs::{qjs, Coerced, Ctx, Exception, Function, Object, Persistent, Promise};
use std::path::Path;
use std::rc::Rc;
use std::time::Duration;

/// Defines the globals; evaluates to a function that takes the native hooks and returns the
/// hooks the worker drives cells with.
const PRELUDE: &str = include_str!("prelude.js");

/// Replaces `JSON.stringify` with one that refuses values nested deeper than the worker's
/// stack allows (a catchable `RangeError` instead of a crash); evaluates to its installer.
const JSON_GUARD: &str = include_str!("json_guard.js");

/// Stack bytes allowed per nesting level of `JSON.stringify` when deciding its depth limit
/// (several times what one level of the engine's recursion takes, even unoptimised).
const STACK_PER_JSON_LEVEL: usize = 2048;

/// Stream numbers the prelude passes to the native `write`.
const STDOUT: i32 = 0;

/// The functions `prelude.js` hands back.
pub(super) struct Hooks {
    /// Formats a value as text (console.log's rules).
    pub(super) format: Persistent<Function<'static>>,
    /// Shows a cell's value: text on stdout, plus a display when it has a rich form.
    pub(super) show: Persistent<Function<'static>>,
    /// Resets per-cell state and declares the cell's tools (JSON list).
    pub(super) begin_cell: Persistent<Function<'static>>,
    /// `[true, value]` when the cell ran a top-level `return`.
    pub(super) take_return: Persistent<Function<'static>>,
}

/// The hooks, usable inside one `Context::with`.
pub(super) struct LiveHooks<'js> {
    pub(super) format: Function<'js>,
    pub(super) show: Function<'js>,
    pub(super) begin_cell: Function<'js>,
    pub(super) take_return: Function<'js>,
}

impl Hooks {
    pub(super) fn restore<'js>(&self, ctx: &Ctx<'js>) -> rquickjs::Result<LiveHooks<'js>> {
        Ok(LiveHooks {
            format: self.format.clone().restore(ctx)?,
            show: self.show.clone().restore(ctx)?,
            begin_cell: self.begin_cell.clone().restore(ctx)?,
            take_return: self.take_return.clone().restore(ctx)?,
        })
    }
}

/// Defines the globals of `prelude.js` with their native hooks and returns its hooks.
pub(super) fn install_prelude<'js>(
    ctx: &Ctx<'js>,
    cell: &Rc<RunningCell>,
    dirs: &Rc<HostDirs>,
) -> rquickjs::Result<Hooks> {
    let native = Object::new(ctx.clone())?;
    define_output(ctx, &native, cell)?;
    define_file_helpers(ctx, &native, dirs)?;
    define_text_helpers(ctx, &native)?;
    define_environment(ctx, &native)?;
    define_code_mode(ctx, &native, cell)?;
    define_timers(ctx, &native, cell)?;

    let guard: Function = ctx.eval(JSON_GUARD)?;
    guard.call::<_, ()>((json_depth_limit(),))?;
    node::define_natives(ctx, &native, cell)?;
    let setup: Function = ctx.eval(PRELUDE)?;
    let hooks: Object = setup.call((native.clone(),))?;
    node::install(ctx, native, hooks.get("format")?)?;
    let function = |name: &str| -> rquickjs::Result<Persistent<Function<'static>>> {
        Ok(Persistent::save(ctx, hooks.get::<_, Function>(name)?))
    };
    Ok(Hooks {
        format: function("format")?,
        show: function("show")?,
        begin_cell: function("beginCell")?,
        take_return: function("takeReturn")?,
    })
}

/// The cell's output: `write` (console, print), `display`, `yieldControl`.
fn define_output<'js>(
    ctx: &Ctx<'js>,
    native: &Object<'js>,
    cell: &Rc<RunningCell>,
) -> rquickjs::Result<()> {
    native.set(
        "write",
        Function::new(ctx.clone(), {
            let cell = Rc::clone(cell);
            move |stream: i32, text: Coerced<String>| {
                let stream = if stream == STDOUT {
                    OutputStream::Stdout
                } else {
                    OutputStream::Stderr
                };
                cell.write(stream, &text.0);
            }
        })?,
    )?;
    native.set(
        "display",
        Function::new(ctx.clone(), {
            let cell = Rc::clone(cell);
            move |bundle_json: Coerced<String>, quiet: Opt<bool>| {
                cell.display(bundle_json.0, quiet.0.unwrap_or(false))
            }
        })?,
    )?;
    native.set(
        "yieldControl",
        Function::new(ctx.clone(), {
            let cell = Rc::clone(cell);
            move || cell.yield_control()
        })?,
    )?;
    Ok(())
}

/// The helpers on files and the host's directories: `read`, `writeFile`, `tree`, `output`
/// (earlier cells' output) and the key-value store (`storeWrite`, `storeRead`).
fn define_file_helpers<'js>(
    ctx: &Ctx<'js>,
    native: &Object<'js>,
    dirs: &Rc<HostDirs>,
) -> rquickjs::Result<()> {
    native.set(
        "read",
        Function::new(
            ctx.clone(),
            |ctx: Ctx<'js>, path: String, offset: f64, limit: f64, numbered: bool| {
                let limit = (limit >= 0.0).then_some(limit as usize);
                helpers::fs::read(Path::new(&path), offset as usize, limit, numbered)
                    .map(|(text, lines)| List((lossy(text), lines)))
                    .map_err(thrown(ctx))
            },
        )?,
    )?;
    native.set(
        "writeFile",
        Function::new(
            ctx.clone(),
            |ctx: Ctx<'js>, path: String, content: String, append: bool| {
                helpers::fs::write(Path::new(&path), content.as_bytes(), append)
                    .map_err(thrown(ctx))
            },
        )?,
    )?;
    native.set(
        "tree",
        Function::new(
            ctx.clone(),
            |ctx: Ctx<'js>, path: String, max_depth: f64, show_hidden: bool| {
                helpers::fs::tree(Path::new(&path), max_depth as usize, show_hidden)
                    .map(|(text, entries)| List((lossy(text), entries)))
                    .map_err(thrown(ctx))
            },
        )?,
    )?;
    native.set(
        "output",
        Function::new(ctx.clone(), {
            let dirs = Rc::clone(dirs);
            move |ctx: Ctx<'js>, ids: Vec<String>| {
                helpers::output::read_outputs(dirs.artifact_dir.as_deref(), &ids)
                    .map(|(text, bytes)| List((lossy(text), bytes)))
                    .map_err(thrown(ctx))
            }
        })?,
    )?;
    native.set(
        "storeWrite",
        Function::new(ctx.clone(), {
            let dirs = Rc::clone(dirs);
            move |ctx: Ctx<'js>, key: String, json: String| {
                helpers::store::save(dirs.store_dir.as_deref(), &key, &json).map_err(thrown(ctx))
            }
        })?,
    )?;
    native.set(
        "storeRead",
        Function::new(ctx.clone(), {
            let dirs = Rc::clone(dirs);
            move |ctx: Ctx<'js>, key: String| {
                helpers::store::load(dirs.store_dir.as_deref(), &key).map_err(thrown(ctx))
            }
        })?,
    )?;
    Ok(())
}

/// The line helpers JavaScript and Lua share: `sort`, `diff`.
fn define_text_helpers<'js>(ctx: &Ctx<'js>, native: &Object<'js>) -> rquickjs::Result<()> {
    native.set(
        "sort",
        Function::new(ctx.clone(), |text: String, reverse: bool, unique: bool| {
            let (sorted, lines) = crate::text::sort(text.as_bytes(), reverse, unique);
            List((String::from_utf8_lossy(&sorted).into_owned(), lines))
        })?,
    )?;
    native.set(
        "diff",
        Function::new(ctx.clone(), |a: String, b: String| {
            let (text, added, removed) = crate::text::unified_diff(a.as_bytes(), b.as_bytes());
            List((String::from_utf8_lossy(&text).into_owned(), added, removed))
        })?,
    )?;
    Ok(())
}

/// The process environment, for `env()` and `process.env`: `envAll`, `envGet`, `envSet`.
fn define_environment<'js>(ctx: &Ctx<'js>, native: &Object<'js>) -> rquickjs::Result<()> {
    native.set(
        "envAll",
        Function::new(ctx.clone(), |ctx: Ctx<'js>| {
            let all = Object::new(ctx)?;
            for (key, value) in std::env::vars_os() {
                all.set(
                    key.to_string_lossy().into_owned(),
                    value.to_string_lossy().into_owned(),
                )?;
            }
            Ok::<_, rquickjs::Error>(all)
        })?,
    )?;
    native.set(
        "envGet",
        Function::new(ctx.clone(), |key: String| {
            std::env::var_os(key).map(|value| value.to_string_lossy().into_owned())
        })?,
    )?;
    native.set(
        "envSet",
        Function::new(
            ctx.clone(),
            |key: String, value: Option<String>| match value {
                Some(value) => std::env::set_var(key, value),
                None => std::env::remove_var(key),
            },
        )?,
    )?;
    Ok(())
}

/// The code-mode surface: `exit` and `stopping` (whether it was called), host tool calls
/// (`callTool`) and `tools.tool_search` (`searchTools`).
fn define_code_mode<'js>(
    ctx: &Ctx<'js>,
    native: &Object<'js>,
    cell: &Rc<RunningCell>,
) -> rquickjs::Result<()> {
    native.set(
        "exit",
        Function::new(ctx.clone(), {
            let cell = Rc::clone(cell);
            move |ctx: Ctx<'js>| -> rquickjs::Result<()> {
                cell.exiting.set(true);
                Err(throw_uncatchable(&ctx, "exit() ended the cell"))
            }
        })?,
    )?;
    native.set(
        "stopping",
        Function::new(ctx.clone(), {
            let cell = Rc::clone(cell);
            move || cell.exiting.get()
        })?,
    )?;
    native.set(
        "callTool",
        Function::new(ctx.clone(), {
            let cell = Rc::clone(cell);
            move |ctx: Ctx<'js>, name: String, args_json: String| {
                let Some((outbox, cell_id)) = cell.sink.borrow().clone() else {
                    return Err(Exception::throw_message(
                        &ctx,
                        "tool calls are only possible while a cell runs",
                    ));
                };
                let (promise, resolve, _reject) = Promise::new(&ctx)?;
                let pending = outbox.call_tool(cell_id, &name, args_json);
                cell.calls.borrow_mut().push(PendingCall {
                    answer: pending.answer,
                    resolve: Persistent::save(&ctx, resolve),
                    outcome: None,
                });
                Ok(promise)
            }
        })?,
    )?;
    native.set(
        "searchTools",
        Function::new(ctx.clone(), {
            let cell = Rc::clone(cell);
            move |ctx: Ctx<'js>, query: String, limit: Option<f64>| {
                crate::tools::search(&cell.tools.borrow(), &query, limit)
                    .map(|found| found.to_string())
                    .map_err(|err| thrown(ctx)(err.to_string()))
            }
        })?,
    )?;
    Ok(())
}

/// `setTimeout`/`setInterval` and their clearing: `setTimer`, `clearTimer`.
fn define_timers<'js>(
    ctx: &Ctx<'js>,
    native: &Object<'js>,
    cell: &Rc<RunningCell>,
) -> rquickjs::Result<()> {
    native.set(
        "setTimer",
        Function::new(ctx.clone(), {
            let cell = Rc::clone(cell);
            move |ctx: Ctx<'js>, callback: Function<'js>, delay_ms: f64, repeat: bool| {
                let delay_ms = if delay_ms.is_finite() { delay_ms } else { 0.0 };
                let delay = Duration::from_secs_f64(delay_ms.clamp(0.0, 1e12) / 1000.0);
                let callback = Persistent::save(&ctx, callback);
                cell.timers.borrow_mut().add(callback, delay, repeat)
            }
        })?,
    )?;
    native.set(
        "clearTimer",
        Function::new(ctx.clone(), {
            let cell = Rc::clone(cell);
            move |id: f64| {
                if id >= 1.0 && id <= f64::from(u32::MAX) {
                    cell.timers.borrow_mut().clear(id as u32);
                }
            }
        })?,
    )?;
    Ok(())
}

/// A helper's failure as the `Error` its promise rejects with.
fn thrown<'js, M: std::fmt::Display>(ctx: Ctx<'js>) -> impl FnOnce(M) -> rquickjs::Error + 'js {
    move |message| Exception::throw_message(&ctx, &message.to_string())
}

/// Bytes from a helper as a JavaScript string (invalid UTF-8 shows as U+FFFD).
fn lossy(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes)
        .unwrap_or_else(|err| String::from_utf8_lossy(err.as_bytes()).into_owned())
}

/// Throws an `Error` that no `catch` or `finally` sees (QuickJS unwinds past them, as
/// for its own "interrupted"): what `exit()` ends the cell with.
fn throw_uncatchable(ctx: &Ctx<'_>, message: &str) -> rquickjs::Error {
    let error = match Exception::from_message(ctx.clone(), message) {
        Ok(error) => error.into_value(),
        Err(err) => return err,
    };
    // SAFETY: both pointers are live for the duration of the call; the function only sets a
    // flag on the error object.
    unsafe { qjs::JS_SetUncatchableError(ctx.as_raw().as_ptr(), error.as_raw()) };
    ctx.throw(error)
}

/// How deep a value `JSON.stringify` may walk on this thread's stack (its rlimit; 8 MiB when
/// unlimited).
fn json_depth_limit() -> usize {
    use nix::sys::resource::{getrlimit, Resource, RLIM_INFINITY};
    let stack = match getrlimit(Resource::RLIMIT_STACK) {
        Ok((soft, _)) if soft != RLIM_INFINITY => usize::try_from(soft).unwrap_or(usize::MAX),
        _ => 8 * MIB,
    };
    (stack.saturating_sub(STACK_SAFETY_MARGIN) / STACK_PER_JSON_LEVEL).clamp(64, 100_000)
}
