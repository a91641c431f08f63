//! The integration tests stay one binary: Cargo builds only `tests/it/main.rs`, so a Rust file
//! in `tests/` beside `it/` would never run, nor would a file of `tests/it/` that `main.rs`
//! does not declare as a module. This fails on either.

use std::path::Path;

/// The names of the `.rs` files directly in `dir`.
fn rust_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".rs"))
        .collect();
    names.sort();
    names
}

#[test]
fn every_integration_test_is_a_module_of_the_one_binary() {
    let tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    assert_eq!(
        rust_files(&tests),
        Vec::<String>::new(),
        "make each a module of tests/it/ (declared in tests/it/main.rs)"
    );
    let main = std::fs::read_to_string(tests.join("it/main.rs")).expect("tests/it/main.rs");
    for file in rust_files(&tests.join("it")) {
        let module = file.trim_end_matches(".rs");
        assert!(
            module == "main" || main.lines().any(|l| l == format!("mod {module};")),
            "tests/it/{file} is not declared in tests/it/main.rs"
        );
    }
}
