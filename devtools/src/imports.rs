//! Import circles between modules. A crate's modules are read from its files (`a.rs` or
//! `a/mod.rs` under their parent's directory); every path that starts with `crate::`, `super::`
//! or `self::` (in a `use` tree or inline, comments and strings left out) is resolved to the
//! deepest module it names. A reference from module `x::a::…` to module `x::b::…` is an edge
//! `a → b` among the children of `x`; a module using its own parent or child adds none. A circle
//! is a strongly connected set of such siblings: two modules that each need the other, so
//! neither can be read, tested or replaced on its own.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module path from the crate root (`[]` is the root).
pub type ModPath = Vec<String>;

/// One circle: the parent and the siblings that depend on each other, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Circle {
    /// The module whose children they are.
    pub parent: ModPath,
    /// The children in the circle.
    pub members: Vec<String>,
}

impl std::fmt::Display for Circle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parent = match self.parent.is_empty() {
            true => "crate".to_string(),
            false => format!("crate::{}", self.parent.join("::")),
        };
        write!(f, "{parent}: {}", self.members.join(" ↔ "))
    }
}

/// The circles among the modules of the crate whose root file is `root` (`lib.rs` or
/// `main.rs`).
pub fn circles(root: &Path) -> std::io::Result<Vec<Circle>> {
    let mut modules = BTreeMap::new();
    read_module(root, Vec::new(), &mut modules)?;
    let known: BTreeSet<ModPath> = modules.keys().cloned().collect();
    // Edges among siblings, by parent.
    let mut edges: BTreeMap<ModPath, BTreeSet<(String, String)>> = BTreeMap::new();
    for (module, text) in &modules {
        for path in references(text) {
            let Some(target) = resolve(module, &path, &known) else {
                continue;
            };
            let common = module
                .iter()
                .zip(&target)
                .take_while(|(a, b)| a == b)
                .count();
            if common == module.len() || common == target.len() {
                continue;
            }
            edges
                .entry(module[..common].to_vec())
                .or_default()
                .insert((module[common].clone(), target[common].clone()));
        }
    }
    let mut found = Vec::new();
    for (parent, edges) in edges {
        for members in strongly_connected(&edges) {
            found.push(Circle {
                parent: parent.clone(),
                members,
            });
        }
    }
    Ok(found)
}

/// Reads the module in `file` at `path` and, recursively, the modules it declares.
fn read_module(
    file: &Path,
    path: ModPath,
    modules: &mut BTreeMap<ModPath, String>,
) -> std::io::Result<()> {
    let raw = std::fs::read_to_string(file)?;
    let text = strip(&raw);
    // `a.rs` and `a/mod.rs` both keep their children in `a/`; `lib.rs` and `main.rs` in their
    // own directory.
    let dir: PathBuf = match file.file_name().and_then(|n| n.to_str()) {
        Some("mod.rs" | "lib.rs" | "main.rs") => file.parent().map(Path::to_path_buf),
        _ => file.with_extension("").into(),
    }
    .unwrap_or_default();
    for child in declared_modules(&text) {
        let mut child_path = path.clone();
        child_path.push(child.clone());
        for candidate in [
            dir.join(format!("{child}.rs")),
            dir.join(&child).join("mod.rs"),
        ] {
            if candidate.is_file() {
                read_module(&candidate, child_path.clone(), modules)?;
                break;
            }
        }
        // An inline `mod x { … }` stays part of its file's text.
    }
    modules.insert(path, text);
    Ok(())
}

/// The names of `mod x;` declarations (of files, not inline modules).
fn declared_modules(text: &str) -> Vec<String> {
    let tokens = tokens(text);
    let mut found = Vec::new();
    for (n, token) in tokens.iter().enumerate() {
        if token == "mod" {
            if let (Some(name), Some(end)) = (tokens.get(n + 1), tokens.get(n + 2)) {
                if end == ";" && is_ident(name) {
                    found.push(name.clone());
                }
            }
        }
    }
    found
}

/// Every path that starts with `crate`, `super` or `self`, with `use` trees expanded.
fn references(text: &str) -> Vec<Vec<String>> {
    let tokens = tokens(text);
    let mut found = Vec::new();
    let mut n = 0;
    while n < tokens.len() {
        let starts = matches!(tokens[n].as_str(), "crate" | "super" | "self")
            && tokens.get(n + 1).map(String::as_str) == Some("::")
            && (n == 0 || tokens[n - 1] != "::");
        if starts {
            let (paths, end) = use_tree(&tokens, n, Vec::new());
            found.extend(paths);
            n = end.max(n + 1);
        } else {
            n += 1;
        }
    }
    found
}

