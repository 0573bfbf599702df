"""Drives gateway-server with the official `openai` Python package, as an application would,
against a mock provider that records what it receives (the Rust side then checks what arrived
upstream). Plain and streamed chat, tools and a tool round trip, tool-call deltas reassembled by
the SDK's stream helper, image and audio parts, JSON modes, sampling fields, n, logprobs,
finish reasons, usage details, a refusal, a provider's own 400, embeddings (dimensions, base64,
token arrays), an unknown model, an open circuit, streams refused with their status, and a
stream cut after its commit point.

Usage: python3 openai_sdk.py BASE_URL API_KEY. Exits non-zero on the first failed check.
"""

import sys

import json
import openai

base_url, api_key = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=30)
user = lambda text: {"role": "user", "content": text}

plain = client.chat.completions.create(model="chat", messages=[{"role": "developer", "content": "be brief"}, user("hi")])
assert plain.choices[0].message.content == "echo: hi", plain
assert plain.usage.total_tokens == 7, plain.usage
assert plain.usage.prompt_tokens_details.cached_tokens == 1, plain.usage
assert plain.usage.completion_tokens_details.reasoning_tokens == 0, plain.usage
assert plain.system_fingerprint == "fp_mock", plain

stream = client.chat.completions.create(
    model="chat", messages=[user("streamed")], stream=True, stream_options={"include_usage": True}
)
pieces, usage = [], None
for chunk in stream:
    if chunk.choices and chunk.choices[0].delta.content:
        pieces.append(chunk.choices[0].delta.content)
    if chunk.usage:
        usage = chunk.usage
assert "".join(pieces) == "echo: streamed", pieces
assert usage is not None and usage.total_tokens == 7, usage

# Tools: a tool call comes back (no content: not "empty", not retried), then a round trip.
tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
called = client.chat.completions.create(
    model="chat", messages=[user("TOOLS please")], tools=tools,
    tool_choice={"type": "function", "function": {"name": "get_weather"}}, parallel_tool_calls=False,
)
call = called.choices[0].message.tool_calls[0]
assert (call.id, call.function.name, call.function.arguments) == ("call_1", "get_weather", '{"city":"Paris"}'), called
assert called.choices[0].finish_reason == "tool_calls", called
follow = client.chat.completions.create(
    model="chat", tools=tools,
    messages=[user("TOOLS please"), called.choices[0].message.model_dump(exclude_none=True), {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}],
)
assert follow.choices[0].message.content == "echo: sunny", follow

# Streamed tool-call deltas, reassembled by the SDK's stream helper.
helper = getattr(client.chat.completions, "stream", None) or client.beta.chat.completions.stream
with helper(model="chat", messages=[user("TOOLS streamed")], tools=tools) as events:
    final = events.get_final_completion()
assembled = final.choices[0].message.tool_calls[0]
assert (assembled.function.name, assembled.function.arguments) == ("get_weather", '{"city":"Paris"}'), final

# Image and audio parts pass through.
parts = [
    {"type": "text", "text": "what is this"},
    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo=", "detail": "low"}},
    {"type": "input_audio", "input_audio": {"data": "UklGRiQAAABXQVZF", "format": "wav"}},
]
seen = client.chat.completions.create(model="chat", messages=[{"role": "user", "content": parts}])
assert seen.choices[0].message.content.startswith("echo: what is this"), seen

# JSON modes reach the provider (and are checked here too).
as_object = client.chat.completions.create(model="chat", messages=[user("JSON please")], response_format={"type": "json_object"})
assert as_object.choices[0].message.content == '{"answer": "echo"}', as_object
schema = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"], "additionalProperties": False}
as_schema = client.chat.completions.create(
    model="chat", messages=[user("SCHEMA please")],
    response_format={"type": "json_schema", "json_schema": {"name": "answer", "schema": schema, "strict": True}},
)
assert as_schema.choices[0].message.content == '{"answer": "echo"}', as_schema

