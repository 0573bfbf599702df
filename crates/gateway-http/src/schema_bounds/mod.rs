//! The bounds a caller's JSON Schema must stay within before it is compiled: its nesting and
//! size, references the gateway resolves without fetching, no reference cycle that never
//! descends into the instance, and a bounded number of subschemas applied to any one instance
//! value, found by a static walk of the schema graph.
//!
//! Why a static walk: a validator follows `$ref`s, so a 100-byte schema can ask for endless or
//! exponential work (`{"allOf": [{"$ref": "#"}]}`; a chain of definitions each referring to the
//! next twice). A compile or a validation cannot be interrupted, so the cost is bounded before
//! either runs. The walk is linear in the schema per instance level.
//!
//! The graph has a node per subschema and edges of two kinds: *in place* (`allOf`, `anyOf`,
//! `oneOf`, `not`, `if`/`then`/`else`, `dependentSchemas`, `$ref` and its dynamic forms: the
//! target applies to the same instance value) and *descending* (`properties`, `items`, …: the
//! target applies to a member or an element). A cycle of in-place edges is an endless validation
//! and is refused. A cycle through a descending edge is a recursive schema (a tree of nodes),
//! which OpenAI's structured outputs support: it is accepted when the subschemas applied to one
//! instance value stay within the budget at every depth down to the JSON parser's limit.
//!
//! The bound, per subschema `s` and depth `d` (how many subschemas `s` applies, itself included,
//! to one value `d` levels below the value it is applied to):
//! `A₀(s) = 1 + Σ A₀(in-place children)` and `A_d(s) = Σ A_d(in-place children) + the worst
//! single member, element or member name of s's descending edges, each counting A_{d−1}` of its
//! targets. A maximum of sums is at most the sum of maxima, so `A_d(root)` bounds every real
//! instance path. It is exact for trees of distinct members (a binary tree stays at one
//! subschema per value) and grows only where one value really meets a subschema several times
//! (`{"properties": {"a": {"allOf": [{"$ref": "#"}, {"$ref": "#"}]}}}` doubles per level).

mod references;
#[cfg(test)]
mod tests;

use references::Anchors;
use serde_json::{Map, Value};
use std::collections::HashMap;

/// The limits a schema is checked against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SchemaLimits {
    /// Largest schema, as compact JSON (default 64 KiB).
    pub max_bytes: usize,
    /// Most subschemas applied to one instance value (default 1 000).
    pub max_per_value: u64,
    /// Most subschemas applied over all instance depths: the size of the schema with every
    /// reference written out, down to [`MAX_DEPTH`] (default 20 000).
    pub max_expanded: u64,
    /// Most regular expressions (`pattern`, `patternProperties`) in one schema (default 64):
    /// each compiles to an automaton of its own.
    pub max_patterns: usize,
}

impl Default for SchemaLimits {
    fn default() -> Self {
        SchemaLimits { max_bytes: 64 << 10, max_per_value: 1_000, max_expanded: 20_000, max_patterns: 64 }
    }
}

/// What the walk found of an admitted schema.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SchemaCost {
    /// The most subschemas it applies to one instance value (at any depth).
    pub per_value: u64,
    /// Its regular expressions.
    pub patterns: usize,
}

/// Deepest JSON a schema may be, and the deepest instance `serde_json` parses (its recursion
/// limit), so the deepest the expansion is followed.
pub const MAX_DEPTH: usize = 128;