/// The paths of the tree that starts at `tokens[at]`, each after `prefix`; and where it ends.
fn use_tree(tokens: &[String], mut at: usize, prefix: Vec<String>) -> (Vec<Vec<String>>, usize) {
    let mut path = prefix;
    loop {
        match tokens.get(at).map(String::as_str) {
            Some("{") => {
                let mut paths = Vec::new();
                at += 1;
                loop {
                    match tokens.get(at).map(String::as_str) {
                        Some("}") => return (paths, at + 1),
                        Some(",") => at += 1,
                        None => return (paths, at),
                        _ => {
                            let (more, end) = use_tree(tokens, at, path.clone());
                            paths.extend(more);
                            at = end.max(at + 1);
                        }
                    }
                }
            }
            Some(segment) if is_ident(segment) => {
                path.push(segment.to_string());
                at += 1;
                if tokens.get(at).map(String::as_str) == Some("::") {
                    at += 1;
                } else {
                    return (vec![path], at);
                }
            }
            _ => return (vec![path], at),
        }
    }
}

/// The deepest known module `path` names, seen from `module`.
fn resolve(module: &ModPath, path: &[String], known: &BTreeSet<ModPath>) -> Option<ModPath> {
    let mut at: ModPath = Vec::new();
    let mut rest = path;
    match rest.first().map(String::as_str) {
        Some("crate") => rest = &rest[1..],
        Some("self" | "super") => {
            at = module.clone();
            while let Some(first) = rest.first() {
                match first.as_str() {
                    "self" => {}
                    "super" => {
                        at.pop()?;
                    }
                    _ => break,
                }
                rest = &rest[1..];
            }
        }
        _ => return None,
    }
    for segment in rest {
        let mut deeper = at.clone();
        deeper.push(segment.clone());
        if !known.contains(&deeper) {
            break;
        }
        at = deeper;
    }
    Some(at)
}

/// The sets of two or more nodes that reach each other (Tarjan's algorithm), each in name
/// order.
fn strongly_connected(edges: &BTreeSet<(String, String)>) -> Vec<Vec<String>> {
    let nodes: BTreeSet<&String> = edges.iter().flat_map(|(a, b)| [a, b]).collect();
    let nodes: Vec<&String> = nodes.into_iter().collect();
    let index_of = |name: &String| nodes.iter().position(|n| *n == name);
    let mut next: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    for (a, b) in edges {
        if let (Some(a), Some(b)) = (index_of(a), index_of(b)) {
            next[a].push(b);
        }
    }
    struct Walk<'a> {
        next: &'a [Vec<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        counter: usize,
        found: Vec<Vec<usize>>,
    }
    fn visit(w: &mut Walk<'_>, v: usize) {
        w.index[v] = Some(w.counter);
        w.low[v] = w.counter;
        w.counter += 1;
        w.stack.push(v);
        w.on_stack[v] = true;
        for &u in w.next[v].clone().iter() {
            match w.index[u] {
                None => {
                    visit(w, u);
                    w.low[v] = w.low[v].min(w.low[u]);
                }
                Some(i) if w.on_stack[u] => w.low[v] = w.low[v].min(i),
                Some(_) => {}
            }
        }
        if Some(w.low[v]) == w.index[v] {
            let mut set = Vec::new();
            while let Some(u) = w.stack.pop() {
                w.on_stack[u] = false;
                set.push(u);
                if u == v {
                    break;
                }
            }
            if set.len() > 1 {
                w.found.push(set);
            }
        }
    }
    let mut walk = Walk {
        next: &next,
        index: vec![None; nodes.len()],
        low: vec![0; nodes.len()],
        on_stack: vec![false; nodes.len()],
        stack: Vec::new(),
        counter: 0,
        found: Vec::new(),
    };
    for v in 0..nodes.len() {
        if walk.index[v].is_none() {
            visit(&mut walk, v);
        }
    }
    walk.found
        .into_iter()
        .map(|set| {
            let mut names: Vec<String> = set.into_iter().map(|i| nodes[i].clone()).collect();
            names.sort();
            names
        })
        .collect()
}

fn is_ident(token: &str) -> bool {
    token
        .chars()
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_')
        && token.chars().all(|c| c.is_alphanumeric() || c == '_')
}

/// Identifiers, `::` and single punctuation characters.
fn tokens(text: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_alphanumeric() || c == '_' {
            let mut word = c.to_string();
            while let Some(&d) = chars.peek() {
                if !(d.is_alphanumeric() || d == '_') {
                    break;
                }
                word.push(d);
                chars.next();
            }
            tokens.push(word);
        } else if c == ':' && chars.peek() == Some(&':') {
            chars.next();
            tokens.push("::".into());
        } else if !c.is_whitespace() {
            tokens.push(c.to_string());
        }
    }
    tokens
}

