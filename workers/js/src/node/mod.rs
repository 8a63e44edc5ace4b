//! Node-style and web globals for cells: what agents written for Node reach for.
//!
//! `web.js` (web platform globals), `files.js` (`Blob`, `File`, `FormData`, `navigator`) and
//! `node.js` (Node's) define them in JavaScript (classes, argument checks, Node's shapes) on
//! the native functions defined here. Each is evaluated only when a cell first uses one of
//! its globals (`lazy.js`), so a worker start does not pay for parsing them. The natives do the work in Rust on kept crates:
//! - [`bytes`]: encodings for `Buffer`, `TextEncoder`/`TextDecoder`, `atob`/`btoa` (base64).
//! - [`url`]: `URL`, `URLSearchParams` (the `url` crate, WHATWG rules).
//! - [`crypto`]: `crypto.getRandomValues`/`randomUUID`/`subtle.digest`, `createHash`.
//! - [`fs`]: `node:fs` (and `fs/promises` on it) with Node's error shape.
//! - [`os`]: the machine facts of `node:os` (uname, sysinfo, the user database).
//! - [`child`]: `node:child_process`'s `spawnSync`/`execSync`/`execFileSync`.
//! - [`fetch`]: `fetch`'s HTTP exchange (ureq) on a thread, answered through the event loop
//!   like a host tool call.
//! - [`websocket`]: `WebSocket`'s connection (tungstenite) on a thread, its events answered
//!   the same way, one at a time.
//!
//! Modules: `require(name)` and `import` of `node:fs`, `node:fs/promises`, `node:path`,
//! `node:os`, `node:child_process`, `node:buffer`, `node:crypto`, `node:url`, `node:util`,
//! `node:events`, `node:process` (and the same names without `node:`) come from the table
//! in `node.js`; [`super::modules`] asks it through [`BUILTINS_GLOBAL`].

mod bytes;
mod child;
mod crypto;
mod fetch;
mod fs;
mod os;
mod url;
mod websocket;

use super::event_loop::PendingCall;
use super::RunningCell;
use crate::runtime::ToolOutcome;
use rquickjs::convert::List;
use rquickjs::{
    ArrayBuffer, Ctx, Exception, Function, Object, Persistent, Promise, TypedArray, Value,
};
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::mpsc::{self, Sender};
use std::time::Duration;

/// Define the globals; each evaluates to a function that takes the native functions.
const LAZY_JS: &str = include_str!("lazy.js");
const WEB_JS: &str = include_str!("web.js");
const FILES_JS: &str = include_str!("files.js");
const WEBSOCKET_JS: &str = include_str!("websocket.js");
const NODE_JS: &str = include_str!("node.js");

/// The built-in modules `node.js` provides (its `BUILTINS` table; a test checks they agree).
pub(super) const BUILTIN_NAMES: &[&str] = &[
    "fs",
    "fs/promises",
    "path",
    "path/posix",
    "os",
    "child_process",
    "buffer",
    "crypto",
    "url",
    "util",
    "events",
    "process",
];

/// The hidden global through which the module loader reaches the built-in modules:
/// `{names(), has(name), exportNames(name), load(name)}`.
pub(super) const BUILTINS_GLOBAL: &str = "__cellvisor_builtins";

/// Adds the natives `node.js` uses to `native` (the object `prelude.js` also gets).
pub(super) fn define_natives<'js>(
    ctx: &Ctx<'js>,
    native: &Object<'js>,
    cell: &Rc<RunningCell>,
) -> rquickjs::Result<()> {
    define_encoding(ctx, native)?;
    define_url(ctx, native)?;
    define_crypto(ctx, native)?;
    define_fs(ctx, native)?;
    define_process(ctx, native, cell)?;
    define_fetch(ctx, native, cell)?;
    websocket::define(ctx, native, cell)
}

/// Defines the globals of `web.js` and `node.js` as placeholders (`lazy.js`) that evaluate
/// their script when a cell first touches one; runs after `prelude.js` (the scripts use its
/// `exit`, `setTimeout` and value formatting, `format`).
pub(super) fn install<'js>(
    ctx: &Ctx<'js>,
    native: Object<'js>,
    format: Function<'js>,
) -> rquickjs::Result<()> {
    native.set("formatValue", format)?;
    native.set("builtinsGlobal", BUILTINS_GLOBAL)?;
    native.set(
        "loadScript",
        Function::new(
            ctx.clone(),
            |ctx: Ctx<'js>, script: String, native: Object<'js>| {
                let source = match script.as_str() {
                    "web" => WEB_JS,
                    "files" => FILES_JS,
                    "websocket" => WEBSOCKET_JS,
                    "node" => NODE_JS,
                    other => {
                        return Err(Exception::throw_type(&ctx, &format!("no script {other:?}")))
                    }
                };
                let setup: Function = ctx.eval(source)?;
                setup.call::<_, ()>((native,))
            },
        )?,
    )?;
    let placeholders: Function = ctx.eval(LAZY_JS)?;
    placeholders.call((native,))
}

