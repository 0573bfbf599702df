//! The references the gateway resolves without fetching: local pointers, anchors and their
//! dynamic and recursive forms, each an in-place edge of the schema graph.

use super::{Edge, Graph, SchemaRefusal, shown};
use serde_json::Value;
use std::collections::HashMap;

/// Where plain-name fragments and recursive anchors point, built from the nodes indexed so far.
#[derive(Default)]
pub(super) struct Anchors {
    built_for: usize,
    names: HashMap<String, Vec<usize>>,
    recursive: Vec<usize>,
}
impl Graph<'_> {
    /// Adds an in-place edge for every reference, indexing targets that are not yet subschemas
    /// (a pointer may name any position of the document).
    pub(super) fn link_references(&mut self) -> Result<(), SchemaRefusal> {
        let base = self.root.get(self.id_keyword).and_then(Value::as_str).map(|id| id.trim_end_matches('#').to_owned());
        let mut id = 0;
        while id < self.nodes.len() {
            let (value, pointer) = (self.nodes[id].value, self.nodes[id].pointer.clone());
            if let Value::Object(map) = value {
                if let Some(Value::String(nested)) = map.get(self.id_keyword).filter(|_| !pointer.is_empty())
                    && !nested.starts_with('#')
                {
                    return Err(SchemaRefusal::Reference {
                        at: shown(&pointer),
                        reference: nested.clone(),
                        why: "a nested $id starts a resource of its own; move it under $defs without the $id",
                    });
                }
                for keyword in ["$ref", "$dynamicRef", "$recursiveRef"] {
                    let Some(reference) = map.get(keyword) else { continue };
                    let refuse = |why| SchemaRefusal::Reference { at: shown(&pointer), reference: reference.to_string(), why };
                    let reference = reference.as_str().ok_or_else(|| refuse("a reference is a string"))?;
                    let local = match &base {
                        Some(base) if !base.is_empty() => reference.strip_prefix(base.as_str()).unwrap_or(reference),
                        _ => reference,
                    };
                    let Some(fragment) = local.strip_prefix('#') else {
                        return Err(refuse(
                            "only local references (#, #/pointer, #anchor) are resolved; the gateway never fetches a schema",
                        ));
                    };
                    for target in self.targets(keyword, fragment).map_err(refuse)? {
                        self.edges[id].push((Edge::InPlace, target));
                    }
                }
            }
            id += 1;
        }
        Ok(())
    }

    /// The subschemas a reference's `fragment` names.
    fn targets(&mut self, keyword: &str, fragment: &str) -> Result<Vec<usize>, &'static str> {
        if fragment.is_empty() || fragment.starts_with('/') {
            let mut value = self.root;
            for token in fragment.split('/').skip(1) {
                let token = percent_encoding::percent_decode_str(token).decode_utf8_lossy().replace("~1", "/").replace("~0", "~");
                value = match value {
                    Value::Object(map) => map.get(&token),
                    Value::Array(list) => token.parse::<usize>().ok().and_then(|i| list.get(i)),
                    _ => None,
                }
                .ok_or("the pointer names nothing in the schema")?;
            }
            let mut targets = vec![self.index(value, fragment.to_owned())];
            if keyword == "$recursiveRef" {
                // Resolves at run time to the outermost `$recursiveAnchor`: any of them.
                targets.extend(self.anchors().recursive.iter().copied());
            }
            return Ok(targets);
        }
        // A plain-name fragment: an `$anchor` (or, for `$dynamicRef`, any `$dynamicAnchor`),
        // or a draft-7 (draft-4) fragment `$id` (`id`).
        match self.anchors().names.get(fragment) {
            Some(targets) if !targets.is_empty() => Ok(targets.clone()),
            _ => Err("no subschema has this anchor"),
        }
    }

    /// The anchors of the nodes indexed so far (rebuilt when more were indexed).
    fn anchors(&mut self) -> &Anchors {
        if self.anchors.built_for != self.nodes.len() {
            let mut anchors = Anchors { built_for: self.nodes.len(), ..Anchors::default() };
            for (i, node) in self.nodes.iter().enumerate() {
                let Value::Object(map) = node.value else { continue };
                for keyword in ["$anchor", "$dynamicAnchor"] {
                    if let Some(name) = map.get(keyword).and_then(Value::as_str) {
                        anchors.names.entry(name.to_owned()).or_default().push(i);
                    }
                }
                if let Some(name) = map.get(self.id_keyword).and_then(Value::as_str).and_then(|id| id.strip_prefix('#')) {
                    anchors.names.entry(name.to_owned()).or_default().push(i);
                }
                if map.get("$recursiveAnchor") == Some(&Value::Bool(true)) {
                    anchors.recursive.push(i);
                }
            }
            self.anchors = anchors;
        }
        &self.anchors
    }
}
