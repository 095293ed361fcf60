//! Anomalies: everything the processor had to ignore, repair or invent.
//! Nothing leaves the decoder silently; each anomaly names what happened and,
//! where there is one, the tool call it belongs to.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};

/// Declares [`AnomalyKind`] with each kind's snake_case name.
macro_rules! anomaly_kinds {
    ($( $(#[$doc:meta])* $kind:ident = $name:literal, )*) => {
        /// What kind of thing happened. The snake_case names are what Ruby
        /// sees as the `:kind` symbol.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum AnomalyKind {
            $( $(#[$doc])* $kind, )*
        }

        impl AnomalyKind {
            /// The snake_case name.
            pub fn name(self) -> &'static str {
                match self {
                    $( AnomalyKind::$kind => $name, )*
                }
            }
        }
    };
}

anomaly_kinds! {
    /// An arguments fragment that matched no call; its text is kept in `excerpt`.
    OrphanFragment = "orphan_fragment",
    /// A call with a name and no id anywhere got a generated id.
    GeneratedId = "generated_id",
    /// Arguments that did not parse were repaired (`detail` says how).
    RepairedArguments = "repaired_arguments",
    /// Arguments that no repair fixes (the error is raised too).
    InvalidArguments = "invalid_arguments",
    /// Arguments that stopped parsing mid-stream: partial updates stopped.
    PartialArgumentsBroken = "partial_arguments_broken",
    /// A field of an unexpected type was converted (an Integer id, a String index).
    ConvertedField = "converted_field",
    /// A field of an unexpected type was ignored.
    IgnoredField = "ignored_field",
    /// A call's id changed on a continuation; the first id is kept.
    IdChanged = "id_changed",
    /// A call's name changed on a continuation; the first name is kept.
    NameChanged = "name_changed",
    /// A header at another index reused the id of an earlier call: a
    /// separate call with the same id.
    DuplicateId = "duplicate_id",
    /// The call got arguments both as an object and as text, or twice as
    /// different objects; the first is kept.
    MixedArguments = "mixed_arguments",
    /// A fragment arrived for a call that was already complete.
    FragmentAfterCompletion = "fragment_after_completion",
    /// The stream ended with open calls and no `finish_reason` or `[DONE]`.
    Truncated = "truncated",
    /// The stream ended inside an event whose JSON was not complete.
    TruncatedEvent = "truncated_event",
    /// An event that could not be read: skipped (the default), or found
    /// after the error a read returned, or at the end of the stream.
    UnreadableEvent = "unreadable_event",
    /// A provider error after the one a read returned.
    ProviderError = "provider_error",
    /// A data payload that is not JSON (and not a known keep-alive) was skipped.
    NonJsonData = "non_json_data",
    /// A JSON payload that is not an object was skipped.
    UnexpectedPayload = "unexpected_payload",
    /// A data line without the `data:` prefix was read as data.
    UnprefixedData = "unprefixed_data",
    /// An event's JSON was followed on its line by more text (`}data: [DONE]`):
    /// the JSON ended the event and the rest was read as the next line.
    GluedEvent = "glued_event",
    /// An SSE line with an unknown field name was skipped.
    UnknownSseField = "unknown_sse_field",
    /// Choices after the first were ignored.
    IgnoredChoices = "ignored_choices",
    /// A content part of an unknown type was ignored.
    IgnoredContentPart = "ignored_content_part",
    /// A Ruby value of a class with no JSON meaning was read as null.
    UnsupportedValue = "unsupported_value",
    /// Cache tokens exceed prompt tokens; net prompt tokens were clamped at 0.
    NegativePromptTokens = "negative_prompt_tokens",
    /// Too many anomalies in one stream; later ones are only counted.
    AnomalyLimit = "anomaly_limit",
    /// The tool call class raised building a completed call, and an error
    /// of the stream was raised in place of the `ToolCallError`.
    ToolCallFailed = "tool_call_failed",
    /// The Thinking class raised building a reasoning item: it was left
    /// out, the read's other items were built.
    ThinkingFailed = "thinking_failed",
    /// A streamed event repeated the whole message after its deltas
    /// (`object: "chat.completion"` with `message`); nothing emitted twice.
    EchoedMessage = "echoed_message",
    /// Responses API: the `done` item's whole arguments differ from the
    /// streamed deltas; the whole arguments were used.
    ArgumentsMismatch = "arguments_mismatch",
    /// Responses API: a message's text deltas stopped short of its whole
    /// text (an `output_text.done`, its done item, the final output); the
    /// rest was handed out from there.
    TextCompleted = "text_completed",
    /// Responses API: a message's whole text differs from what its deltas
    /// gave, which stands; or it matched no message while others' text
    /// streamed, and was not handed out.
    TextMismatch = "text_mismatch",
    /// Responses API: the response ended incomplete (`max_output_tokens`...).
    IncompleteResponse = "incomplete_response",
    /// Responses API: an event or output item of a type the processor does
    /// not read was skipped.
    IgnoredEvent = "ignored_event",
    /// The stream ended without one event of the processor's protocol (a
    /// chat completion chunk, or a Responses API event): another API's
    /// stream, or an empty one.
    WrongProtocol = "wrong_protocol",
    /// Input came after `finish`; it was read as a new stream.
    InputAfterFinish = "input_after_finish",
    /// A call cut by the output limit was not handed out (`output_limit`).
    DroppedCall = "dropped_call",
    /// An exception from Ruby interrupted a read after the core had read
    /// it: its items are returned by the next read or `finish`.
    Interrupted = "interrupted",
    /// The model refused (`refusal` of a chat delta or message, a
    /// Responses refusal): the text is not handed out (rule 81).
    Refusal = "refusal",
    /// What the next request carries back (a reasoning detail's member, a
    /// call's `extra_content`) came again with another value; the first is
    /// kept (rules 78, 79).
    ConflictingValue = "conflicting_value",
}

/// One anomaly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Anomaly {
    pub kind: AnomalyKind,
    /// A sentence for logs.
    pub message: String,
    /// The call's id, name and index, when the anomaly belongs to a call.
    pub call_id: Option<String>,
    pub call_name: Option<String>,
    pub index: Option<i64>,
    /// The field concerned (`tool_calls[].index`, `usage.prompt_tokens`...).
    pub field: Option<&'static str>,
    /// A short excerpt of the data concerned.
    pub excerpt: Option<String>,
    /// How many times this same anomaly happened (identical anomalies, e.g.
    /// the same keep-alive payload on every event, are kept once).
    pub count: u64,
}

impl Anomaly {
    /// An anomaly with a message and nothing else.
    pub fn new(kind: AnomalyKind, message: impl Into<String>) -> Self {
        Anomaly {
            kind,
            message: message.into(),
            call_id: None,
            call_name: None,
            index: None,
            field: None,
            excerpt: None,
            count: 1,
        }
    }

    /// Everything that makes two anomalies the same one (all but the count):
    /// what [`Anomalies::push`] compares, found by its hash.
    fn identity(&self) -> impl Hash + PartialEq + '_ {
        (self.kind, &self.message, &self.call_id, &self.call_name, self.index, self.field, &self.excerpt)
    }

    pub fn field(mut self, field: &'static str) -> Self {
        self.field = Some(field);
        self
    }

    pub fn excerpt(mut self, text: &str) -> Self {
        self.excerpt = Some(excerpt(text));
        self
    }

    /// [`Anomaly::excerpt`] of raw bytes. A text already cut must not be cut
    /// again: the second cut would replace its length with the quote's.
    pub fn excerpt_bytes(mut self, bytes: &[u8]) -> Self {
        self.excerpt = Some(excerpt_bytes(bytes));
        self
    }
}