/// Why a schema is refused before compilation.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SchemaRefusal {
    /// Larger than [`SchemaLimits::max_bytes`].
    #[error("the schema is larger than {limit} bytes")]
    TooLarge {
        /// The limit.
        limit: usize,
    },
    /// Nested deeper than [`MAX_DEPTH`].
    #[error("the schema nests deeper than {MAX_DEPTH} levels")]
    TooDeep,
    /// A reference the gateway does not resolve.
    #[error("{at}: reference {reference:?} cannot be used ({why})")]
    Reference {
        /// JSON pointer of the subschema holding it.
        at: String,
        /// The reference (or nested `$id`).
        reference: String,
        /// Why.
        why: &'static str,
    },
    /// In-place references that lead back to where they started.
    #[error("{at}: its references lead back to it without descending into the instance (an endless validation)")]
    Cycle {
        /// JSON pointer of a subschema on the cycle.
        at: String,
    },
    /// More regular expressions than [`SchemaLimits::max_patterns`].
    #[error("the schema has more than {limit} patterns")]
    TooManyPatterns {
        /// The limit.
        limit: usize,
    },
    /// Too many subschemas applied to one instance value, or over all depths.
    #[error("its references expand to more than {limit} subschemas {per}")]
    Expansion {
        /// The limit exceeded.
        limit: u64,
        /// `for one instance value` or `in all`.
        per: &'static str,
    },
}

/// How a subschema applies a child subschema.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Edge {
    /// To the same instance value.
    InPlace,
    /// To the member of one name (`properties`: distinct names within one subschema).
    Member,
    /// To any member (`patternProperties`, `additionalProperties`, `unevaluatedProperties`).
    AnyMember,
    /// To the member names themselves (`propertyNames`).
    Names,
    /// To the element at this index (`prefixItems`, array-form `items`).
    Element(usize),
    /// To any element (`items`, `additionalItems`, `contains`, `unevaluatedItems`), or to
    /// decoded content (`contentSchema`).
    AnyElement,
    /// Not applied: a `$defs` entry, reached only through references.
    Defined,
}

/// The depth of `value` (1 for a scalar), without recursion; stops counting past [`MAX_DEPTH`].
pub fn depth(value: &Value) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(value, 1usize)];
    while let Some((v, d)) = stack.pop() {
        deepest = deepest.max(d);
        if d > MAX_DEPTH {
            break;
        }
        match v {
            Value::Array(items) => stack.extend(items.iter().map(|i| (i, d + 1))),
            Value::Object(map) => stack.extend(map.values().map(|i| (i, d + 1))),
            _ => {}
        }
    }
    deepest
}

/// Checks the references and the expansion of `schema` (its depth and size are checked by the
/// caller, which serializes it anyway): its cost when a validator can compile it and apply it
/// to any parsed instance within `limits`.
pub fn check(schema: &Value, limits: &SchemaLimits) -> Result<SchemaCost, SchemaRefusal> {
    // Draft 4 names a resource `id`; later drafts `$id`.
    let draft4 = schema.get("$schema").and_then(Value::as_str).is_some_and(|s| s.contains("draft-04"));
    let mut graph = Graph {
        root: schema,
        id_keyword: if draft4 { "id" } else { "$id" },
        ids: HashMap::new(),
        nodes: Vec::new(),
        edges: Vec::new(),
        anchors: Anchors::default(),
    };
    graph.index(schema, String::new());
    graph.link_references()?;
    let patterns = graph.nodes.iter().map(|n| n.patterns).sum();
    if patterns > limits.max_patterns {
        return Err(SchemaRefusal::TooManyPatterns { limit: limits.max_patterns });
    }
    let order = graph.in_place_order()?;
    let per_value = graph.expansion(&order, limits)?;
    Ok(SchemaCost { per_value, patterns })
}

struct Node<'a> {
    value: &'a Value,
    pointer: String,
    /// `unevaluatedProperties` or `unevaluatedItems`: the validator applies the in-place
    /// subschemas once more to learn what they evaluated.
    re_evaluates: bool,
    /// Its regular expressions.
    patterns: usize,
}
struct Graph<'a> {
    root: &'a Value,
    id_keyword: &'static str,
    /// Node id by the address of its value in the schema (a position in the document).
    ids: HashMap<*const Value, usize>,
    nodes: Vec<Node<'a>>,
    edges: Vec<Vec<(Edge, usize)>>,
    anchors: Anchors,
}

fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

fn shown(pointer: &str) -> String {
    format!("#{pointer}")
}

