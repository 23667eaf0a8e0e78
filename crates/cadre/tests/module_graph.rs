//! No crate of the workspace has modules that import each other in a circle: within each
//! crate, the top-level modules (`src/x.rs`, `src/x/...`) and their references to one
//! another (`use crate::y`, `crate::y::...`, `super::y` that reaches the crate root, `use
//! crate::{y, z::...}`) form a graph without a cycle. A cycle fails the test, which prints
//! it (`cadre-core: alloc -> cluster -> alloc`).
//!
//! The source is read as text: comments, string and character literals are dropped first,
//! and `super::` is resolved from the file's module path and any inline `mod name { ... }`
//! around it. Test modules count: a module's tests are part of it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The source without comments and with string and character literals emptied, so that
/// neither their words nor their braces are taken for code.
fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c == b'r'
            && (b.get(i + 1) == Some(&b'"') || b.get(i + 1) == Some(&b'#'))
            && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_'))
        {
            // A raw string: r"...", r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&b'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&b'"') {
                out.push('r');
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= b.len() {
                    break;
                }
                if b[j] == b'"'
                    && b[j + 1..]
                        .iter()
                        .take(hashes)
                        .filter(|&&h| h == b'#')
                        .count()
                        == hashes
                {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j;
        } else if c == b'"' {
            let start = i + 1;
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            let inside = text.get(start..i.min(b.len())).unwrap_or("");
            i += 1;
            // A path in an attribute (`#[serde(with = "crate::policy::secs")]`) is code.
            let is_path = (inside.starts_with("crate::") || inside.starts_with("super::"))
                && inside.chars().all(|c| is_ident(c) || c == ':');
            if is_path {
                out.push_str(inside);
            } else {
                out.push_str("\"\"");
            }
        } else if c == b'\'' {
            // A character literal ('x', '\n', '\u{7f}'), or a lifetime ('a), kept.
            let end = if b.get(i + 1) == Some(&b'\\') {
                b.get(i + 3..)
                    .and_then(|r| r.iter().position(|&x| x == b'\''))
                    .map(|p| i + 3 + p)
            } else {
                let ch = text[i + 1..].chars().next().map_or(1, char::len_utf8);
                (b.get(i + 1 + ch) == Some(&b'\'')).then_some(i + 1 + ch)
            };
            match end {
                Some(e) => {
                    out.push_str("' '");
                    i = e + 1;
                }
                None => {
                    out.push('\'');
                    i += 1;
                }
            }
        } else {
            let ch = text[i..].chars().next().expect("a character");
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The first path segment of each item of a use-group's inside (`a::X, b::{Y, Z}, c`).
fn group_heads(inside: &str) -> Vec<String> {
    let mut heads = Vec::new();
    let mut depth = 0;
    let mut item = String::new();
    for c in inside.chars().chain(std::iter::once(',')) {
        match c {
            '{' => {
                depth += 1;
                item.push(c);
            }
            '}' => {
                depth -= 1;
                item.push(c);
            }
            ',' if depth == 0 => {
                let head: String = item.trim().chars().take_while(|&c| is_ident(c)).collect();
                if !head.is_empty() {
                    heads.push(head);
                }
                item.clear();
            }
            _ => item.push(c),
        }
    }
    heads
}

/// What follows a path prefix at `rest`: the names it reaches at that level.
fn heads_after(rest: &str) -> Vec<String> {
    if let Some(group) = rest.strip_prefix('{') {
        let mut depth = 1;
        let end = group
            .char_indices()
            .find(|&(_, c)| {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    _ => {}
                }
                depth == 0
            })
            .map_or(group.len(), |(i, _)| i);
        group_heads(&group[..end])
    } else {
        let head: String = rest.chars().take_while(|&c| is_ident(c)).collect();
        if head.is_empty() {
            Vec::new()
        } else {
            vec![head]
        }
    }
}

/// The crate-level modules that the code of a file, whose module path is `path` (`[]` for
/// the crate root), names.
fn references(code: &str, path: &[String]) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    // Inline modules open around the current position: (name, brace depth inside).
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut pending_mod: Option<String> = None;
    let chars: Vec<(usize, char)> = code.char_indices().collect();
    let mut k = 0;
    while k < chars.len() {
        let (at, c) = chars[k];
        let boundary = at == 0 || !code[..at].ends_with(is_ident);
        match c {
            '{' => {
                depth += 1;
                if let Some(name) = pending_mod.take() {
                    inline.push((name, depth));
                }
            }
            '}' => {
                if inline.last().is_some_and(|&(_, d)| d == depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
            }
            ';' => pending_mod = None,
            _ if boundary && code[at..].starts_with("mod ") => {
                let name: String = code[at + 4..]
                    .trim_start()
                    .chars()
                    .take_while(|&c| is_ident(c))
                    .collect();
                pending_mod = Some(name);
            }
            _ if boundary && code[at..].starts_with("crate::") => {
                found.extend(heads_after(&code[at + "crate::".len()..]));
            }
            _ if boundary && code[at..].starts_with("super::") => {
                let mut rest = &code[at..];
                let mut ups = 0;
                while let Some(r) = rest.strip_prefix("super::") {
                    ups += 1;
                    rest = r.trim_start();
                }
                let here: Vec<&String> = path.iter().chain(inline.iter().map(|(n, _)| n)).collect();
                if ups == here.len() {
                    found.extend(heads_after(rest));
                }
                // Skip the `super::` run just read.
                let skip = code[at..].len() - rest.len();
                while k < chars.len() && chars[k].0 < at + skip {
                    k += 1;
                }
                continue;
            }
            _ => {}
        }
        k += 1;
    }
    found
}

/// Every `.rs` file under `dir`, with its module path below the crate root.
fn files(src: &Path, dir: &Path, out: &mut Vec<(PathBuf, Vec<String>)>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            files(src, &p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            let rel = p.strip_prefix(src).expect("below src");
            let mut path: Vec<String> = rel
                .with_extension("")
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if path.last().is_some_and(|l| l == "mod") {
                path.pop();
            }
            if path == ["lib"] || path == ["main"] {
                path.clear();
            }
            out.push((p, path));
        }
    }
}

