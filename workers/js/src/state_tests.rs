//! Tests of the JavaScript worker's snapshots, through the real engine and the runtime's
//! state tasks: what is saved, what comes back into a fresh engine, what is skipped and why.
use super::tests::{engine, stdout_of};
use super::JsEngine;
use crate::runtime::Engine;
use cellvisor_ipc::state::{NameInfo, SkippedName, StateRefusal, StateReport, StateTask};
use cellvisor_worker_core::state::testing::{load, run_task, save};
use std::path::{Path, PathBuf};
use std::time::Instant;

const MAX: u64 = 256 << 20;

fn snapshot_path(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join("snaps").join("js.snapshot")
}

/// Saves `js`; the saved and skipped names.
fn saved(js: &mut JsEngine, path: &Path) -> (Vec<String>, Vec<SkippedName>) {
    match save(js, path, MAX) {
        StateReport::Saved { saved, skipped, .. } => (saved, skipped),
        other => panic!("not saved: {other:?}"),
    }
}

/// Loads `path` into `js`; the restored and skipped names.
fn loaded(js: &mut JsEngine, path: &Path, replace: bool) -> (Vec<String>, Vec<SkippedName>) {
    match load(js, path, replace) {
        StateReport::Loaded {
            restored, skipped, ..
        } => (restored, skipped),
        other => panic!("not loaded: {other:?}"),
    }
}

/// Runs `setup` in one engine, saves it, loads it into a fresh one and returns that.
fn round_trip(setup: &str) -> (JsEngine, Vec<String>, Vec<SkippedName>) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = snapshot_path(&dir);
    let mut first = engine();
    stdout_of(&mut first, setup);
    saved(&mut first, &path);
    let mut second = engine();
    let (restored, skipped) = loaded(&mut second, &path, false);
    (second, restored, skipped)
}

fn why_skipped<'a>(skipped: &'a [SkippedName], name: &str) -> &'a str {
    skipped
        .iter()
        .find(|s| s.name == name)
        .map(|s| s.why.as_str())
        .unwrap_or_else(|| panic!("{name} not skipped: {skipped:?}"))
}

#[test]
fn every_value_kind_round_trips_into_a_fresh_engine() {
    let (mut js, restored, skipped) = round_trip(
        "x = 41; var s = 'text'; b = true; n = null; u = undefined; big = 12345678901234567890n;\n\
         nan = NaN; inf = -Infinity; negz = -0; when = new Date(86400000);\n\
         m = new Map([[1, 'one'], ['k', {deep: [1, 2]}]]); st = new Set([1, 'a']);\n\
         re = /a+b/gi; ab = new Uint8Array([1, 2, 255]).buffer; f64 = new Float64Array([1.5, -2]);\n\
         view = new Uint16Array(new ArrayBuffer(8), 2, 3); view[0] = 7; sparse = [1, , 3];\n\
         nested = {a: [1, {b: 'c'}], 'odd key': 2}; err = new TypeError('bad'); boxed = Object(5);\n\
         bare = Object.create(null); bare.k = 1; hidden = 0;\n\
         Object.defineProperty(globalThis, 'quiet', {value: 9, writable: true, configurable: true});\n\
         sym = Symbol.for('shared'); 0",
    );
    assert!(skipped.is_empty(), "{skipped:?}");
    for name in ["x", "s", "big", "nan", "m", "quiet", "bare"] {
        assert!(restored.contains(&name.to_string()), "{name}: {restored:?}");
    }
    let checks = [
        "x + 1",
        "s.toUpperCase()",
        "b && n === null && u === undefined && 'u' in globalThis",
        "big * 2n",
        "Number.isNaN(nan) && inf === -Infinity && Object.is(negz, -0)",
        "when instanceof Date && when.getTime()",
        "m instanceof Map && m.get(1) + m.get('k').deep[1]",
        "st instanceof Set && st.has('a') && st.size",
        "re instanceof RegExp && re.flags + re.test('xaab')",
        "ab instanceof ArrayBuffer && [...new Uint8Array(ab)].join()",
        "f64 instanceof Float64Array && f64[0] + f64[1]",
        "view instanceof Uint16Array && view.byteOffset + ':' + view.length + ':' + view[0]",
        "sparse.length + ':' + (1 in sparse) + ':' + sparse[2]",
        "nested.a[1].b + nested['odd key']",
        "err instanceof TypeError && err.message",
        "boxed instanceof Number && boxed + 1",
        "Object.getPrototypeOf(bare) === null && bare.k",
        "Object.getOwnPropertyDescriptor(globalThis, 'quiet').enumerable + ':' + quiet",
        "sym === Symbol.for('shared')",
    ];
    let expected = [
        "42",
        "TEXT",
        "true",
        "24691357802469135780",
        "true",
        "86400000",
        "one2",
        "2",
        "gitrue",
        "1,2,255",
        "-0.5",
        "2:3:7",
        "3:false:3",
        "c2",
        "bad",
        "6",
        "1",
        "false:9",
        "true",
    ];
    for (check, want) in checks.iter().zip(expected) {
        assert_eq!(stdout_of(&mut js, check).trim_end(), want, "{check}");
    }
}

