/**
 * A request in flight that streams events: awaitable for its result (`await call`) and an
 * async iterator of its `eval/event` notifications (`for await (const e of call)`), both from
 * the one object. Events are kept from the start, so iterating after the await still sees
 * them all; they go when the call is dropped.
 */

import type { EvalEvent } from "./protocol.js";

/** A streaming request: `await` it for the result, iterate it for the events. */
export class Call<T> implements Promise<T>, AsyncIterable<EvalEvent> {
  /** The result (the same promise `await call` waits on). */
  readonly result: Promise<T>;
  readonly [Symbol.toStringTag] = "Call";
  private readonly queue: EvalEvent[] = [];
  private wake: (() => void) | undefined;
  private ended = false;
  private failure: unknown;
  private iterated = false;
  private dropped = false;

  /** `start` is handed the function that takes each event; it answers the result. */
  constructor(start: (push: (event: EvalEvent) => void) => Promise<T>) {
    this.result = start((event) => this.push(event));
    // A host that only iterates hears a failure from the iterator; no unhandled rejection.
    this.result.then(
      () => this.finish(),
      (error: unknown) => this.finish(error),
    );
  }

  then<R1 = T, R2 = never>(
    onfulfilled?: ((value: T) => R1 | PromiseLike<R1>) | null,
    onrejected?: ((reason: unknown) => R2 | PromiseLike<R2>) | null,
  ): Promise<R1 | R2> {
    return this.result.then(onfulfilled, onrejected);
  }

  catch<R = never>(onrejected?: ((reason: unknown) => R | PromiseLike<R>) | null): Promise<T | R> {
    return this.result.catch(onrejected);
  }

  finally(onfinally?: (() => void) | null): Promise<T> {
    return this.result.finally(onfinally);
  }

  /** The events, in order, ending when the result arrives (throwing the request's error, if it failed). Iterable once. */
  events(): AsyncIterableIterator<EvalEvent> {
    return this[Symbol.asyncIterator]();
  }

  [Symbol.asyncIterator](): AsyncIterableIterator<EvalEvent> {
    if (this.iterated) throw new TypeError("a call's events can be iterated once");
    this.iterated = true;
    const next = async (): Promise<IteratorResult<EvalEvent>> => {
      for (;;) {
        const event = this.queue.shift();
        if (event !== undefined) return { value: event, done: false };
        if (this.ended) {
          if (this.failure !== undefined) {
            const failure = this.failure;
            this.failure = undefined;
            throw failure;
          }
          return { value: undefined, done: true };
        }
        await new Promise<void>((resolve) => (this.wake = resolve));
      }
    };
    const iterator: AsyncIterableIterator<EvalEvent> = {
      next,
      return: async () => {
        // Stop keeping events nobody will read; the request itself goes on.
        this.dropped = true;
        this.queue.length = 0;
        return { value: undefined, done: true };
      },
      [Symbol.asyncIterator]: () => iterator,
    };
    return iterator;
  }

  private push(event: EvalEvent): void {
    if (this.dropped) return;
    this.queue.push(event);
    this.notify();
  }

  private finish(error?: unknown): void {
    this.ended = true;
    this.failure = error;
    this.notify();
  }

  private notify(): void {
    const wake = this.wake;
    this.wake = undefined;
    wake?.();
  }
}
