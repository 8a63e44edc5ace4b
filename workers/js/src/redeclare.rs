//! Rewrites a cell's source so it can run as a global script again and again.
//!
//! QuickJS keeps top-level lexical declarations of a global script in one global scope, and
//! declaring the same name again in a later script is a `SyntaxError` ("redeclaration of
//! 'x'"). In a notebook that breaks the most common move there is: running a cell again.
//! So before a cell runs, its top-level declarations become `var`s (which may be repeated):
//! `let`/`const` turn into `var` (padded to the same width, so error columns stay right) and
//! `class C ...{}` turns into `var C = class C ...{};`. The price: a top-level `const` can be
//! reassigned by later code, and top-level bindings become properties of `globalThis`.
//! Declarations inside blocks, functions and `for (...)` heads are left alone.
//!
//! The same pass makes three module-ish forms work in a script:
//! - static `import ... from "spec"` becomes `var ... = await import("spec")` (bindings are
//!   snapshots, not live bindings; the module itself is loaded by [`super::modules`]);
//! - `export` in front of a top-level declaration is dropped;
//! - a `return` outside any function ends the cell with that value: the cell is wrapped in a
//!   labelled block and `return x` becomes `{ __cellvisor_return(x); break <label>; }`, so
//!   `finally` blocks still run and `catch` blocks do not see it.
//!
//! The cell is parsed by `oxc_parser` (as a module first, for static imports and top-level
//! `await`, then as a script, for HTML-like comments), and the edits are made at the spans
//! of the statements it found. A cell that parses as neither runs unchanged, so QuickJS
//! reports its syntax error at the right place. The corpus in `tests/js_corpus` holds the
//! rewriter to what the engine makes of tricky cells.

use oxc_allocator::Allocator;
use oxc_ast::ast::{
    ArrowFunctionExpression, Class, Declaration, Function, ImportDeclaration,
    ImportDeclarationSpecifier, ModuleExportName, Program, ReturnStatement, Statement,
    VariableDeclaration, VariableDeclarationKind,
};
use oxc_ast_visit::Visit;
use oxc_parser::{ParseOptions, Parser};
use oxc_span::{GetSpan, SourceType, Span};
use oxc_syntax::scope::ScopeFlags;
use std::borrow::Cow;

/// The function a rewritten top-level `return` hands its value to (defined by `prelude.js`).
pub(super) const RETURN_FUNCTION: &str = "__cellvisor_return";
/// The label of the block a cell with a top-level `return` is wrapped in.
const CELL_LABEL: &str = "__cellvisor_cell";

/// Returns `source` rewritten as described in the module documentation.
pub(super) fn prepare_cell(source: &str) -> Cow<'_, str> {
    let allocator = Allocator::default();
    let Some(program) = parse(&allocator, source) else {
        return Cow::Borrowed(source);
    };
    let mut edits = Vec::new();
    for statement in &program.body {
        top_level(source, statement, &mut edits);
    }
    let mut returns = TopLevelReturns { edits: Vec::new() };
    returns.visit_program(&program);
    if !returns.edits.is_empty() {
        edits.append(&mut returns.edits);
        let body_start = program.hashbang.as_ref().map_or(0, |hashbang| {
            let end = hashbang.span.end as usize;
            source
                .get(end..)
                .and_then(|rest| rest.find('\n'))
                .map_or(source.len(), |at| end + at + 1)
        });
        edits.push(Edit::insert(body_start, format!("{CELL_LABEL}: {{")));
        edits.push(Edit::insert(source.len(), "\n}".into()));
    }
    if edits.is_empty() {
        return Cow::Borrowed(source);
    }
    // Insertions go before a replacement at the same place.
    edits.sort_by_key(|edit| (edit.at, edit.len != 0));
    apply(source, &edits).map_or(Cow::Borrowed(source), Cow::Owned)
}

/// The cell's syntax tree: as a module, else as a script; `None` when it is neither.
fn parse<'a>(allocator: &'a Allocator, source: &'a str) -> Option<Program<'a>> {
    let options = ParseOptions {
        allow_return_outside_function: true,
        ..ParseOptions::default()
    };
    [SourceType::mjs(), SourceType::cjs()]
        .into_iter()
        .map(|goal| {
            Parser::new(allocator, source, goal)
                .with_options(options)
                .parse()
        })
        .find(|parsed| !parsed.panicked && parsed.errors.is_empty())
        .map(|parsed| parsed.program)
}

/// Replace `len` bytes at `at` with `text`.
struct Edit {
    at: usize,
    len: usize,
    text: String,
}

impl Edit {
    fn insert(at: usize, text: String) -> Edit {
        Edit { at, len: 0, text }
    }

    fn replace(span: Span, text: String) -> Edit {
        Edit {
            at: span.start as usize,
            len: span.size() as usize,
            text,
        }
    }
}

