//! Makes a cell's top-level `let`, `const` and `class` declarations redeclarable.
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
//! This is a scanner, not a parser: it follows strings, comments, template literals, regular
//! expression literals and bracket nesting well enough to know what sits at the top level,
//! and gives up (returning the source unchanged) on anything it cannot follow.

use std::borrow::Cow;

/// Returns `source` with its top-level lexical declarations rewritten as `var`s.
pub(super) fn make_redeclarable(source: &str) -> Cow<'_, str> {
    match Scanner::new(source).run() {
        Some(edits) if !edits.is_empty() => Cow::Owned(apply(source, &edits)),
        _ => Cow::Borrowed(source),
    }
}

/// Replace `len` bytes at `at` with `text`.
struct Edit {
    at: usize,
    len: usize,
    text: String,
}

fn apply(source: &str, edits: &[Edit]) -> String {
    let mut out = String::with_capacity(source.len() + 16 * edits.len());
    let mut copied = 0;
    for edit in edits {
        out.push_str(&source[copied..edit.at]);
        out.push_str(&edit.text);
        copied = edit.at + edit.len;
    }
    out.push_str(&source[copied..]);
    out
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
}

/// The previous significant token, which decides whether `/` starts a regular expression
/// and whether a word starts a statement.
#[derive(Clone, Copy, PartialEq)]
enum Prev<'a> {
    Start,
    Punct(u8),
    Word(&'a str),
    Literal,
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
            edits: Vec::new(),
        }
    }

    fn peek(&self, offset: usize) -> Option<u8> {
        self.bytes.get(self.pos + offset).copied()
    }

    /// Scans the whole source; `None` when it cannot be followed.
    fn run(mut self) -> Option<Vec<Edit>> {
        if self.text.starts_with("#!") {
            self.skip_line();
        }
        while let Some(byte) = self.peek(0) {
            match byte {
                b'\n' | b'\r' => {
                    self.newline_since_prev = true;
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
                _ if is_word_byte(byte) => self.word(),
                _ => {
                    self.pos += 1;
                    self.token(Prev::Punct(byte));
                }
            }
        }
        (self.stack.is_empty() && !self.awaiting_class_body).then_some(self.edits)
    }

    fn token(&mut self, prev: Prev<'a>) {
        self.prev = prev;
        self.newline_since_prev = false;
    }

    fn regex_allowed(&self) -> bool {
        match self.prev {
            Prev::Start => true,
            Prev::Punct(b')' | b']') | Prev::Literal => false,
            Prev::Punct(_) => true,
            Prev::Word(word) => KEYWORDS_BEFORE_EXPRESSION.contains(&word),
        }
    }

    /// Whether a word here would begin a statement (of the top level, when the stack is empty).
    fn at_statement_start(&self) -> bool {
        match self.prev {
            Prev::Start | Prev::Punct(b';' | b'}') => true,
            // Automatic semicolon insertion after a complete expression and a line break.
            Prev::Punct(b')' | b']') | Prev::Literal | Prev::Word(_) => self.newline_since_prev,
            Prev::Punct(_) => false,
        }
    }

    fn open(&mut self, byte: u8) {
        let kind = match byte {
            b'(' => Open::Paren,
            b'[' => Open::Bracket,
            _ if self.awaiting_class_body && self.stack.is_empty() => {
                self.awaiting_class_body = false;
                Open::ClassBody
            }
            _ => Open::Brace,
        };
        self.stack.push(kind);
        self.pos += 1;
        self.token(Prev::Punct(byte));
    }

    fn close(&mut self, byte: u8) -> Option<()> {
        let open = self.stack.pop()?;
        let matches = match byte {
            b')' => open == Open::Paren,
            b']' => open == Open::Bracket,
            _ => matches!(open, Open::Brace | Open::ClassBody | Open::Substitution),
        };
        if !matches {
            return None;
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
        if self.stack.is_empty() && self.at_statement_start() {
            self.rewrite_declaration(start, word);
        }
        self.token(Prev::Word(word));
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
            self.newline_since_prev = true;
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
    use super::make_redeclarable;

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
}