fn type_error<'js>(ctx: &Ctx<'js>) -> impl Fn(String) -> rquickjs::Error + 'js {
    let ctx = ctx.clone();
    move |message| Exception::throw_type(&ctx, &message)
}

fn plain_error<'js>(ctx: &Ctx<'js>) -> impl Fn(String) -> rquickjs::Error + 'js {
    let ctx = ctx.clone();
    move |message| Exception::throw_message(&ctx, &message)
}

/// The bytes of a `Uint8Array` (a `Buffer` is one); `node.js` hands every binary argument
/// over as one.
fn bytes_of<'a>(ctx: &Ctx<'_>, array: &'a TypedArray<'_, u8>) -> rquickjs::Result<&'a [u8]> {
    array
        .as_bytes()
        .ok_or_else(|| Exception::throw_type(ctx, "the ArrayBuffer behind this array was detached"))
}

fn buffer<'js>(ctx: &Ctx<'js>, bytes: Vec<u8>) -> rquickjs::Result<ArrayBuffer<'js>> {
    ArrayBuffer::new(ctx.clone(), bytes)
}

fn define_encoding<'js>(ctx: &Ctx<'js>, native: &Object<'js>) -> rquickjs::Result<()> {
    native.set(
        "bytesEncode",
        Function::new(
            ctx.clone(),
            |ctx: Ctx<'js>, text: String, encoding: String| {
                let encoding = bytes::Encoding::parse(&encoding).map_err(type_error(&ctx))?;
                buffer(&ctx, bytes::encode(&text, encoding))
            },
        )?,
    )?;
    native.set(
        "bytesDecode",
        Function::new(
            ctx.clone(),
            |ctx: Ctx<'js>, data: TypedArray<'js, u8>, encoding: String| {
                let encoding = bytes::Encoding::parse(&encoding).map_err(type_error(&ctx))?;
                Ok::<_, rquickjs::Error>(bytes::decode(bytes_of(&ctx, &data)?, encoding))
            },
        )?,
    )?;
    native.set(
        "utf8Decode",
        Function::new(
            ctx.clone(),
            |ctx: Ctx<'js>, data: TypedArray<'js, u8>, fatal: bool, keep_bom: bool| {
                bytes::decode_utf8(bytes_of(&ctx, &data)?, fatal, keep_bom)
                    .map_err(type_error(&ctx))
            },
        )?,
    )?;
    native.set(
        "atob",
        Function::new(ctx.clone(), |ctx: Ctx<'js>, text: String| {
            bytes::atob(&text).map_err(plain_error(&ctx))
        })?,
    )?;
    native.set(
        "btoa",
        Function::new(ctx.clone(), |ctx: Ctx<'js>, text: String| {
            bytes::btoa(&text).map_err(plain_error(&ctx))
        })?,
    )
}

fn define_url<'js>(ctx: &Ctx<'js>, native: &Object<'js>) -> rquickjs::Result<()> {
    native.set(
        "urlParse",
        Function::new(
            ctx.clone(),
            |ctx: Ctx<'js>, input: String, base: Option<String>| {
                url::parse(&input, base.as_deref())
                    .map(Vec::from)
                    .map_err(type_error(&ctx))
            },
        )?,
    )?;
    native.set(
        "urlSet",
        Function::new(
            ctx.clone(),
            |ctx: Ctx<'js>, href: String, part: String, value: String| {
                url::set(&href, &part, &value).map_err(type_error(&ctx))
            },
        )?,
    )?;
    native.set(
        "queryParse",
        Function::new(ctx.clone(), |query: String| List(url::parse_query(&query)))?,
    )?;
    native.set(
        "querySerialize",
        Function::new(ctx.clone(), |names: Vec<String>, values: Vec<String>| {
            url::serialize_query(&names, &values)
        })?,
    )
}