/// The source with `edits` (sorted, not overlapping) applied; `None` if they overlap.
fn apply(source: &str, edits: &[Edit]) -> Option<String> {
    let mut out = String::with_capacity(source.len() + 16 * edits.len());
    let mut copied = 0;
    for edit in edits {
        out.push_str(source.get(copied..edit.at)?);
        out.push_str(&edit.text);
        copied = edit.at + edit.len;
    }
    out.push_str(source.get(copied..)?);
    Some(out)
}

/// The edits for one statement of the top level.
fn top_level(source: &str, statement: &Statement, edits: &mut Vec<Edit>) {
    match statement {
        Statement::VariableDeclaration(declaration) => lexical_to_var(declaration, edits),
        Statement::ClassDeclaration(class) => class_to_var(class, edits),
        Statement::ImportDeclaration(import) => {
            if let Some(edit) = import_to_dynamic(source, import) {
                edits.push(edit);
            }
        }
        Statement::ExportNamedDeclaration(export) => {
            let Some(declaration) = &export.declaration else {
                return;
            };
            let export_keyword = Span::sized(export.span.start, "export".len() as u32);
            edits.push(Edit::replace(export_keyword, " ".repeat("export".len())));
            match declaration {
                Declaration::VariableDeclaration(declaration) => lexical_to_var(declaration, edits),
                Declaration::ClassDeclaration(class) => class_to_var(class, edits),
                _ => {}
            }
        }
        _ => {}
    }
}

/// `let` becomes `var`, `const` becomes `var  ` (same width).
fn lexical_to_var(declaration: &VariableDeclaration, edits: &mut Vec<Edit>) {
    let (keyword, var) = match declaration.kind {
        VariableDeclarationKind::Let => ("let", "var"),
        VariableDeclarationKind::Const => ("const", "var  "),
        _ => return,
    };
    let at = Span::sized(declaration.span.start, keyword.len() as u32);
    edits.push(Edit::replace(at, var.into()));
}

/// `class C {}` becomes `var C = class C {};`.
fn class_to_var(class: &Class, edits: &mut Vec<Edit>) {
    let Some(id) = &class.id else {
        return;
    };
    edits.push(Edit::insert(
        class.span.start as usize,
        format!("var {} = ", id.name),
    ));
    edits.push(Edit::insert(class.span.end as usize, ";".into()));
}

/// `import d, {a as b} from "m"` becomes `var { default: d, a: b } = await import("m");`,
/// keeping the statement's line count.
fn import_to_dynamic(source: &str, import: &ImportDeclaration) -> Option<Edit> {
    let spec = source.get(import.source.span.start as usize..import.source.span.end as usize)?;
    let mut namespace = None;
    let mut fields = Vec::new();
    for specifier in import.specifiers.iter().flatten() {
        match specifier {
            ImportDeclarationSpecifier::ImportDefaultSpecifier(default) => {
                fields.insert(0, format!("default: {}", default.local.name));
            }
            ImportDeclarationSpecifier::ImportNamespaceSpecifier(all) => {
                namespace = Some(all.local.name.as_str());
            }
            ImportDeclarationSpecifier::ImportSpecifier(named) => {
                let imported = match &named.imported {
                    ModuleExportName::StringLiteral(name) => {
                        serde_json::to_string(name.value.as_str()).ok()?
                    }
                    other => other.name().to_string(),
                };
                fields.push(if imported == named.local.name.as_str() {
                    imported
                } else {
                    format!("{imported}: {}", named.local.name)
                });
            }
        }
    }
    let text = match (import.specifiers.is_some(), namespace) {
        (false, _) => format!("await import({spec});"),
        (true, Some(namespace)) => {
            let default = fields.first().and_then(|f| f.strip_prefix("default: "));
            match default {
                Some(default) => format!(
                    "var {namespace} = await import({spec}), {default} = {namespace}.default;"
                ),
                None => format!("var {namespace} = await import({spec});"),
            }
        }
        (true, None) => format!("var {{ {} }} = await import({spec});", fields.join(", ")),
    };
    let original = source.get(import.span.start as usize..import.span.end as usize)?;
    let newlines = "\n".repeat(original.matches('\n').count());
    Some(Edit::replace(import.span, text + &newlines))
}

/// Finds the `return`s outside any function and turns each into a call of
/// [`RETURN_FUNCTION`] and a `break` out of the cell's block.
struct TopLevelReturns {
    edits: Vec<Edit>,
}

