//! Snapshots of the Lua namespace, through the real engine: saved by one worker, loaded by a
//! fresh one, as after an eviction.

use super::tests::{completed, engine};
use super::LuaEngine;
use crate::runtime::{Engine, Interrupt, StateError};
use cellvisor_ipc::state::{NameInfo, SkippedName, StateRefusal, StateReport, StateTask};
use cellvisor_ipc::CellOutcome;
use cellvisor_worker_core::state::testing::{load, run_task, save};
use std::path::{Path, PathBuf};
use std::time::Instant;

const NO_CAP: u64 = 1 << 40;

fn snapshot_path(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join("lua.snapshot")
}

/// Saves `from` and loads the snapshot into a fresh engine; the names restored and skipped.
fn carry_over(from: &mut LuaEngine) -> (LuaEngine, Vec<String>, Vec<SkippedName>) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = snapshot_path(&dir);
    let saved = save(from, &path, NO_CAP);
    assert!(matches!(saved, StateReport::Saved { .. }), "{saved:?}");
    let mut fresh = engine();
    match load(&mut fresh, &path, false) {
        StateReport::Loaded {
            restored, skipped, ..
        } => (fresh, restored, skipped),
        other => panic!("expected Loaded, got {other:?}"),
    }
}

/// Writes `from`'s payload alone (no trailer) into `path`; its length.
fn raw_payload(from: &mut LuaEngine, path: &Path) -> u64 {
    std::fs::write(path, b"").expect("empty payload file");
    from.save_state(path, NO_CAP, &Interrupt::default())
        .expect("saved");
    std::fs::metadata(path).expect("payload written").len()
}

/// What the `names` task lists for `engine`.
fn listed_names(engine: &mut LuaEngine) -> Vec<NameInfo> {
    match run_task(engine, StateTask::Names) {
        (CellOutcome::Completed, StateReport::Names(names)) => names,
        other => panic!("expected names, got {other:?}"),
    }
}

#[test]
fn every_value_kind_comes_back_as_it_was() {
    let mut before = engine();
    completed(
        &mut before,
        r#"
        answer = 41
        extremes = { math.mininteger, math.maxinteger, -1, 0, -0.0, 1e300 }
        ratio = 2.0
        huge = math.huge
        bytes = "a\0b\255\n"
        yes, no = true, false
        mixed = { 10, 20, 30, name = "n", [true] = "t", [2.5] = "f", [-7] = "neg" }
        mixed[{}] = "table key"
        nested = { inner = { deeper = { "leaf" } } }
        "#,
    );
    let (mut after, restored, skipped) = carry_over(&mut before);
    assert!(skipped.is_empty(), "{skipped:?}");
    for name in [
        "answer", "bytes", "huge", "mixed", "nested", "no", "ratio", "yes",
    ] {
        assert!(restored.contains(&name.to_string()), "{name}: {restored:?}");
    }
    let probe = r#"
        local table_keys = 0
        for k, v in pairs(mixed) do
          if type(k) == "table" and v == "table key" then table_keys = table_keys + 1 end
        end
        return math.type(answer), answer + 1, math.type(ratio), ratio, huge == math.huge,
          bytes == "a\0b\255\n", #bytes, yes, no, #mixed, mixed.name, mixed[true], mixed[2.5],
          mixed[-7], table_keys, nested.inner.deeper[1],
          extremes[1] == math.mininteger, extremes[2] == math.maxinteger, extremes[3],
          math.type(extremes[4]), 1 / extremes[5], extremes[6]
    "#;
    assert_eq!(
        completed(&mut after, probe),
        "integer\t42\tfloat\t2.0\ttrue\ttrue\t5\ttrue\tfalse\t3\tn\tt\tf\tneg\t1\tleaf\t\
         true\ttrue\t-1\tinteger\t-inf\t1e+300\n"
    );
}

#[test]
fn cycles_and_shared_references_stay_one_table() {
    let mut before = engine();
    completed(
        &mut before,
        "t = {}; t.self = t; pair = { t, t }; alias = t; ring = { next = { next = {} } }; \
         ring.next.next.next = ring",
    );
    let (mut after, _, _) = carry_over(&mut before);
    assert_eq!(
        completed(
            &mut after,
            "return t.self == t, pair[1] == pair[2], pair[1] == t, alias == t, \
             ring.next.next.next == ring"
        ),
        "true\ttrue\ttrue\ttrue\ttrue\n"
    );
}