#[test]
fn cycles_and_shared_references_are_kept() {
    let (mut js, _, _) = round_trip(
        "a = {name: 'a'}; a.self = a; shared = [1]; b = {x: shared, y: shared};\n\
         other = shared; m = new Map(); m.set('me', m); buf = new ArrayBuffer(4);\n\
         v1 = new Uint8Array(buf); v2 = new Uint8Array(buf, 1); 0",
    );
    assert_eq!(
        stdout_of(
            &mut js,
            "[a.self === a, b.x === b.y, other === b.x, m.get('me') === m, v1.buffer === v2.buffer]"
        ),
        "[true,true,true,true,true]\n"
    );
    stdout_of(&mut js, "v1[1] = 9");
    assert_eq!(stdout_of(&mut js, "v2[0]"), "9\n");
}

#[test]
fn functions_and_classes_come_back_by_source() {
    let (mut js, restored, skipped) = round_trip(
        "function square(x) { return x * x }\nconst twice = (f, x) => f(f(x));\n\
         class Point { constructor(x, y) { this.x = x; this.y = y } norm() { return square(this.x) + square(this.y) } }\n\
         class Point3 extends Point { static made = 0; constructor(x, y, z) { super(x, y); this.z = z; Point3.made++ } }\n\
         p = new Point3(1, 2, 3); async function later() { return 5 }\n\
         const obj = { greet() { return 'hi ' + this.who }, who: 'you' }; 0",
    );
    assert!(skipped.is_empty(), "{skipped:?}");
    assert!(restored.contains(&"Point".to_string()), "{restored:?}");
    assert_eq!(stdout_of(&mut js, "twice(square, 3)"), "81\n");
    assert_eq!(stdout_of(&mut js, "new Point(3, 4).norm()"), "25\n");
    assert_eq!(
        stdout_of(
            &mut js,
            "[p instanceof Point3, p instanceof Point, p.norm(), p.z, Point3.made]"
        ),
        "[true,true,5,3,1]\n"
    );
    assert_eq!(
        stdout_of(&mut js, "new Point3(0, 0, 0); Point3.made"),
        "2\n"
    );
    assert_eq!(stdout_of(&mut js, "await later()"), "5\n");
    assert_eq!(stdout_of(&mut js, "obj.greet()"), "hi you\n");
}