impl<'a> Graph<'a> {
    /// Indexes `schema` (at `pointer`) and every subschema under it, without recursion.
    fn index(&mut self, schema: &'a Value, pointer: String) -> usize {
        if let Some(&id) = self.ids.get(&std::ptr::from_ref(schema)) {
            return id;
        }
        let first = self.nodes.len();
        let mut pending = vec![(schema, pointer)];
        let mut children: Vec<Vec<(Edge, &'a Value)>> = Vec::new();
        while let Some((value, pointer)) = pending.pop() {
            if self.ids.contains_key(&std::ptr::from_ref(value)) {
                continue;
            }
            self.ids.insert(std::ptr::from_ref(value), self.nodes.len());
            let mine = match value {
                Value::Object(map) => Self::children(map, &pointer),
                _ => Vec::new(), // `true`, `false`: nothing further applies
            };
            pending
                .extend(mine.iter().filter(|(_, _, v)| !self.ids.contains_key(&std::ptr::from_ref(*v))).map(|(_, at, v)| (*v, at.clone())));
            children.push(mine.into_iter().map(|(edge, _, v)| (edge, v)).collect());
            let map = value.as_object();
            let re_evaluates = map.is_some_and(|m| m.contains_key("unevaluatedProperties") || m.contains_key("unevaluatedItems"));
            let patterns = map.map_or(0, |m| {
                usize::from(m.get("pattern").is_some_and(Value::is_string))
                    + m.get("patternProperties").and_then(Value::as_object).map_or(0, Map::len)
            });
            self.nodes.push(Node { value, pointer, re_evaluates, patterns });
            self.edges.push(Vec::new());
        }
        for (offset, list) in children.into_iter().enumerate() {
            self.edges[first + offset] =
                list.into_iter().filter_map(|(edge, v)| self.ids.get(&std::ptr::from_ref(v)).map(|&c| (edge, c))).collect();
        }
        first
    }

    /// The subschemas `map` names, each with how it applies and its pointer.
    fn children(map: &'a Map<String, Value>, pointer: &str) -> Vec<(Edge, String, &'a Value)> {
        let mut out = Vec::new();
        for (key, value) in map {
            let at = format!("{pointer}/{}", escape(key));
            let listed = || value.as_array().into_iter().flatten().enumerate().map(|(i, v)| (i, format!("{at}/{i}"), v));
            let entries = || value.as_object().into_iter().flatten().map(|(name, v)| (name.as_str(), format!("{at}/{}", escape(name)), v));
            match key.as_str() {
                "not" | "if" | "then" | "else" => out.push((Edge::InPlace, at, value)),
                "allOf" | "anyOf" | "oneOf" => out.extend(listed().map(|(_, at, v)| (Edge::InPlace, at, v))),
                "dependentSchemas" => out.extend(entries().map(|(_, at, v)| (Edge::InPlace, at, v))),
                // Draft 7: a schema applies in place; a list of names is `dependentRequired`.
                "dependencies" => out.extend(entries().filter(|(_, _, v)| !v.is_array()).map(|(_, at, v)| (Edge::InPlace, at, v))),
                "properties" => out.extend(entries().map(|(_, at, v)| (Edge::Member, at, v))),
                "patternProperties" => out.extend(entries().map(|(_, at, v)| (Edge::AnyMember, at, v))),
                "additionalProperties" | "unevaluatedProperties" => out.push((Edge::AnyMember, at, value)),
                "propertyNames" => out.push((Edge::Names, at, value)),
                "prefixItems" => out.extend(listed().map(|(i, at, v)| (Edge::Element(i), at, v))),
                "items" if value.is_array() => out.extend(listed().map(|(i, at, v)| (Edge::Element(i), at, v))),
                "items" | "additionalItems" | "contains" | "unevaluatedItems" | "contentSchema" => out.push((Edge::AnyElement, at, value)),
                "$defs" | "definitions" => out.extend(entries().map(|(_, at, v)| (Edge::Defined, at, v))),
                _ => {}
            }
        }
        out
    }
    /// The subschemas in an order where every in-place edge goes forward, or the cycle.
    fn in_place_order(&self) -> Result<Vec<usize>, SchemaRefusal> {
        let n = self.nodes.len();
        let mut incoming = vec![0usize; n];
        for list in &self.edges {
            for &(edge, to) in list {
                incoming[to] += usize::from(edge == Edge::InPlace);
            }
        }
        let mut ready: Vec<usize> = (0..n).filter(|&i| incoming[i] == 0).collect();
        let mut order = Vec::with_capacity(n);
        while let Some(node) = ready.pop() {
            order.push(node);
            for &(edge, to) in &self.edges[node] {
                if edge == Edge::InPlace {
                    incoming[to] -= 1;
                    if incoming[to] == 0 {
                        ready.push(to);
                    }
                }
            }
        }
        match (0..n).find(|&i| incoming[i] > 0) {
            Some(on_cycle) => Err(SchemaRefusal::Cycle { at: shown(&self.nodes[on_cycle].pointer) }),
            None => Ok(order),
        }
    }

    /// Bounds the subschemas applied to one instance value, depth by depth (see the module
    /// doc): `applied[s]` is at most what subschema `s` applies, itself included, to any one
    /// value `depth` levels below the value it is applied to. Returns the most at any depth.
    fn expansion(&self, order: &[usize], limits: &SchemaLimits) -> Result<u64, SchemaRefusal> {
        let n = self.nodes.len();
        let mut above = vec![0u64; n];
        let (mut total, mut most) = (0u64, 0u64);
        for depth in 0..=MAX_DEPTH {
            let mut applied = vec![0u64; n];
            // Children before parents: an in-place child's count is final when its parent adds it.
            for &node in order.iter().rev() {
                let in_place = self.edges[node]
                    .iter()
                    .filter(|(edge, _)| *edge == Edge::InPlace)
                    .fold(0u64, |sum, &(_, to)| sum.saturating_add(applied[to]));
                let own = if depth == 0 { 1 } else { self.descended(node, &above) };
                // `unevaluated*` runs the in-place subschemas once more to see what they covered.
                let again = if self.nodes[node].re_evaluates { in_place } else { 0 };
                applied[node] = own.saturating_add(in_place).saturating_add(again);
            }
            let at_root = applied[0];
            if at_root == 0 {
                return Ok(most);
            }
            most = most.max(at_root);
            if at_root > limits.max_per_value {
                return Err(SchemaRefusal::Expansion { limit: limits.max_per_value, per: "for one instance value" });
            }
            total = total.saturating_add(at_root);
            if total > limits.max_expanded {
                return Err(SchemaRefusal::Expansion { limit: limits.max_expanded, per: "in all" });
            }
            above = applied;
        }
        Ok(most)
    }

    /// What `node`'s own descending edges apply to one value a level down, given what each
    /// target applies one level less deep (`above`): the worst of a member (every any-member
    /// target plus the most one name adds), an element (likewise by index) and a member name.
    fn descended(&self, node: usize, above: &[u64]) -> u64 {
        let (mut any_member, mut any_element, mut names, mut one_member) = (0u64, 0u64, 0u64, 0u64);
        // Names within one `properties` are distinct; indices may repeat (`prefixItems` beside a
        // draft-7 array `items`), so they are summed per index.
        let mut indexed: HashMap<usize, u64> = HashMap::new();
        for &(edge, to) in &self.edges[node] {
            let count = above[to];
            match edge {
                Edge::AnyMember => any_member = any_member.saturating_add(count),
                Edge::AnyElement => any_element = any_element.saturating_add(count),
                Edge::Names => names = names.saturating_add(count),
                Edge::Member => one_member = one_member.max(count),
                Edge::Element(index) => {
                    let sum = indexed.entry(index).or_default();
                    *sum = sum.saturating_add(count);
                }
                Edge::InPlace | Edge::Defined => {}
            }
        }
        let one_element = indexed.values().copied().max().unwrap_or(0);
        any_member.saturating_add(one_member).max(any_element.saturating_add(one_element)).max(names)
    }
}
