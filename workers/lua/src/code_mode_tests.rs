//! Tests of the code-mode helpers in code_mode.lua: text, image, audio, notify, exit and
//! os.exit, and Lua's own `load` as `lua_load`. (`store`/`load` go through the daemon in
//! tests/code_mode.rs: they read the worker's environment.)

use super::*;
use serde_json::json;

#[test]
fn text_image_audio_and_notify() {
    let mut lua = engine();
    let ran = run(
        &mut lua,
        "text('raw'); text({a = {1, 2}}); text(42); notify('halfway')\n\
         image('data:image/png;base64,iVBO', 'high'); audio('data:audio/wav;base64,UklG')\n\
         image({type = 'image', data = 'R0lG', mimeType = 'image/gif'})",
    );
    assert_eq!(ran.outcome, CellOutcome::Completed, "{ran:?}");
    assert_eq!(ran.stdout, "raw\n{\"a\":[1,2]}\n42\n");
    assert_eq!(
        ran.displays,
        vec![
            json!({"application/x-cellvisor-status": {"op": "notify", "message": "halfway"}}),
            json!({"image/png": "iVBO", "text/plain": "<image image/png>",
                   "application/x-cellvisor-image-detail": "high"}),
            json!({"audio/wav": "UklG", "text/plain": "<audio audio/wav>"}),
            json!({"image/gif": "R0lG", "text/plain": "<image image/gif>"}),
        ]
    );
    for (code, message) in [
        ("notify('')", "notify: the message must not be empty"),
        ("image('http://x/y.png')", "image: expected a data URL"),
        (
            "image('data:image/png;base64,AA', 'huge')",
            "detail must be one of",
        ),
        (
            "store('f', {g = print})",
            "store: value.g is a function, which JSON cannot hold",
        ),
    ] {
        let (summary, _) = failed(&mut lua, code);
        assert!(summary.contains(message), "{code}: {summary}");
    }
}

#[test]
fn exit_ends_the_cell_even_inside_pcall_and_os_exit_does_not_kill_the_worker() {
    let mut lua = engine();
    let ran = run(
        &mut lua,
        "flag = 'before'; print('shown')\n\
         local ok = pcall(function() exit() end)\n\
         flag = 'after'; print('never')",
    );
    assert_eq!(ran.outcome, CellOutcome::Completed, "{ran:?}");
    assert_eq!(ran.stdout, "shown\n");
    assert_eq!(completed(&mut lua, "flag"), "before\n");
    // From a coroutine the cell created, too.
    let ran = run(
        &mut lua,
        "coroutine.wrap(function() pcall(exit) end)(); flag = 'after'",
    );
    assert_eq!(ran.outcome, CellOutcome::Completed, "{ran:?}");
    assert_eq!(completed(&mut lua, "flag"), "before\n");
    // os.exit ends the cell, not the worker: 0 (or nothing) as success, others as a failure.
    assert_eq!(run(&mut lua, "os.exit()").outcome, CellOutcome::Completed);
    assert_eq!(run(&mut lua, "os.exit(0)").outcome, CellOutcome::Completed);
    let (summary, ran) = failed(&mut lua, "print('partial'); os.exit(3)");
    assert_eq!(summary, "exit(3): the cell ended with status 3");
    assert_eq!(ran.stdout, "partial\n");
    assert_eq!(completed(&mut lua, "1 + 1"), "2\n");
}

#[test]
fn lua_load_is_the_builtin_load() {
    let mut lua = engine();
    assert_eq!(completed(&mut lua, "lua_load('return 6 * 7')()"), "42\n");
    assert_eq!(completed(&mut lua, "load == lua_load"), "false\n");
}

/// Issue 27 item 7: `load` is the store helper; a call meant for Lua's own `load` (a chunk,
/// a function, its extra arguments) fails with a message that names `lua_load`.
#[test]
fn load_of_a_chunk_names_lua_load() {
    let mut lua = engine();
    for code in [
        "load('return 6 * 7')()",
        "load(function() return nil end)",
        "load('chunk', 'name', 't')",
    ] {
        let (summary, _) = failed(&mut lua, code);
        assert!(summary.contains("Lua's own load"), "{code}: {summary}");
        assert!(summary.contains("is lua_load"), "{code}: {summary}");
    }
    let (summary, _) = failed(&mut lua, "load(42)");
    assert!(
        summary.contains("key must be a string, not number"),
        "{summary}"
    );
}

/// A table with both the key 1 and the key "1" is refused by `store`: JSON would merge them.
#[test]
fn store_refuses_keys_json_would_merge() {
    let mut lua = engine();
    let (summary, _) = failed(&mut lua, "store('k', {a = {[1] = 'x', ['1'] = 'y'}})");
    assert!(
        summary.contains(r#"store: value.a has the key 1 and the key "1" (both "1" in JSON)"#),
        "{summary}"
    );
}
