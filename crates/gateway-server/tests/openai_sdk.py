"""Drives gateway-server with the official `openai` Python package: a plain chat completion,
a streamed one, embeddings, and two errors (an unknown model and an open circuit).

Usage: python3 openai_sdk.py BASE_URL API_KEY. Exits non-zero on the first failed check.
"""

import sys

import openai

base_url, api_key = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=30)

plain = client.chat.completions.create(model="chat", messages=[{"role": "user", "content": "hi"}])
assert plain.choices[0].message.content == "echo: hi", plain
assert plain.usage.total_tokens == 7, plain.usage

stream = client.chat.completions.create(
    model="chat",
    messages=[{"role": "user", "content": "streamed"}],
    stream=True,
    stream_options={"include_usage": True},
)
pieces, usage = [], None
for chunk in stream:
    if chunk.choices and chunk.choices[0].delta.content:
        pieces.append(chunk.choices[0].delta.content)
    if chunk.usage:
        usage = chunk.usage
assert "".join(pieces) == "echo: streamed", pieces
assert usage is not None and usage.total_tokens == 7, usage

vectors = client.embeddings.create(model="chat", input=["a", "b"])
assert [list(d.embedding) for d in vectors.data] == [[0.5, -1.0, 2.0]] * 2, vectors

try:
    client.chat.completions.create(model="gpt-9", messages=[{"role": "user", "content": "x"}])
    raise AssertionError("an unknown model must fail")
except openai.NotFoundError as e:
    assert e.status_code == 404 and e.body["code"] == "model_not_found", e.body

try:
    client.chat.completions.create(model="dead", messages=[{"role": "user", "content": "x"}])
    raise AssertionError("an open circuit must fail")
except openai.APIStatusError as e:
    assert e.status_code == 503, e
    assert e.response.headers["retry-after"] == "60", e.response.headers
    assert e.body["code"] == "circuit_open", e.body

print("openai sdk: plain, stream, embeddings, 404 and 503 all as expected")
