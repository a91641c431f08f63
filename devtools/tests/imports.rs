//! No crate of the workspace, nor its integration tests, has an import circle between its modules
//! (see `devtools::imports`).

use std::path::Path;

#[test]
fn no_crate_of_the_workspace_has_an_import_circle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let roots = [
        "src/lib.rs",
        "src/main.rs",
        "actors/src/lib.rs",
        "schemas/src/lib.rs",
        "model/src/lib.rs",
        "model/src/main.rs",
        "simulations/src/main.rs",
        "bench/src/main.rs",
        "devtools/src/lib.rs",
        "tests/it/main.rs",
        "actors/tests/it/main.rs",
    ];
    let mut found = Vec::new();
    for file in roots {
        let circles = devtools::imports::circles(&root.join(file))
            .unwrap_or_else(|e| panic!("cannot read {file}: {e}"));
        found.extend(circles.into_iter().map(|c| format!("{file}: {c}")));
    }
    assert!(found.is_empty(), "import circles:\n{}", found.join("\n"));
}
