"""Drives gateway-server with the official `openai` Python package beyond chat: the Responses API
(create, the stream helper, a tool call answered with function_call_output, a 3-turn chain over
two sources that stays on its first source and fails clearly once that source is down, retrieve,
delete, background polling), images (generate, edit), audio (transcription as JSON and as text,
speech bytes), moderations, legacy completions (whole and streamed), files and a batch of one.
The provider is gateway-mock's Surface (accounts `a` and `b`); the Rust side checks what arrived.

Usage: python3 openai_sdk_surface.py BASE_URL API_KEY MOCK_ROOT. Exits non-zero on the first
failed check.
"""

import json
import sys
import urllib.request

import openai

base_url, api_key, mock_root = sys.argv[1], sys.argv[2], sys.argv[3]
client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=30)


def account_of(id_):
    """The Surface account an id was made on: resp_a_1 -> a, file-b-2 -> b."""
    return id_.replace("-", "_").split("_")[1]


def speech_bytes(text):
    return b"ID3\x04\x00" + text.encode() + bytes([0xFF, 0xFB, 0x90, 0x00, 0x80, 0xFE])


def switch(account, state):
    request = urllib.request.Request(f"{mock_root}/{account}/v1/__mock/{state}", data=b"{}", method="POST")
    urllib.request.urlopen(request).read()


# Responses, whole.
made = client.responses.create(model="chat", input="hi there")
assert made.output_text == "echo: hi there (turn 1)", made
assert made.id.startswith("resp_"), made.id
assert made.usage.total_tokens == 7 and made.usage.input_tokens_details.cached_tokens == 1, made.usage

# The stream helper: created first, deltas, the final response from response.completed.
with client.responses.stream(model="chat", input="streamed") as stream:
    kinds = [event.type for event in stream]
    final = stream.get_final_response()
assert kinds[0] == "response.created" and kinds[-1] == "response.completed", kinds
assert "response.output_text.delta" in kinds, kinds
assert final.output_text == "echo: streamed (turn 1)", final

# A raw stream carries sequence numbers 0, 1, 2 ...
raw = client.responses.create(model="chat", input="numbered", stream=True)
numbers = [event.sequence_number for event in raw]
assert numbers == list(range(len(numbers))), numbers

# A tool call, then its output as the next turn.
tools = [{"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]
called = client.responses.create(model="chat", input="TOOLS please", tools=tools)
call = called.output[0]
assert (call.type, call.name, call.arguments, call.call_id) == ("function_call", "get_weather", '{"city":"Paris"}', "call_1"), called
answered = client.responses.create(
    model="chat", previous_response_id=called.id, tools=tools,
    input=[{"type": "function_call_output", "call_id": "call_1", "output": "sunny"}],
)
assert answered.output_text == "echo: sunny (turn 2)", answered
assert account_of(answered.id) == account_of(called.id), (answered.id, called.id)

# A 3-turn chain stays on its first turn's source.
first = client.responses.create(model="chat", input="turn one")
chain = [first]
for turn in (2, 3):
    chain.append(client.responses.create(model="chat", input=f"turn {turn}", previous_response_id=chain[-1].id))
    assert chain[-1].output_text == f"echo: turn {turn} (turn {turn})", chain[-1]
home = account_of(first.id)
assert all(account_of(r.id) == home for r in chain), [r.id for r in chain]

# Its source down: a clear error, never another account.
switch(home, "down")
try:
    client.responses.create(model="chat", input="turn 4", previous_response_id=chain[-1].id)
    raise AssertionError("a turn whose source is down must fail")
except openai.APIStatusError as e:
    assert e.status_code in (502, 503), e
    assert f"only source {home} holds previous_response_id {chain[-1].id}" in str(e), e
finally:
    switch(home, "up")

# Retrieve, list its input, delete; then it is gone.
got = client.responses.retrieve(first.id)
assert got.id == first.id and got.output_text == first.output_text, got
items = client.responses.input_items.list(first.id)
assert [item.content[0].text for item in items.data] == ["turn one"], items
client.responses.delete(first.id)
try:
    client.responses.retrieve(first.id)
    raise AssertionError("a deleted response must be gone")
except openai.NotFoundError as e:
    assert f"Response with id '{first.id}' not found." in str(e), e

# A background response, polled to its end.
queued = client.responses.create(model="chat", input="in the background", background=True)
assert queued.status == "queued", queued
polled = queued
while polled.status in ("queued", "in_progress"):
    polled = client.responses.retrieve(queued.id)
assert polled.status == "completed" and polled.output_text == "echo: in the background (turn 1)", polled

# Images.
image = client.images.generate(model="chat", prompt="a red fox", n=1, size="1024x1024")
import base64

assert base64.b64decode(image.data[0].b64_json) == b"png:a red fox", image
edited = client.images.edit(model="chat", image=("fox.png", b"\x89PNG\r\n\x1a\nfox"), prompt="make it blue")
assert base64.b64decode(edited.data[0].b64_json) == b"edited 1 image(s): make it blue", edited

# Audio.
wav = b"RIFF\x24\x00\x00\x00WAVEfmt \xff\xfe\x00\x01"
heard = client.audio.transcriptions.create(model="chat", file=("hello.wav", wav), language="en")
assert heard.text == f"transcript of {len(wav)} bytes of hello.wav", heard
as_text = client.audio.transcriptions.create(model="chat", file=("hello.wav", wav), response_format="text")
assert as_text.strip() == f"transcript of {len(wav)} bytes of hello.wav", as_text
translated = client.audio.translations.create(model="chat", file=("hallo.wav", wav))
assert translated.text == f"translation of {len(wav)} bytes of hallo.wav", translated
spoken = client.audio.speech.create(model="chat", voice="alloy", input="hello world")
assert spoken.content == speech_bytes("hello world"), spoken.content

# Moderations and legacy completions.
moderated = client.moderations.create(model="chat", input="HATE speech")
assert moderated.results[0].flagged and moderated.results[0].categories.hate, moderated
completed = client.completions.create(model="chat", prompt="say hi")
assert completed.choices[0].text == "echo: say hi", completed
pieces = [chunk.choices[0].text for chunk in client.completions.create(model="chat", prompt="say hi", stream=True) if chunk.choices]
assert "".join(pieces) == "echo: say hi", pieces

# A file, then a batch of it: on the file's source.
lines = "".join(json.dumps({"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions",
                            "body": {"model": "m", "messages": [{"role": "user", "content": f"q{i}"}]}}) + "\n" for i in range(2))
uploaded = client.files.create(file=("batch.jsonl", lines.encode()), purpose="batch")
assert uploaded.purpose == "batch" and uploaded.bytes == len(lines.encode()), uploaded
assert client.files.content(uploaded.id).content == lines.encode()
batch = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h")
assert account_of(batch.id) == account_of(uploaded.id), (batch.id, uploaded.id)
while batch.status not in ("completed", "failed", "cancelled", "expired"):
    batch = client.batches.retrieve(batch.id)
assert batch.status == "completed" and batch.request_counts.completed == 2, batch
outputs = [json.loads(line) for line in client.files.content(batch.output_file_id).content.decode().splitlines()]
assert [o["custom_id"] for o in outputs] == ["r0", "r1"], outputs
assert outputs[1]["response"]["body"]["choices"][0]["message"]["content"] == "echo: q1", outputs
client.files.delete(uploaded.id)
try:
    client.files.retrieve(uploaded.id)
    raise AssertionError("a deleted file must be gone")
except openai.NotFoundError:
    pass

print("ok")
