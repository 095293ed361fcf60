//! SSE line framing over raw bytes read from an HTTP body.
//!
//! Bytes arrive in reads split anywhere. The reader finds line ends (LF, CRLF,
//! or a lone CR, including a CRLF split across two reads), strips a leading
//! UTF-8 BOM, splits each line into an SSE field, and never holds more than
//! one line's worth of bytes: a line longer than the limit is reported and
//! then skipped up to its end without being buffered.

use memchr::memchr2;

/// The limit on one line used when none is given: 8 MiB.
pub const DEFAULT_MAX_LINE_BYTES: usize = 8 * 1024 * 1024;

/// Longest SSE line (and event) a processor accepts, in bytes; by default
/// [`DEFAULT_MAX_LINE_BYTES`] (so both processors' options derive Default).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaxLineBytes(pub usize);

impl Default for MaxLineBytes {
    fn default() -> Self {
        MaxLineBytes(DEFAULT_MAX_LINE_BYTES)
    }
}

const BOM: &[u8] = b"\xEF\xBB\xBF";

/// One line of an SSE stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Line<'a> {
    /// An empty line: the end of an event.
    Blank,
    /// A line starting with `:` (comments, keep-alives such as `: OPENROUTER PROCESSING`).
    Comment(&'a [u8]),
    /// `name: value`; one space after the colon is dropped. A line without a
    /// colon is a field with an empty value, as the SSE standard says.
    Field { name: &'a [u8], value: &'a [u8] },
}

impl<'a> Line<'a> {
    /// Splits one line (without its terminator) into its SSE meaning.
    /// Spaces or tabs before the field name are not part of it (Discourse's
    /// SambaNova spec stream indents its `data:` lines); a line of nothing
    /// but them stays a field with a blank name.
    pub fn parse(line: &'a [u8]) -> Line<'a> {
        if line.is_empty() {
            return Line::Blank;
        }
        let line = match line[0] {
            b' ' | b'\t' => match line.iter().position(|&b| b != b' ' && b != b'\t') {
                Some(start) => &line[start..],
                None => line,
            },
            _ => line,
        };
        if line[0] == b':' {
            return Line::Comment(&line[1..]);
        }
        match line.iter().position(|&b| b == b':') {
            Some(colon) => {
                let value = &line[colon + 1..];
                let value = value.strip_prefix(b" ").unwrap_or(value);
                Line::Field { name: &line[..colon], value }
            }
            None => Line::Field { name: line, value: b"" },
        }
    }
}

/// A line longer than the limit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("SSE line longer than {limit} bytes (at least {length} bytes without a line end)")]
pub struct LineTooLong {
    pub length: usize,
    pub limit: usize,
    /// The first bytes of the line, for the error message.
    pub head: Vec<u8>,
}

/// What the reader hands on: a complete line (without its terminator), or
/// the report of a line over the limit (whose bytes are dropped).
#[derive(Debug, PartialEq, Eq)]
pub enum Event<'a> {
    Line(&'a [u8]),
    TooLong(LineTooLong),
}

/// What a sink did with the bytes at the start of a line ([`Sink::block`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Block {
    /// It read this many bytes (whole lines, each with its line end) at
    /// once, as it would have read them line by line.
    Read(usize),
    /// The bytes are the start of what it would read at once, cut by the
    /// end of the read before any line of it does anything but set the
    /// event's name: the reader may hold them whole and offer them again
    /// joined to the next read.
    More,
    /// Left to the reader, line by line.
    Lines,
}

/// Where the reader's lines go. A closure over [`Event`]s is one; a
/// sink may also take a whole event at the start of a line
/// ([`Sink::block`]).
pub trait Sink {
    fn event(&mut self, event: Event<'_>);
    /// At the start of a line, with no line held: what the sink does with
    /// `input` at once; [`Block::Lines`] (the default) leaves it to the
    /// reader.
    fn block(&mut self, _input: &[u8]) -> Block {
        Block::Lines
    }
}

impl<F: FnMut(Event<'_>)> Sink for F {
    fn event(&mut self, event: Event<'_>) {
        self(event)
    }
}

/// Splits bytes into lines. See the module documentation. It never stops
/// early: whatever the caller does with a line, the next one follows, so the
/// reader never holds more than one unterminated line.
#[derive(Debug)]
pub struct LineReader {
    /// The unterminated last line of the reads so far.
    buf: Vec<u8>,
    max_line: usize,
    /// The stream has not shown its first three bytes yet (BOM check).
    at_start: bool,
    /// The last line ended with a CR at the end of a read; an LF that starts
    /// the next read belongs to it.
    skip_lf: bool,
    /// Inside a line that was too long: drop bytes up to its end.
    skipping: bool,
    /// The start of an event a read cut, which the sink would read at once
    /// ([`Block::More`]), held whole rather than as lines: offered again
    /// with the next read's first bytes joined, else given as lines.
    held: Vec<u8>,
}

const HEAD_LEN: usize = 80;

/// Most bytes held for [`Block::More`] (and of the next read joined to
/// them): the usual event is a few hundred bytes; a longer one goes line
/// by line.
const HOLD_MAX: usize = 1024;

impl LineReader {
    /// A reader that refuses lines longer than `max_line` bytes.
    pub fn new(max_line: usize) -> Self {
        LineReader {
            buf: Vec::new(),
            max_line: max_line.max(1),
            at_start: true,
            skip_lf: false,
            skipping: false,
            held: Vec::new(),
        }
    }