/// The graph of a crate's top-level modules: each module and the modules it names.
fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut all = Vec::new();
    files(src, src, &mut all);
    let modules: BTreeSet<String> = all
        .iter()
        .filter_map(|(_, path)| path.first().cloned())
        .collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = modules
        .iter()
        .map(|m| (m.clone(), BTreeSet::new()))
        .collect();
    for (file, path) in &all {
        let Some(me) = path.first() else { continue };
        let text = std::fs::read_to_string(file)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", file.display()));
        for other in references(&code_only(&text), path) {
            if modules.contains(&other) && other != *me {
                graph.get_mut(me).expect("a module").insert(other);
            }
        }
    }
    graph
}

/// The groups of modules that reach one another (the graph's strongly connected components
/// of more than one module), each in name order.
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<BTreeSet<String>> {
    let reach = |from: &str| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.to_string()];
        while let Some(m) = todo.pop() {
            for next in &graph[&m] {
                if seen.insert(next.clone()) {
                    todo.push(next.clone());
                }
            }
        }
        seen
    };
    let reached: BTreeMap<&String, BTreeSet<String>> =
        graph.keys().map(|m| (m, reach(m))).collect();
    let mut out: Vec<BTreeSet<String>> = Vec::new();
    for m in graph.keys() {
        if out.iter().any(|c| c.contains(m)) {
            continue;
        }
        let circle: BTreeSet<String> = reached[m]
            .iter()
            .filter(|o| reached[*o].contains(m))
            .cloned()
            .collect();
        if circle.len() > 1 {
            out.push(circle);
        }
    }
    out
}

