"""The clients' wire types, generated from the protocol's JSON Schema.

clients/schema/protocol.json (written by `cellvisor protocol schema` from the Rust types)
becomes clients/typescript/src/generated/protocol.ts (the TypeScript client's types) and
clients/python/src/cellvisor/_generated.py (the Python client's method names, error codes and
typed dicts). Both are checked in; `--check` regenerates them in memory and fails with a diff
when a checked-in file differs, which `scripts/test` (and so CI) runs: a change of the Rust
types that the clients do not follow fails the build.

Usage: scripts/gen-clients [--check] [--schema FILE]
Standard library only.
"""

from __future__ import annotations

import argparse
import difflib
import json
import keyword
import re
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = ROOT / "clients/schema/protocol.json"
TS_OUT = ROOT / "clients/typescript/src/generated/protocol.ts"
PY_OUT = ROOT / "clients/python/src/cellvisor/_generated.py"
REGENERATE = "cargo run -p cellvisor-cli -- protocol schema > clients/schema/protocol.json && scripts/gen-clients"

Schema = Any


def ref_name(ref: str) -> str:
    if not ref.startswith("#/$defs/"):
        raise ValueError(f"unsupported $ref {ref!r}: only #/$defs/NAME")
    return ref[len("#/$defs/"):]


def is_any(schema: Schema) -> bool:
    """True for a schema that allows any value (`true`, or only a description/default)."""
    if schema is True:
        return True
    if not isinstance(schema, dict):
        return False
    return not (set(schema) - {"description", "default", "title", "examples"})


def const_name(name: str) -> str:
    """`files/list` -> `FILES_LIST`."""
    return re.sub(r"[^A-Za-z0-9]", "_", name).upper()


# ---------------------------------------------------------------- TypeScript


def ts_doc(text: Optional[str], indent: str) -> List[str]:
    if not text:
        return []
    lines = text.replace("*/", "*\\/").splitlines()
    if len(lines) == 1:
        return [f"{indent}/** {lines[0]} */"]
    return [f"{indent}/**"] + [f"{indent} * {line}".rstrip() for line in lines] + [f"{indent} */"]


def ts_key(name: str) -> str:
    return name if re.fullmatch(r"[A-Za-z_$][A-Za-z0-9_$]*", name) else json.dumps(name)


def ts_type(schema: Schema, indent: str = "") -> str:
    """The TypeScript type of `schema`."""
    if schema is False:
        return "never"
    if is_any(schema):
        return "JsonValue"
    if "$ref" in schema:
        return ref_name(schema["$ref"])
    if "const" in schema:
        return json.dumps(schema["const"])
    if "enum" in schema:
        return " | ".join(json.dumps(v) for v in schema["enum"])
    for key, joiner in (("oneOf", " | "), ("anyOf", " | "), ("allOf", " & ")):
        if key in schema:
            rest = {k: v for k, v in schema.items() if k not in (key, "description", "default")}
            parts = [ts_type(s, indent) for s in schema[key]]
            if rest:
                return f"{ts_type(rest, indent)} & ({' | '.join(parts)})" if joiner == " | " else \
                    " & ".join([ts_type(rest, indent)] + parts)
            if len(parts) == 1:
                return parts[0]
            return joiner.join(
                f"({p})" if (not p.startswith("{") and (" | " in p or " & " in p)) else p for p in parts)
    kind = schema.get("type")
    if isinstance(kind, list):
        return " | ".join(ts_type({**schema, "type": k}, indent) for k in kind)
    if kind == "string":
        return "string"
    if kind in ("integer", "number"):
        return "number"
    if kind == "boolean":
        return "boolean"
    if kind == "null":
        return "null"
    if kind == "array":
        item = ts_type(schema.get("items", True), indent)
        return f"({item})[]" if (" | " in item or " & " in item) else f"{item}[]"
    if kind == "object" or "properties" in schema:
        return ts_object(schema, indent)
    raise ValueError(f"unsupported schema: {json.dumps(schema)[:200]}")


def ts_object(schema: Schema, indent: str) -> str:
    props: Dict[str, Schema] = schema.get("properties", {})
    required = set(schema.get("required", []))
    extra = schema.get("additionalProperties", True if not props else False)
    if not props:
        value = "JsonValue" if extra is True or extra is None else ts_type(extra, indent)
        return f"{{ [key: string]: {value} }}"
    inner = indent + "  "
    lines = ["{"]
    for name, prop in props.items():
        lines += ts_doc(prop.get("description") if isinstance(prop, dict) else None, inner)
        optional = "" if name in required else "?"
        lines.append(f"{inner}{ts_key(name)}{optional}: {ts_type(prop, inner)};")
    if extra not in (False, None) and not (extra is True and "additionalProperties" not in schema):
        lines.append(f"{inner}[key: string]: {'JsonValue' if extra is True else ts_type(extra, inner)};")
    lines.append(f"{indent}}}")
    return "\n".join(lines)


