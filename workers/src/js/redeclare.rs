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
//!   `finally` blocks still run and `catch` blocks do not see it. The end of the returned
//!   expression is found like automatic semicolon insertion would (a `;`, the enclosing
//!   block's `}`, or a line break before something that cannot continue the expression).
//!
//! This is a scanner, not a parser: it follows strings, comments, template literals, regular
//! expression literals and bracket nesting well enough to know what sits at the top level,
//! and gives up (returning the source unchanged) on anything it cannot follow.

use std::borrow::Cow;

/// The function a rewritten top-level `return` hands its value to (defined by `prelude.js`).
pub(super) const RETURN_FUNCTION: &str = "__cellvisor_return";
/// The label of the block a cell with a top-level `return` is wrapped in.
const CELL_LABEL: &str = "__cellvisor_cell";

/// Returns `source` rewritten as described in the module documentation.
pub(super) fn prepare_cell(source: &str) -> Cow<'_, str> {
    match Scanner::new(source).run() {
        Some(scan) if !scan.edits.is_empty() => {
            let mut edits = scan.edits;
            if let Some(body_start) = scan.returns_from {
                edits.push(Edit {
                    at: body_start,
                    len: 0,
                    text: format!("{CELL_LABEL}: {{"),
                });
                edits.push(Edit {
                    at: source.len(),
                    len: 0,
                    text: "\n}".into(),
                });
            }
            // Insertions go before a replacement at the same place.
            edits.sort_by_key(|edit| (edit.at, edit.len != 0));
            apply(source, &edits).map_or(Cow::Borrowed(source), Cow::Owned)
        }
        _ => Cow::Borrowed(source),
    }
}

/// What a scan found.
struct Scan {
    edits: Vec<Edit>,
    /// Where the cell's body starts, when it has a top-level `return` (it is then wrapped).
    returns_from: Option<usize>,
}

/// Replace `len` bytes at `at` with `text`.
struct Edit {
    at: usize,
    len: usize,
    text: String,
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

/// What an open bracket was, so its closing one knows what to do.
#[derive(Clone, Copy, PartialEq)]
enum Open {
    Paren,
    Bracket,
    Brace,
    /// The body of a top-level class we rewrote: its `}` gets a `;` after it.
    ClassBody,
    /// `${` inside a template literal: its `}` resumes the template.
    Substitution,
    /// The body of a function, method or arrow: a `return` in here is its own.
    FunctionBody,
    /// The parentheses after `if`, `for`, `while`, `switch`, `catch` or `with`: the `{`
    /// after them opens a block, not a function body.
    ControlParen,
}

/// The previous significant token, which decides whether `/` starts a regular expression
/// and whether a word starts a statement.
#[derive(Clone, Copy, PartialEq)]
enum Prev<'a> {
    Start,
    Punct(u8),
    Word(&'a str),
    Literal,
    /// `=>`
    Arrow,
}

/// Words before `(` that make the parentheses a statement's head rather than parameters.
const CONTROL_WORDS: &[&str] = &["if", "for", "while", "switch", "catch", "with", "await"];

/// Words after which an expression is not complete yet.
const OPERATOR_WORDS: &[&str] = &[
    "return",
    "typeof",
    "instanceof",
    "in",
    "of",
    "new",
    "delete",
    "void",
    "throw",
    "yield",
    "await",
];

/// A top-level `return` whose expression has not ended yet.
#[derive(Clone, Copy)]
struct OpenReturn {
    keyword_at: usize,
    depth: usize,
}

/// Keywords after which `/` begins a regular expression rather than a division.
const KEYWORDS_BEFORE_EXPRESSION: &[&str] = &[
    "return",
    "typeof",
    "instanceof",
    "in",
    "of",
    "new",
    "delete",
    "void",
    "throw",
    "case",
    "do",
    "else",
    "yield",
    "await",
];

struct Scanner<'a> {
    text: &'a str,
    bytes: &'a [u8],
    pos: usize,
    stack: Vec<Open>,
    prev: Prev<'a>,
    newline_since_prev: bool,
    /// A top-level class was rewritten and its body's `{` has not been seen yet.
    awaiting_class_body: bool,
    /// Whether the last `)` closed a [`Open::ControlParen`].
    last_paren_control: bool,
    open_return: Option<OpenReturn>,
    /// Where the body starts (after a `#!` line).
    body_start: usize,
    saw_return: bool,
    edits: Vec<Edit>,
}

