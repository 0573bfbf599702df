"""Drives gateway-server's Messages API with the official `anthropic` Python package, as an
application (or Claude Code) would, against the mock Anthropic provider, which records what it
receives (the Rust side then checks what arrived upstream). A whole message, a streamed one
read through the SDK's stream helper (its first piece before the provider's held rest), a streamed tool use and its JSON pieces, thinking, a
refusal, token counting, an unknown model, a 529 on one source passed over to the next, Claude
Code's headers, the provider's 429, a stream cut after its commit point, and each SDK on a scope
of the other protocol: served through translation, or refused by name for what it cannot carry.

Usage: python3 anthropic_sdk.py BASE_URL API_KEY, BASE_URL the proxy's root (no /v1: the SDK
appends /v1/messages itself). Prints the anthropic-version the SDK sent (a line
`anthropic-version sent: ...`); exits non-zero on the first failed check.
"""

import json
import sys
import time

import anthropic
import openai

base_url, api_key = sys.argv[1], sys.argv[2]
# No retries of the SDK's own: what is retried, the gateway retries.
client = anthropic.Anthropic(base_url=base_url, api_key=api_key, max_retries=0, timeout=30)
user = lambda text: [{"role": "user", "content": text}]


def check(ok, what, got):
    if not ok:
        raise AssertionError(f"{what}; got {got!r}")


# A whole message.
whole = client.messages.create(model="claude", max_tokens=64, messages=user("hello"))
check([b.type for b in whole.content] == ["text"], "one text block", whole)
check(whole.content[0].text == "echo: hello", "the text echoes the prompt", whole.content)
check(whole.stop_reason == "end_turn", "stop_reason end_turn", whole.stop_reason)
check(whole.role == "assistant" and whole.type == "message", "an assistant message", whole)
usage = whole.usage
check(isinstance(usage.input_tokens, int) and isinstance(usage.output_tokens, int), "usage tokens present", usage)
check((usage.input_tokens, usage.output_tokens) == (12, 3), "the provider's usage passed on", usage)
check((usage.cache_creation_input_tokens, usage.cache_read_input_tokens) == (1, 2), "cache counts passed on", usage)

# A streamed message through the SDK's helper: its text pieces make the whole text.
with client.messages.stream(model="claude", max_tokens=64, messages=user("streamed hello")) as stream:
    pieces = list(stream.text_stream)
    final = stream.get_final_message()
check(len(pieces) >= 2, "the text came in pieces", pieces)
check("".join(pieces) == "echo: streamed hello", "the pieces make the text", pieces)
check(final.content[0].text == "".join(pieces), "the final message holds the streamed text", final)
check(final.stop_reason == "end_turn", "streamed stop_reason end_turn", final.stop_reason)
check(final.usage.output_tokens == 3, "message_delta's usage in the final message", final.usage)

# Incremental: the first text piece reaches the SDK while the provider still holds the rest (the
# Rust side lets it go about a second after the request reached the provider).
with client.messages.stream(model="claude", max_tokens=64, messages=user("GATED timing")) as stream:
    arrivals = []
    for _ in stream.text_stream:
        arrivals.append(time.monotonic())
check(len(arrivals) >= 2 and arrivals[1] - arrivals[0] >= 0.5, "the first piece before the held rest", arrivals)

# A streamed tool use: the input's JSON pieces, and the tool_use block they make.
tools = [
    {
        "name": "get_weather",
        "description": "The weather in a city.",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    }
]
tool_choice = {"type": "tool", "name": "get_weather"}
partial, snapshots = [], []
with client.messages.stream(
    model="claude", max_tokens=64, messages=user("TOOLS please"), tools=tools, tool_choice=tool_choice
) as stream:
    for event in stream:
        if event.type == "input_json":
            partial.append(event.partial_json)
            snapshots.append(event.snapshot)
    called = stream.get_final_message()