#[test]
fn closures_and_unsaveable_values_are_skipped_with_reasons() {
    let (mut js, restored, skipped) = round_trip(
        "function makeCounter() { let n = 0; return () => ++n }\nconst inc = makeCounter(); inc();\n\
         api = { count: inc }; keep = 1; pending = Promise.resolve(1); weak = new WeakMap();\n\
         prox = new Proxy({}, {}); gen = (function* () { yield 1 })(); native = Math.max;\n\
         bound = makeCounter.bind(null); holder = { p: pending }; 0",
    );
    let reasons = [
        ("inc", "closure over n"),
        ("api", "count: closure over n"),
        ("pending", "Promise objects cannot be saved"),
        ("weak", "WeakMap objects cannot be saved"),
        ("prox", "Proxy objects cannot be saved"),
        ("gen", "generators cannot be saved"),
        ("native", "native functions cannot be saved"),
        ("bound", "bound functions cannot be saved"),
        ("holder", ".p: Promise objects cannot be saved"),
    ];
    for (name, why) in reasons {
        let said = why_skipped(&skipped, name);
        assert!(said.contains(why), "{name}: {said}");
        assert!(!restored.contains(&name.to_string()), "{name} restored");
    }
    assert_eq!(stdout_of(&mut js, "keep + makeCounter()()"), "2\n");
    assert_eq!(stdout_of(&mut js, "typeof inc"), "undefined\n");
}

#[test]
fn let_and_const_across_cells_are_restored() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = snapshot_path(&dir);
    let mut first = engine();
    stdout_of(&mut first, "let x = 41");
    stdout_of(&mut first, "const y = x + 1; class K { v() { return y } }");
    let (names, _) = saved(&mut first, &path);
    assert_eq!(names, ["x", "y", "K"]);
    let mut second = engine();
    loaded(&mut second, &path, false);
    assert_eq!(stdout_of(&mut second, "x + 1"), "42\n");
    assert_eq!(stdout_of(&mut second, "new K().v()"), "42\n");
    // A cell may declare them again after a restore.
    assert_eq!(stdout_of(&mut second, "let x = 1; x"), "1\n");
}

#[test]
fn the_prelude_is_never_saved() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut js = engine();
    stdout_of(&mut js, "typeof Buffer + typeof fetch");
    let (names, skipped) = saved(&mut js, &snapshot_path(&dir));
    assert!(
        names.is_empty() && skipped.is_empty(),
        "{names:?} {skipped:?}"
    );
}

#[test]
fn replace_leaves_only_what_the_snapshot_held() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = snapshot_path(&dir);
    let mut js = engine();
    stdout_of(&mut js, "var kept = 1; let changed = 'before'");
    saved(&mut js, &path);
    stdout_of(
        &mut js,
        "var later = 2; changed = 'after'; globalThis.loose = 3",
    );
    let (restored, _) = loaded(&mut js, &path, true);
    assert_eq!(restored, ["kept", "changed"]);
    assert_eq!(
        stdout_of(
            &mut js,
            "[typeof later, typeof loose, changed, kept, typeof print]"
        ),
        "[\"undefined\",\"undefined\",\"before\",1,\"function\"]\n"
    );
    // Without replace, names the snapshot lacks stay.
    stdout_of(&mut js, "var later = 2");
    loaded(&mut js, &path, false);
    assert_eq!(stdout_of(&mut js, "later + kept"), "3\n");
}

#[test]
fn a_payload_over_the_cap_is_too_big() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = snapshot_path(&dir);
    let mut js = engine();
    stdout_of(&mut js, "big = 'x'.repeat(100000); 0");
    match save(&mut js, &path, 10_000) {
        StateReport::Refused(StateRefusal::TooBig { bytes, max }) => {
            assert_eq!(max, 10_000);
            assert!(bytes > 10_000, "{bytes}");
        }
        other => panic!("not refused: {other:?}"),
    }
    assert!(!path.exists());
    assert_eq!(stdout_of(&mut js, "big.length"), "100000\n");
}