impl<'a> Scanner<'a> {
    fn new(text: &'a str) -> Self {
        Scanner {
            text,
            bytes: text.as_bytes(),
            pos: 0,
            stack: Vec::new(),
            prev: Prev::Start,
            newline_since_prev: false,
            awaiting_class_body: false,
            last_paren_control: false,
            open_return: None,
            body_start: 0,
            saw_return: false,
            edits: Vec::new(),
        }
    }

    fn peek(&self, offset: usize) -> Option<u8> {
        self.bytes.get(self.pos + offset).copied()
    }

    /// Scans the whole source; `None` when it cannot be followed.
    fn run(mut self) -> Option<Scan> {
        if self.text.starts_with("#!") {
            self.skip_line();
            self.body_start = self.pos;
        }
        while let Some(byte) = self.peek(0) {
            match byte {
                b'\n' | b'\r' => {
                    self.line_break();
                    self.pos += 1;
                }
                b' ' | b'\t' | 0x0b | 0x0c => self.pos += 1,
                b'/' if self.peek(1) == Some(b'/') => self.skip_line(),
                b'/' if self.peek(1) == Some(b'*') => self.skip_block_comment()?,
                b'/' if self.regex_allowed() => {
                    self.skip_regex()?;
                    self.token(Prev::Literal);
                }
                b'\'' | b'"' => {
                    self.skip_string(byte)?;
                    self.token(Prev::Literal);
                }
                b'`' => {
                    self.pos += 1;
                    self.scan_template()?;
                }
                b'0'..=b'9' => self.skip_number(),
                b'.' if self.peek(1).is_some_and(|b| b.is_ascii_digit()) => self.skip_number(),
                b'(' | b'[' | b'{' => self.open(byte),
                b')' | b']' | b'}' => self.close(byte)?,
                b'=' if self.peek(1) == Some(b'>') => {
                    self.pos += 2;
                    self.token(Prev::Arrow);
                }
                b';' => {
                    self.end_return_here(1);
                    self.pos += 1;
                    self.token(Prev::Punct(byte));
                }
                _ if is_word_byte(byte) => self.word(),
                _ => {
                    self.pos += 1;
                    self.token(Prev::Punct(byte));
                }
            }
        }
        self.end_return_here(0);
        if !self.stack.is_empty() || self.awaiting_class_body || self.open_return.is_some() {
            return None;
        }
        Some(Scan {
            returns_from: self.saw_return.then_some(self.body_start),
            edits: self.edits,
        })
    }

    /// Ends an open top-level `return` at the current position when it sits at the same
    /// bracket depth, replacing `consume` bytes (its `;`).
    fn end_return_here(&mut self, consume: usize) {
        let Some(open) = self.open_return else {
            return;
        };
        if open.depth != self.stack.len() {
            return;
        }
        self.open_return = None;
        self.saw_return = true;
        self.edits.push(Edit {
            at: open.keyword_at,
            len: "return".len(),
            text: format!("{{ {RETURN_FUNCTION}("),
        });
        self.edits.push(Edit {
            at: self.pos,
            len: consume,
            text: format!("); break {CELL_LABEL}; }}"),
        });
    }

    /// A line break: it may end an open `return` (automatic semicolon insertion).
    fn line_break(&mut self) {
        self.newline_since_prev = true;
        let Some(open) = self.open_return else {
            return;
        };
        if open.depth != self.stack.len() {
            return;
        }
        let complete = match self.prev {
            Prev::Word("return") => true,
            Prev::Literal | Prev::Punct(b')' | b']' | b'}') => self.next_starts_statement(),
            Prev::Word(word) => !OPERATOR_WORDS.contains(&word) && self.next_starts_statement(),
            _ => false,
        };
        if complete {
            self.end_return_here(0);
        }
    }

