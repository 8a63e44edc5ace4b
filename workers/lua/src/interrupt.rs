//! Stopping a running cell.
//!
//! Every cell runs as a coroutine. An instruction-count hook checks the cell's interrupt flag
//! and, once it is raised:
//! - in the cell's own coroutine, where yielding is allowed, it *yields*: a yield cannot be
//!   caught by `pcall`, so the driver gets control back and simply never resumes;
//! - anywhere else (a coroutine the cell created, or below a C function that cannot be yielded
//!   across, such as a `table.sort` comparator) it raises the error `interrupted`, which unwinds
//!   towards the cell's coroutine, where the next hook yields. Erroring rather than yielding a
//!   nested coroutine keeps its resumer from mistaking the stop for an ordinary (empty) yield.
//!
//! `exit()` (and `os.exit`, which a cell must not use to kill its worker) ends the cell the same
//! way, at once: called in the cell's coroutine it yields it (past any `pcall`); in a coroutine
//! the cell created it raises `exit() ended the cell` there and makes the cell's coroutine stop
//! at its next instruction. The driver then reports the cell as ended by `exit`, not
//! interrupted.
//!
//! The hook is installed with the raw C API rather than mlua's `set_hook`, because mlua tracks a
//! single hooked thread and removes the hook from every other one, so a loop inside
//! `coroutine.wrap(function() ... end)()` could not be stopped. Installed on the main thread, the
//! hook (and the pointer to its [`HookControl`], kept in the thread's "extra space") is copied
//! into every coroutine created afterwards, the cells' and the user's alike.

use mlua::ffi::{self, lua_Debug, lua_State};
use mlua::{Lua, Thread};
use std::ffi::c_int;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicPtr, Ordering};
use std::sync::Arc;

/// How many VM instructions run between two looks at the interrupt flag: small enough to stop
/// within microseconds, large enough to cost nothing measurable.
const INSTRUCTIONS_PER_CHECK: i32 = 1000;

/// What the hook reads. Lives for the rest of the process (see [`InterruptHook::install`]).
#[derive(Default)]
struct HookControl {
    /// The running cell's interrupt flag; null between cells.
    flag: AtomicPtr<AtomicBool>,
    /// The running cell's coroutine, the one the hook may yield; null between cells.
    cell_thread: AtomicPtr<lua_State>,
    /// Set when the hook yielded the cell's coroutine, to tell that yield from a
    /// `coroutine.yield()` written at the top level of a cell.
    yielded: AtomicBool,
    /// The status `exit()` asked for, or [`NOT_EXITING`].
    exit_status: AtomicI64,
}

/// `HookControl::exit_status` while the cell has not called `exit()`.
const NOT_EXITING: i64 = i64::MIN;

impl HookControl {
    fn new() -> Self {
        HookControl {
            exit_status: AtomicI64::new(NOT_EXITING),
            ..HookControl::default()
        }
    }

    fn exiting(&self) -> bool {
        self.exit_status.load(Ordering::Relaxed) != NOT_EXITING
    }
}

/// The engine's handle on the hook.
pub(super) struct InterruptHook {
    control: &'static HookControl,
    /// Keeps alive the flag `control.flag` points to while a cell runs.
    armed_flag: Option<Arc<AtomicBool>>,
}

impl InterruptHook {
    /// Installs the hook on the main thread of `lua`; coroutines created afterwards inherit it.
    ///
    /// The control block is leaked on purpose: the hook can run as long as any Lua code can,
    /// including `__gc` metamethods while the state closes and coroutines that outlive a cell, so
    /// it must outlive the `Lua` state, and a worker has exactly one engine for its whole life.
    pub(super) fn install(lua: &Lua) -> mlua::Result<Self> {
        let control: &'static HookControl = Box::leak(Box::new(HookControl::new()));
        let control_ptr: *const HookControl = control;
        // SAFETY: `exec_raw` runs the closure in protected mode on a valid state with enough
        // stack for one push. The main thread's extra space is `LUA_EXTRASPACE` bytes, exactly
        // one pointer, reserved for the embedder (mlua does not use it); writing it before
        // setting the hook means the hook never reads it uninitialized.
        unsafe {
            lua.exec_raw::<()>((), |state| {
                ffi::lua_rawgeti(state, ffi::LUA_REGISTRYINDEX, ffi::LUA_RIDX_MAINTHREAD);
                let main = ffi::lua_tothread(state, -1);
                ffi::lua_pop(state, 1);
                if !main.is_null() {
                    ffi::lua_getextraspace(main)
                        .cast::<*const HookControl>()
                        .write(control_ptr);
                    ffi::lua_sethook(
                        main,
                        Some(on_instruction_count),
                        ffi::LUA_MASKCOUNT,
                        INSTRUCTIONS_PER_CHECK,
                    );
                }
            })?;
        }
        Ok(InterruptHook {
            control,
            armed_flag: None,
        })
    }