fn define_crypto<'js>(ctx: &Ctx<'js>, native: &Object<'js>) -> rquickjs::Result<()> {
    native.set("maxRandomValues", crypto::MAX_RANDOM_VALUES)?;
    native.set(
        "randomBytes",
        Function::new(ctx.clone(), |ctx: Ctx<'js>, len: usize| {
            let bytes = crypto::random_bytes(len).map_err(plain_error(&ctx))?;
            buffer(&ctx, bytes)
        })?,
    )?;
    native.set(
        "randomUUID",
        Function::new(ctx.clone(), crypto::random_uuid)?,
    )?;
    native.set(
        "digest",
        Function::new(
            ctx.clone(),
            |ctx: Ctx<'js>, algorithm: String, data: TypedArray<'js, u8>| {
                let digest = crypto::digest(&algorithm, bytes_of(&ctx, &data)?)
                    .map_err(plain_error(&ctx))?;
                buffer(&ctx, digest)
            },
        )?,
    )
}

/// A failed file operation as the `Error` Node throws (`code`, `errno`, `syscall`, `path`).
fn throw_fs(ctx: &Ctx<'_>, error: fs::FsError) -> rquickjs::Error {
    let built = (|| {
        let exception = Exception::from_message(ctx.clone(), &error.message)?;
        let object = exception.as_object();
        object.set("code", error.code.as_str())?;
        object.set("errno", error.errno)?;
        object.set("syscall", error.syscall)?;
        object.set("path", error.path.as_str())?;
        if let Some(dest) = &error.dest {
            object.set("dest", dest.as_str())?;
        }
        Ok::<_, rquickjs::Error>(exception)
    })();
    match built {
        Ok(exception) => ctx.throw(exception.into_value()),
        Err(err) => err,
    }
}

/// Data to write: a string as UTF-8, else the bytes of a `Uint8Array`.
fn data_arg<'js>(ctx: &Ctx<'js>, data: &Value<'js>) -> rquickjs::Result<Vec<u8>> {
    if let Some(text) = data.as_string() {
        return Ok(text.to_string()?.into_bytes());
    }
    let array = TypedArray::<u8>::from_value(data.clone())
        .map_err(|_| Exception::throw_type(ctx, "data must be a string or a Uint8Array"))?;
    Ok(bytes_of(ctx, &array)?.to_vec())
}

fn define_fs<'js>(ctx: &Ctx<'js>, native: &Object<'js>) -> rquickjs::Result<()> {
    macro_rules! fs_fn {
        ($name:literal, |$ctx:ident $(, $arg:ident : $ty:ty)*| $body:expr) => {
            native.set(
                $name,
                Function::new(ctx.clone(), |$ctx: Ctx<'js> $(, $arg: $ty)*| {
                    $body.map_err(|error| throw_fs(&$ctx, error))
                })?,
            )?;
        };
    }
    native.set(
        "fsRead",
        Function::new(ctx.clone(), |ctx: Ctx<'js>, path: String| {
            let bytes = fs::read(&path).map_err(|error| throw_fs(&ctx, error))?;
            buffer(&ctx, bytes)
        })?,
    )?;
    fs_fn!("fsReadText", |ctx, path: String| fs::read_text(&path));
    native.set(
        "fsWrite",
        Function::new(
            ctx.clone(),
            |ctx: Ctx<'js>, path: String, data: Value<'js>, append: bool, exclusive: bool| {
                let data = data_arg(&ctx, &data)?;
                fs::write(&path, &data, append, exclusive).map_err(|error| throw_fs(&ctx, error))
            },
        )?,
    )?;
    native.set(
        "fsStat",
        Function::new(ctx.clone(), |ctx: Ctx<'js>, path: String, follow: bool| {
            let stat = fs::stat(&path, follow).map_err(|error| throw_fs(&ctx, error))?;
            Ok::<_, rquickjs::Error>(List((stat.kind, stat.numbers.to_vec())))
        })?,
    )?;
    native.set(
        "fsExists",
        Function::new(ctx.clone(), |path: String| {
            std::path::Path::new(&path).exists()
        })?,
    )?;
    fs_fn!("fsReaddir", |ctx, path: String| fs::readdir(&path)
        .map(List));
    fs_fn!("fsMkdir", |ctx,
                       path: String,
                       recursive: bool,
                       mode: u32| fs::mkdir(
        &path, recursive, mode
    ));
    fs_fn!("fsRm", |ctx, path: String, recursive: bool, force: bool| {
        fs::rm(&path, recursive, force)
    });
    fs_fn!("fsRmdir", |ctx, path: String, recursive: bool| fs::rmdir(
        &path, recursive
    ));
    fs_fn!("fsUnlink", |ctx, path: String| fs::unlink(&path));
    fs_fn!("fsRename", |ctx, from: String, to: String| fs::rename(
        &from, &to
    ));
    fs_fn!("fsCopy", |ctx, from: String, to: String| fs::copy_file(
        &from, &to
    ));
    fs_fn!(
        "fsSymlink",
        |ctx, target: String, path: String| fs::symlink(&target, &path)
    );
    fs_fn!("fsReadlink", |ctx, path: String| fs::readlink(&path));
    fs_fn!("fsRealpath", |ctx, path: String| fs::realpath(&path));
    fs_fn!("fsChmod", |ctx, path: String, mode: u32| fs::chmod(
        &path, mode
    ));
    fs_fn!("fsAccess", |ctx, path: String, mode: i32| fs::access(
        &path, mode
    ));
    fs_fn!("fsMkdtemp", |ctx, prefix: String| fs::mkdtemp(&prefix));
    Ok(())
}