    /// Whether what follows the current line break cannot continue the expression before it.
    fn next_starts_statement(&self) -> bool {
        match self.next_word_or_byte() {
            None => true,
            Some(NextToken::Word(word)) => word != "in" && word != "instanceof",
            Some(NextToken::Byte(b'!')) => {
                let rest = self.text[self.pos..].trim_start();
                !rest.starts_with("!=")
            }
            Some(NextToken::Byte(byte)) => !matches!(
                byte,
                b'.' | b'('
                    | b'['
                    | b'`'
                    | b'+'
                    | b'-'
                    | b'*'
                    | b'/'
                    | b'%'
                    | b'='
                    | b'<'
                    | b'>'
                    | b'&'
                    | b'|'
                    | b'^'
                    | b'?'
                    | b':'
                    | b','
                    | b';'
                    | b'}'
                    | b')'
                    | b']'
            ),
        }
    }

    fn in_function(&self) -> bool {
        self.stack.contains(&Open::FunctionBody)
    }

    fn token(&mut self, prev: Prev<'a>) {
        self.prev = prev;
        self.newline_since_prev = false;
    }

    fn regex_allowed(&self) -> bool {
        match self.prev {
            Prev::Start => true,
            Prev::Punct(b')' | b']') | Prev::Literal => false,
            Prev::Punct(_) | Prev::Arrow => true,
            Prev::Word(word) => KEYWORDS_BEFORE_EXPRESSION.contains(&word),
        }
    }

    /// Whether a word here would begin a statement (of the top level, when the stack is empty).
    fn at_statement_start(&self) -> bool {
        match self.prev {
            Prev::Start | Prev::Punct(b';' | b'}') => true,
            // Automatic semicolon insertion after a complete expression and a line break.
            Prev::Punct(b')' | b']') | Prev::Literal | Prev::Word(_) => self.newline_since_prev,
            Prev::Punct(_) | Prev::Arrow => false,
        }
    }

    fn open(&mut self, byte: u8) {
        let kind = match byte {
            b'(' => match self.prev {
                Prev::Word(word) if CONTROL_WORDS.contains(&word) => Open::ControlParen,
                _ => Open::Paren,
            },
            b'[' => Open::Bracket,
            _ if self.awaiting_class_body && self.stack.is_empty() => {
                self.awaiting_class_body = false;
                Open::ClassBody
            }
            _ => match self.prev {
                Prev::Arrow => Open::FunctionBody,
                Prev::Punct(b')') if !self.last_paren_control => Open::FunctionBody,
                _ => Open::Brace,
            },
        };
        self.stack.push(kind);
        self.pos += 1;
        self.token(Prev::Punct(byte));
    }

    fn close(&mut self, byte: u8) -> Option<()> {
        if self
            .open_return
            .is_some_and(|open| open.depth == self.stack.len())
        {
            self.end_return_here(0);
        }
        let open = self.stack.pop()?;
        let matches = match byte {
            b')' => matches!(open, Open::Paren | Open::ControlParen),
            b']' => open == Open::Bracket,
            _ => matches!(
                open,
                Open::Brace | Open::ClassBody | Open::Substitution | Open::FunctionBody
            ),
        };
        if !matches {
            return None;
        }
        if byte == b')' {
            self.last_paren_control = open == Open::ControlParen;
        }
        self.pos += 1;
        match open {
            Open::Substitution => self.scan_template(),
            Open::ClassBody => {
                self.edits.push(Edit {
                    at: self.pos,
                    len: 0,
                    text: ";".into(),
                });
                self.token(Prev::Punct(b';'));
                Some(())
            }
            _ => {
                self.token(Prev::Punct(byte));
                Some(())
            }
        }
    }

