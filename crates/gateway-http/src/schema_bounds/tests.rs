//! Tests of the schema bounds: cycles, expansions, references, limits and depth.

use super::*;
use serde_json::json;

fn refused(schema: Value) -> SchemaRefusal {
    check(&schema, &SchemaLimits::default()).unwrap_err()
}

fn accepted(schema: Value) -> SchemaCost {
    check(&schema, &SchemaLimits::default()).unwrap_or_else(|e| panic!("{schema} refused: {e}"))
}

/// `$defs` d0..dn, each applying the next twice by `form`.
fn chain(n: usize, form: impl Fn(Value) -> Value) -> Value {
    let mut defs = Map::new();
    for i in 0..n {
        defs.insert(format!("d{i}"), form(json!({"$ref": format!("#/$defs/d{}", i + 1)})));
    }
    defs.insert(format!("d{n}"), json!({"type": "string"}));
    json!({"$defs": defs, "$ref": "#/$defs/d0"})
}

#[test]
fn in_place_cycles_are_refused_with_where_they_are() {
    assert_eq!(refused(json!({"allOf": [{"$ref": "#"}]})), SchemaRefusal::Cycle { at: "#".into() });
    let defs = json!({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"anyOf": [{"$ref": "#/$defs/a"}]}}, "$ref": "#/$defs/a"});
    assert!(matches!(refused(defs), SchemaRefusal::Cycle { .. }));
    assert!(matches!(refused(json!({"$ref": "#"})), SchemaRefusal::Cycle { .. }));
    let anchored = json!({"$defs": {"x": {"$anchor": "x", "not": {"$ref": "#x"}}}, "$ref": "#x"});
    assert!(matches!(refused(anchored), SchemaRefusal::Cycle { .. }));
}

#[test]
fn exponential_chains_are_refused_in_place_and_through_members() {
    assert!(matches!(refused(chain(20, |r| json!({"allOf": [r, r]}))), SchemaRefusal::Expansion { .. }));
    // Under one member name twice over: each depth doubles on the same instance path.
    let same_member = chain(20, |r| json!({"properties": {"a": {"allOf": [r, r]}}}));
    assert!(matches!(refused(same_member), SchemaRefusal::Expansion { .. }));
    accepted(chain(7, |r| json!({"allOf": [r, r]})));
}

#[test]
fn unevaluated_keywords_count_the_second_pass_over_their_siblings() {
    // Each level's `unevaluatedProperties` re-applies the `anyOf` beside it: ×2 a level.
    let mut nested = json!({"type": "string"});
    for _ in 0..32 {
        nested = json!({"anyOf": [{"properties": {"a": nested}}], "unevaluatedProperties": false});
    }
    assert!(matches!(refused(nested), SchemaRefusal::Expansion { .. }));
    accepted(json!({"anyOf": [{"properties": {"a": {"type": "string"}}}], "unevaluatedProperties": false}));
}

#[test]
fn draft_4_ids_start_resources_too() {
    let draft4 = json!({"$schema": "http://json-schema.org/draft-04/schema#", "definitions": {"d0": {"type": "string"}},
        "properties": {"p": {"id": "http://x/y", "allOf": [{"$ref": "#/definitions/d0"}]}}});
    assert!(refused(draft4).to_string().contains("nested $id"));
    // In later drafts `id` is no keyword: a property may be called that.
    accepted(json!({"properties": {"p": {"id": "http://x/y", "type": "object"}}}));
}

#[test]
fn recursive_and_branching_schemas_are_accepted() {
    // OpenAI's recursive UI example, and a binary tree: one subschema per instance value.
    accepted(json!({"type": "object", "properties": {"label": {"type": "string"}, "children": {"type": "array", "items": {"$ref": "#"}}}}));
    accepted(
        json!({"$defs": {"node": {"type": "object", "properties": {"left": {"$ref": "#/$defs/node"}, "right": {"$ref": "#/$defs/node"}}}}, "$ref": "#/$defs/node"}),
    );
    // Two different members each referring on: a tree of distinct paths, not a blow-up.
    accepted(chain(40, |r| json!({"type": "object", "properties": {"a": r, "b": r}})));
    let mut nested = json!({"type": "string"});
    for _ in 0..60 {
        nested = json!({"type": "object", "properties": {"a": nested}});
    }
    accepted(nested);
}

#[test]
fn references_the_gateway_cannot_resolve_are_refused() {
    let cases = [
        (json!({"$ref": "https://example.com/schema.json"}), "only local references"),
        (json!({"$ref": "other.json#/x"}), "only local references"),
        (json!({"$ref": "#/$defs/missing"}), "names nothing"),
        (json!({"$ref": "#nowhere"}), "no subschema has this anchor"),
        (json!({"$ref": 12}), "a reference is a string"),
        (json!({"properties": {"a": {"$id": "https://example.com/a", "type": "string"}}}), "nested $id"),
    ];
    for (schema, why) in cases {
        let e = refused(schema.clone()).to_string();
        assert!(e.contains(why), "{schema}: {e}");
    }
    // The root's own $id is a base the local form may repeat; escapes and anchors resolve.
    accepted(
        json!({"$id": "https://example.com/s", "$defs": {"a/b": {"type": "string"}}, "properties": {"x": {"$ref": "https://example.com/s#/$defs/a~1b"}}}),
    );
    accepted(
        json!({"$defs": {"a b": {"$anchor": "ab", "type": "string"}}, "properties": {"x": {"$ref": "#/$defs/a%20b"}, "y": {"$ref": "#ab"}}}),
    );
    // A pointer into a position that is not a subschema keyword is still followed.
    assert!(matches!(refused(json!({"x-data": {"allOf": [{"$ref": "#/x-data"}]}, "$ref": "#/x-data"})), SchemaRefusal::Cycle { .. }));
}

#[test]
fn data_is_not_taken_for_subschemas() {
    accepted(json!({"enum": [{"$ref": "#"}], "const": {"allOf": [{"$ref": "#"}]}, "default": {"$ref": "#"}}));
    accepted(json!({"properties": {"$ref": {"type": "string"}, "allOf": {"type": "string"}}}));
}

#[test]
fn the_budgets_are_the_limits_given() {
    let wide = json!({"allOf": (0..50).map(|_| json!({"type": "string"})).collect::<Vec<_>>()});
    let tight = SchemaLimits { max_per_value: 50, ..SchemaLimits::default() };
    assert_eq!(check(&wide, &tight), Err(SchemaRefusal::Expansion { limit: 50, per: "for one instance value" }));
    assert_eq!(check(&wide, &SchemaLimits { max_per_value: 51, ..tight }).map(|c| c.per_value), Ok(51));
    let recursive = json!({"properties": {"a": {"$ref": "#"}}});
    let small_total = SchemaLimits { max_expanded: 100, ..SchemaLimits::default() };
    assert_eq!(check(&recursive, &small_total), Err(SchemaRefusal::Expansion { limit: 100, per: "in all" }));
}

#[test]
fn depth_is_measured_without_recursion() {
    let mut deep = json!(1);
    for _ in 0..10_000 {
        deep = Value::Array(vec![deep]);
    }
    assert!(depth(&deep) > MAX_DEPTH);
    assert_eq!(depth(&json!({"a": [1]})), 3);
    std::mem::forget(deep); // dropping a 10 000-deep Value recurses; the test's stack is small
}