    /// Starts watching `flag` for the cell about to run in `cell_thread`.
    pub(super) fn arm(&mut self, lua: &Lua, flag: Arc<AtomicBool>, cell_thread: &Thread) {
        self.control.yielded.store(false, Ordering::SeqCst);
        self.control
            .exit_status
            .store(NOT_EXITING, Ordering::SeqCst);
        self.control
            .flag
            .store(Arc::as_ptr(&flag).cast_mut(), Ordering::SeqCst);
        self.armed_flag = Some(flag);
        let control = self.control;
        // SAFETY: the thread is pushed as the only argument, so index -1 is that thread. It
        // inherited the hook from the main thread already; setting it again is cheap and makes
        // the cell's interruptibility independent of how mlua creates threads.
        let _ = unsafe {
            lua.exec_raw::<()>(cell_thread, |state| {
                let thread = ffi::lua_tothread(state, -1);
                ffi::lua_pop(state, 1);
                if !thread.is_null() {
                    ffi::lua_sethook(
                        thread,
                        Some(on_instruction_count),
                        ffi::LUA_MASKCOUNT,
                        INSTRUCTIONS_PER_CHECK,
                    );
                    control.cell_thread.store(thread, Ordering::SeqCst);
                }
            })
        };
    }

    /// Stops watching: between cells nothing is interrupted.
    pub(super) fn disarm(&mut self) {
        self.control
            .cell_thread
            .store(ptr::null_mut(), Ordering::SeqCst);
        self.control.flag.store(ptr::null_mut(), Ordering::SeqCst);
        self.armed_flag = None;
    }

    /// The status the running cell gave `exit()` (0 for success), if it called it.
    pub(super) fn exit_status(&self) -> Option<i64> {
        let status = self.control.exit_status.load(Ordering::SeqCst);
        (status != NOT_EXITING).then_some(status)
    }

    /// Whether the hook yielded the cell's coroutine (as opposed to the cell's own code).
    pub(super) fn yielded_for_interrupt(&self) -> bool {
        self.control.yielded.load(Ordering::SeqCst)
    }
}

/// The hook itself; see the module documentation for what it does.
unsafe extern "C-unwind" fn on_instruction_count(state: *mut lua_State, _: *mut lua_Debug) {
    // SAFETY: every thread that has this hook got its extra space from the main thread after
    // `install` wrote the (never freed) control pointer there.
    let control = unsafe { *ffi::lua_getextraspace(state).cast::<*const HookControl>() };
    let Some(control) = (unsafe { control.as_ref() }) else {
        return;
    };
    let flag = control.flag.load(Ordering::Acquire);
    // SAFETY: a non-null flag pointer is kept alive by `InterruptHook::armed_flag`, and it is
    // only changed on this (the engine's) thread, never while Lua code runs.
    if flag.is_null() || !(unsafe { (*flag).load(Ordering::Relaxed) } || control.exiting()) {
        return;
    }
    unsafe {
        if state == control.cell_thread.load(Ordering::Acquire) && ffi::lua_isyieldable(state) != 0
        {
            control.yielded.store(true, Ordering::SeqCst);
            // From a count hook, `lua_yield` returns; the VM yields once the hook returns.
            ffi::lua_yield(state, 0);
            return;
        }
        // Nothing in this frame needs dropping, so unwinding over it with longjmp is sound.
        ffi::lua_pushstring(state, c"interrupted".as_ptr());
        ffi::lua_error(state);
    }
}

/// `exit(status?)` and `os.exit(status?)` as a Lua C function: no status, `0` or `true` end
/// the cell successfully, any other number (or `false`, 1) as a failure with that status.
/// Between cells it does nothing.
///
/// # Safety
/// Called by Lua only, on a thread whose extra space holds the control pointer (every thread
/// created after [`InterruptHook::install`]).
pub(super) unsafe extern "C-unwind" fn exit_cell(state: *mut lua_State) -> c_int {
    // SAFETY: see the function's contract.
    let control = unsafe { *ffi::lua_getextraspace(state).cast::<*const HookControl>() };
    let Some(control) = (unsafe { control.as_ref() }) else {
        return 0;
    };
    let cell_thread = control.cell_thread.load(Ordering::Acquire);
    if cell_thread.is_null() {
        return 0;
    }
    // SAFETY: argument 1 is read by type; absent arguments are LUA_TNONE.
    let status = unsafe {
        match ffi::lua_type(state, 1) {
            ffi::LUA_TNONE | ffi::LUA_TNIL => 0,
            ffi::LUA_TBOOLEAN => i64::from(ffi::lua_toboolean(state, 1) == 0),
            ffi::LUA_TNUMBER => ffi::lua_tonumber(state, 1) as i64,
            _ => 1,
        }
    };
    control
        .exit_status
        .store(status.max(NOT_EXITING + 1), Ordering::SeqCst);
    unsafe {
        if state == cell_thread && ffi::lua_isyieldable(state) != 0 {
            // From a C function, `lua_yield` unwinds to the resume (nothing here needs dropping).
            return ffi::lua_yield(state, 0);
        }
        // In a coroutine the cell created: the error unwinds it, and the cell's own coroutine
        // stops at its very next instruction once it runs again (its hook now fires at once).
        ffi::lua_sethook(
            cell_thread,
            Some(on_instruction_count),
            ffi::LUA_MASKCOUNT,
            1,
        );
        ffi::lua_pushstring(state, c"exit() ended the cell".as_ptr());
        ffi::lua_error(state)
    }
}