#[test]
fn sparse_integer_keys_stay_integers() {
    let mut before = engine();
    completed(&mut before, "sparse = { [1] = 1, [1000000] = 2 }");
    let (mut after, _, _) = carry_over(&mut before);
    assert_eq!(
        completed(
            &mut after,
            "local kinds = {} for k in pairs(sparse) do kinds[#kinds + 1] = math.type(k) end \
             return sparse[1], sparse[1000000], sparse['1000000'], table.concat(kinds, ',')"
        ),
        "1\t2\tnil\tinteger,integer\n"
    );
}

#[test]
fn closures_keep_their_upvalues_and_share_them() {
    let mut before = engine();
    completed(
        &mut before,
        r#"
        function make_counter() local n = 0; return function() n = n + 1; return n end end
        count = make_counter(); count(); count()
        do
          local shared = 10
          bump = function() shared = shared + 1 end
          peek = function() return shared end
        end
        local insert = table.insert
        push = function(list, value) insert(list, value); return #list end
        shout = function(text) return string.upper(text) .. "!" end
        local function fact(n) if n <= 1 then return 1 end return n * fact(n - 1) end
        factorial = fact
        "#,
    );
    let (mut after, restored, skipped) = carry_over(&mut before);
    assert!(skipped.is_empty(), "{skipped:?}");
    assert!(restored.contains(&"count".to_string()), "{restored:?}");
    assert_eq!(
        completed(
            &mut after,
            "local third = count(); bump(); bump(); \
             return third, count(), peek(), push({1}, 2), shout('hi'), factorial(5)"
        ),
        "3\t4\t12\t2\tHI!\t120\n"
    );
    // The restored functions see the new worker's globals, not a copy of the old ones.
    completed(&mut after, "function string.upper() return 'replaced' end");
    assert_eq!(completed(&mut after, "shout('x')"), "replaced!\n");
}

#[test]
fn metatables_come_back_attached() {
    let mut before = engine();
    completed(
        &mut before,
        r#"
        Point = {}
        Point.__index = Point
        function Point.new(x, y) return setmetatable({ x = x, y = y }, Point) end
        function Point:sum() return self.x + self.y end
        Point.__add = function(a, b) return Point.new(a.x + b.x, a.y + b.y) end
        p = Point.new(1, 2)
        "#,
    );
    let (mut after, _, _) = carry_over(&mut before);
    assert_eq!(
        completed(
            &mut after,
            "return getmetatable(p) == Point, p:sum(), (p + p):sum(), Point.new(5, 5):sum()"
        ),
        "true\t3\t6\t10\n"
    );
}

#[test]
fn unsaveable_values_are_skipped_with_where_and_why() {
    let mut before = engine();
    completed(
        &mut before,
        r#"
        co = coroutine.create(function() end)
        wrapped = coroutine.wrap(function() end)
        handle = io.tmpfile()
        holder = { inner = { co } }
        fine = "kept"
        say = print
        fmt = string.format
        "#,
    );
    let (mut after, restored, skipped) = carry_over(&mut before);
    let why = |name: &str| {
        skipped
            .iter()
            .find(|skip| skip.name == name)
            .map(|skip| skip.why.clone())
            .unwrap_or_else(|| panic!("{name} not skipped: {skipped:?}"))
    };
    assert_eq!(why("co"), "threads (coroutines) cannot be saved");
    assert_eq!(why("wrapped"), "C functions cannot be saved");
    assert_eq!(why("handle"), "userdata cannot be saved");
    assert_eq!(
        why("holder"),
        "threads (coroutines) cannot be saved (found at .inner[1])"
    );
    assert_eq!(skipped.len(), 4, "{skipped:?}");
    assert_eq!(restored, ["fine", "fmt", "say"]);
    assert_eq!(
        completed(
            &mut after,
            "return fine, say == print, fmt('%d', 3), co, holder"
        ),
        "kept\ttrue\t3\tnil\tnil\n"
    );
}

#[test]
fn prelude_names_are_not_the_users_unless_changed() {
    let mut lua = engine();
    completed(&mut lua, "x = 1; function tostring(v) return 'mine' end");
    let names = listed_names(&mut lua);
    let listed: Vec<&str> = names.iter().map(|info| info.name.as_str()).collect();
    assert_eq!(listed, ["tostring", "x"]);
}

