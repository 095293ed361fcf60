//! Syntax errors of the JSON parser.

/// What is wrong with the JSON text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SyntaxErrorKind {
    /// A character that cannot appear here.
    Unexpected,
    /// The input ended before the value was complete.
    UnexpectedEnd,
    /// Something other than whitespace after the complete value.
    TrailingData,
    /// Containers nested deeper than the parser's limit.
    TooDeep,
    /// A number that breaks the JSON number grammar (`01`, `1.`, `-`, `1e`).
    InvalidNumber,
    /// A backslash escape that JSON does not have, or a bad `\u` digit.
    InvalidEscape,
    /// A `\u` escape that is half of a surrogate pair without the other half.
    InvalidUnicode,
    /// An unescaped control character (U+0000 to U+001F) inside a string.
    ControlCharacter,
}

/// A syntax error, with the byte offset in the whole input (all fragments
/// together) where it was detected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message} at byte {offset}")]
pub struct SyntaxError {
    /// What kind of problem.
    pub kind: SyntaxErrorKind,
    /// Byte offset in the whole input of the character where the problem was
    /// detected (for [`SyntaxErrorKind::UnexpectedEnd`], the input's length).
    pub offset: usize,
    /// What was expected and found, e.g. `expected ',' or '}', found 'x'`.
    pub message: String,
}

impl SyntaxError {
    pub(crate) fn new(kind: SyntaxErrorKind, offset: usize, message: impl Into<String>) -> Self {
        SyntaxError { kind, offset, message: message.into() }
    }
}

/// Describes the character at `pos` of `text` for a message: `'x'`, or
/// `end of input`.
pub(crate) fn found(text: &str, pos: usize) -> String {
    match text.get(pos..).and_then(|rest| rest.chars().next()) {
        Some(c) => format!("{c:?}"),
        None => "end of input".to_owned(),
    }
}