check(len(partial) >= 2, "the tool input came in JSON pieces", partial)
check(json.loads("".join(partial)) == {"city": "Paris"}, "the pieces make the input's JSON", partial)
check(snapshots[-1] == {"city": "Paris"}, "the SDK's accumulated input", snapshots)
check(called.stop_reason == "tool_use", "stop_reason tool_use", called.stop_reason)
uses = [b for b in called.content if b.type == "tool_use"]
check(len(uses) == 1, "one tool_use block", called.content)
check((uses[0].id, uses[0].name, uses[0].input) == ("toolu_mock_1", "get_weather", {"city": "Paris"}), "the tool call", uses[0])
check(called.content[0].type == "text" and called.content[0].text == "Let me check.", "the text before the call", called.content)

# Thinking streamed before the text; a refusal whole.
with client.messages.stream(model="claude", max_tokens=64, messages=user("THINK first")) as stream:
    thought = stream.get_final_message()
check([b.type for b in thought.content] == ["thinking", "text"], "a thinking block, then text", thought.content)
check((thought.content[0].thinking, thought.content[0].signature) == ("hmm", "sig"), "the thinking and its signature", thought.content[0])
refused = client.messages.create(model="claude", max_tokens=64, messages=user("REFUSE"))
check(refused.stop_reason == "refusal" and refused.content == [], "a refusal: no content", refused)

# Token counting.
counted = client.messages.count_tokens(model="claude", messages=user("sixteen characters"))
check(isinstance(counted.input_tokens, int) and counted.input_tokens > 0, "input_tokens a positive int", counted)

# An unknown model (no such scope).
try:
    client.messages.create(model="no-such-scope", max_tokens=64, messages=user("x"))
    raise AssertionError("an unknown model must fail")
except anthropic.NotFoundError as e:
    check(e.status_code == 404 and e.type == "not_found_error", "404 not_found_error", (e.status_code, e.body))

# A 529 on source a, a clean answer from b: the gateway retries, not the SDK (max_retries=0).
for _ in range(2):
    raw = client.messages.with_raw_response.create(model="claude-failover", max_tokens=64, messages=user("fail over"))
    check(raw.http_response.headers.get("x-gateway-source") == "b", "b answered", raw.http_response.headers)
    check(raw.parse().content[0].text == "echo: fail over", "b's answer", raw.parse())
with client.messages.stream(model="claude-failover", max_tokens=64, messages=user("fail over streamed")) as stream:
    text = "".join(stream.text_stream)
check(text == "echo: fail over streamed", "a streamed call passed over a too", text)

# Claude Code's headers (the Rust side checks that they reached the provider verbatim), with the
# gateway key in x-api-key as Claude Code sends an API key (the client above sends what the SDK
# does for api_key: Authorization: Bearer in 2.x).
sent = []
claude_code = anthropic.Anthropic(
    base_url=base_url,
    api_key=api_key,
    max_retries=0,
    timeout=30,
    default_headers={
        "anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14",
        "x-app": "cli",
        "x-api-key": api_key,
        "Authorization": anthropic.Omit(),
    },
    http_client=anthropic.DefaultHttpxClient(event_hooks={"request": [lambda request: sent.append(request.headers)]}),
)
with claude_code.messages.stream(model="claude", max_tokens=64, messages=user("CLAUDECODE hi")) as stream:
    text = "".join(stream.text_stream)
check(text == "echo: CLAUDECODE hi", "Claude Code's call answered", text)
check(sent and sent[0].get("x-api-key") == api_key and "authorization" not in sent[0], "the key sent in x-api-key alone", sent)
check(sent[0].get("anthropic-version"), "the SDK sent its anthropic-version", sent)
print(f"anthropic-version sent: {sent[0]['anthropic-version']}")  # the Rust side checks it arrived verbatim

# A stream cut after its first text: the SDK raises, never a clean-looking end.
got = []
try:
    with client.messages.stream(model="claude", max_tokens=64, messages=user("CUT")) as stream:
        for piece in stream.text_stream:
            got.append(piece)
    raise AssertionError(f"a cut stream must raise, got {got}")
except anthropic.APIError as e:
    check("".join(got) == "echo: ", "the text before the cut", got)
    check(isinstance(e, anthropic.APIStatusError) and e.type is not None, "an Anthropic error event", e)

# The provider's 429 reaches the caller (a scope of its own: the source is held off after it).
try:
    client.messages.create(model="claude-pushback", max_tokens=64, messages=user("PUSHBACK"))
    raise AssertionError("the provider's 429 must reach the caller")