#[test]
fn replace_leaves_only_the_snapshot_and_the_prelude() {
    let mut before = engine();
    completed(&mut before, "a = 1; b = 2");
    let dir = tempfile::tempdir().expect("temp dir");
    let path = snapshot_path(&dir);
    assert!(matches!(
        save(&mut before, &path, NO_CAP),
        StateReport::Saved { .. }
    ));

    let mut merging = engine();
    completed(&mut merging, "b = 99; c = 3");
    assert!(matches!(
        load(&mut merging, &path, false),
        StateReport::Loaded { .. }
    ));
    assert_eq!(completed(&mut merging, "return a, b, c"), "1\t2\t3\n");

    let mut replacing = engine();
    completed(&mut replacing, "b = 99; c = 3; type = nil; read = 'broken'");
    match load(&mut replacing, &path, true) {
        StateReport::Loaded { restored, .. } => assert_eq!(restored, ["a", "b"]),
        other => panic!("expected Loaded, got {other:?}"),
    }
    assert_eq!(
        completed(&mut replacing, "return a, b, c, type(read), type(1)"),
        "1\t2\tnil\tfunction\tnumber\n"
    );
}

#[test]
fn a_payload_over_the_cap_is_refused() {
    let mut lua = engine();
    completed(&mut lua, "big = string.rep('x', 10000); small = 1");
    let dir = tempfile::tempdir().expect("temp dir");
    match save(&mut lua, &snapshot_path(&dir), 1000) {
        StateReport::Refused(StateRefusal::TooBig { bytes, max }) => {
            assert_eq!(max, 1000);
            assert!(bytes > 1000, "{bytes}");
        }
        other => panic!("expected TooBig, got {other:?}"),
    }
}