def typescript(doc: Dict[str, Any]) -> str:
    out = [
        "// Generated by scripts/gen-clients from clients/schema/protocol.json (itself generated",
        "// from the Rust types by `cellvisor protocol schema`). Do not edit: regenerate with",
        f"//   {REGENERATE}",
        "/* eslint-disable */",
        "",
        "/** Any JSON value. */",
        "export type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue };",
        "",
        "/** The protocol version of the types below. */",
        f"export const PROTOCOL_VERSION = {doc['protocol_version']} as const;",
        "",
    ]
    for name, schema in doc["$defs"].items():
        out += ts_doc(schema.get("description"), "")
        out.append(f"export type {name} = {ts_type(schema)};")
        out.append("")
    methods: Dict[str, Any] = doc["methods"]
    out.append("/** Every method's params (`Record<string, never>`: it takes none). */")
    out.append("export interface Params {")
    for name, method in methods.items():
        params = method["params"]
        out.append(f"  {ts_key(name)}: {'Record<string, never>' if params is None else ts_type(params, '  ')};")
    out += ["}", "", "/** Every method's result. */", "export interface Results {"]
    for name, method in methods.items():
        out.append(f"  {ts_key(name)}: {ts_type(method['result'], '  ')};")
    out += ["}", "", "/** The method names, as constants. */", "export const Methods = {"]
    for name in methods:
        out.append(f"  {const_name(name)}: {json.dumps(name)},")
    for name in list(doc["notifications"]) + list(doc["server_requests"]):
        out.append(f"  {const_name(name)}: {json.dumps(name)},")
    out += ["} as const;", ""]
    for name, note in doc["notifications"].items():
        out += ts_doc(note.get("description"), "")
        out.append(f"export type {const_name(name).title().replace('_', '')}Params = {ts_type(note['params'])};")
        out.append("")
    out += ["/** The JSON-RPC error codes the daemon answers with. */", "export const ErrorCodes = {"]
    for name, error in doc["errors"].items():
        out += ts_doc(error["description"], "  ")
        out.append(f"  {name}: {error['code']},")
    out += ["} as const;", ""]
    return "\n".join(out)


# ---------------------------------------------------------------- Python


def py_type(schema: Schema) -> str:
    """The Python annotation of `schema` (names of typed dicts quoted)."""
    if schema is False or is_any(schema):
        return "Any"
    if "$ref" in schema:
        return repr(ref_name(schema["$ref"]))
    if "const" in schema:
        return f"Literal[{schema['const']!r}]"
    if "enum" in schema:
        return f"Literal[{', '.join(repr(v) for v in schema['enum'])}]"
    for key in ("oneOf", "anyOf"):
        if key in schema:
            if "properties" in schema:
                return "Dict[str, Any]"
            if all(isinstance(s, dict) and "const" in s for s in schema[key]):
                return f"Literal[{', '.join(repr(s['const']) for s in schema[key])}]"
            parts = [py_type(s) for s in schema[key]]
            return parts[0] if len(parts) == 1 else f"Union[{', '.join(parts)}]"
    if "allOf" in schema:
        return "Dict[str, Any]"
    kind = schema.get("type")
    if isinstance(kind, list):
        parts = [py_type({**schema, "type": k}) for k in kind]
        return f"Union[{', '.join(parts)}]"
    simple = {"string": "str", "integer": "int", "number": "float", "boolean": "bool", "null": "None"}
    if kind in simple:
        return simple[kind]
    if kind == "array":
        return f"List[{py_type(schema.get('items', True))}]"
    if kind == "object" or "properties" in schema:
        extra = schema.get("additionalProperties", True)
        return f"Dict[str, {'Any' if extra in (True, None, False) else py_type(extra)}]"
    raise ValueError(f"unsupported schema: {json.dumps(schema)[:200]}")


def py_comment(text: Optional[str], indent: str) -> List[str]:
    if not text:
        return []
    return [f"{indent}#: {line}".rstrip() for line in text.splitlines()]


