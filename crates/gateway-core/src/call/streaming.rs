//! A streamed attempt up to its commit point (SPEC §13): [`CallMachine::on_chunk`], and what
//! it says of each chunk.

use super::CallMachine;
use crate::outcome::OutcomeClass;
use crate::request::{Kind, Outcome, Structured};
use crate::stream::{Assembly, Chunk, StructuredStream, assemble, chunks_of, commits, opening_failure};

/// Where a streamed attempt stands after a chunk.
#[derive(Clone, Debug, PartialEq)]
pub enum Streaming {
    /// Not at its commit point yet: read on.
    ReadOn,
    /// At its commit point: these chunks (up to and including it) go to the caller, and the
    /// rest follow as they arrive.
    Committed(Vec<Chunk>),
    /// A stream asking for JSON, held to its end, ended with an answer that passed the check:
    /// these chunks are the whole answer, to go to the caller at once.
    Validated(Vec<Chunk>),
    /// It ended before anything could reach the caller, with this outcome
    /// ([`CallMachine::on_outcome`] is to be told).
    Ended(Outcome),
}

impl CallMachine {
    /// A chunk of a streamed attempt of `kind` before its commit point (the first chunk with
    /// content, a tool-call delta or a refusal). `None`: the stream ended. An answer that must be JSON
    /// (`structured`) and opens with prose ends at its commit point, unseen, and is re-asked
    /// like a whole one; a stream that ends without content is `Transient(empty)`. A stream
    /// asking for JSON under `StructuredStream::Validated` is held (merged as it comes) to its
    /// end, which the upstream's check reaches first: an answer that fails it ends the attempt
    /// unseen; one that passes is [`Streaming::Validated`].
    pub fn on_chunk(
        &mut self,
        chunk: Option<Result<Chunk, Outcome>>,
        kind: Kind,
        structured: Option<&Structured>,
        mode: StructuredStream,
    ) -> Streaming {
        let chunk = match chunk {
            Some(Ok(chunk)) => chunk,
            Some(Err(outcome)) => return Streaming::Ended(outcome),
            None => {
                return match self.held.take() {
                    Some(answer) if self.opened => Streaming::Validated(chunks_of(&answer.finish())),
                    _ => Streaming::Ended(Outcome::new(OutcomeClass::Transient, "empty")),
                };
            }
        };
        // The commit point is judged once per chunk, and never again once reached.
        let committed = !self.opened && commits(kind, &chunk);
        if mode.holds(structured) {
            let answer = self.held.get_or_insert_with(|| Assembly::of(kind));
            answer.push(&chunk);
            if committed {
                self.opened = true;
                if let Some(outcome) = opening_failure(structured, answer.clone().finish().text_answers()) {
                    return Streaming::Ended(outcome);
                }
            }
            return Streaming::ReadOn;
        }
        self.preamble.push(chunk);
        if !committed {
            return Streaming::ReadOn;
        }
        if structured.is_some()
            && let Some(outcome) = opening_failure(structured, assemble(kind, &self.preamble).text_answers())
        {
            return Streaming::Ended(outcome);
        }
        Streaming::Committed(std::mem::take(&mut self.preamble))
    }
}