fn define_process<'js>(
    ctx: &Ctx<'js>,
    native: &Object<'js>,
    cell: &Rc<RunningCell>,
) -> rquickjs::Result<()> {
    native.set(
        "cwd",
        Function::new(ctx.clone(), |ctx: Ctx<'js>| {
            std::env::current_dir()
                .map(|dir| dir.to_string_lossy().into_owned())
                .map_err(|err| Exception::throw_message(&ctx, &format!("process.cwd(): {err}")))
        })?,
    )?;
    native.set(
        "chdir",
        Function::new(ctx.clone(), |ctx: Ctx<'js>, dir: String| {
            std::env::set_current_dir(&dir)
                .map_err(|err| throw_fs(&ctx, fs::FsError::from_io(&err, "chdir", &dir)))
        })?,
    )?;
    native.set(
        "osInfo",
        Function::new(ctx.clone(), |ctx: Ctx<'js>| os::info(&ctx))?,
    )?;
    native.set(
        "execPath",
        std::env::current_exe()
            .map(|path| path.to_string_lossy().into_owned())
            .unwrap_or_default(),
    )?;
    native.set("platform", std::env::consts::OS)?;
    native.set("arch", std::env::consts::ARCH)?;
    native.set("pid", std::process::id())?;
    native.set("engineVersion", super::quickjs_version())?;
    native.set("userAgent", user_agent())?;
    native.set(
        "cpuCount",
        Function::new(ctx.clone(), || {
            std::thread::available_parallelism().map_or(1, usize::from)
        })?,
    )?;
    native.set("ppid", nix::unistd::getppid().as_raw())?;
    native.set(
        "spawnSync",
        Function::new(ctx.clone(), {
            let cell = Rc::clone(cell);
            move |ctx: Ctx<'js>, program: String, args: Vec<String>, options: Object<'js>| {
                let request = spawn_request(&ctx, program, args, &options)?;
                let result = child::spawn_sync(request, &|| cell.stop_requested());
                let out = Object::new(ctx.clone())?;
                out.set("pid", result.pid)?;
                out.set("status", result.status)?;
                out.set("signal", result.signal)?;
                out.set("stdout", buffer(&ctx, result.stdout)?)?;
                out.set("stderr", buffer(&ctx, result.stderr)?)?;
                out.set("error", result.error)?;
                Ok::<_, rquickjs::Error>(out)
            }
        })?,
    )
}

/// `navigator.userAgent`: `cellvisor/<version> QuickJS`.
fn user_agent() -> String {
    format!("cellvisor/{} QuickJS", env!("CARGO_PKG_VERSION"))
}

/// `{cwd, env: [[name, value]...], input: Uint8Array, timeout: ms}` as a request.
fn spawn_request<'js>(
    ctx: &Ctx<'js>,
    program: String,
    args: Vec<String>,
    options: &Object<'js>,
) -> rquickjs::Result<child::SpawnRequest> {
    let env: Option<Vec<Vec<String>>> = options.get("env")?;
    let input: Option<TypedArray<'js, u8>> = options.get("input")?;
    let timeout: Option<f64> = options.get("timeout")?;
    Ok(child::SpawnRequest {
        program,
        args,
        cwd: options.get("cwd")?,
        env: env.map(|pairs| {
            pairs
                .into_iter()
                .filter_map(|pair| match <[String; 2]>::try_from(pair) {
                    Ok([name, value]) => Some((name, value)),
                    Err(_) => None,
                })
                .collect()
        }),
        input: match input {
            Some(input) => Some(bytes_of(ctx, &input)?.to_vec()),
            None => None,
        },
        timeout: timeout
            .filter(|ms| ms.is_finite() && *ms > 0.0)
            .map(|ms| Duration::from_secs_f64(ms / 1000.0)),
    })
}

