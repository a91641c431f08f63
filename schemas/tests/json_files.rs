//! The JSON Schema files under `schemas/json/` are generated from the wire types. This test fails
//! when a type changed and the files were not regenerated (`IDEM_BLESS=1 cargo test -p
//! idem-schemas` rewrites them), and checks that the schemas describe real documents.

use std::path::PathBuf;

use idem_schemas::json_schema::documents;

#[test]
fn schema_files_match_the_types() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("json");
    let bless = std::env::var_os("IDEM_BLESS").is_some();
    for (name, schema) in documents() {
        let path = dir.join(name);
        let generated = serde_json::to_string_pretty(&schema).expect("schema serialises") + "\n";
        if bless {
            std::fs::write(&path, &generated).expect("write schema file");
            continue;
        }
        let on_disk = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e}; run IDEM_BLESS=1 cargo test", path.display()));
        assert_eq!(
            on_disk, generated,
            "{name} is out of date; run IDEM_BLESS=1 cargo test -p idem-schemas"
        );
    }
}

#[test]
fn schemas_name_the_contract_fields() {
    let docs = documents();
    let find = |n: &str| {
        docs.iter()
            .find(|(name, _)| *name == n)
            .map(|(_, s)| s.clone())
            .expect("document exists")
    };
    let signal = find("signal-request.schema.json");
    let required: Vec<&str> = signal["required"]
        .as_array()
        .expect("required list")
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    assert_eq!(required, ["type", "subject"]);
    assert_eq!(signal["additionalProperties"], false);

    let decision = find("decision-response.schema.json");
    for field in [
        "decision_id",
        "type",
        "decision",
        "subject_hash",
        "actions",
        "created_at",
    ] {
        assert!(
            decision["properties"].get(field).is_some(),
            "decision response lacks {field}"
        );
    }
    let verdicts = &decision["$defs"]["Verdict"]["enum"];
    assert_eq!(
        verdicts,
        &serde_json::json!(["allow", "deny", "step_up", "review"])
    );

    let envelope = find("callback-envelope.schema.json");
    assert!(envelope["$defs"]["CallbackData"]["properties"]
        .get("subject_hash")
        .is_some());
    let problem = find("problem.schema.json");
    assert!(problem["properties"].get("detail").is_some());
}
