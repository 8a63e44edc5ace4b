//! ES modules for cells: `import()` (and the static imports [`super::redeclare`] turns into
//! it) of local files and of plain-ESM packages in `node_modules`.
//!
//! - Relative and absolute specifiers resolve against the importing module's directory, or
//!   the process cwd (the session's) for a cell. A missing extension tries `.js`, `.mjs`,
//!   then `index.js` / `index.mjs` in a directory. `.json` files load as a default export.
//! - Bare specifiers walk up from there through `node_modules/<pkg>`: `exports` (the
//!   `import`, `module` and `default` conditions, exact subpaths and `*` patterns), then
//!   `module`, then `main`, then `index.js`.
//! - QuickJS caches modules by name forever, so edits would never be seen. Every cell first
//!   checks the files it loaded from outside `node_modules`; when one changed (mtime or size)
//!   the *generation* goes up and local modules get new names (`path?gen=N`), so the next
//!   import loads them all afresh, together with their local imports. Packages in
//!   `node_modules` keep their first copy.
//! - Node's built-in modules that `node/node.js` provides (`node:fs`, `path`...) resolve to
//!   `node:<name>` and load as a module over the built-in object, before any package.
//! - What QuickJS cannot load is an error naming the specifier and where we looked: other
//!   `node:` built-ins, CommonJS-only files and packages, missing files.

use rquickjs::loader::{Loader, Resolver};
use rquickjs::module::Declared;
use rquickjs::{Ctx, Exception, Function, Module, Object};
use std::cell::RefCell;
use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};
use std::rc::Rc;
use std::time::SystemTime;

/// Marks a module name of a later generation: `/x/a.js?gen=3`.
const GENERATION_MARK: &str = "?gen=";

/// What identifies a version of a file.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Stamp {
    modified: Option<SystemTime>,
    len: u64,
}

fn stamp_of(path: &Path) -> Option<Stamp> {
    let meta = std::fs::metadata(path).ok()?;
    Some(Stamp {
        modified: meta.modified().ok(),
        len: meta.len(),
    })
}

/// Shared by the resolver, the loader and the engine (which refreshes it every cell).
#[derive(Default)]
pub(super) struct ModuleState {
    generation: u64,
    /// Local files loaded in this generation, with the stamp they had.
    local_files: HashMap<PathBuf, Stamp>,
}

impl ModuleState {
    /// Starts a new generation if a local module file changed since it was loaded.
    pub(super) fn refresh(&mut self) {
        let changed = self
            .local_files
            .iter()
            .any(|(path, stamp)| stamp_of(path) != Some(*stamp));
        if changed {
            self.generation += 1;
            self.local_files.clear();
        }
    }

    fn name_for(&mut self, path: &Path) -> String {
        let plain = path.to_string_lossy().into_owned();
        if in_node_modules(path) {
            return plain;
        }
        if let Some(stamp) = stamp_of(path) {
            match self.local_files.get(path) {
                Some(known) if *known != stamp => {
                    // Changed while this generation runs (written by the same cell, say).
                    self.generation += 1;
                    self.local_files.clear();
                    self.local_files.insert(path.to_path_buf(), stamp);
                }
                Some(_) => {}
                None => {
                    self.local_files.insert(path.to_path_buf(), stamp);
                }
            }
        }
        if self.generation == 0 {
            plain
        } else {
            format!("{plain}{GENERATION_MARK}{}", self.generation)
        }
    }
}

pub(super) type SharedModuleState = Rc<RefCell<ModuleState>>;

/// The file behind a module name (the name without its generation mark).
fn path_of_name(name: &str) -> &str {
    match name.rfind(GENERATION_MARK) {
        Some(at)
            if name[at + GENERATION_MARK.len()..]
                .bytes()
                .all(|b| b.is_ascii_digit()) =>
        {
            &name[..at]
        }
        _ => name,
    }
}

fn in_node_modules(path: &Path) -> bool {
    path.components()
        .any(|part| part == Component::Normal("node_modules".as_ref()))
}

pub(super) struct CellResolver {
    pub(super) state: SharedModuleState,
}

pub(super) struct CellLoader;

impl Resolver for CellResolver {
    fn resolve<'js>(&mut self, ctx: &Ctx<'js>, base: &str, name: &str) -> rquickjs::Result<String> {
        if let Some(builtin) = provided_builtin(name) {
            return Ok(builtin);
        }
        match resolve_path(base, name) {
            Ok(path) => Ok(self.state.borrow_mut().name_for(&path)),
            Err(message) => Err(Exception::throw_message(ctx, &message)),
        }
    }
}

