//! JSON Schema (draft 2020-12) documents of the public wire types, generated from the same
//! `ToSchema` derives the OpenAPI document uses, so the files in `schemas/json/` cannot drift
//! from the code: a test regenerates them and compares.

use serde_json::{json, Map, Value};
use utoipa::ToSchema;

use crate::wire::{
    CallbackEnvelope, DecisionPage, DecisionResponse, DecisionView, DeliveryPage, DeliveryView,
    EndpointList, Problem, RedeliverRequest, Redelivered, SetError, SignalRequest, SourceReceipt,
    SourceStatus, TenantStats,
};

/// Every published document: its file name under `schemas/json/` and its schema.
pub fn documents() -> Vec<(&'static str, Value)> {
    vec![
        ("signal-request.schema.json", document::<SignalRequest>()),
        (
            "decision-response.schema.json",
            document::<DecisionResponse>(),
        ),
        (
            "callback-envelope.schema.json",
            document::<CallbackEnvelope>(),
        ),
        ("problem.schema.json", document::<Problem>()),
        ("delivery.schema.json", document::<DeliveryView>()),
        ("delivery-page.schema.json", document::<DeliveryPage>()),
        ("decision.schema.json", document::<DecisionView>()),
        ("decision-page.schema.json", document::<DecisionPage>()),
        ("endpoint-list.schema.json", document::<EndpointList>()),
        (
            "redeliver-request.schema.json",
            document::<RedeliverRequest>(),
        ),
        ("redelivered.schema.json", document::<Redelivered>()),
        ("source-receipt.schema.json", document::<SourceReceipt>()),
        ("source-status.schema.json", document::<SourceStatus>()),
        ("set-error.schema.json", document::<SetError>()),
        ("tenant-stats.schema.json", document::<TenantStats>()),
    ]
}

/// A standalone JSON Schema for `T`: its referenced schemas under `$defs`.
pub fn document<T: ToSchema>() -> Value {
    let mut referenced = Vec::new();
    T::schemas(&mut referenced);
    let mut root = serde_json::to_value(T::schema()).unwrap_or(Value::Null);
    let mut defs = Map::new();
    for (name, schema) in referenced {
        let mut schema = serde_json::to_value(schema).unwrap_or(Value::Null);
        rewrite_refs(&mut schema);
        defs.insert(name, schema);
    }
    rewrite_refs(&mut root);
    let mut doc = Map::new();
    doc.insert(
        "$schema".into(),
        json!("https://json-schema.org/draft/2020-12/schema"),
    );
    doc.insert("title".into(), json!(T::name()));
    if let Value::Object(fields) = root {
        doc.extend(fields);
    }
    if !defs.is_empty() {
        doc.insert("$defs".into(), Value::Object(defs));
    }
    Value::Object(doc)
}

/// OpenAPI points at `#/components/schemas/X`; a standalone document at `#/$defs/X`.
fn rewrite_refs(v: &mut Value) {
    match v {
        Value::Object(map) => {
            for (k, child) in map.iter_mut() {
                if k == "$ref" {
                    if let Value::String(s) = child {
                        if let Some(name) = s.strip_prefix("#/components/schemas/") {
                            *s = format!("#/$defs/{name}");
                        }
                    }
                } else {
                    rewrite_refs(child);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(rewrite_refs),
        _ => {}
    }
}