/// Most bytes of data quoted in a message or an excerpt.
pub const EXCERPT_BYTES: usize = 120;

/// The start of `text`, cut at a character boundary, with `…` when cut.
pub fn excerpt(text: &str) -> String {
    if text.len() <= EXCERPT_BYTES {
        return text.to_owned();
    }
    let mut end = EXCERPT_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &text[..end], text.len())
}

/// The start of raw bytes, lossily decoded, for messages.
pub fn excerpt_bytes(bytes: &[u8]) -> String {
    let cut = &bytes[..bytes.len().min(EXCERPT_BYTES)];
    let mut text = String::from_utf8_lossy(cut).into_owned();
    if bytes.len() > EXCERPT_BYTES {
        text.push_str(&format!("… ({} bytes)", bytes.len()));
    }
    text
}

/// Anomalies of one processor, bounded: after [`Anomalies::LIMIT`] only a
/// count is kept (one `anomaly_limit` entry says so). An anomaly identical to
/// one already kept (and not about a call) only counts on that one, and noise (payloads skipped as
/// keep-alives or non-chunks) keeps at most [`Anomalies::NOISE_LIMIT`]
/// entries per kind, so a stream of pings cannot push real anomalies out
/// (again one `anomaly_limit` entry per kind says so).
#[derive(Debug, Default)]
pub struct Anomalies {
    list: Vec<Anomaly>,
    /// How many the caller has already taken (see [`Anomalies::take_new`]).
    delivered: usize,
    /// Positions of taken entries that repeated since the last
    /// [`Anomalies::take_new`], each once: taken again with their count.
    repeated: Vec<usize>,
    dropped: u64,
    /// Positions of kept anomalies by the hash of their identity (first of
    /// each hash).
    seen: HashMap<u64, usize>,
    /// Noise entries seen, per noise kind, counted up to two past the cap
    /// (one past: the cap is announced now).
    noise: [usize; 2],
    limit_reported: bool,
}