# A streamed JSON answer cut short upstream is re-asked unseen: the SDK reads one stream whose
# text is the answer that passed the check.
pieces = client.chat.completions.create(
    model="chat", messages=[user("TRUNCATEONCE")], response_format={"type": "json_object"}, stream=True,
)
text = "".join(c.choices[0].delta.content or "" for c in pieces if c.choices)
assert json.loads(text) == {"answer": "echo"}, text

# Sampling and bookkeeping fields arrive as sent; n and logprobs come back.
fields = client.chat.completions.create(
    model="chat", messages=[user("FIELDS")], temperature=0.2, top_p=0.9, n=2, stop=["END"], seed=42,
    logprobs=True, top_logprobs=2, user="u-1", metadata={"k": "v"}, max_completion_tokens=50,
    presence_penalty=0.5, frequency_penalty=0.25, logit_bias={"50256": -100}, extra_body={"vendor_knob": 7},
)
assert len(fields.choices) == 2 and fields.choices[1].message.content == "echo 1: FIELDS", fields
assert fields.choices[0].logprobs.content[0].token == "echo", fields

assert client.chat.completions.create(model="chat", messages=[user("LENGTH")]).choices[0].finish_reason == "length"
refused = client.chat.completions.create(model="chat", messages=[user("REFUSE")])
assert refused.choices[0].message.refusal == "I can't help with that." and refused.choices[0].message.content is None, refused

try:
    client.chat.completions.create(model="chat", messages=[user("BAD400")], temperature=3)
    raise AssertionError("the provider's 400 must reach the caller")
except openai.BadRequestError as e:
    assert e.body["message"] == "Invalid 'temperature': decimal above maximum value.", e.body
    assert (e.body["param"], e.body["code"]) == ("temperature", "decimal_above_max_value"), e.body

# Embeddings: dimensions, base64 left as the provider encoded it, token arrays.
shaped = client.embeddings.create(model="chat", input=["a", "b"], dimensions=5)
assert [len(d.embedding) for d in shaped.data] == [5, 5], shaped
raw = client.embeddings.with_raw_response.create(model="chat", input="a", encoding_format="base64")
assert raw.http_response.json()["data"][0]["embedding"] == "AAAAPwAAgL8AAABA", raw.http_response.text
tokens = client.embeddings.create(model="chat", input=[[1, 2, 3], [4, 5]])
assert len(tokens.data) == 2, tokens
decoded = client.embeddings.create(model="chat", input=["a", "b"])
assert [list(d.embedding) for d in decoded.data] == [[0.5, -1.0, 2.0]] * 2, decoded

try:
    client.chat.completions.create(model="gpt-9", messages=[user("x")])
    raise AssertionError("an unknown model must fail")
except openai.NotFoundError as e:
    assert e.status_code == 404 and e.body["code"] == "model_not_found", e.body

try:
    client.chat.completions.create(model="dead", messages=[user("x")])
    raise AssertionError("an open circuit must fail")
except openai.APIStatusError as e:
    assert e.status_code == 503, e
    assert e.response.headers["retry-after"] == "60", e.response.headers
    assert e.body["code"] == "circuit_open", e.body

# A stream that cannot start fails as OpenAI's does: with its status, before any event.
try:
    client.chat.completions.create(model="chat", messages=[user("BAD400")], stream=True)
    raise AssertionError("the provider's 400 must reach a streamed caller")
except openai.BadRequestError as e:
    assert e.status_code == 400 and e.body["param"] == "temperature", e.body
try:
    client.chat.completions.create(model="dead", messages=[user("x")], stream=True)
    raise AssertionError("an open circuit must fail a streamed call")
except openai.APIStatusError as e:
    assert e.status_code == 503 and e.body["code"] == "circuit_open", e.body

# A stream cut after its first content: the SDK raises, never a clean-looking end.
got = []
try:
    for chunk in client.chat.completions.create(model="chat", messages=[user("CUT")], stream=True):
        if chunk.choices and chunk.choices[0].delta.content:
            got.append(chunk.choices[0].delta.content)
    raise AssertionError(f"a cut stream must raise, got {got}")
except openai.APIError as e:
    assert "".join(got) == "echo: CUT", got
    assert "broke off" in str(e), e

print("openai sdk: chat, streams, tools, parts, JSON modes, fields, errors, embeddings and a cut stream as expected")
