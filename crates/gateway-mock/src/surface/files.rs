//! Files and batches of a [`Surface`](super::Surface) account. A file is uploaded (multipart
//! `file` and `purpose`), read back, and deleted. A batch needs its input file on the same
//! account (else 400, as another account's file is unknown there); polled, it goes
//! `validating` → `in_progress` → `completed`, and then names an output file holding one answer
//! line per input line (`custom_id`, a chat completion echoing the line's last message).

use super::{Account, error, not_found};
use crate::answer::Answer;
use crate::recording::Received;
use serde_json::{Value, json};

/// A stored file: its object and its bytes.
pub(super) struct StoredFile {
    object: Value,
    bytes: bytes::Bytes,
}

/// A stored batch: its object, and the polls it has been through.
pub(super) struct StoredBatch {
    object: Value,
    polls: u32,
}

fn file_object(id: &str, filename: &str, purpose: &str, bytes: usize) -> Value {
    json!({"id": id, "object": "file", "bytes": bytes, "created_at": 1_700_000_000, "filename": filename,
           "purpose": purpose, "status": "processed", "status_details": null})
}

fn store(state: &mut Account, account: &str, filename: &str, purpose: &str, bytes: bytes::Bytes) -> Value {
    let id = state.next_id("file-", account);
    let object = file_object(&id, filename, purpose, bytes.len());
    state.files.insert(id, StoredFile { object: object.clone(), bytes });
    object
}

/// `POST /files`.
pub(super) fn upload(state: &mut Account, account: &str, request: &Received) -> Answer {
    let Some(form) = request.form() else { return error(400, "the body must be multipart/form-data", None, None) };
    let Some(file) = form.iter().find(|p| p.name == "file" && p.filename.is_some()) else {
        return error(400, "Missing required parameter: 'file'.", Some("file"), None);
    };
    let Some(purpose) = request.form_value("purpose") else {
        return error(400, "Missing required parameter: 'purpose'.", Some("purpose"), None);
    };
    let object = store(state, account, file.filename.as_deref().unwrap_or("upload"), &purpose, file.data.clone());
    Answer::json(200, &object)
}

/// `GET /files/{id}`.
pub(super) fn retrieve(state: &mut Account, id: &str) -> Answer {
    state.files.get(id).map_or_else(|| not_found("File", id), |f| Answer::json(200, &f.object))
}

/// `GET /files/{id}/content`: its bytes, labelled `application/json` as OpenAI's API
/// reference labels them (whatever the file holds).
pub(super) fn content(state: &mut Account, id: &str) -> Answer {
    state.files.get(id).map_or_else(|| not_found("File", id), |f| Answer::bytes(200, "application/json", f.bytes.clone()))
}

/// `DELETE /files/{id}`.
pub(super) fn delete(state: &mut Account, id: &str) -> Answer {
    match state.files.remove(id) {
        Some(_) => Answer::json(200, &json!({"id": id, "object": "file", "deleted": true})),
        None => not_found("File", id),
    }
}

/// `POST /batches`.
pub(super) fn create_batch(state: &mut Account, account: &str, request: &Received) -> Answer {
    let body = &request.body;
    let Some(input) = body["input_file_id"].as_str() else {
        return error(400, "Missing required parameter: 'input_file_id'.", Some("input_file_id"), None);
    };
    let Some(file) = state.files.get(input) else {
        return error(400, &format!("Invalid 'input_file_id': file {input} not found."), Some("input_file_id"), Some("invalid_input_file"));
    };
    let lines = file.bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()).count();
    let id = state.next_id("batch_", account);
    let object = json!({"id": id, "object": "batch", "endpoint": body["endpoint"], "input_file_id": input,
                        "completion_window": body["completion_window"], "status": "validating", "created_at": 1_700_000_000,
                        "output_file_id": null, "error_file_id": null, "metadata": body["metadata"],
                        "request_counts": {"total": lines, "completed": 0, "failed": 0}});
    state.batches.insert(id, StoredBatch { object: object.clone(), polls: 0 });
    Answer::json(200, &object)
}

/// The output file of a batch of `input`: one answer line per input line.
fn outputs(input: &[u8]) -> bytes::Bytes {
    let mut out = String::new();
    for (i, line) in input.split(|b| *b == b'\n').filter(|l| !l.is_empty()).enumerate() {
        let request: Value = serde_json::from_slice(line).unwrap_or_default();
        let said = request["body"]["messages"].as_array().and_then(|m| m.last()).and_then(|m| m["content"].as_str()).unwrap_or("");
        let answer = json!({"object": "chat.completion", "choices": [{"index": 0, "message": {"role": "assistant", "content": format!("echo: {said}")}, "finish_reason": "stop"}]});
        let line = json!({"id": format!("batch_req_{i}"), "custom_id": request["custom_id"],
                          "response": {"status_code": 200, "request_id": format!("req_{i}"), "body": answer}, "error": null});
        out.push_str(&line.to_string());
        out.push('\n');
    }
    out.into()
}

/// `GET /batches/{id}`: the batch a poll further on.
pub(super) fn retrieve_batch(state: &mut Account, account: &str, id: &str) -> Answer {
    let Some(batch) = state.batches.get_mut(id) else { return not_found("Batch", id) };
    batch.polls += 1;
    let status = batch.object["status"].as_str().unwrap_or("").to_owned();
    let next = match (status.as_str(), batch.polls) {
        ("validating", _) => Some("in_progress"),
        ("in_progress", _) => Some("completed"),
        ("cancelling", _) => Some("cancelled"),
        _ => None,
    };
    let Some(next) = next else { return Answer::json(200, &batch.object) };
    batch.object["status"] = json!(next);
    if next != "completed" {
        return Answer::json(200, &batch.object);
    }
    let input = batch.object["input_file_id"].as_str().unwrap_or("").to_owned();
    let lines = batch.object["request_counts"]["total"].clone();
    let bytes = state.files.get(&input).map(|f| outputs(&f.bytes)).unwrap_or_default();
    let output = store(state, account, "batch_output.jsonl", "batch_output", bytes);
    let Some(batch) = state.batches.get_mut(id) else { return not_found("Batch", id) };
    batch.object["output_file_id"] = output["id"].clone();
    batch.object["request_counts"]["completed"] = lines;
    Answer::json(200, &batch.object)
}

/// `POST /batches/{id}/cancel`.
pub(super) fn cancel_batch(state: &mut Account, id: &str) -> Answer {
    let Some(batch) = state.batches.get_mut(id) else { return not_found("Batch", id) };
    if matches!(batch.object["status"].as_str(), Some("validating" | "in_progress")) {
        batch.object["status"] = json!("cancelling");
    }
    Answer::json(200, &batch.object)
}