impl Anomalies {
    pub const LIMIT: usize = 1000;
    /// Distinct entries kept per noise kind.
    pub const NOISE_LIMIT: usize = 50;

    pub fn push(&mut self, anomaly: Anomaly) {
        // Anomalies of a call are each kept (two calls may share an id, and
        // each is reported once per call already); the rest repeat.
        let key = anomaly.call_id.is_none().then(|| {
            let mut h = DefaultHasher::new();
            anomaly.identity().hash(&mut h);
            h.finish()
        });
        if let Some(&at) = key.as_ref().and_then(|k| self.seen.get(k)) {
            if let Some(kept) = self.list.get_mut(at).filter(|k| k.identity() == anomaly.identity()) {
                kept.count = kept.count.saturating_add(1);
                if at < self.delivered && !self.repeated.contains(&at) {
                    self.repeated.push(at);
                }
                return;
            }
        }
        let noise = match anomaly.kind {
            AnomalyKind::NonJsonData => Some(0),
            AnomalyKind::UnexpectedPayload => Some(1),
            _ => None,
        };
        if let Some(n) = noise.and_then(|i| self.noise.get_mut(i)) {
            *n = n.saturating_add(1);
            if *n > Self::NOISE_LIMIT {
                self.dropped += 1;
                // Past the overall limit its own entry says enough.
                if *n == Self::NOISE_LIMIT + 1 && self.list.len() < Self::LIMIT {
                    self.note_limit(Self::NOISE_LIMIT, &format!("{} ", anomaly.kind.name()));
                }
                return;
            }
        }
        self.keep(anomaly, key);
    }

    /// Keeps `anomaly` (found again by `key`), or counts it past the limit.
    fn keep(&mut self, anomaly: Anomaly, key: Option<u64>) {
        if self.list.len() < Self::LIMIT {
            if let Some(key) = key {
                self.seen.entry(key).or_insert(self.list.len());
            }
            self.list.push(anomaly);
        } else {
            if !self.limit_reported {
                self.limit_reported = true;
                self.note_limit(Self::LIMIT, "");
            }
            self.dropped += 1;
        }
    }

    /// Says that after `limit` anomalies (`of` a kind) the rest is counted.
    fn note_limit(&mut self, limit: usize, of: &str) {
        let message = format!("more than {limit} {of}anomalies; later ones are only counted");
        self.list.push(Anomaly::new(AnomalyKind::AnomalyLimit, message));
    }

    /// Every anomaly kept so far.
    pub fn all(&self) -> &[Anomaly] {
        &self.list
    }

    /// Anomalies recorded since the last call (for callbacks): the entries
    /// taken before that repeated since (with their count so far), then
    /// the new ones.
    pub fn take_new(&mut self) -> impl ExactSizeIterator<Item = &Anomaly> {
        let start = self.delivered;
        self.delivered = self.list.len();
        let repeated = std::mem::take(&mut self.repeated);
        let list = &self.list;
        let taken: Vec<&Anomaly> =
            repeated.iter().filter_map(|&at| list.get(at)).chain(&list[start..]).collect();
        taken.into_iter()
    }