impl Loader for CellLoader {
    fn load<'js>(&mut self, ctx: &Ctx<'js>, name: &str) -> rquickjs::Result<Module<'js, Declared>> {
        if let Some(builtin) = name.strip_prefix(BUILTIN_PREFIX) {
            let source = builtin_module_source(ctx, builtin)?;
            return Module::declare(ctx.clone(), name, source);
        }
        let path = path_of_name(name);
        let source = match module_source(Path::new(path)) {
            Ok(source) => source,
            Err(message) => return Err(Exception::throw_message(ctx, &message)),
        };
        Module::declare(ctx.clone(), name, source)
    }
}

/// Module names of the built-in modules `node.js` provides: `node:fs`.
const BUILTIN_PREFIX: &str = "node:";

fn builtins<'js>(ctx: &Ctx<'js>) -> rquickjs::Result<Object<'js>> {
    ctx.globals().get(super::node::BUILTINS_GLOBAL)
}

/// `node:<name>` when `name` (with or without `node:`) is a built-in module `node.js`
/// provides. Like Node, a built-in wins over a package of the same name.
fn provided_builtin(name: &str) -> Option<String> {
    let bare = name.strip_prefix(BUILTIN_PREFIX).unwrap_or(name);
    super::node::BUILTIN_NAMES
        .contains(&bare)
        .then(|| format!("{BUILTIN_PREFIX}{bare}"))
}

/// An ES module over a built-in: its object as the default export, its keys as named ones.
fn builtin_module_source(ctx: &Ctx<'_>, name: &str) -> rquickjs::Result<String> {
    let export_names: Function = builtins(ctx)?.get("exportNames")?;
    let names: Vec<String> = export_names.call((name,))?;
    let quoted = serde_json::to_string(name).unwrap_or_default();
    let mut source = format!(
        "const builtin = globalThis.{}.load({quoted});\nexport default builtin;\n",
        super::node::BUILTINS_GLOBAL
    );
    for export in names {
        source.push_str(&format!("export const {export} = builtin.{export};\n"));
    }
    Ok(source)
}

/// The module text QuickJS gets for `path`.
fn module_source(path: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|err| format!("cannot load module {}: {err}", path.display()))?;
    if path.extension().is_some_and(|ext| ext == "json") {
        return Ok(format!("export default {text}\n;"));
    }
    let commonjs = path.extension().is_some_and(|ext| ext == "cjs") || looks_like_commonjs(&text);
    if commonjs {
        return Err(format!(
            "cannot load {}: it is a CommonJS module (require/module.exports), and QuickJS \
             loads ES modules only. Use an ESM build of it (a package's `module` field or \
             `exports` \"import\" condition), or another package",
            path.display()
        ));
    }
    Ok(text)
}

/// A file that uses CommonJS and no ESM syntax.
fn looks_like_commonjs(text: &str) -> bool {
    const ESM_MARKS: &[&str] = &[
        "export{",
        "export {",
        "export default",
        "export const ",
        "export let ",
        "export var ",
        "export function",
        "export async ",
        "export class ",
        "export *",
    ];
    let esm = ESM_MARKS.iter().any(|mark| text.contains(mark))
        || text.lines().any(|line| {
            let line = line.trim_start();
            line.starts_with("import ") || line.starts_with("import{")
        });
    !esm && (text.contains("module.exports")
        || text.contains("exports.")
        || text.contains("require("))
}

/// Node.js's built-in modules, importable without `node:`.
const NODE_BUILTINS: &[&str] = &[
    "assert",
    "async_hooks",
    "buffer",
    "child_process",
    "cluster",
    "console",
    "crypto",
    "dgram",
    "dns",
    "events",
    "fs",
    "http",
    "http2",
    "https",
    "module",
    "net",
    "os",
    "path",
    "perf_hooks",
    "process",
    "querystring",
    "readline",
    "stream",
    "string_decoder",
    "timers",
    "tls",
    "tty",
    "url",
    "util",
    "v8",
    "vm",
    "worker_threads",
    "zlib",
];

fn node_builtin_message(name: &str) -> String {
    format!(
        "cannot import `{name}`: cellvisor provides these Node.js built-in modules: {}",
        super::node::BUILTIN_NAMES.join(", ")
    )
}