    /// Bytes held between reads: an unterminated line, or the start of an
    /// event held whole (never more than the limit).
    pub fn buffered(&self) -> usize {
        self.buf.len() + self.held.len()
    }

    /// Most bytes [`Block::More`] may hold: within the line limit, so a
    /// line over it is reported when it would have been.
    fn hold_limit(&self) -> usize {
        HOLD_MAX.min(self.max_line)
    }

    /// Feeds one read: every complete line, and every line over the limit,
    /// is passed to `on` in order. A line over the limit is reported once;
    /// its bytes are dropped, also those that arrive in later reads.
    pub fn feed(&mut self, mut input: &[u8], on: &mut impl Sink) {
        if !self.held.is_empty() && !input.is_empty() {
            input = self.feed_held(input, on);
        }
        self.lines(input, on, true);
    }

    /// The reading of [`LineReader::feed`]; `blocks`: the sink is offered
    /// each line start with no line held.
    fn lines(&mut self, mut input: &[u8], on: &mut impl Sink, blocks: bool) {
        loop {
            if self.skip_lf && !input.is_empty() {
                self.skip_lf = false;
                if input[0] == b'\n' {
                    input = &input[1..];
                }
            }
            if input.is_empty() {
                return;
            }
            if self.skipping {
                let Some(end) = memchr2(b'\n', b'\r', input) else { return };
                self.skipping = false;
                input = self.after_terminator(input, end);
                continue;
            }
            if self.at_start {
                return self.feed_start(input, on);
            }
            if blocks && self.buf.is_empty() {
                match on.block(input) {
                    Block::Read(read) => {
                        input = input.get(read..).unwrap_or_default();
                        continue;
                    }
                    Block::More if input.len() <= self.hold_limit() => {
                        self.held.extend_from_slice(input);
                        return;
                    }
                    _ => {}
                }
            }
            let Some(end) = memchr2(b'\n', b'\r', input) else {
                if self.buf.len() + input.len() > self.max_line {
                    let err = self.too_long(input, self.buf.len() + input.len());
                    self.skipping = true;
                    on.event(Event::TooLong(err));
                } else {
                    self.buf.extend_from_slice(input);
                }
                return;
            };
            let line_len = self.buf.len() + end;
            let rest = self.after_terminator(input, end);
            if line_len > self.max_line {
                let err = self.too_long(&input[..end], line_len);
                on.event(Event::TooLong(err));
            } else if self.buf.is_empty() {
                on.event(Event::Line(&input[..end]));
            } else {
                self.buf.extend_from_slice(&input[..end]);
                on.event(Event::Line(&self.buf));
                self.buf.clear();
            }
            input = rest;
        }
    }

    /// End of input: a last line without a line end is complete now. The
    /// reader is then ready for a new stream.
    pub fn finish(&mut self, on: &mut impl Sink) {
        self.release_held(on);
        let ended = std::mem::replace(self, LineReader::new(self.max_line));
        if ended.skipping {
            return;
        }
        let line = match ended.buf.strip_prefix(BOM) {
            Some(rest) if ended.at_start => rest,
            _ => &ended.buf[..],
        };
        if !line.is_empty() {
            on.event(Event::Line(line));
        }
    }

