// JSON.stringify of this QuickJS recurses on the C stack without checking its depth (and
// scans the whole path at each level): a deeply nested value would overflow the worker's
// stack and crash it. Values nested deeper than the stack allows are refused first with a
// catchable RangeError, as engines that check do. The check walks the value once, without
// recursion; a newer engine that checks its stack in JSON.stringify makes it unnecessary.
// Evaluates to an installer taking the largest depth.
(function (maxDepth) {
  const nativeStringify = JSON.stringify;
  const isObject = (value) => value !== null && typeof value === "object";
  const children = (value, visit) => {
    if (Array.isArray(value)) {
      for (let i = 0; i < value.length; i++) if (isObject(value[i])) visit(value[i]);
    } else {
      for (const key in value) if (isObject(value[key])) visit(value[key]);
    }
  };
  // Whether some path from `root` is longer than maxDepth objects (inlined: it runs on
  // every value stringified).
  const tooDeep = (root) => {
    const stack = [root];
    const depths = [1];
    while (stack.length > 0) {
      const value = stack.pop();
      const depth = depths.pop();
      if (depth > maxDepth) return true;
      if (Array.isArray(value)) {
        for (let i = 0; i < value.length; i++) {
          const child = value[i];
          if (child !== null && typeof child === "object") {
            stack.push(child);
            depths.push(depth + 1);
          }
        }
      } else {
        for (const key in value) {
          const child = value[key];
          if (child !== null && typeof child === "object") {
            stack.push(child);
            depths.push(depth + 1);
          }
        }
      }
    }
    return false;
  };
  // Whether the first path longer than maxDepth repeats an object (a cycle, which stringify
  // reports itself as a TypeError before going deep).
  const deepPathIsCycle = (root) => {
    const path = [];
    const onPath = new Set();
    const stack = [root, false];
    while (stack.length > 0) {
      const leaving = stack.pop();
      const value = stack.pop();
      if (leaving) {
        onPath.delete(path.pop());
        continue;
      }
      if (onPath.has(value)) return true;
      if (path.length >= maxDepth) return false;
      path.push(value);
      onPath.add(value);
      stack.push(value, true);
      children(value, (child) => stack.push(child, false));
    }
    return false;
  };
  Object.defineProperty(JSON, "stringify", {
    value: function stringify(value, replacer, space) {
      if (isObject(value) && tooDeep(value)) {
        if (deepPathIsCycle(value)) throw new TypeError("circular reference");
        throw new RangeError(`JSON.stringify: the value is nested more than ${maxDepth} levels deep`);
      }
      return replacer === undefined && space === undefined
        ? nativeStringify.call(JSON, value)
        : nativeStringify.call(JSON, value, replacer, space);
    },
    writable: true,
    configurable: true,
  });
});