except anthropic.RateLimitError as e:
    check(e.status_code == 429 and e.type == "rate_limit_error", "429 rate_limit_error", (e.status_code, e.body))
    check(int(e.response.headers.get("retry-after", "0")) > 0, "a retry-after", e.response.headers)


# Across protocols: each SDK on a scope whose only source speaks the other protocol is served
# through translation, whole, streamed and with a tool call; a request the other protocol cannot
# express is refused with a 400 naming that source's protocol. (Before translation both calls
# were refused: these two functions are where that flipped.)
def openai_sdk_on_an_anthropic_scope():
    chat = openai.OpenAI(base_url=f"{base_url}/v1", api_key=api_key, max_retries=0, timeout=30)
    whole = chat.chat.completions.create(model="claude", messages=user("translated to anthropic"))
    check(whole.choices[0].message.content == "echo: translated to anthropic", "an Anthropic source answers the openai SDK", whole)
    check(whole.choices[0].finish_reason == "stop" and whole.usage.prompt_tokens > 0, "finish reason and usage", whole)
    pieces = chat.chat.completions.create(model="claude", messages=user("translated to anthropic, streamed"), stream=True)
    text = "".join(c.choices[0].delta.content or "" for c in pieces if c.choices)
    check(text == "echo: translated to anthropic, streamed", "a streamed chat served by Anthropic", text)
    function = {"type": "function", "function": {"name": "get_weather", "parameters": tools[0]["input_schema"]}}
    helper = getattr(chat.chat.completions, "stream", None) or chat.beta.chat.completions.stream
    with helper(model="claude", messages=user("TOOLS translated"), tools=[function]) as events:
        final = events.get_final_completion()
    call = final.choices[0].message.tool_calls[0]
    check((call.function.name, json.loads(call.function.arguments)) == ("get_weather", {"city": "Paris"}), "a translated tool call", final)
    check(final.choices[0].finish_reason == "tool_calls", "finish_reason tool_calls", final.choices[0])
    try:
        chat.chat.completions.create(model="claude", messages=user("two answers"), n=2)
        raise AssertionError("n=2 cannot be asked of an Anthropic source and must be refused")
    except openai.BadRequestError as e:
        check(e.status_code == 400 and "anthropic" in e.message, "a 400 naming anthropic", (e.status_code, e.body))


def anthropic_sdk_on_an_openai_scope():
    whole = client.messages.create(model="chat", max_tokens=64, messages=user("translated to openai"))
    check(whole.content[0].text == "echo: translated to openai", "an OpenAI source answers the anthropic SDK", whole)
    check(whole.stop_reason == "end_turn" and whole.usage.output_tokens > 0, "stop reason and usage", whole)
    with client.messages.stream(model="chat", max_tokens=64, messages=user("translated to openai, streamed")) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    check(text == "echo: translated to openai, streamed", "a streamed message served by OpenAI", text)
    check(final.stop_reason == "end_turn", "the streamed stop reason", final)
    with client.messages.stream(model="chat", max_tokens=64, messages=user("TOOLS translated"), tools=tools) as stream:
        called = stream.get_final_message()
    uses = [b for b in called.content if b.type == "tool_use"]
    check(len(uses) == 1 and (uses[0].name, uses[0].input) == ("get_weather", {"city": "Paris"}), "a translated tool_use", called)
    check(called.stop_reason == "tool_use", "stop_reason tool_use", called)
    document = {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0xLjQK"}}
    try:
        client.messages.create(
            model="chat", max_tokens=64, messages=[{"role": "user", "content": [{"type": "text", "text": "read this"}, document]}]
        )
        raise AssertionError("a document block cannot be sent to an OpenAI source and must be refused")
    except anthropic.BadRequestError as e:
        check(e.status_code == 400 and "openai" in (e.api_message or ""), "a 400 naming openai", (e.status_code, e.body))


openai_sdk_on_an_anthropic_scope()
anthropic_sdk_on_an_openai_scope()

print(
    "anthropic sdk: whole, streamed, tool use, thinking, refusal, count_tokens, errors, failover,"
    " Claude Code's headers, a cut stream and both directions of translation as expected"
)