    /// The held start of an event and the next read: the sink is offered
    /// them joined (up to [`HOLD_MAX`] bytes of the read) once a line could
    /// have ended. What it reads is consumed, what it would still read at
    /// once stays held; otherwise the held bytes go as lines, as they would
    /// have without the holding (the sink could read nothing at once from
    /// a line start among them: the event they start is cut), and the read
    /// follows. Returns the bytes of the read left to read.
    fn feed_held<'b>(&mut self, input: &'b [u8], on: &mut impl Sink) -> &'b [u8] {
        let held = self.held.len();
        let joined = input.len().min(HOLD_MAX);
        let fits = held + input.len() <= self.hold_limit();
        if memchr2(b'\n', b'\r', &input[..joined]).is_none() && fits {
            self.held.extend_from_slice(input);
            return &[];
        }
        self.held.extend_from_slice(&input[..joined]);
        match on.block(&self.held) {
            Block::Read(read) if read >= held => {
                self.held.clear();
                return input.get(read - held..).unwrap_or_default();
            }
            // (Not the driver's: its event ends in the new bytes.) What
            // the sink left of the held bytes goes as lines.
            Block::Read(read) => {
                self.held.truncate(held);
                self.held.drain(..read);
            }
            Block::More if fits => return &[],
            _ => self.held.truncate(held),
        }
        self.release_held(on);
        input
    }

    /// The held bytes, if any, as lines.
    fn release_held(&mut self, on: &mut impl Sink) {
        if !self.held.is_empty() {
            let mut held = std::mem::take(&mut self.held);
            self.lines(&held, on, false);
            held.clear();
            self.held = held;
        }
    }

    /// The first bytes of a stream: a UTF-8 BOM is dropped. Fewer than three
    /// bytes that could still be a BOM are held until more arrive.
    fn feed_start(&mut self, input: &[u8], on: &mut impl Sink) {
        let mut joined = std::mem::take(&mut self.buf);
        joined.extend_from_slice(input);
        if joined.len() < BOM.len() && BOM.starts_with(&joined) {
            self.buf = joined;
            return;
        }
        self.at_start = false;
        let body = joined.strip_prefix(BOM).unwrap_or(&joined);
        self.feed(body, on);
    }

    /// Consumes the line end at `input[end]` (CR, LF or CRLF) and returns
    /// what follows it.
    fn after_terminator<'b>(&mut self, input: &'b [u8], end: usize) -> &'b [u8] {
        let rest = &input[end + 1..];
        if input[end] == b'\r' {
            match rest.first() {
                Some(b'\n') => return &rest[1..],
                None => self.skip_lf = true,
                Some(_) => {}
            }
        }
        rest
    }

    /// The report of a line over the limit, whose held bytes are dropped.
    fn too_long(&mut self, tail: &[u8], length: usize) -> LineTooLong {
        let mut head: Vec<u8> = self.buf.iter().take(HEAD_LEN).copied().collect();
        head.extend(tail.iter().take(HEAD_LEN - head.len()));
        self.buf.clear();
        LineTooLong { length, limit: self.max_line, head }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines and too-long reports of a list of reads, then finish.
    fn run(reads: &[&[u8]], max: usize) -> (Vec<String>, Vec<LineTooLong>) {
        let mut reader = LineReader::new(max);
        let mut lines = Vec::new();
        let mut long = Vec::new();
        let mut on = |e: Event<'_>| match e {
            Event::Line(l) => lines.push(String::from_utf8_lossy(l).into_owned()),
            Event::TooLong(t) => long.push(t),
        };
        for read in reads {
            reader.feed(read, &mut on);
        }
        reader.finish(&mut on);
        (lines, long)
    }

    #[test]
    fn every_line_ending_is_a_line_end() {
        let (lines, _) = run(&[b"a\nb\r\nc\rd\n\ne"], 100);
        assert_eq!(lines, ["a", "b", "c", "d", "", "e"]);
    }

    #[test]
    fn a_crlf_split_across_reads_is_one_line_end() {
        let (lines, _) = run(&[b"data: 1\r", b"\ndata: 2\r", b"\r\n"], 100);
        assert_eq!(lines, ["data: 1", "data: 2", ""]);
    }

    #[test]
    fn any_split_gives_the_same_lines() {
        let stream: &[u8] = b"\xEF\xBB\xBFdata: {\"a\":\"\xC3\xA9\"}\r\n\r\n: ping\rdata:x\n\ndata: [DONE]";
        let (whole, _) = run(&[stream], 1000);
        assert_eq!(whole, ["data: {\"a\":\"\u{e9}\"}", "", ": ping", "data:x", "", "data: [DONE]"]);
        for i in 0..=stream.len() {
            for j in i..=stream.len() {
                let (split, _) = run(&[&stream[..i], &stream[i..j], &stream[j..]], 1000);
                assert_eq!(split, whole, "split at {i} and {j}");
            }
        }
        let singles: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(run(&singles, 1000).0, whole);
    }

    #[test]
    fn a_bom_only_counts_at_the_start() {
        let (lines, _) = run(&[b"\xEF\xBB", b"\xBFa\n\xEF\xBB\xBFb\n"], 100);
        assert_eq!(lines[0], "a");
        // A BOM later in the stream is text, not framing.
        assert_eq!(lines[1], "\u{feff}b");
        let (short, _) = run(&[b"\xEF"], 100);
        assert_eq!(short.len(), 1, "a lone byte at EOF is still a line");
    }

    #[test]
    fn fields_comments_and_blank_lines() {
        assert_eq!(Line::parse(b""), Line::Blank);
        assert_eq!(Line::parse(b": OPENROUTER PROCESSING"), Line::Comment(b" OPENROUTER PROCESSING"));
        assert_eq!(Line::parse(b"data: {}"), Line::Field { name: b"data", value: b"{}" });
        assert_eq!(Line::parse(b"data:{}"), Line::Field { name: b"data", value: b"{}" });
        assert_eq!(Line::parse(b"data:  x"), Line::Field { name: b"data", value: b" x" });
        assert_eq!(Line::parse(b"data"), Line::Field { name: b"data", value: b"" });
        assert_eq!(Line::parse(b"event: error"), Line::Field { name: b"event", value: b"error" });
        assert_eq!(Line::parse(b"   data: {}"), Line::Field { name: b"data", value: b"{}" });
        assert_eq!(Line::parse(b"\t data:x"), Line::Field { name: b"data", value: b"x" });
        assert_eq!(Line::parse(b"  "), Line::Field { name: b"  ", value: b"" });
    }

    #[test]
    fn a_long_line_is_reported_once_and_skipped_without_buffering() {
        let mut reader = LineReader::new(10);
        let mut lines = Vec::new();
        let mut long = Vec::new();
        let mut on = |e: Event<'_>| match e {
            Event::Line(l) => lines.push(l.to_vec()),
            Event::TooLong(t) => long.push(t),
        };
        reader.feed(b"ok\n0123456", &mut on);
        reader.feed(b"789abc", &mut on);
        for _ in 0..1000 {
            reader.feed(&[b'x'; 1000], &mut on);
            assert_eq!(reader.buffered(), 0);
        }
        reader.feed(b"yyy\nnext\n", &mut on);
        assert_eq!(lines, [b"ok".to_vec(), b"next".to_vec()]);
        assert_eq!(long.len(), 1);
        assert_eq!((long[0].limit, long[0].head.as_slice()), (10, &b"0123456789abc"[..]));
    }

    #[test]
    fn a_long_complete_line_is_reported_and_the_lines_after_it_follow() {
        let (lines, long) = run(&[b"a\n123456\nb\n", b"c\n"], 4);
        assert_eq!(lines, ["a", "b", "c"]);
        assert_eq!(long.len(), 1);
        assert_eq!(long[0].length, 6);
    }

    #[test]
    fn finish_passes_the_last_unterminated_line_and_resets() {
        let mut reader = LineReader::new(100);
        let mut seen = Vec::new();
        let mut on = |e: Event<'_>| {
            if let Event::Line(l) = e {
                seen.push(l.to_vec());
            }
        };
        reader.feed(b"data: 1\ndata: 2", &mut on);
        reader.finish(&mut on);
        reader.feed(b"\xEF\xBB\xBFdata: 3\n", &mut on);
        assert_eq!(seen, [b"data: 1".to_vec(), b"data: 2".to_vec(), b"data: 3".to_vec()]);
    }

    /// A sink that reads `event` at once wherever a line starts with it,
    /// and asks for more when what it got is a start of it.
    struct Whole {
        event: &'static [u8],
        seen: Vec<String>,
    }

    impl Sink for Whole {
        fn event(&mut self, event: Event<'_>) {
            if let Event::Line(l) = event {
                self.seen.push(String::from_utf8_lossy(l).into_owned());
            }
        }

        fn block(&mut self, input: &[u8]) -> Block {
            if input.starts_with(self.event) {
                self.seen.push("<whole>".to_owned());
                Block::Read(self.event.len())
            } else if self.event.starts_with(input) {
                Block::More
            } else {
                Block::Lines
            }
        }
    }

    fn whole(reads: &[&[u8]], event: &'static [u8], max: usize) -> Vec<String> {
        let mut reader = LineReader::new(max);
        let mut sink = Whole { event, seen: Vec::new() };
        for read in reads {
            reader.feed(read, &mut sink);
            assert!(reader.buffered() <= max, "{} bytes held", reader.buffered());
        }
        reader.finish(&mut sink);
        sink.seen
    }

    #[test]
    fn an_event_a_read_cuts_is_read_whole_with_the_next() {
        let stream: &[u8] = b"a\nev\nda\n\nev\nda\n\nx\n";
        let want = ["a", "<whole>", "<whole>", "x"];
        assert_eq!(whole(&[stream], b"ev\nda\n\n", 100), want);
        for at in 0..=stream.len() {
            assert_eq!(whole(&[&stream[..at], &stream[at..]], b"ev\nda\n\n", 100), want, "split at {at}");
        }
        let singles: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(whole(&singles, b"ev\nda\n\n", 100), want);
        // In three reads, the held bytes growing with one that ends no line.
        for i in 0..=stream.len() {
            for j in i..=stream.len() {
                let reads: &[&[u8]] = &[&stream[..i], &stream[i..j], &stream[j..]];
                assert_eq!(whole(reads, b"ev\nda\n\n", 100), want, "split at {i} and {j}");
            }
        }
    }

    #[test]
    fn an_event_longer_than_what_is_joined_goes_as_lines() {
        // 1,024 bytes of the next read are joined to the held ones: an
        // event that ends past them goes as lines, one that ends within
        // them is read at once.
        for name in [1000, 1015, 1016, 1017, 1030, 2100] {
            let event: &'static [u8] = format!("{}\nda\n\n", "e".repeat(name)).into_bytes().leak();
            let stream = [b"a\n", event, b"x\n"].concat();
            let read_at_once = ["a", "<whole>", "x"];
            let by_lines = ["a", &"e".repeat(name), "da", "", "x"];
            for at in [3, 4, 10, 500] {
                let seen = whole(&[&stream[..at], &stream[at..]], event, 4096);
                // (The held bytes: the event's first at - 2.)
                match at - 2 + (stream.len() - at).min(HOLD_MAX) >= event.len() {
                    true => assert_eq!(seen, read_at_once, "{name} at {at}"),
                    false => assert_eq!(seen, by_lines, "{name} at {at}"),
                }
            }
        }
    }

    #[test]
    fn held_bytes_the_sink_then_refuses_go_as_lines() {
        // A start of the event, then something else; then the stream ends
        // inside a start.
        let stream: &[u8] = b"ev\ndb\n\nev\nd";
        let want = ["ev", "db", "", "ev", "d"];
        for at in 0..=stream.len() {
            assert_eq!(whole(&[&stream[..at], &stream[at..]], b"ev\nda\n\n", 100), want, "split at {at}");
        }
        // Within the line limit: a cut start longer than it goes as lines
        // (and its long line is reported when it would have been).
        let (long_event, max) = (b"event-event-event\nda\n\n", 8);
        let split: &[&[u8]] = &[b"event-even", b"t-event\nda\n\n"];
        let mut reader = LineReader::new(max);
        let mut too_long = 0;
        let mut sink = |e: Event<'_>| too_long += usize::from(matches!(e, Event::TooLong(_)));
        for read in split {
            reader.feed(read, &mut sink);
        }
        assert_eq!(too_long, 1);
        assert_eq!(whole(split, long_event, max), ["da", ""]);
    }

    /// A sink that reads less than it held: the rest of the held bytes
    /// still goes as lines, once.
    #[test]
    fn held_bytes_a_sink_reads_in_part_are_not_given_twice() {
        struct Part(Vec<String>);
        impl Sink for Part {
            fn event(&mut self, event: Event<'_>) {
                if let Event::Line(l) = event {
                    self.0.push(String::from_utf8_lossy(l).into_owned());
                }
            }
            fn block(&mut self, input: &[u8]) -> Block {
                match input {
                    [b'a', b'b', ..] if input.len() < 6 => Block::More,
                    [b'a', b'b', b'\n', ..] => {
                        self.0.push("<ab>".to_owned());
                        Block::Read(3)
                    }
                    _ => Block::Lines,
                }
            }
        }
        let mut reader = LineReader::new(100);
        let mut sink = Part(Vec::new());
        for read in [&b"ab\nc"[..], b"d\nef\n"] {
            reader.feed(read, &mut sink);
        }
        reader.finish(&mut sink);
        assert_eq!(sink.0, ["<ab>", "cd", "ef"]);
    }
}
