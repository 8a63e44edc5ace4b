//! How a cell's failure is told: a thrown value's report on stderr (an Error's name,
//! message and stack, or the value formatted as `console.log` would), promises rejected with
//! no handler (as Node reports them), and the heap running out.

use super::{JsEngine, MIB};
use cellvisor_ipc::{CellOutcome, OutputStream};
use rquickjs::{qjs, Coerced, Ctx, Function, Value};

impl JsEngine {
    /// Writes a thrown value's report to stderr; `Failed` with its one-line summary.
    pub(super) fn report_exception<'js>(
        &self,
        ctx: &Ctx<'js>,
        format: &Function<'js>,
        thrown: Value<'js>,
        prefixes: Prefixes,
    ) -> CellOutcome {
        let described = if thrown.is_null() && self.heap_nearly_full(ctx) {
            // The engine could not even allocate its out-of-memory error.
            Described {
                headline: "InternalError: out of memory".into(),
                stack: String::new(),
                is_error: true,
            }
        } else {
            describe_exception(ctx, format, thrown)
        };
        let prefix = if described.is_error {
            prefixes.error
        } else {
            prefixes.value
        };
        let headline = format!("{prefix}{}", described.headline);
        let mut report = format!("{headline}\n{}", described.stack);
        if !report.ends_with('\n') {
            report.push('\n');
        }
        self.cell.write(OutputStream::Stderr, &report);
        let summary = first_line(&headline);
        if !headline.ends_with("out of memory") {
            return CellOutcome::Failed { summary };
        }
        // Measured before the collection that frees what the failed allocation left.
        let used = heap_used(ctx);
        self.report_out_of_memory(ctx);
        match self.memory_limit {
            Some(limit) => CellOutcome::OutOfMemory {
                summary,
                limit_bytes: limit as u64,
                used_bytes: used,
            },
            // No limit of ours was reached: the process itself could not allocate.
            None => CellOutcome::Failed { summary },
        }
    }

    /// Promises the cell rejected and nobody handled: reported like Node does, and the
    /// first one fails a cell that would otherwise have completed.
    pub(super) fn report_unhandled_rejections<'js>(
        &self,
        ctx: &Ctx<'js>,
        format: &Function<'js>,
        outcome: CellOutcome,
    ) -> CellOutcome {
        let rejections = std::mem::take(&mut *self.cell.rejections.borrow_mut());
        let mut outcome = outcome;
        for rejection in rejections {
            let Ok(reason) = rejection.reason.restore(ctx) else {
                continue;
            };
            let failure = self.report_exception(ctx, format, reason, UNCAUGHT_IN_PROMISE);
            if outcome == CellOutcome::Completed {
                outcome = failure;
            }
        }
        outcome
    }

    pub(super) fn fail(&self, report: &str) -> CellOutcome {
        self.cell.write(OutputStream::Stderr, report);
        CellOutcome::Failed {
            summary: report.lines().next().unwrap_or_default().to_string(),
        }
    }

    /// Whether the heap is past half its limit: a `null` thrown then is an out-of-memory error
    /// the engine had no memory left to build.
    fn heap_nearly_full(&self, ctx: &Ctx<'_>) -> bool {
        let Some(limit) = self.memory_limit else {
            return false;
        };
        usize::try_from(heap_used(ctx)).is_ok_and(|used| used >= limit / 2)
    }

    /// Frees what the failed allocation left behind and tells the user what happened.
    fn report_out_of_memory(&self, ctx: &Ctx<'_>) {
        ctx.run_gc();
        let limit = match self.memory_limit {
            Some(limit) if limit >= MIB => format!(" of {} MiB", limit / MIB),
            Some(limit) => format!(" of {limit} bytes"),
            None => String::new(),
        };
        self.cell.write(
            OutputStream::Stderr,
            &format!(
                "The cell ran out of JavaScript heap memory (limit{limit}). Values it already \
                 stored in globals still hold their memory; set them to null to free it.\n"
            ),
        );
    }
}

/// What goes before a thrown value's headline: Errors read `Name: message` on their own,
/// other values `Uncaught 42`.
#[derive(Clone, Copy)]
pub(super) struct Prefixes {
    error: &'static str,
    value: &'static str,
}

pub(super) const UNCAUGHT: Prefixes = Prefixes {
    error: "",
    value: "Uncaught ",
};

pub(super) const UNCAUGHT_IN_PROMISE: Prefixes = Prefixes {
    error: "Uncaught (in promise) ",
    value: "Uncaught (in promise) ",
};

/// A thrown value, taken apart for reporting.
struct Described {
    /// `Name: message` for an Error, the formatted value otherwise.
    headline: String,
    /// The Error's stack (frames, one a line), or empty.
    stack: String,
    is_error: bool,
}

fn describe_exception<'js>(
    ctx: &Ctx<'js>,
    format: &Function<'js>,
    thrown: Value<'js>,
) -> Described {
    let Some(error) = thrown.as_object().filter(|object| object.is_error()) else {
        let text = format.call::<_, String>((thrown,)).unwrap_or_else(|_| {
            let _ = ctx.catch();
            "<a value that cannot be printed>".into()
        });
        return Described {
            headline: text,
            stack: String::new(),
            is_error: false,
        };
    };
    let name = error
        .get::<_, Coerced<String>>("name")
        .map(|name| name.0)
        .unwrap_or_else(|_| "Error".into());
    let message = error
        .get::<_, Coerced<String>>("message")
        .map(|message| message.0)
        .unwrap_or_default();
    let stack = error
        .get::<_, Option<Coerced<String>>>("stack")
        .ok()
        .flatten()
        .map(|stack| stack.0)
        .unwrap_or_default();
    let _ = ctx.catch(); // a throwing getter must not leak into the next cell
    Described {
        headline: if message.is_empty() {
            name
        } else {
            format!("{name}: {message}")
        },
        stack,
        is_error: true,
    }
}

/// What the runtime's heap holds now, in bytes (what its memory limit is checked against).
fn heap_used(ctx: &Ctx<'_>) -> u64 {
    // SAFETY: the runtime of a live context; JS_ComputeMemoryUsage only fills `usage`.
    let used = unsafe {
        let mut usage = std::mem::zeroed::<qjs::JSMemoryUsage>();
        qjs::JS_ComputeMemoryUsage(qjs::JS_GetRuntime(ctx.as_raw().as_ptr()), &mut usage);
        usage.malloc_size
    };
    u64::try_from(used).unwrap_or_default()
}

fn first_line(text: &str) -> String {
    text.lines().next().unwrap_or_default().to_string()
}