#[test]
fn a_bad_payload_fails_cleanly_and_leaves_the_namespace() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut js = engine();
    stdout_of(&mut js, "kept = 5");
    let garbage = [
        &b"\xff\xfe not text"[..],
        b"{\"format\": \"cellvisor-js-state\", \"version\": 1, \"entries\": [",
        b"{\"format\": \"other\", \"version\": 1, \"entries\": []}",
        b"{\"format\": \"cellvisor-js-state\", \"version\": 9, \"entries\": []}",
        b"{\"format\": \"cellvisor-js-state\", \"version\": 1, \"entries\": [[\"a\", [\"r\", 99]]]}",
        b"{\"format\": \"cellvisor-js-state\", \"version\": 1, \"entries\": [[\"a\", [\"zz\"]]]}",
        b"{\"format\": \"cellvisor-js-state\", \"version\": 1, \"entries\": [[\"a\", {\"x\": 1}]]}",
        b"{\"format\": \"cellvisor-js-state\", \"version\": 1, \"entries\": [7]}",
    ];
    for (i, payload) in garbage.iter().enumerate() {
        let path = dir.path().join(format!("bad{i}"));
        std::fs::write(&path, payload).expect("write");
        let err = js
            .load_state(&path, payload.len() as u64, false, &Default::default())
            .expect_err("refused");
        assert!(
            matches!(err, crate::runtime::StateError::Failed(_)),
            "{i}: {err:?}"
        );
    }
    assert_eq!(stdout_of(&mut js, "kept"), "5\n");
}

#[test]
fn only_the_payload_bytes_are_read() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = snapshot_path(&dir);
    let mut js = engine();
    stdout_of(&mut js, "x = 1");
    saved(&mut js, &path);
    // The sealed file carries a trailer after the payload; loading through the runtime reads
    // around it.
    let mut fresh = engine();
    loaded(&mut fresh, &path, false);
    assert_eq!(stdout_of(&mut fresh, "x"), "1\n");
}

#[test]
fn names_lists_kinds_sizes_and_what_would_survive() {
    let mut js = engine();
    stdout_of(
        &mut js,
        "x = 1; m = new Map(); class K {}; k = new K(); function f() {}; p = Promise.resolve(); 0",
    );
    let (_, report) = run_task(&mut js, StateTask::Names);
    let StateReport::Names(names) = report else {
        panic!("{report:?}")
    };
    let find = |name: &str| -> &NameInfo {
        names
            .iter()
            .find(|info| info.name == name)
            .unwrap_or_else(|| panic!("{name}: {names:?}"))
    };
    assert_eq!(names.len(), 6, "{names:?}");
    assert_eq!(find("x").kind, "number");
    assert_eq!(find("m").kind, "Map");
    assert_eq!(find("K").kind, "class");
    assert_eq!(find("k").kind, "K");
    assert_eq!(find("f").kind, "function");
    assert_eq!(find("f").note.as_deref(), Some("by source text"));
    assert!(find("x").saveable && find("x").size_bytes.is_some());
    let promise = find("p");
    assert!(!promise.saveable);
    assert_eq!(
        promise.note.as_deref(),
        Some("Promise objects cannot be saved")
    );
}

#[test]
fn ten_thousand_objects_save_and_load_quickly() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = snapshot_path(&dir);
    let mut js = engine();
    stdout_of(
        &mut js,
        "rows = []; for (let i = 0; i < 10000; i++) rows.push({id: i, name: 'row ' + i, tags: ['a', 'b'], when: new Date(i)}); 0",
    );
    let started = Instant::now();
    let bytes = match save(&mut js, &path, MAX) {
        StateReport::Saved { bytes, .. } => bytes,
        other => panic!("{other:?}"),
    };
    let save_time = started.elapsed();
    let mut fresh = engine();
    let started = Instant::now();
    loaded(&mut fresh, &path, false);
    let load_time = started.elapsed();
    println!("10,000 objects: save {save_time:?}, load {load_time:?}, {bytes} bytes");
    assert_eq!(
        stdout_of(&mut fresh, "rows[9999].name + rows.length"),
        "row 999910000\n"
    );
    // Debug builds run QuickJS unoptimised: the bound is for release builds.
    let bound = if cfg!(debug_assertions) { 10.0 } else { 1.0 };
    assert!(save_time.as_secs_f64() < bound && load_time.as_secs_f64() < bound);
}
