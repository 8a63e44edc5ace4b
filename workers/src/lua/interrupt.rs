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
//! The hook is installed with the raw C API rather than mlua's `set_hook`, because mlua tracks a
//! single hooked thread and removes the hook from every other one, so a loop inside
//! `coroutine.wrap(function() ... end)()` could not be stopped. Installed on the main thread, the
//! hook (and the pointer to its [`HookControl`], kept in the thread's "extra space") is copied
//! into every coroutine created afterwards, the cells' and the user's alike.

use mlua::ffi::{self, lua_Debug, lua_State};
use mlua::{Lua, Thread};
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
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
        let control: &'static HookControl = Box::leak(Box::default());
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
    if flag.is_null() || !unsafe { (*flag).load(Ordering::Relaxed) } {
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