/// Where `name`, imported from the module `base`, lives.
fn resolve_path(base: &str, name: &str) -> Result<PathBuf, String> {
    if name.starts_with("node:") {
        return Err(node_builtin_message(name));
    }
    // `https://...` would otherwise be looked for as a package named `https:`.
    match crate::helpers::uri_scheme(name.as_bytes()) {
        Some(b"file") | None => {}
        Some(_) => {
            return Err(format!(
                "cannot import `{name}`: remote imports are not supported; import local files \
                 (./x.js, /abs/x.mjs, file:///abs/x.js) or packages installed in node_modules"
            ))
        }
    }
    let from_dir = importer_dir(base)?;
    let name = name.strip_prefix("file://").unwrap_or(name);
    let home_relative = in_home(name);
    let name = home_relative.as_deref().unwrap_or(name);
    if name.starts_with("./")
        || name.starts_with("../")
        || name.starts_with('/')
        || name == "."
        || name == ".."
    {
        let target = normalize(&from_dir.join(name));
        return find_file(&target).ok_or_else(|| {
            format!(
                "cannot find module `{name}` imported from {}: looked for {}",
                describe_importer(base),
                candidates(&target)
                    .iter()
                    .map(|path| path.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        });
    }
    resolve_package(&from_dir, name, base)
}

/// `~/x` as `$HOME/x` (the home directory, as Node hosts resolve it); `None` otherwise.
fn in_home(name: &str) -> Option<String> {
    let rest = name.strip_prefix("~/")?;
    let home = std::env::var_os("HOME").filter(|home| !home.is_empty())?;
    Some(Path::new(&home).join(rest).to_string_lossy().into_owned())
}

/// The directory relative imports start from: the importing module's, or the cwd for cells.
fn importer_dir(base: &str) -> Result<PathBuf, String> {
    let base_path = Path::new(path_of_name(base));
    if base_path.is_absolute() {
        if let Some(dir) = base_path.parent() {
            return Ok(dir.to_path_buf());
        }
    }
    std::env::current_dir()
        .map_err(|err| format!("cannot resolve imports: no working directory: {err}"))
}

fn describe_importer(base: &str) -> String {
    let path = path_of_name(base);
    if Path::new(path).is_absolute() {
        path.to_string()
    } else {
        match std::env::current_dir() {
            Ok(dir) => format!("the cell (cwd {})", dir.display()),
            Err(_) => "the cell".into(),
        }
    }
}

/// `a/./b/../c` -> `a/c`, without touching the file system.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

fn candidates(target: &Path) -> Vec<PathBuf> {
    let mut list = vec![target.to_path_buf()];
    let text = target.to_string_lossy();
    for ext in [".js", ".mjs", ".json"] {
        list.push(PathBuf::from(format!("{text}{ext}")));
    }
    list.push(target.join("index.js"));
    list.push(target.join("index.mjs"));
    list
}

fn find_file(target: &Path) -> Option<PathBuf> {
    candidates(target).into_iter().find(|path| path.is_file())
}

/// `pkg` or `@scope/pkg`, and the subpath after it (`./x` or `.`).
fn split_package(name: &str) -> Option<(&str, String)> {
    let mut parts = name.splitn(3, '/');
    let first = parts.next()?;
    let (package_len, rest) = if first.starts_with('@') {
        let second = parts.next()?;
        (first.len() + 1 + second.len(), parts.next())
    } else {
        (
            first.len(),
            name.get(first.len() + 1..).filter(|rest| !rest.is_empty()),
        )
    };
    let package = &name[..package_len];
    let subpath = match rest {
        Some(rest) if !rest.is_empty() => format!("./{rest}"),
        _ => ".".into(),
    };
    (!package.is_empty()).then_some((package, subpath))
}

fn resolve_package(from_dir: &Path, name: &str, base: &str) -> Result<PathBuf, String> {
    let Some((package, subpath)) = split_package(name) else {
        return Err(format!(
            "cannot import `{name}`: not a valid module specifier"
        ));
    };
    let mut looked = Vec::new();
    if NODE_BUILTINS.contains(&package) && !package.starts_with('@') {
        let found = from_dir
            .ancestors()
            .any(|dir| dir.join("node_modules").join(package).is_dir());
        if !found {
            return Err(node_builtin_message(name));
        }
    }
    for dir in from_dir.ancestors() {
        let modules = dir.join("node_modules");
        let package_dir = modules.join(package);
        looked.push(modules.display().to_string());
        if package_dir.is_dir() {
            return package_entry(&package_dir, package, &subpath);
        }
    }
    Err(format!(
        "cannot find package `{package}` imported from {} (looked in {})",
        describe_importer(base),
        looked.join(", ")
    ))
}

/// The file `subpath` of the package in `dir` stands for.
fn package_entry(dir: &Path, package: &str, subpath: &str) -> Result<PathBuf, String> {
    let manifest_path = dir.join("package.json");
    let manifest: serde_json::Value = match std::fs::read_to_string(&manifest_path) {
        Ok(text) => serde_json::from_str(&text)
            .map_err(|err| format!("cannot read {}: {err}", manifest_path.display()))?,
        Err(_) => serde_json::Value::Null,
    };
    let not_found = |what: String| {
        format!(
            "cannot import `{package}`{}: {what}",
            if subpath == "." {
                String::new()
            } else {
                format!(" subpath `{subpath}`")
            }
        )
    };
    if let Some(exports) = manifest.get("exports").filter(|e| !e.is_null()) {
        let target = exports_target(exports, subpath).ok_or_else(|| {
            not_found(format!(
                "{} does not export it for `import` (its `exports` has no \"import\", \"module\" \
                 or \"default\" entry for it; a \"require\"-only package is CommonJS, which \
                 QuickJS cannot load)",
                manifest_path.display()
            ))
        })?;
        let path = normalize(&dir.join(target));
        return find_file(&path)
            .ok_or_else(|| not_found(format!("{} does not exist", path.display())));
    }
    let entry = if subpath == "." {
        ["module", "main"]
            .iter()
            .find_map(|field| manifest.get(field).and_then(|v| v.as_str()))
            .unwrap_or("index.js")
            .to_string()
    } else {
        subpath.to_string()
    };
    let path = normalize(&dir.join(entry));
    find_file(&path).ok_or_else(|| {
        not_found(format!(
            "looked for {}",
            candidates(&path)
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ))
    })
}

/// Node's `exports` lookup for an `import` (conditions `import`, `module`, `default`).
fn exports_target(exports: &serde_json::Value, subpath: &str) -> Option<String> {
    let is_subpath_map = exports
        .as_object()
        .is_some_and(|map| map.keys().any(|key| key.starts_with('.')));
    if !is_subpath_map {
        return (subpath == ".")
            .then(|| conditional_target(exports, ""))
            .flatten();
    }
    let map = exports.as_object()?;
    if let Some(target) = map.get(subpath) {
        return conditional_target(target, "");
    }
    // Patterns: "./features/*": "./src/features/*.js".
    for (key, target) in map {
        if let Some((prefix, suffix)) = key.split_once('*') {
            if let Some(middle) = subpath
                .strip_prefix(prefix)
                .and_then(|rest| rest.strip_suffix(suffix))
            {
                return conditional_target(target, middle);
            }
        }
    }
    None
}

fn conditional_target(target: &serde_json::Value, star: &str) -> Option<String> {
    match target {
        serde_json::Value::String(path) => Some(path.replace('*', star)),
        serde_json::Value::Array(options) => {
            options.iter().find_map(|t| conditional_target(t, star))
        }
        serde_json::Value::Object(conditions) => conditions
            .iter()
            .filter(|(condition, _)| matches!(condition.as_str(), "import" | "module" | "default"))
            .find_map(|(_, t)| conditional_target(t, star)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exports_pick_the_import_condition() {
        let exports = serde_json::json!({
            ".": {"require": "./index.cjs", "import": "./index.mjs"},
            "./sub": {"default": "./sub.js"},
            "./features/*": "./src/*.js"
        });
        assert_eq!(
            exports_target(&exports, ".").as_deref(),
            Some("./index.mjs")
        );
        assert_eq!(
            exports_target(&exports, "./sub").as_deref(),
            Some("./sub.js")
        );
        assert_eq!(
            exports_target(&exports, "./features/x").as_deref(),
            Some("./src/x.js")
        );
        assert_eq!(
            exports_target(&serde_json::json!({"require": "./a.cjs"}), "."),
            None
        );
        assert_eq!(
            exports_target(&serde_json::json!("./m.js"), ".").as_deref(),
            Some("./m.js")
        );
    }

    #[test]
    fn a_home_relative_specifier_is_under_home() {
        let home = std::env::var("HOME").unwrap_or_default();
        if !home.is_empty() {
            assert_eq!(
                in_home("~/lib/x.js"),
                Some(format!("{}/lib/x.js", home.trim_end_matches('/')))
            );
        }
        assert_eq!(in_home("./x.js"), None);
        assert_eq!(in_home("~user/x.js"), None);
    }

    #[test]
    fn package_names_split_from_subpaths() {
        assert_eq!(split_package("lodash-es"), Some(("lodash-es", ".".into())));
        assert_eq!(split_package("a/b/c"), Some(("a", "./b/c".into())));
        assert_eq!(split_package("@s/p"), Some(("@s/p", ".".into())));
        assert_eq!(split_package("@s/p/q"), Some(("@s/p", "./q".into())));
    }

    #[test]
    fn generation_marks_come_off() {
        assert_eq!(path_of_name("/a/b.js?gen=12"), "/a/b.js");
        assert_eq!(path_of_name("/a/b.js"), "/a/b.js");
        assert_eq!(path_of_name("/a/b.js?gen=x"), "/a/b.js?gen=x");
    }

    #[test]
    fn commonjs_is_recognised() {
        assert!(looks_like_commonjs(
            "const x = require('y');\nmodule.exports = x;"
        ));
        assert!(!looks_like_commonjs(
            "import x from 'y';\nexport default x;"
        ));
        assert!(!looks_like_commonjs("export const a = 1;"));
    }
}
