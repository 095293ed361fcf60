//! The JSON number grammar, one byte at a time, so a number can stop at any
//! fragment boundary and go on in the next fragment.
//!
//! `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`

/// Where in the number grammar the text read so far ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum NumState {
    /// `-`
    Minus,
    /// `0` or `-0`: no more integer digits may follow.
    Zero,
    /// Integer digits after a leading `1`-`9`.
    Int,
    /// `.`: a fraction digit must follow.
    Dot,
    /// Fraction digits.
    Frac,
    /// `e` / `E`: a sign or digit must follow.
    Exp,
    /// Exponent sign: a digit must follow.
    ExpSign,
    /// Exponent digits.
    ExpInt,
}

/// What one more byte does to a number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Step {
    /// The byte belongs to the number.
    Next(NumState),
    /// The byte is not part of any number: the number ends before it.
    End,
    /// The byte is a number character that cannot come here.
    Invalid,
}

impl NumState {
    /// The state after the first byte of a value, when it starts a number.
    pub(super) fn start(b: u8) -> Option<NumState> {
        match b {
            b'-' => Some(NumState::Minus),
            b'0' => Some(NumState::Zero),
            b'1'..=b'9' => Some(NumState::Int),
            _ => None,
        }
    }

    /// Reads one more byte.
    #[inline]
    pub(super) fn step(self, b: u8) -> Step {
        use NumState::*;
        match (self, b) {
            (Minus, b'0') => Step::Next(Zero),
            (Minus, b'1'..=b'9') | (Int, b'0'..=b'9') => Step::Next(Int),
            (Dot | Frac, b'0'..=b'9') => Step::Next(Frac),
            (Exp | ExpSign | ExpInt, b'0'..=b'9') => Step::Next(ExpInt),
            (Zero | Int, b'.') => Step::Next(Dot),
            (Zero | Int | Frac, b'e' | b'E') => Step::Next(Exp),
            (Exp, b'+' | b'-') => Step::Next(ExpSign),
            (_, b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-') => Step::Invalid,
            _ => Step::End,
        }
    }

    /// True when the text read so far is a whole number.
    pub(super) fn is_accepting(self) -> bool {
        matches!(self, NumState::Zero | NumState::Int | NumState::Frac | NumState::ExpInt)
    }

    /// What is wrong when the number cannot go on with the next byte.
    pub(super) fn problem(self) -> &'static str {
        match self {
            NumState::Minus => "expected a digit after '-'",
            NumState::Zero => "invalid number: no digit may follow a leading zero",
            NumState::Dot => "expected a digit after the decimal point",
            NumState::Exp | NumState::ExpSign => "expected a digit in the exponent",
            NumState::Int | NumState::Frac | NumState::ExpInt => "invalid number",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Option<NumState> {
        let mut bytes = text.bytes();
        let mut state = NumState::start(bytes.next()?)?;
        for b in bytes {
            match state.step(b) {
                Step::Next(next) => state = next,
                Step::End | Step::Invalid => return None,
            }
        }
        Some(state)
    }

    #[test]
    fn accepts_the_json_grammar() {
        for ok in ["0", "-0", "7", "-12", "1.5", "0.0", "1e5", "1E+5", "1.5e-3", "12345678901234567890123"] {
            assert!(read(ok).is_some_and(NumState::is_accepting), "{ok}");
        }
        for incomplete in ["-", "1.", "1e", "1e+", "-0."] {
            assert!(read(incomplete).is_some_and(|s| !s.is_accepting()), "{incomplete}");
        }
        for bad in ["01", "-01", "1.2.3", "1e5e", "1e5.0", "1-", "--1", "+1", ".5", "1.e5"] {
            assert!(read(bad).is_none_or(|s| !s.is_accepting()), "{bad}");
        }
    }

    #[test]
    fn other_bytes_end_a_number() {
        for b in [b',', b']', b'}', b' ', b'\n', b'x', b'"'] {
            assert_eq!(NumState::Int.step(b), Step::End);
        }
    }
}