/// One cycle through the modules of `circle`, from its first module back to it.
fn a_cycle(graph: &BTreeMap<String, BTreeSet<String>>, circle: &BTreeSet<String>) -> Vec<String> {
    let first = circle.first().expect("a module");
    // Breadth-first from the first module back to it, within the circle: a shortest cycle.
    let mut came_from: BTreeMap<String, String> = BTreeMap::new();
    let mut todo = std::collections::VecDeque::from([first.clone()]);
    while let Some(m) = todo.pop_front() {
        for next in graph[&m].iter().filter(|n| circle.contains(*n)) {
            if next == first {
                let mut path = vec![first.clone(), m.clone()];
                let mut at = m.clone();
                while let Some(prev) = came_from.get(&at) {
                    path.push(prev.clone());
                    at = prev.clone();
                }
                path.reverse();
                return path;
            }
            if !came_from.contains_key(next) && next != first {
                came_from.insert(next.clone(), m.clone());
                todo.push_back(next.clone());
            }
        }
    }
    unreachable!("the modules of a circle reach one another")
}

#[test]
fn no_crate_has_modules_that_import_each_other_in_a_circle() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut names: Vec<PathBuf> = std::fs::read_dir(&crates)
        .expect("the crates directory")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.join("src").is_dir())
        .collect();
    names.sort();
    assert!(names.len() >= 10, "only {names:?} found");
    // Every crate of the workspace is read, new ones included.
    let manifest = std::fs::read_to_string(crates.join("..").join("Cargo.toml"))
        .expect("the workspace's Cargo.toml");
    for member in manifest
        .split('"')
        .filter_map(|s| s.strip_prefix("crates/"))
    {
        assert!(
            names
                .iter()
                .any(|n| n.file_name().is_some_and(|f| f == member)),
            "the workspace's crate {member} is not read (found {names:?})"
        );
    }
    let cycles: Vec<String> = names
        .iter()
        .filter_map(|dir| {
            let name = dir
                .file_name()
                .expect("a name")
                .to_string_lossy()
                .into_owned();
            let graph = module_graph(&dir.join("src"));
            let found: Vec<String> = circles(&graph)
                .iter()
                .map(|c| {
                    let members: Vec<&str> = c.iter().map(String::as_str).collect();
                    format!(
                        "{name}: {} (for one: {})",
                        members.join(", "),
                        a_cycle(&graph, c).join(" -> ")
                    )
                })
                .collect();
            (!found.is_empty()).then(|| found.join("\n"))
        })
        .collect();
    assert!(
        cycles.is_empty(),
        "modules that import each other in a circle (give the shared type a module of its \
         own):\n{}",
        cycles.join("\n")
    );
}

#[test]
fn the_reader_sees_every_form_of_reference() {
    let code = code_only(
        "use crate::{alloc::X, cluster::{Y, Z}};\n\
         use super::time::Dur; // crate::commented\n\
         #[serde(with = \"crate::policy::secs\")] struct S;\n\
         fn f() { let s = \"crate::quoted {\"; crate::job::JobId(1); let c = '{'; }\n\
         mod tests { use super::*; use super::super::quota::Q; }\n",
    );
    let found = references(&code, &["placement".to_string()]);
    assert_eq!(
        found,
        ["alloc", "cluster", "job", "policy", "quota", "time"]
            .map(String::from)
            .into()
    );
    // One level deeper (src/scheduler/free.rs), `super::` is the scheduler itself.
    let found = references(
        &code_only("use super::mod_item; use super::super::backfill;"),
        &["scheduler".to_string(), "free".to_string()],
    );
    assert_eq!(found, ["backfill"].map(String::from).into());
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    g.insert("a".into(), ["b".to_string()].into());
    g.insert("b".into(), ["a".to_string()].into());
    g.insert("c".into(), ["a".to_string()].into());
    let found = circles(&g);
    assert_eq!(found, vec![["a".to_string(), "b".to_string()].into()]);
    assert_eq!(a_cycle(&g, &found[0]), ["a", "b", "a"].map(String::from));
}