    fn word(&mut self) {
        let start = self.pos;
        while self.peek(0).is_some_and(is_word_byte) {
            self.pos += 1;
        }
        let word = &self.text[start..self.pos];
        if word == "return"
            && self.prev != Prev::Punct(b'.')
            && self.open_return.is_none()
            && !self.in_function()
            && !matches!(self.next_word_or_byte(), Some(NextToken::Byte(b':')))
        {
            self.open_return = Some(OpenReturn {
                keyword_at: start,
                depth: self.stack.len(),
            });
        }
        if self.stack.is_empty() && self.at_statement_start() {
            match word {
                "import" => {
                    if let Some((end, text)) = self.static_import(start) {
                        self.edits.push(Edit {
                            at: start,
                            len: end - start,
                            text,
                        });
                        self.pos = end;
                        self.token(Prev::Punct(b';'));
                        return;
                    }
                }
                "export" => {
                    if let Some(NextToken::Word(
                        "const" | "let" | "var" | "function" | "async" | "class",
                    )) = self.next_word_or_byte()
                    {
                        self.edits.push(Edit {
                            at: start,
                            len: word.len(),
                            text: " ".repeat(word.len()),
                        });
                        // What follows starts the statement now.
                        self.prev = Prev::Start;
                        return;
                    }
                }
                _ => self.rewrite_declaration(start, word),
            }
        }
        self.token(Prev::Word(word));
    }

    /// A static import statement starting at `start` (the `import` keyword, the scanner just
    /// past it): where it ends and the `var ... = await import(...)` that replaces it.
    fn static_import(&self, start: usize) -> Option<(usize, String)> {
        let mut parser = ImportParser {
            text: self.text,
            pos: self.pos,
        };
        let statement = parser.import_clause()?;
        let end = parser.pos;
        let newlines = self.text[start..end].matches('\n').count();
        let mut text = statement.to_script();
        text.push_str(&"\n".repeat(newlines));
        Some((end, text))
    }

    fn rewrite_declaration(&mut self, start: usize, word: &str) {
        match word {
            "const" => self.edits.push(Edit {
                at: start,
                len: word.len(),
                text: "var  ".into(),
            }),
            "let" => {
                let next = self.next_word_or_byte();
                let declares = match next {
                    Some(NextToken::Word(name)) => name != "in" && name != "instanceof",
                    Some(NextToken::Byte(b'[' | b'{')) => true,
                    _ => false,
                };
                if declares {
                    self.edits.push(Edit {
                        at: start,
                        len: word.len(),
                        text: "var".into(),
                    });
                }
            }
            "class" => {
                if let Some(NextToken::Word(name)) = self.next_word_or_byte() {
                    if name != "extends" {
                        self.edits.push(Edit {
                            at: start,
                            len: 0,
                            text: format!("var {name} = "),
                        });
                        self.awaiting_class_body = true;
                    }
                }
            }
            _ => {}
        }
    }