    /// True when anomalies arrived or repeated since the last
    /// [`Anomalies::take_new`].
    pub fn has_new(&self) -> bool {
        self.delivered < self.list.len() || !self.repeated.is_empty()
    }

    /// Anomalies past the limit, counted but not kept.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excerpts_cut_at_char_boundaries() {
        let text = "é".repeat(100);
        let e = excerpt(&text);
        assert!(e.starts_with(&"é".repeat(60)));
        assert!(e.ends_with("(200 bytes)"));
        assert_eq!(excerpt("short"), "short");
        assert!(excerpt_bytes(&[0xff; 200]).ends_with("(200 bytes)"));
    }

    #[test]
    fn the_list_is_bounded_and_says_so() {
        let mut a = Anomalies::default();
        for i in 0..Anomalies::LIMIT + 50 {
            a.push(Anomaly::new(AnomalyKind::OrphanFragment, format!("x{i}")));
        }
        assert_eq!(a.all().len(), Anomalies::LIMIT + 1);
        assert_eq!(a.all().last().map(|x| x.kind), Some(AnomalyKind::AnomalyLimit));
        assert_eq!(a.dropped(), 50);
        assert_eq!(a.take_new().len(), Anomalies::LIMIT + 1);
        assert!(a.take_new().next().is_none());
        assert!(!a.has_new());
    }

    #[test]
    fn identical_anomalies_are_counted_on_one_entry() {
        let mut a = Anomalies::default();
        for _ in 0..5000 {
            a.push(Anomaly::new(AnomalyKind::NonJsonData, "ping").excerpt("ping"));
        }
        a.push(Anomaly::new(AnomalyKind::GeneratedId, "real"));
        assert_eq!(a.all().len(), 2);
        assert_eq!(a.all()[0].count, 5000);
        assert_eq!(a.all()[1].kind, AnomalyKind::GeneratedId);
        assert_eq!(a.take_new().len(), 2);
        // A repeat of a taken one is taken again, once, with its count.
        a.push(Anomaly::new(AnomalyKind::NonJsonData, "ping").excerpt("ping"));
        a.push(Anomaly::new(AnomalyKind::NonJsonData, "ping").excerpt("ping"));
        assert!(a.has_new(), "a repeat reaches the callback again");
        let counts: Vec<u64> = a.take_new().map(|x| x.count).collect();
        assert_eq!(counts, [5002]);
        assert!(!a.has_new());
        assert_eq!(a.dropped(), 0);
        // Two calls that share an id keep an entry each.
        let mut b = Anomalies::default();
        for _ in 0..2 {
            let mut x = Anomaly::new(AnomalyKind::InvalidArguments, "bad");
            x.call_id = Some("same".into());
            b.push(x);
        }
        assert_eq!(b.all().len(), 2);
    }

    #[test]
    fn distinct_noise_keeps_a_bounded_share_and_real_anomalies_their_room() {
        let mut a = Anomalies::default();
        for i in 0..5000 {
            a.push(Anomaly::new(AnomalyKind::NonJsonData, "skipped").excerpt(&format!("ping {i}")));
            a.push(Anomaly::new(AnomalyKind::UnexpectedPayload, "skipped").excerpt(&i.to_string()));
        }
        for i in 0..100 {
            a.push(Anomaly::new(AnomalyKind::OrphanFragment, format!("real {i}")));
        }
        // One `anomaly_limit` entry per noise kind says the rest is counted.
        assert_eq!(a.all().len(), 2 * Anomalies::NOISE_LIMIT + 2 + 100);
        assert_eq!(a.all().iter().filter(|x| x.kind == AnomalyKind::OrphanFragment).count(), 100);
        let notes: Vec<&str> = a
            .all()
            .iter()
            .filter(|x| x.kind == AnomalyKind::AnomalyLimit)
            .map(|x| x.message.as_str())
            .collect();
        assert_eq!(
            notes,
            [
                "more than 50 non_json_data anomalies; later ones are only counted",
                "more than 50 unexpected_payload anomalies; later ones are only counted"
            ]
        );
        assert_eq!(a.dropped(), 2 * (5000 - Anomalies::NOISE_LIMIT as u64));
    }
}