/// `fetch(request)` -> `[promise, id]`; the promise resolves with `[ok, text]` like a tool
/// call's. `fetchSettled(id, abandon)` forgets a fetch; with `abandon` (an aborted request)
/// its promise is answered at once, so the cell stops waiting for the network.
fn define_fetch<'js>(
    ctx: &Ctx<'js>,
    native: &Object<'js>,
    cell: &Rc<RunningCell>,
) -> rquickjs::Result<()> {
    let open: Rc<RefCell<HashMap<u64, Sender<ToolOutcome>>>> = Rc::default();
    let next_id = Rc::new(std::cell::Cell::new(0_u64));
    native.set(
        "fetch",
        Function::new(ctx.clone(), {
            let cell = Rc::clone(cell);
            let open = Rc::clone(&open);
            move |ctx: Ctx<'js>, request: Object<'js>| {
                let names: Vec<String> = request.get("headerNames")?;
                let values: Vec<String> = request.get("headerValues")?;
                let body: Option<TypedArray<'js, u8>> = request.get("body")?;
                let redirect: String = request.get("redirect")?;
                let timeout_ms: Option<f64> = request.get("timeoutMs")?;
                let fetch_request = fetch::FetchRequest {
                    method: request.get("method")?,
                    url: request.get("url")?,
                    headers: names.into_iter().zip(values).collect(),
                    body: match body {
                        Some(body) => Some(bytes_of(&ctx, &body)?.to_vec()),
                        None => None,
                    },
                    redirect: fetch::Redirect::parse(&redirect).map_err(type_error(&ctx))?,
                    timeout: timeout_ms
                        .filter(|ms| ms.is_finite())
                        .map(|ms| Duration::from_secs_f64(ms.max(1.0) / 1000.0)),
                };
                let (answer, receiver) = mpsc::channel();
                fetch::start(fetch_request, answer.clone()).map_err(type_error(&ctx))?;
                let id = next_id.get() + 1;
                next_id.set(id);
                open.borrow_mut().insert(id, answer);
                let (promise, resolve, _reject) = Promise::new(&ctx)?;
                cell.calls.borrow_mut().push(PendingCall {
                    answer: receiver,
                    resolve: Persistent::save(&ctx, resolve),
                    outcome: None,
                });
                Ok::<_, rquickjs::Error>(List((promise, id)))
            }
        })?,
    )?;
    native.set(
        "fetchSettled",
        Function::new(ctx.clone(), move |id: f64, abandon: bool| {
            if let Some(answer) = open.borrow_mut().remove(&(id as u64)) {
                if abandon {
                    let _ = answer.send(Err("fetch failed: aborted".into()));
                }
            }
        })?,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_of_builtins_matches_the_table_of_node_js() {
        let engine = super::super::JsEngine::with_limits(None, None).expect("engine starts");
        let names: Vec<String> = engine
            .context
            .with(|ctx| ctx.eval(format!("{BUILTINS_GLOBAL}.names()")))
            .expect("the table answers");
        assert_eq!(names, BUILTIN_NAMES);
    }

    #[test]
    fn each_script_loads_when_one_of_its_globals_is_first_used() {
        let engine = super::super::JsEngine::with_limits(None, None).expect("engine starts");
        let steps: Vec<bool> = engine
            .context
            .with(|ctx| {
                ctx.eval(
                    "const placeholder = (name) => \
                       typeof Object.getOwnPropertyDescriptor(globalThis, name).get === 'function';\n\
                     const steps = [placeholder('URL'), placeholder('Buffer')];\n\
                     new URL('http://a.test/');\n\
                     steps.push(placeholder('URL'), placeholder('fetch'), placeholder('Buffer'));\n\
                     Buffer.from('x');\n\
                     steps.push(placeholder('Buffer'), placeholder('require'));\n\
                     steps",
                )
            })
            .expect("the cell runs");
        assert_eq!(steps, [true, true, false, false, true, false, false]);
    }
}