    /// The next token after the current position (past blanks and comments), without moving.
    fn next_word_or_byte(&self) -> Option<NextToken<'a>> {
        let mut at = self.pos;
        loop {
            match self.bytes.get(at..)? {
                [b' ' | b'\t' | b'\n' | b'\r', ..] => at += 1,
                [b'/', b'/', ..] => {
                    at += self.bytes[at..].iter().position(|&b| b == b'\n')?;
                }
                [b'/', b'*', ..] => {
                    at += 2 + find(&self.bytes[at + 2..], b"*/")? + 2;
                }
                [first, ..] if is_word_byte(*first) => {
                    let len = self.bytes[at..]
                        .iter()
                        .position(|&b| !is_word_byte(b))
                        .unwrap_or(self.bytes.len() - at);
                    return Some(NextToken::Word(&self.text[at..at + len]));
                }
                [first, ..] => return Some(NextToken::Byte(*first)),
                [] => return None,
            }
        }
    }

    fn skip_line(&mut self) {
        while self.peek(0).is_some_and(|b| b != b'\n') {
            self.pos += 1;
        }
    }

    fn skip_block_comment(&mut self) -> Option<()> {
        let body = &self.bytes[self.pos + 2..];
        let len = find(body, b"*/")?;
        if body[..len].contains(&b'\n') {
            self.line_break();
        }
        self.pos += 2 + len + 2;
        Some(())
    }

    fn skip_string(&mut self, quote: u8) -> Option<()> {
        self.pos += 1;
        loop {
            match self.peek(0)? {
                b'\\' => self.pos += 2,
                b'\n' => return None,
                byte => {
                    self.pos += 1;
                    if byte == quote {
                        return Some(());
                    }
                }
            }
        }
    }

    /// Scans template text up to its end (a literal) or a `${` (which opens a substitution).
    fn scan_template(&mut self) -> Option<()> {
        loop {
            match self.peek(0)? {
                b'\\' => self.pos += 2,
                b'`' => {
                    self.pos += 1;
                    self.token(Prev::Literal);
                    return Some(());
                }
                b'$' if self.peek(1) == Some(b'{') => {
                    self.pos += 2;
                    self.stack.push(Open::Substitution);
                    self.token(Prev::Punct(b'{'));
                    return Some(());
                }
                _ => self.pos += 1,
            }
        }
    }

    fn skip_regex(&mut self) -> Option<()> {
        self.pos += 1;
        let mut in_class = false;
        loop {
            match self.peek(0)? {
                b'\\' => self.pos += 2,
                b'\n' => return None,
                b'[' => {
                    in_class = true;
                    self.pos += 1;
                }
                b']' => {
                    in_class = false;
                    self.pos += 1;
                }
                b'/' if !in_class => {
                    self.pos += 1;
                    while self.peek(0).is_some_and(is_word_byte) {
                        self.pos += 1;
                    }
                    return Some(());
                }
                _ => self.pos += 1,
            }
        }
    }

    fn skip_number(&mut self) {
        while self.peek(0).is_some_and(|b| is_word_byte(b) || b == b'.') {
            self.pos += 1;
        }
        self.token(Prev::Literal);
    }
}

/// What a static import binds.
struct StaticImport<'a> {
    /// The specifier as written, quotes included.
    specifier: &'a str,
    default: Option<&'a str>,
    namespace: Option<&'a str>,
    /// `(imported name as written, local name)`; `None` when there are no braces.
    named: Option<Vec<(&'a str, &'a str)>>,
}

impl StaticImport<'_> {
    fn to_script(&self) -> String {
        let load = format!("await import({})", self.specifier);
        if let Some(namespace) = self.namespace {
            return match self.default {
                Some(default) => {
                    format!("var {namespace} = {load}, {default} = {namespace}.default;")
                }
                None => format!("var {namespace} = {load};"),
            };
        }
        if self.default.is_none() && self.named.is_none() {
            return format!("{load};");
        }
        let mut bindings: Vec<String> = Vec::new();
        if let Some(default) = self.default {
            bindings.push(format!("default: {default}"));
        }
        for (imported, local) in self.named.iter().flatten() {
            if imported == local {
                bindings.push((*local).to_string());
            } else {
                bindings.push(format!("{imported}: {local}"));
            }
        }
        format!("var {{ {} }} = {load};", bindings.join(", "))
    }
}

/// Reads the rest of an import statement after the `import` keyword.
struct ImportParser<'a> {
    text: &'a str,
    pos: usize,
}