def py_typed_dict(name: str, schema: Schema) -> List[str]:
    props: Dict[str, Schema] = schema.get("properties", {})
    required = set(schema.get("required", []))
    fields: List[Tuple[str, Schema, bool]] = [(k, v, k in required) for k, v in props.items()]
    if any(keyword.iskeyword(k) or not k.isidentifier() for k, _, _ in fields):
        # Not writable as a class: the functional form.
        items = ", ".join(f"{k!r}: {py_type(v)}" for k, v, _ in fields)
        return [f"{name} = TypedDict({name!r}, {{{items}}}, total=False)", ""]
    lines: List[str] = []
    must = [f for f in fields if f[2]]
    may = [f for f in fields if not f[2]]
    base = "TypedDict"
    if must and may:
        lines += [f"class _{name}Required(TypedDict):"]
        lines += [f"    {k}: {py_type(v)}" for k, v, _ in must]
        lines += ["", ""]
        base = f"_{name}Required"
    lines.append(f"class {name}({base}{', total=False' if may else ''}):")
    doc = schema.get("description")
    if doc:
        lines.append(f'    """{doc.splitlines()[0].replace(chr(92), chr(92) * 2)}"""')
    body = may if (must and may) else fields
    for k, v, _ in body:
        lines += py_comment(v.get("description") if isinstance(v, dict) else None, "    ")
        lines.append(f"    {k}: {py_type(v)}")
    if not body and not doc:
        lines.append("    pass")
    lines += ["", ""]
    return lines


def python(doc: Dict[str, Any]) -> str:
    out = [
        '"""The protocol\'s wire types, generated by scripts/gen-clients from',
        "clients/schema/protocol.json (itself generated from the Rust types by",
        "`cellvisor protocol schema`). Do not edit: regenerate with",
        f"    {REGENERATE}",
        '"""',
        "",
        "# flake8: noqa",
        "from __future__ import annotations",
        "",
        "from typing import Any, Dict, List, Union",
        "",
        "from typing import Literal, TypedDict",
        "",
        f"PROTOCOL_VERSION = {doc['protocol_version']}",
        "",
        "# The methods a client may call, and the daemon's own notification and request.",
    ]
    names = list(doc["methods"]) + list(doc["notifications"]) + list(doc["server_requests"])
    for name in names:
        out.append(f"{const_name(name)} = {name!r}")
    out += ["", "#: Every method a client may call.", f"METHODS = ({', '.join(repr(n) for n in doc['methods'])},)", ""]
    out.append("# The JSON-RPC error codes the daemon answers with.")
    for name, error in doc["errors"].items():
        out += py_comment(error["description"], "")
        out.append(f"{name} = {error['code']}")
    out += ["", "#: Every error code by its name.", "ERROR_CODES = {"]
    out += [f"    {name!r}: {name}," for name in doc["errors"]]
    out += ["}", "", ""]
    for name, schema in doc["$defs"].items():
        if schema.get("type") == "object" and "properties" in schema and not any(
            k in schema for k in ("oneOf", "anyOf", "allOf")
        ):
            out += py_typed_dict(name, schema)
        else:
            out += py_comment(schema.get("description"), "")
            out += [f"{name} = {py_type(schema)}", "", ""]
    return "\n".join(out).rstrip("\n") + "\n"


# ---------------------------------------------------------------- files


def outputs(doc: Dict[str, Any]) -> Dict[Path, str]:
    """Every generated file and its text."""
    return {TS_OUT: typescript(doc), PY_OUT: python(doc)}


def differences(doc: Dict[str, Any]) -> List[str]:
    """A unified diff per generated file that differs from the checked-in one."""
    diffs = []
    for path, text in outputs(doc).items():
        current = path.read_text() if path.exists() else ""
        if current != text:
            rel = path.relative_to(ROOT)
            diffs.append("".join(difflib.unified_diff(
                current.splitlines(keepends=True), text.splitlines(keepends=True),
                f"{rel} (checked in)", f"{rel} (generated)", n=1)))
    return diffs


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="fail when a checked-in file differs")
    parser.add_argument("--schema", type=Path, default=SCHEMA, help="the schema (default: the checked-in one)")
    args = parser.parse_args(argv)
    try:
        doc = json.loads(args.schema.read_text())
    except (OSError, ValueError) as err:
        print(f"gen-clients: cannot read the schema {args.schema}: {err}", file=sys.stderr)
        return 2
    if args.check:
        diffs = differences(doc)
        if diffs:
            sys.stdout.write("\n".join(diffs))
            print(f"\ngen-clients: the clients' generated types differ from {args.schema.name}; "
                  f"regenerate them with:\n    {REGENERATE}", file=sys.stderr)
            return 1
        print("gen-clients: the clients' generated types match the schema")
        return 0
    for path, text in outputs(doc).items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
