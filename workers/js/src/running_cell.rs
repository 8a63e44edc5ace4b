//! What the native hooks, the event loop and the interrupt handler share about the cell that
//! runs now ([`RunningCell`]): where its output goes (nothing once `exit()` was called), its
//! interrupt flag, the rejections nobody handled yet, its timers and its tool calls.

use super::event_loop::{PendingCall, Timers};
use super::MIB;
use crate::runtime::{Interrupt, Outbox};
use cellvisor_ipc::{ExecuteCell, OutputStream};
use rquickjs::{Ctx, Persistent, Value};
use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The largest display bundle sent; frames to the supervisor are capped at 16 MiB.
const MAX_DISPLAY_BYTES: usize = 8 * MIB;

/// What the native hooks, the event loop and the interrupt handler share about the cell that
/// runs now.
#[derive(Default)]
pub(super) struct RunningCell {
    pub(super) sink: RefCell<Option<(Outbox, u64)>>,
    pub(super) interrupt: RefCell<Option<Arc<AtomicBool>>>,
    /// The interrupt handler stopped the cell (QuickJS threw its uncatchable "interrupted").
    pub(super) interrupted: Cell<bool>,
    /// `exit()` was called: the cell ends successfully, and the interrupt handler stops
    /// whatever code still runs (a `catch` that swallowed exit's throw, say).
    pub(super) exiting: Cell<bool>,
    /// Promises rejected with no handler (yet), as QuickJS's rejection tracker reports them.
    /// Emptied at the end of every cell: nothing may outlive the runtime.
    pub(super) rejections: RefCell<Vec<Rejection>>,
    pub(super) timers: RefCell<Timers>,
    pub(super) calls: RefCell<Vec<PendingCall>>,
    /// The host tools the cell may call, for `tools.tool_search`.
    pub(super) tools: RefCell<Vec<cellvisor_ipc::ToolInfo>>,
    /// The cell's value is being shown: its text is left in the socket's buffer, for the
    /// cell's `Done` to take along (one write, one wake-up of the supervisor).
    pub(super) showing_value: Cell<bool>,
    /// Text was left in the socket's buffer while showing the value.
    pub(super) value_unflushed: Cell<bool>,
}

pub(super) struct Rejection {
    promise: Persistent<Value<'static>>,
    pub(super) reason: Persistent<Value<'static>>,
}

impl RunningCell {
    pub(super) fn begin(&self, outbox: &Outbox, cell: &ExecuteCell, interrupt: &Interrupt) {
        *self.sink.borrow_mut() = Some((outbox.clone(), cell.cell_id));
        self.tools.borrow_mut().clone_from(&cell.tools);
        *self.interrupt.borrow_mut() = Some(interrupt.flag());
        self.interrupted.set(false);
        self.exiting.set(false);
    }

    /// Forgets the cell, dropping what it left behind: timers, unanswered tool calls and
    /// rejections (their values must not outlive the runtime).
    pub(super) fn end(&self) {
        self.sink.borrow_mut().take();
        self.interrupt.borrow_mut().take();
        self.rejections.borrow_mut().clear();
        self.timers.borrow_mut().clear_all();
        self.calls.borrow_mut().clear();
        self.exiting.set(false);
    }

    /// QuickJS's rejection tracker: remembers a rejection until someone handles it.
    pub(super) fn track_rejection<'js>(
        &self,
        ctx: &Ctx<'js>,
        promise: Value<'js>,
        reason: Value<'js>,
        handled: bool,
    ) {
        if handled {
            self.forget_rejection(ctx, &promise);
        } else {
            self.rejections.borrow_mut().push(Rejection {
                promise: Persistent::save(ctx, promise),
                reason: Persistent::save(ctx, reason),
            });
        }
    }

    pub(super) fn forget_rejection<'js>(&self, ctx: &Ctx<'js>, promise: &Value<'js>) {
        self.rejections.borrow_mut().retain(|rejection| {
            rejection
                .promise
                .clone()
                .restore(ctx)
                .map_or(true, |tracked| tracked != *promise)
        });
    }

    /// Output of the cell; nothing once `exit()` was called.
    pub(super) fn write(&self, stream: OutputStream, text: &str) {
        if self.exiting.get() {
            return;
        }
        if let Some((outbox, cell_id)) = &*self.sink.borrow() {
            if self.showing_value.get() {
                outbox.output_unflushed(*cell_id, stream, text.as_bytes());
                self.value_unflushed.set(true);
            } else {
                outbox.output(*cell_id, stream, text.as_bytes());
            }
        }
    }

    /// Sends what showing the value left in the socket's buffer: the cell has more to run
    /// before its `Done`.
    pub(super) fn flush_value(&self) {
        if self.value_unflushed.replace(false) {
            if let Some((outbox, _)) = &*self.sink.borrow() {
                outbox.flush();
            }
        }
    }

    /// Sends a display bundle. One over [`MAX_DISPLAY_BYTES`] could not cross the socket:
    /// it is dropped, with a note on stderr unless `quiet` (a trailing value's rich form,
    /// whose text already went to stdout).
    pub(super) fn display(&self, bundle_json: String, quiet: bool) {
        if self.exiting.get() {
            return;
        }
        if bundle_json.len() > MAX_DISPLAY_BYTES {
            if !quiet {
                self.write(
                    OutputStream::Stderr,
                    &format!(
                        "display: a bundle of {} bytes was not sent (the limit is {} MiB)\n",
                        bundle_json.len(),
                        MAX_DISPLAY_BYTES / MIB
                    ),
                );
            }
            return;
        }
        if let Some((outbox, cell_id)) = &*self.sink.borrow() {
            outbox.display(*cell_id, bundle_json);
        }
    }

    /// `yield_control()`: the host gets the output so far now; the cell goes on.
    pub(super) fn yield_control(&self) {
        if self.exiting.get() {
            return;
        }
        if let Some((outbox, cell_id)) = &*self.sink.borrow() {
            outbox.yield_control(*cell_id);
        }
    }

    pub(super) fn interrupt_raised(&self) -> bool {
        self.interrupt
            .borrow()
            .as_ref()
            .is_some_and(|flag| flag.load(Ordering::Relaxed))
    }

    /// Whether the cell must stop (interrupt or `exit()`), whether or not QuickJS noticed yet.
    pub(super) fn stop_requested(&self) -> bool {
        self.interrupted.get() || self.exiting.get() || self.interrupt_raised()
    }
}