/// `text` without comments, string and character literals (each replaced by a space).
fn strip(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut n = 0;
    while n < b.len() {
        match (b[n], b.get(n + 1).copied()) {
            (b'/', Some(b'/')) => {
                while n < b.len() && b[n] != b'\n' {
                    n += 1;
                }
            }
            (b'/', Some(b'*')) => {
                let mut depth = 0;
                while n < b.len() {
                    if b[n] == b'/' && b.get(n + 1) == Some(&b'*') {
                        depth += 1;
                        n += 2;
                    } else if b[n] == b'*' && b.get(n + 1) == Some(&b'/') {
                        depth -= 1;
                        n += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        n += 1;
                    }
                }
                out.push(' ');
            }
            (b'r', Some(b'#' | b'"')) if n == 0 || !is_word_byte(b[n - 1]) => {
                let mut hashes = 0;
                let mut m = n + 1;
                while b.get(m) == Some(&b'#') {
                    hashes += 1;
                    m += 1;
                }
                if b.get(m) != Some(&b'"') {
                    out.push('r');
                    n += 1;
                    continue;
                }
                m += 1;
                let close: Vec<u8> = std::iter::once(b'"')
                    .chain(std::iter::repeat_n(b'#', hashes))
                    .collect();
                while m < b.len() && !b[m..].starts_with(&close) {
                    m += 1;
                }
                n = m + close.len();
                out.push(' ');
            }
            (b'"', _) => {
                n += 1;
                while n < b.len() && b[n] != b'"' {
                    n += if b[n] == b'\\' { 2 } else { 1 };
                }
                n += 1;
                out.push(' ');
            }
            // A character literal ('x', '\n', '\''), not a lifetime ('a).
            (b'\'', _) if is_char_literal(&b[n..]) => {
                n += 1;
                while n < b.len() && b[n] != b'\'' {
                    n += if b[n] == b'\\' { 2 } else { 1 };
                }
                n += 1;
                out.push(' ');
            }
            _ => {
                // Copy one whole UTF-8 character.
                let len = utf8_len(b[n]);
                out.push_str(&text[n..(n + len).min(b.len())]);
                n += len;
            }
        }
    }
    out
}

fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

fn is_char_literal(b: &[u8]) -> bool {
    match b.get(1) {
        Some(b'\\') => true,
        Some(_) => {
            let len = utf8_len(b[1]);
            b.get(1 + len) == Some(&b'\'')
        }
        None => false,
    }
}

fn utf8_len(first: u8) -> usize {
    match first {
        0xf0..=0xff => 4,
        0xe0..=0xef => 3,
        0xc0..=0xdf => 2,
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crate_with(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("temp dir");
        for (path, text) in files {
            let file = dir.path().join(path);
            std::fs::create_dir_all(file.parent().expect("a parent")).expect("dirs");
            std::fs::write(file, text).expect("write");
        }
        dir
    }

    #[test]
    fn a_circle_between_siblings_is_found_and_parents_and_children_are_not_one() {
        let dir = crate_with(&[
            ("lib.rs", "mod a;\nmod b;\nmod c;\n"),
            ("a.rs", "use crate::b::Thing;\nmod inner;\n"),
            (
                "a/inner.rs",
                "use super::super::c::X; // crate::b in a comment\n",
            ),
            // A parent's item used by its child, and a child's by its parent: no circle.
            (
                "b.rs",
                "use crate::{c::{self, Y}, a::inner::Z};\nmod leaf;\nuse leaf::W;\n",
            ),
            (
                "b/leaf.rs",
                "use super::Thing;\nfn f() { let s = \"crate::c::Q\"; }\n",
            ),
            ("c.rs", "fn g() -> &'static str { crate::d::x() }\n"),
        ]);
        let found = circles(&dir.path().join("lib.rs")).expect("read");
        assert_eq!(
            found,
            vec![Circle {
                parent: vec![],
                members: vec!["a".into(), "b".into()]
            }],
            "{found:?}"
        );
        assert_eq!(found[0].to_string(), "crate: a ↔ b");
    }

    #[test]
    fn nested_siblings_and_a_three_way_circle() {
        let dir = crate_with(&[
            ("main.rs", "mod store;\n"),
            ("store/mod.rs", "pub mod x;\npub mod y;\npub mod z;\n"),
            ("store/x.rs", "use super::y::A;\n"),
            ("store/y.rs", "fn f() { crate::store::z::g(); }\n"),
            (
                "store/z.rs",
                "use r#\"not a path\"#;\nuse self::super::x;\n",
            ),
        ]);
        let found = circles(&dir.path().join("main.rs")).expect("read");
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].to_string(), "crate::store: x ↔ y ↔ z");
    }
}