impl<'a> Visit<'a> for TopLevelReturns {
    fn visit_function(&mut self, _: &Function<'a>, _: ScopeFlags) {}

    fn visit_arrow_function_expression(&mut self, _: &ArrowFunctionExpression<'a>) {}

    fn visit_class(&mut self, class: &Class<'a>) {
        // A class body holds methods, field initializers and static blocks, where a `return`
        // is not the cell's; only the `extends` expression runs in the cell.
        if let Some(super_class) = &class.super_class {
            self.visit_expression(super_class);
        }
    }

    fn visit_return_statement(&mut self, statement: &ReturnStatement<'a>) {
        let keyword = Span::sized(statement.span.start, "return".len() as u32);
        self.edits
            .push(Edit::replace(keyword, format!("{{ {RETURN_FUNCTION}(")));
        let value_end = match &statement.argument {
            Some(argument) => {
                self.visit_expression(argument);
                argument.span().end
            }
            None => keyword.end,
        };
        // Up to the statement's end: its `;`, if it has one.
        let rest = Span::new(value_end, statement.span.end.max(value_end));
        self.edits
            .push(Edit::replace(rest, format!("); break {CELL_LABEL}; }}")));
    }
}

#[cfg(test)]
mod tests {
    use super::prepare_cell as make_redeclarable;

    #[test]
    fn rewrites_top_level_declarations_only() {
        assert_eq!(make_redeclarable("let a = 1; a"), "var a = 1; a");
        assert_eq!(make_redeclarable("const {x, y} = o"), "var   {x, y} = o");
        assert_eq!(
            make_redeclarable("x = 1\nconst b = 2"),
            "x = 1\nvar   b = 2"
        );
        assert_eq!(
            make_redeclarable("class A extends B { m() { let q } }\n(1)"),
            "var A = class A extends B { m() { let q } };\n(1)"
        );
        let untouched = [
            "for (let i = 0; i < 3; i++) {}",
            "{ let a = 1 }",
            "function f() { const z = 1 }",
            "let = 5",
            "x = class Y {}",
            "o.let = 1; o.const",
            "'let a = 1'",
            "`${ `let ${1}` } let b`",
            "/let a = 1/.test(s)",
            "// let a\n/* const b */",
            "if (x) { let y = 2 }",
        ];
        for source in untouched {
            assert_eq!(make_redeclarable(source), source, "{source}");
        }
    }

    #[test]
    fn follows_templates_regexes_and_division() {
        assert_eq!(
            make_redeclarable("let s = `a${ {b: 1}.b }c`; let r = /[/]}/g; const d = 4 / 2 / 1"),
            "var s = `a${ {b: 1}.b }c`; var r = /[/]}/g; var   d = 4 / 2 / 1"
        );
    }

    #[test]
    fn gives_up_on_unbalanced_source() {
        assert_eq!(make_redeclarable("let a = (1"), "let a = (1");
        assert_eq!(make_redeclarable("let a = 'x"), "let a = 'x");
    }

    #[test]
    fn static_imports_become_dynamic_ones() {
        assert_eq!(
            make_redeclarable("import x from './a.js'\nx"),
            "var { default: x } = await import('./a.js');\nx"
        );
        assert_eq!(
            make_redeclarable("import {a as b, c} from \"m\";"),
            "var { a: b, c } = await import(\"m\");"
        );
        assert_eq!(
            make_redeclarable("import * as ns from 'm'; ns"),
            "var ns = await import('m'); ns"
        );
        assert_eq!(
            make_redeclarable("import d, * as ns from 'm'"),
            "var ns = await import('m'), d = ns.default;"
        );
        assert_eq!(
            make_redeclarable("import d, {\n  e,\n} from 'm' with { type: 'json' }\n1"),
            "var { default: d, e } = await import('m');\n\n\n1"
        );
        assert_eq!(
            make_redeclarable("import './side.js'"),
            "await import('./side.js');"
        );
        for untouched in ["import('./x.js')", "import.meta", "if (a) { import('b') }"] {
            assert_eq!(make_redeclarable(untouched), untouched);
        }
        assert_eq!(
            make_redeclarable("export const a = 1"),
            "       var   a = 1"
        );
    }

    #[test]
    fn top_level_returns_break_out_of_the_cell() {
        let wrapped = |body: &str| format!("__cellvisor_cell: {{{body}\n}}");
        assert_eq!(
            make_redeclarable("return 1"),
            wrapped("{ __cellvisor_return( 1); break __cellvisor_cell; }")
        );
        assert_eq!(
            make_redeclarable("if (a) return b; else c"),
            wrapped("if (a) { __cellvisor_return( b); break __cellvisor_cell; } else c")
        );
        assert_eq!(
            make_redeclarable("if (a) { return }\nx"),
            wrapped("if (a) { { __cellvisor_return(); break __cellvisor_cell; } }\nx")
        );
        assert_eq!(
            make_redeclarable("return x\n  .y\nz()"),
            wrapped("{ __cellvisor_return( x\n  .y); break __cellvisor_cell; }\nz()")
        );
        assert_eq!(
            make_redeclarable("return {a: () => { return 1 }}"),
            wrapped("{ __cellvisor_return( {a: () => { return 1 }}); break __cellvisor_cell; }")
        );
        for untouched in [
            "function f() { return 1 }",
            "const g = () => { if (x) { return 2 } }",
            "({ m() { return 3 } })",
            "o.return",
            "({return: 1})",
        ] {
            assert!(
                !make_redeclarable(untouched).contains("__cellvisor"),
                "{untouched}"
            );
        }
    }
}
