// A session's JavaScript state as data: the user's globals encoded as tagged JSON (a
// structured-clone encoding of our own) and decoded again. Evaluates to a function that
// takes the native helpers (classOf, freeNames, toBase64, fromBase64) and returns
// {names, save, load}. `host` (the globals the worker itself defined) is a Set of names.
//
// A value is a JSON primitive (finite numbers other than -0, strings, booleans, null) or an
// array whose first item is a tag:
//   ["u"] undefined    ["n", "NaN"|"Infinity"|"-Infinity"|"-0"]    ["b", digits] BigInt
//   ["y", key] a Symbol.for symbol    ["r", id] an object met before (cycles, shared refs)
//   ["h"] an array hole
//   ["A", id, items, props, proto]            ["O", id, props, proto]
//   ["D", id, time]  ["R", id, source, flags]  ["M", id, [[k, v]...]]  ["S", id, [v...]]
//   ["AB", id, base64]  ["T", id, type, buffer, byteOffset, length]
//   ["P", id, primitive] a boxed primitive    ["E", id, name, message, stack, props]
//   ["F", id, source, props, prototypeProps] a function or class, by its source text
// props are [[key, value, attributes?]...] (attributes: a bit set of writable 1,
// enumerable 2, configurable 4, when not all three; an accessor's value is ["g", get, set]);
// proto is 0 (the usual one), 1 (null) or the encoded constructor whose .prototype it is.
(function (native) {
  "use strict";
  const FORMAT = "cellvisor-js-state";
  const VERSION = 1;
  const classOf = native.classOf;
  const ObjectProto = Object.prototype;
  const FunctionToString = Function.prototype.toString;
  const getOwnPropertyNames = Object.getOwnPropertyNames;
  const getDescriptor = Object.getOwnPropertyDescriptor;

  // The engine's class of each kind of object, learned from samples.
  const TYPED = [
    Int8Array, Uint8Array, Uint8ClampedArray, Int16Array, Uint16Array, Int32Array, Uint32Array,
    Float32Array, Float64Array, BigInt64Array, BigUint64Array,
  ];
  if (typeof Float16Array === "function") TYPED.push(Float16Array);
  const KIND = new Map();
  const learn = (sample, kind) => KIND.set(classOf(sample), kind);
  learn({}, "Object");
  learn([], "Array");
  learn(new Date(0), "Date");
  learn(/x/, "RegExp");
  learn(new Map(), "Map");
  learn(new Set(), "Set");
  learn(new ArrayBuffer(0), "ArrayBuffer");
  learn(new DataView(new ArrayBuffer(0)), "DataView");
  for (const Type of TYPED) learn(new Type(0), Type.name);
  learn(new Error(), "Error");
  learn(Object(1), "Number");
  learn(Object("s"), "String");
  learn(Object(true), "Boolean");
  learn(Object(1n), "BigIntBox");
  const UNSAVEABLE = new Map([
    [classOf(Promise.resolve()), "Promise objects cannot be saved"],
    [classOf(new WeakMap()), "WeakMap objects cannot be saved"],
    [classOf(new WeakSet()), "WeakSet objects cannot be saved"],
    [classOf(new Proxy({}, {})), "Proxy objects cannot be saved"],
    [classOf((function* () {})()), "generators cannot be saved"],
    [classOf((async function* () {})()), "async generators cannot be saved"],
    [classOf(Object(Symbol())), "Symbol objects cannot be saved"],
    [classOf(new SharedArrayBuffer(0)), "SharedArrayBuffer objects cannot be saved"],
  ]);
  if (typeof WeakRef === "function") UNSAVEABLE.set(classOf(new WeakRef({})), "WeakRef objects cannot be saved");
  if (typeof FinalizationRegistry === "function") {
    UNSAVEABLE.set(classOf(new FinalizationRegistry(() => {})), "FinalizationRegistry objects cannot be saved");
  }
  const SOURCE_FUNCTIONS = new Set(
    [function () {}, () => {}, async function () {}, async () => {}, function* () {}, async function* () {}, class {}, { m() {} }.m]
      .map(classOf),
  );
  const BOUND = classOf(function () {}.bind(null));
  const TYPED_BY_NAME = new Map(TYPED.map((Type) => [Type.name, Type]));
  const ERRORS = { Error, TypeError, RangeError, SyntaxError, ReferenceError, EvalError, URIError };
  if (typeof AggregateError === "function") ERRORS.AggregateError = AggregateError;

  class Unsaveable extends Error {}
  class TooBig extends Error {}

  const userNames = (host) =>
    getOwnPropertyNames(globalThis).filter((name) => !host.has(name) && !name.startsWith("__cellvisor"));

  // Why the function's source cannot stand alone, or null when it can.
  const freeCache = new Map();
  function captured(source) {
    let free = freeCache.get(source);
    if (free === undefined) {
      free = native.freeNames(source);
      freeCache.set(source, free);
    }
    if (free === null) return "its source text cannot be evaluated again";
    const missing = free.filter((name) => name !== "arguments" && !(name in globalThis));
    if (missing.length === 0) return null;
    return `closure over ${missing.join(", ")}: captured variables cannot be saved`;
  }

  function encoder(maxBytes) {
    const ids = new Map();
    const order = [];
    let budget = 0;
    const spend = (bytes) => {
      budget += bytes;
      if (budget > maxBytes) throw new TooBig(String(budget));
    };
    const where = (path) => (path === "" ? "" : `${path}: `);

    function enc(value, path) {
      switch (typeof value) {
        case "string":
          spend(value.length + 2);
          return value;
        case "boolean":
          spend(4);
          return value;
        case "number":
          spend(2);
          if (Number.isFinite(value) && !Object.is(value, -0)) return value;
          return ["n", Object.is(value, -0) ? "-0" : String(value)];
        case "undefined":
          spend(5);
          return ["u"];
        case "bigint":
          spend(8);
          return ["b", value.toString()];
        case "symbol": {
          const key = Symbol.keyFor(value);
          if (key === undefined) throw new Unsaveable(`${where(path)}symbols cannot be saved`);
          return ["y", key];
        }
        default:
          if (value === null) {
            spend(4);
            return null;
          }
          return encObject(value, path);
      }
    }

    function encObject(object, path) {
      const seen = ids.get(object);
      if (seen !== undefined) {
        spend(8);
        return ["r", seen];
      }
      const cls = classOf(object);
      const refused = UNSAVEABLE.get(cls);
      if (refused !== undefined) throw new Unsaveable(where(path) + refused);
      const id = order.length;
      ids.set(object, id);
      order.push(object);
      spend(8);
      if (typeof object === "function") return encFunction(object, id, cls, path);
      const kind = KIND.get(cls);
      switch (kind) {
        case "Object":
          return ["O", id, props(object, path, false), proto(object, ObjectProto, path)];
        case "Array":
          return encArray(object, id, path);
        case "Date":
          return ["D", id, enc(Date.prototype.getTime.call(object), path)];
        case "RegExp":
          spend(object.source.length);
          return ["R", id, object.source, object.flags];
        case "Map": {
          const entries = [];
          for (const [key, item] of Map.prototype.entries.call(object)) {
            entries.push([enc(key, `${path}<key>`), enc(item, `${path}.get(…)`)]);
          }
          return ["M", id, entries];
        }
        case "Set": {
          const items = [];
          for (const item of Set.prototype.values.call(object)) items.push(enc(item, `${path}<item>`));
          return ["S", id, items];
        }
        case "ArrayBuffer":
          spend(Math.ceil(object.byteLength / 3) * 4);
          return ["AB", id, native.toBase64(object)];
        case "Number":
        case "String":
        case "Boolean":
        case "BigIntBox":
          return ["P", id, enc(object.valueOf(), path)];
        case "Error":
          return [
            "E", id, String(object.name), String(object.message), enc(object.stack, path),
            props(object, path, false).filter(([key]) => key !== "message" && key !== "stack"),
          ];
        case undefined:
          break;
        default: {
          // A typed array or DataView: its buffer is encoded as a shared object of its own.
          const length = kind === "DataView" ? object.byteLength : object.length;
          return ["T", id, kind, enc(object.buffer, path), object.byteOffset, length];
        }
      }
      const tag = Object.prototype.toString.call(object).slice(8, -1);
      throw new Unsaveable(`${where(path)}${tag === "Object" ? "these" : tag} objects cannot be saved`);
    }

    function encArray(array, id, path) {
      const items = new Array(array.length);
      let present = 0;
      for (let i = 0; i < array.length; i++) {
        if (i in array) {
          items[i] = enc(array[i], `${path}[${i}]`);
          present++;
        } else {
          spend(5);
          items[i] = ["h"];
        }
      }
      const extra = getOwnPropertyNames(array).length - 1 > present;
      const more = extra ? props(array, path, true) : [];
      return ["A", id, items, more, proto(array, Array.prototype, path)];
    }

    function encFunction(fn, id, cls, path) {
      if (cls === BOUND) throw new Unsaveable(`${where(path)}bound functions cannot be saved`);
      if (!SOURCE_FUNCTIONS.has(cls)) throw new Unsaveable(`${where(path)}native functions cannot be saved`);
      const source = FunctionToString.call(fn);
      if (source.includes("[native code]")) throw new Unsaveable(`${where(path)}native functions cannot be saved`);
      const why = captured(source);
      if (why !== null) throw new Unsaveable(where(path) + why);
      spend(source.length);
      const isClass = source.startsWith("class");
      const own = props(fn, path, false, isClass ? "class" : "function");
      const prototype = getDescriptor(fn, "prototype");
      let prototypeProps = [];
      if (prototype !== undefined && prototype.value !== null && typeof prototype.value === "object" && !isClass) {
        prototypeProps = props(prototype.value, `${path}.prototype`, false).filter(([key]) => key !== "constructor");
      }
      return ["F", id, source, own, prototypeProps];
    }

    // An object's own string-keyed properties; symbol keys are refused, never dropped.
    function props(object, path, skipIndexes, ofFunction) {
      if (Object.getOwnPropertySymbols(object).length > 0) {
        throw new Unsaveable(`${where(path)}symbol-keyed properties cannot be saved`);
      }
      const out = [];
      for (const key of getOwnPropertyNames(object)) {
        if (skipIndexes && (key === "length" || String(key >>> 0) === key)) continue;
        if (ofFunction && (key === "length" || key === "name" || key === "prototype")) continue;
        const desc = getDescriptor(object, key);
        // A class's static methods come back with its source.
        if (ofFunction === "class" && typeof desc.value === "function") continue;
        const attrs = (desc.writable ? 1 : 0) | (desc.enumerable ? 2 : 0) | (desc.configurable ? 4 : 0);
        const sub = `${path}.${key}`;
        spend(key.length + 3);
        let value;
        if ("value" in desc) value = enc(desc.value, sub);
        else value = ["g", enc(desc.get, `${sub}<get>`), enc(desc.set, `${sub}<set>`)];
        const accessor = !("value" in desc);
        out.push(attrs === 7 || (accessor && attrs === 6) ? [key, value] : [key, value, attrs]);
      }
      return out;
    }

    // The object's prototype: 0 when it is `usual`, 1 for null, else its class.
    function proto(object, usual, path) {
      const p = Object.getPrototypeOf(object);
      if (p === usual) return 0;
      if (p === null) return 1;
      const ctor = getDescriptor(p, "constructor");
      if (ctor !== undefined && typeof ctor.value === "function" && ctor.value.prototype === p) {
        return enc(ctor.value, `${path}<class>`);
      }
      throw new Unsaveable(`${where(path)}objects with this prototype cannot be saved`);
    }

    // Encodes one global; on failure forgets the objects met in it.
    function encodeName(value) {
      const mark = order.length;
      const start = budget;
      try {
        return enc(value, "");
      } catch (error) {
        for (let i = mark; i < order.length; i++) ids.delete(order[i]);
        order.length = mark;
        if (error instanceof Unsaveable) budget = start;
        throw error;
      }
    }
    return { encodeName };
  }

  function describeFailure(error) {
    if (error instanceof Unsaveable) return error.message;
    if (error instanceof RangeError) return "nested too deeply to be saved";
    return `saving it threw ${String(error)}`;
  }

  function save(host, maxBytes) {
    const { encodeName } = encoder(maxBytes);
    const parts = [];
    const saved = [];
    const skipped = [];
    for (const name of userNames(host)) {
      const desc = getDescriptor(globalThis, name);
      if (!("value" in desc)) {
        skipped.push([name, "global accessors (getters and setters) cannot be saved"]);
        continue;
      }
      try {
        parts.push(JSON.stringify([name, encodeName(desc.value), desc.enumerable ? 1 : 0]));
        saved.push(name);
      } catch (error) {
        if (error instanceof TooBig) return { tooBig: Number(error.message) };
        skipped.push([name, describeFailure(error)]);
      }
    }
    const text = `{"format":"${FORMAT}","version":${VERSION},"entries":[${parts.join(",")}]}`;
    return { text, saved, skipped };
  }

  function names(host) {
    return userNames(host).map((name) => {
      const desc = getDescriptor(globalThis, name);
      const value = desc.value;
      const info = { name, kind: kindOf(desc), size: null, saveable: true, note: null };
      if (!("value" in desc)) {
        info.saveable = false;
        info.note = "global accessors (getters and setters) cannot be saved";
        return info;
      }
      try {
        info.size = JSON.stringify(encoder(Infinity).encodeName(value)).length;
        if (typeof value === "function") info.note = "by source text";
      } catch (error) {
        info.saveable = false;
        info.note = describeFailure(error);
      }
      return info;
    });
  }

  function kindOf(desc) {
    if (!("value" in desc)) return "accessor";
    const value = desc.value;
    if (value === null) return "null";
    if (typeof value === "function") {
      const cls = classOf(value);
      if (SOURCE_FUNCTIONS.has(cls) && FunctionToString.call(value).startsWith("class")) return "class";
      return "function";
    }
    if (typeof value !== "object") return typeof value;
    const kind = KIND.get(classOf(value));
    if (kind === "BigIntBox") return "BigInt";
    if (kind !== undefined && kind !== "Object") return kind;
    const p = Object.getPrototypeOf(value);
    if (p === null) return "Object";
    const ctor = getDescriptor(p, "constructor");
    if (ctor !== undefined && typeof ctor.value === "function" && typeof ctor.value.name === "string" && ctor.value.name) {
      return ctor.value.name;
    }
    return Object.prototype.toString.call(value).slice(8, -1);
  }

  // ---- decoding ----

  class Bad extends Error {}
  const bad = (what) => {
    throw new Bad(what);
  };
  const isArray = Array.isArray;

  function decoder() {
    const table = [];
    const fresh = (id, object) => {
      if (!Number.isInteger(id) || id < 0 || table[id] !== undefined) bad("a bad object id");
      table[id] = object;
      return object;
    };

    function dec(data) {
      if (data === null || typeof data !== "object") return data;
      if (!isArray(data)) bad("an untagged object");
      const [tag, id] = data;
      switch (tag) {
        case "u": return undefined;
        case "n": return data[1] === "-0" ? -0 : Number(data[1]);
        case "b": return BigInt(data[1]);
        case "y": return Symbol.for(String(data[1]));
        case "r": {
          if (!Number.isInteger(id) || table[id] === undefined) bad("a reference to nothing");
          return table[id];
        }
        case "O": {
          // In the encoder's order: properties, then the prototype.
          const object = fresh(id, {});
          defineProps(object, data[2]);
          setProto(object, data[3]);
          return object;
        }
        case "A": {
          const items = data[2];
          if (!isArray(items)) bad("an array without items");
          const array = fresh(id, new Array(items.length));
          for (let i = 0; i < items.length; i++) {
            const item = items[i];
            if (isArray(item) && item[0] === "h") continue;
            array[i] = dec(item);
          }
          defineProps(array, data[3]);
          setProto(array, data[4]);
          return array;
        }
        case "D": return fresh(id, new Date(dec(data[2])));
        case "R": return fresh(id, new RegExp(String(data[2]), String(data[3])));
        case "M": {
          const map = fresh(id, new Map());
          for (const entry of list(data[2])) map.set(dec(list(entry)[0]), dec(entry[1]));
          return map;
        }
        case "S": {
          const set = fresh(id, new Set());
          for (const item of list(data[2])) set.add(dec(item));
          return set;
        }
        case "AB": return fresh(id, native.fromBase64(String(data[2])));
        case "T": {
          // Its buffer first: the id order is the encoder's, the buffer's id comes after ours.
          const Type = data[2] === "DataView" ? DataView : TYPED_BY_NAME.get(data[2]);
          if (Type === undefined) bad("an unknown typed array");
          const slot = id;
          fresh(slot, PLACEHOLDER);
          const buffer = dec(data[3]);
          if (!(buffer instanceof ArrayBuffer)) bad("a typed array without a buffer");
          table[slot] = new Type(buffer, data[4], data[5]);
          return table[slot];
        }
        case "P": return fresh(id, Object(dec(data[2])));
        case "E": {
          const Type = Object.hasOwn(ERRORS, data[2]) ? ERRORS[data[2]] : Error;
          const error = fresh(id, new Type(String(data[3])));
          if (!Object.hasOwn(ERRORS, data[2])) error.name = String(data[2]);
          const stack = dec(data[4]);
          if (stack !== undefined) Object.defineProperty(error, "stack", { value: stack, writable: true, configurable: true });
          defineProps(error, data[5]);
          return error;
        }
        case "F": {
          const fn = fresh(id, evaluate(String(data[2])));
          defineProps(fn, data[3]);
          if (list(data[4]).length > 0) defineProps(fn.prototype, data[4]);
          return fn;
        }
        default:
          return bad(`an unknown tag ${JSON.stringify(tag)}`);
      }
    }

    const list = (data) => (isArray(data) ? data : bad("a list expected"));

    function setProto(object, data) {
      if (data === 0 || data === undefined) return;
      if (data === 1) return Object.setPrototypeOf(object, null);
      const ctor = dec(data);
      if (typeof ctor !== "function") bad("a prototype that is not a class");
      Object.setPrototypeOf(object, ctor.prototype);
    }

    function defineProps(object, data) {
      for (const entry of list(data)) {
        const [key, value, attrs] = list(entry);
        if (typeof key !== "string") bad("a property name that is not text");
        const bits = attrs === undefined ? 7 : attrs;
        const flags = { enumerable: (bits & 2) !== 0, configurable: (bits & 4) !== 0 };
        if (isArray(value) && value[0] === "g") {
          flags.get = dec(value[1]);
          flags.set = dec(value[2]);
        } else {
          flags.value = dec(value);
          flags.writable = (bits & 1) !== 0;
        }
        Object.defineProperty(object, key, flags);
      }
    }
    return dec;
  }
  const PLACEHOLDER = Object.freeze({});

  // A function back from its source text: an expression (`function f() {}`, `class K {}`,
  // `(a) => a`), else a method (`m() {}`).
  function evaluate(source) {
    const indirectEval = eval;
    try {
      return indirectEval(`(${source}\n)`);
    } catch (error) {
      if (!(error instanceof SyntaxError)) throw error;
    }
    const holder = indirectEval(`({${source}\n})`);
    const keys = Object.keys(holder);
    if (keys.length !== 1) bad("a function source that is neither an expression nor a method");
    const desc = getDescriptor(holder, keys[0]);
    return desc.value !== undefined ? desc.value : desc.get || desc.set;
  }

  function load(host, text) {
    let payload;
    try {
      payload = JSON.parse(text);
    } catch (error) {
      return { failed: "the payload is not JSON" };
    }
    if (payload === null || typeof payload !== "object" || payload.format !== FORMAT) {
      return { failed: "the payload is not a JavaScript state" };
    }
    if (payload.version !== VERSION) return { failed: `the payload is version ${payload.version}, not ${VERSION}` };
    if (!isArray(payload.entries)) return { failed: "the payload has no entries" };
    const dec = decoder();
    const restored = [];
    const skipped = [];
    for (const entry of payload.entries) {
      if (!isArray(entry) || typeof entry[0] !== "string") return { failed: "the payload has a bad entry" };
      const [name, data, enumerable] = entry;
      if (host.has(name) || name.startsWith("__cellvisor")) {
        skipped.push([name, "the name now belongs to the worker's prelude"]);
        continue;
      }
      try {
        const value = dec(data);
        const desc = getDescriptor(globalThis, name);
        if (desc === undefined || desc.configurable) {
          Object.defineProperty(globalThis, name, { value, writable: true, enumerable: enumerable !== 0, configurable: true });
        } else {
          globalThis[name] = value;
        }
        restored.push(name);
      } catch (error) {
        if (error instanceof Bad) return { failed: `the payload holds ${error.message} (at ${name})` };
        skipped.push([name, `restoring it threw ${String(error)}`]);
      }
    }
    return { restored, skipped };
  }

  return { save, names, load };
});
