//! `GET /openapi.json` is OpenAPI 3.1 of every endpoint, and the JSON Schema files in
//! `schemas/json/` agree with its components.

use serde_json::Value;

use crate::support::*;

/// A standalone schema's `#/$defs/X` refs as the OpenAPI document writes them.
fn as_component_refs(v: &Value) -> Value {
    match v {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, child)| match (k.as_str(), child) {
                    ("$ref", Value::String(s)) => (
                        k.clone(),
                        Value::String(s.replace("#/$defs/", "#/components/schemas/")),
                    ),
                    _ => (k.clone(), as_component_refs(child)),
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(as_component_refs).collect()),
        other => other.clone(),
    }
}

#[tokio::test]
async fn openapi_covers_every_endpoint_and_agrees_with_the_schema_files() {
    let (_dir, _receiver, _idem, client) = Harness::new().start().await;
    let r = client.send("GET", "/openapi.json", Req::new("")).await;
    assert_eq!(r.status, 200);
    let doc = r.json();
    assert_eq!(doc["openapi"], "3.1.0");
    let mut paths: Vec<&str> = doc["paths"]
        .as_object()
        .expect("paths")
        .keys()
        .map(String::as_str)
        .collect();
    paths.sort();
    assert_eq!(
        paths,
        [
            "/.well-known/ssf-configuration/ssf/{tenant}",
            "/console",
            "/console/{asset}",
            "/healthz",
            "/metrics",
            "/openapi.json",
            "/ssf/{tenant}/jwks",
            "/ssf/{tenant}/streams",
            "/ssf/{tenant}/streams/status",
            "/ssf/{tenant}/streams/subjects:add",
            "/ssf/{tenant}/streams/subjects:remove",
            "/ssf/{tenant}/streams/verify",
            "/ssf/{tenant}/streams/{stream_id}/poll",
            "/ssf/{tenant}/token",
            "/v1/decisions",
            "/v1/decisions/{id}",
            "/v1/deliveries",
            "/v1/deliveries/redeliver",
            "/v1/deliveries/{id}",
            "/v1/deliveries/{id}/redeliver",
            "/v1/endpoints",
            "/v1/playbooks/{type}/evaluate",
            "/v1/signals",
            "/v1/sources",
            "/v1/sources/{tenant}/{source}",
            "/v1/sources/{tenant}/{source}/status",
            "/v1/sources/{tenant}/{source}/subjects",
            "/v1/sources/{tenant}/{source}/subscription",
            "/v1/stats"
        ]
    );
    let streams = &doc["paths"]["/ssf/{tenant}/streams"];
    for method in ["get", "post", "patch", "put", "delete"] {
        assert!(streams.get(method).is_some(), "{method} streams documented");
    }
    let sources = &doc["paths"]["/v1/sources/{tenant}/{source}"];
    for (method, status) in [
        ("post", "200"),
        ("post", "401"),
        ("get", "200"),
        ("get", "401"),
    ] {
        assert!(
            sources[method]["responses"].get(status).is_some(),
            "{method} {status} documented on sources"
        );
    }
    let signals = &doc["paths"]["/v1/signals"]["post"];
    let headers: Vec<&str> = signals["parameters"]
        .as_array()
        .expect("params")
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    for h in [
        "Idempotency-Key",
        "Prefer",
        "webhook-id",
        "webhook-timestamp",
        "webhook-signature",
    ] {
        assert!(headers.contains(&h), "{h} documented");
    }
    for status in ["201", "400", "401", "409", "413", "415", "422"] {
        assert!(
            signals["responses"].get(status).is_some(),
            "{status} documented"
        );
    }
    let problem_types = doc["components"]["schemas"]["ProblemType"]["enum"]
        .as_array()
        .expect("problem types");
    assert!(problem_types.len() >= 17);
    assert!(problem_types.contains(&Value::from("urn:idem:problem:key-in-flight")));
    assert!(problem_types.contains(&Value::from("urn:idem:problem:repeated-header")));
    let created = &signals["responses"]["201"]["headers"];
    for h in [
        "Idempotent-Replayed",
        "Preference-Applied",
        "Idem-Deduplicated",
    ] {
        assert!(created.get(h).is_some(), "{h} documented on 201");
    }

    let components = doc["components"]["schemas"]
        .as_object()
        .expect("components");
    for (file, schema) in idem_schemas::json_schema::documents() {
        let name = schema["title"].as_str().expect("title");
        let mut body = schema.as_object().expect("object").clone();
        body.remove("$schema");
        body.remove("title");
        let defs = body.remove("$defs");
        assert_eq!(
            as_component_refs(&Value::Object(body)),
            components[name],
            "{file} vs components.{name}"
        );
        for (def, def_schema) in defs
            .as_ref()
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            assert_eq!(
                &as_component_refs(def_schema),
                &components[def.as_str()],
                "{file}: $defs.{def}"
            );
        }
    }
}