#[test]
fn garbage_and_truncated_payloads_fail_cleanly() {
    let mut before = engine();
    completed(
        &mut before,
        "t = { 1, 'two', x = { 3.5 } }; t.me = t; n = 7; \
         function f() return n end; do local up = {}; g = function() return up end end",
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("payload");
    let len = raw_payload(&mut before, &path);
    let payload = std::fs::read(&path).expect("payload");

    let mut after = engine();
    completed(&mut after, "kept = 'untouched'");
    let interrupt = Interrupt::default();
    let mut refuse = |bytes: &[u8], what: &str| {
        std::fs::write(&path, bytes).expect("write");
        let result = after.load_state(&path, bytes.len() as u64, true, &interrupt);
        assert!(
            matches!(result, Err(StateError::Failed(_))),
            "{what}: {result:?}"
        );
    };
    refuse(b"", "empty");
    refuse(b"not a lua snapshot at all, just bytes", "garbage");
    for cut in 0..payload.len() {
        refuse(&payload[..cut], &format!("cut at {cut}"));
    }
    let mut trailing = payload.clone();
    trailing.push(0);
    refuse(&trailing, "a byte past the end");
    // The namespace was never touched by a payload that failed.
    assert_eq!(
        completed(&mut after, "return kept, t, n"),
        "untouched\tnil\tnil\n"
    );

    // Only the first `len` bytes are the payload: a trailer after them is not read.
    let mut with_trailer = payload.clone();
    with_trailer.extend_from_slice(b"trailer bytes");
    std::fs::write(&path, &with_trailer).expect("write");
    after
        .load_state(&path, len, true, &interrupt)
        .expect("loads the payload");
    assert_eq!(
        completed(&mut after, "return t.me == t, f(), kept"),
        "true\t7\tnil\n"
    );
}

#[test]
fn flipped_bytes_in_data_never_panic() {
    let mut before = engine();
    completed(
        &mut before,
        "t = { 1, 'two', x = { 3.5 }, [true] = false }; t.me = t; s = 'text'",
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("payload");
    let len = raw_payload(&mut before, &path);
    let payload = std::fs::read(&path).expect("payload");
    let mut after = engine();
    for position in 0..payload.len() {
        for flip in [0x01, 0x80, 0xff] {
            let mut bytes = payload.clone();
            bytes[position] ^= flip;
            std::fs::write(&path, &bytes).expect("write");
            // Loaded or refused, but never a panic.
            let _ = after.load_state(&path, len, true, &Interrupt::default());
        }
    }
}

#[test]
fn names_say_kind_size_and_whether_kept() {
    let mut lua = engine();
    completed(
        &mut lua,
        "count = 3; label = 'abc'; list = { 1, 2, 3 }; function f() end; \
         co = coroutine.create(f); say = print",
    );
    let names = listed_names(&mut lua);
    let info = |name: &str| -> &NameInfo {
        names
            .iter()
            .find(|info| info.name == name)
            .unwrap_or_else(|| panic!("{name} not listed: {names:?}"))
    };
    assert_eq!(info("count").kind, "number");
    assert_eq!(info("label").kind, "string");
    assert_eq!(info("list").kind, "table");
    assert_eq!(info("f").kind, "function");
    assert_eq!(
        info("f").note.as_deref(),
        Some("as bytecode, with its upvalues")
    );
    assert_eq!(
        info("say").note.as_deref(),
        Some("as a reference to the worker's own `print`")
    );
    assert!(info("list").size_bytes.is_some_and(|size| size > 3));
    assert!(info("list").saveable && info("label").saveable);
    let co = info("co");
    assert_eq!(co.kind, "thread");
    assert!(!co.saveable);
    assert_eq!(
        co.note.as_deref(),
        Some("threads (coroutines) cannot be saved")
    );
}

/// Saves `code`'s namespace and loads it into a fresh engine, printing the times; the fresh
/// engine.
fn timed_round_trip(what: &str, code: &str) -> LuaEngine {
    let mut before = engine();
    completed(&mut before, code);
    let dir = tempfile::tempdir().expect("temp dir");
    let path = snapshot_path(&dir);
    let started = Instant::now();
    let bytes = match save(&mut before, &path, NO_CAP) {
        StateReport::Saved { bytes, .. } => bytes,
        other => panic!("expected Saved, got {other:?}"),
    };
    let saved_in = started.elapsed();
    let mut after = engine();
    let started = Instant::now();
    assert!(matches!(
        load(&mut after, &path, false),
        StateReport::Loaded { .. }
    ));
    let loaded_in = started.elapsed();
    println!("{what}: snapshot {bytes} bytes, save {saved_in:?}, load {loaded_in:?}");
    after
}

#[test]
fn a_million_entries_save_and_load_quickly() {
    let mut after = timed_round_trip(
        "1e6-entry integer array",
        "big = {} for i = 1, 1000000 do big[i] = i end",
    );
    assert_eq!(
        completed(&mut after, "return #big, big[1000000]"),
        "1000000\t1000000\n"
    );
    let mut after = timed_round_trip(
        "1e6 string keys to floats",
        "keyed = {} for i = 1, 1000000 do keyed['k' .. i] = i + 0.5 end",
    );
    assert_eq!(
        completed(&mut after, "return keyed.k1000000"),
        "1000000.5\n"
    );
}

#[test]
fn deep_nesting_is_kept_up_to_a_bound_and_skipped_past_it() {
    let mut before = engine();
    completed(
        &mut before,
        "local function chain(n) local head = {} local node = head \
           for _ = 1, n do node.next = {} node = node.next end return head end \
         deep = chain(240); too_deep = chain(5000)",
    );
    let (mut after, restored, skipped) = carry_over(&mut before);
    assert_eq!(restored, ["deep"]);
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    assert_eq!(skipped[0].name, "too_deep");
    assert!(
        skipped[0]
            .why
            .starts_with("tables and functions nested this deeply cannot be saved"),
        "{skipped:?}"
    );
    assert_eq!(
        completed(
            &mut after,
            "local n, node = 0, deep while node.next do n = n + 1 node = node.next end return n"
        ),
        "240\n"
    );
}

#[test]
fn an_upvalue_shared_with_a_function_inside_another_upvalue_stays_shared() {
    let mut before = engine();
    completed(
        &mut before,
        "do local holder, n = {}, 5 \
           outer = function() return holder, n end \
           holder.inner = function() n = n + 1 return n end end",
    );
    let (mut after, _, skipped) = carry_over(&mut before);
    assert!(skipped.is_empty(), "{skipped:?}");
    assert_eq!(
        completed(
            &mut after,
            "local holder = outer() holder.inner() return select(2, outer())"
        ),
        "6\n"
    );
}

#[test]
fn globals_under_keys_that_are_not_strings_are_skipped() {
    let mut before = engine();
    completed(&mut before, "_G[1] = 'one'; named = 2");
    let (_, restored, skipped) = carry_over(&mut before);
    assert_eq!(restored, ["named"]);
    assert_eq!(
        skipped,
        [SkippedName {
            name: "_G[1]".into(),
            why: "only globals named by strings are saved".into(),
        }]
    );
}

#[test]
fn an_interrupt_stops_a_save_and_a_load() {
    let mut lua = engine();
    completed(&mut lua, "big = {} for i = 1, 100000 do big[i] = i end");
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("payload");
    let len = raw_payload(&mut lua, &path);
    let interrupt = Interrupt::default();
    interrupt
        .flag()
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let other = dir.path().join("other");
    std::fs::write(&other, b"").expect("empty payload file");
    let saved = lua.save_state(&other, NO_CAP, &interrupt);
    assert!(
        matches!(&saved, Err(StateError::Failed(why)) if why == "interrupted"),
        "{saved:?}"
    );
    let loaded = lua.load_state(&path, len, true, &interrupt);
    assert!(
        matches!(&loaded, Err(StateError::Failed(why)) if why == "interrupted"),
        "{loaded:?}"
    );
    assert_eq!(completed(&mut lua, "#big"), "100000\n");
}