impl<'a> ImportParser<'a> {
    fn bytes(&self) -> &'a [u8] {
        self.text.as_bytes()
    }

    fn skip_blanks(&mut self) {
        loop {
            match self.bytes().get(self.pos..) {
                Some([b' ' | b'\t' | b'\n' | b'\r', ..]) => self.pos += 1,
                Some([b'/', b'/', ..]) => {
                    while self.bytes().get(self.pos).is_some_and(|&b| b != b'\n') {
                        self.pos += 1;
                    }
                }
                Some([b'/', b'*', ..]) => match find(&self.bytes()[self.pos + 2..], b"*/") {
                    Some(len) => self.pos += 2 + len + 2,
                    None => return,
                },
                _ => return,
            }
        }
    }

    fn eat(&mut self, byte: u8) -> bool {
        self.skip_blanks();
        if self.bytes().get(self.pos) == Some(&byte) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn identifier(&mut self) -> Option<&'a str> {
        self.skip_blanks();
        let start = self.pos;
        while self
            .bytes()
            .get(self.pos)
            .copied()
            .is_some_and(is_word_byte)
        {
            self.pos += 1;
        }
        let word = &self.text[start..self.pos];
        (!word.is_empty() && !word.as_bytes()[0].is_ascii_digit()).then_some(word)
    }

    fn keyword(&mut self, keyword: &str) -> bool {
        let saved = self.pos;
        if self.identifier() == Some(keyword) {
            true
        } else {
            self.pos = saved;
            false
        }
    }

    fn string(&mut self) -> Option<&'a str> {
        self.skip_blanks();
        let start = self.pos;
        let quote = *self
            .bytes()
            .get(self.pos)
            .filter(|&&b| b == b'"' || b == b'\'')?;
        self.pos += 1;
        loop {
            match *self.bytes().get(self.pos)? {
                b'\\' => self.pos += 2,
                b'\n' => return None,
                byte => {
                    self.pos += 1;
                    if byte == quote {
                        return Some(&self.text[start..self.pos]);
                    }
                }
            }
        }
    }

    fn import_clause(&mut self) -> Option<StaticImport<'a>> {
        let mut import = StaticImport {
            specifier: "",
            default: None,
            namespace: None,
            named: None,
        };
        if let Some(specifier) = self.string() {
            import.specifier = specifier;
            return self.finish(import);
        }
        let saved = self.pos;
        match self.identifier() {
            Some(word) if word != "from" || !self.at_string() => {
                import.default = Some(word);
                if !self.eat(b',') {
                    return self.from(import);
                }
            }
            _ => self.pos = saved,
        }
        if self.eat(b'*') {
            if !self.keyword("as") {
                return None;
            }
            import.namespace = Some(self.identifier()?);
        } else if self.eat(b'{') {
            let mut named = Vec::new();
            loop {
                if self.eat(b'}') {
                    break;
                }
                let imported = match self.string() {
                    Some(quoted) => quoted,
                    None => self.identifier()?,
                };
                let local = if self.keyword("as") {
                    self.identifier()?
                } else if imported.starts_with(['"', '\'']) {
                    return None;
                } else {
                    imported
                };
                named.push((imported, local));
                if !self.eat(b',') {
                    if !self.eat(b'}') {
                        return None;
                    }
                    break;
                }
            }
            import.named = Some(named);
        } else {
            return None;
        }
        self.from(import)
    }

    fn at_string(&mut self) -> bool {
        self.skip_blanks();
        matches!(self.bytes().get(self.pos), Some(b'"' | b'\''))
    }

    fn from(&mut self, mut import: StaticImport<'a>) -> Option<StaticImport<'a>> {
        if !self.keyword("from") {
            return None;
        }
        import.specifier = self.string()?;
        self.finish(import)
    }

    /// Skips import attributes (`with { type: "json" }`) and the statement's `;`.
    fn finish(&mut self, import: StaticImport<'a>) -> Option<StaticImport<'a>> {
        if self.keyword("with") || self.keyword("assert") {
            if !self.eat(b'{') {
                return None;
            }
            while !self.eat(b'}') {
                if self.string().is_none()
                    && self.identifier().is_none()
                    && !self.eat(b':')
                    && !self.eat(b',')
                {
                    return None;
                }
            }
        }
        let before_semicolon = self.pos;
        if !self.eat(b';') {
            self.pos = before_semicolon;
        }
        Some(import)
    }
}

enum NextToken<'a> {
    Word(&'a str),
    Byte(u8),
}

/// Identifier characters; every non-ASCII byte counts, which is right for identifiers and
/// harmless elsewhere since only ASCII bytes steer the scanner.
fn is_word_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'$' || byte == b'\\' || byte >= 0x80
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
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
            wrapped("if (a) { { __cellvisor_return( ); break __cellvisor_cell; }}\nx")
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
