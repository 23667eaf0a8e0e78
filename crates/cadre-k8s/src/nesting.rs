//! How deep a YAML text nests its collections, found by one pass over the text before any
//! YAML parsing.
//!
//! **Why**: the YAML parser's cost grows with the square of the nesting depth (100,000
//! opening brackets `[[[[...` take minutes), and the deserializer's own recursion limit
//! only comes after the parser has done that work. **Given** a file's text. **Decided**:
//! the first document and line where flow collections (`[`, `{`) and block collections
//! (more indented lines, `- ` entries) together nest deeper than a limit. **Must hold**: the
//! pass is linear in the text and stops at the first excess; it never counts what is not
//! structure (quoted scalars, comments, block scalars' `|`/`>` content, brackets inside a
//! plain scalar of block context such as `echo [a]`).
//!
//! The count is an estimate of the true depth, never far from it: a block sequence written
//! at its parent key's indentation (`key:` then `- a` below it) adds no level, and a
//! scalar after `- ` counts as one. Real manifests nest about 15 levels by this count
//! (the deepest of the corpus in `shared/corpus/k8s`: see the tests), far below
//! [`MAX_NESTING_DEPTH`].

/// The deepest nesting of collections a manifest may have.
pub const MAX_NESTING_DEPTH: usize = 64;

/// Where a text first nests deeper than a limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TooDeep {
    /// 1-based document of the file (empty documents count, as in the other errors).
    pub doc: usize,
    /// 1-based line.
    pub line: usize,
}

/// A block scalar (`|` or `>`) being skipped: the indentation of the line that opened it,
/// and its content's once the first non-empty line said.
struct BlockScalar {
    parent: usize,
    content: Option<usize>,
}

/// How deep `text` nests its collections, by this module's count (the deepest of all its
/// documents).
pub fn nesting_depth(text: &str) -> usize {
    find_too_deep(text, usize::MAX).1
}

/// The first document and line where `text` nests collections deeper than `limit`, or
/// `None`. Also the deepest nesting found, for the tests.
pub(crate) fn find_too_deep(text: &str, limit: usize) -> (Option<TooDeep>, usize) {
    let mut doc = 1;
    // A document marker or content has been seen: the next `---` starts another document.
    let mut started = false;
    // Columns of the open block collections, increasing.
    let mut block: Vec<usize> = Vec::new();
    let mut flow = 0usize;
    let mut quote: Option<u8> = None;
    let mut scalar: Option<BlockScalar> = None;
    // The outermost flow collection is itself the node a block column was counted for
    // (`[a, b]` alone on its line, or after `- `): not a level of its own.
    let mut flow_on_column = false;
    let mut deepest = 0;
    for (i, line) in text.lines().enumerate() {
        let bytes = line.as_bytes();
        let indent = bytes.iter().take_while(|&&b| b == b' ').count();
        let blank = bytes[indent..].iter().all(|b| b.is_ascii_whitespace());
        if let Some(s) = &mut scalar {
            if blank {
                continue;
            }
            match s.content {
                None if indent > s.parent => {
                    s.content = Some(indent);
                    continue;
                }
                Some(c) if indent >= c => continue,
                _ => scalar = None,
            }
        }
        let mut pos = indent;
        // The column this line's node was counted at, when it was.
        let mut counted_at = None;
        if quote.is_none() && flow == 0 {
            let marker = |m: &[u8]| {
                bytes.starts_with(m) && bytes.get(3).is_none_or(|b| b.is_ascii_whitespace())
            };
            if marker(b"---") {
                if started {
                    doc += 1;
                }
                started = true;
                block.clear();
                pos = 3;
            } else if marker(b"...") || bytes.first() == Some(&b'%') {
                continue;
            }
            if blank
                || bytes
                    .get(pos..)
                    .is_some_and(|r| r.trim_ascii_start().starts_with(b"#"))
            {
                continue;
            }
            if pos == indent {
                started = true;
                // The line's node, then each `- ` or `? ` entry's on it.
                let mut cols = vec![indent];
                while let Some(rest) = bytes.get(pos..) {
                    let entry = matches!(rest.first(), Some(b'-' | b'?'))
                        && rest.get(1).is_none_or(|b| *b == b' ');
                    if !entry {
                        break;
                    }
                    pos += 1;
                    pos += bytes[pos..].iter().take_while(|&&b| b == b' ').count();
                    if pos < bytes.len() {
                        cols.push(pos);
                    }
                }
                counted_at = cols.last().copied();
                for col in cols {
                    while block.last().is_some_and(|&top| top > col) {
                        block.pop();
                    }
                    if block.last() != Some(&col) {
                        block.push(col);
                    }
                }
                deepest = deepest.max(block.len());
                if block.len() > limit {
                    return (Some(TooDeep { doc, line: i + 1 }), deepest);
                }
            }
        }
        // Whether a node may start here: at the line's content, and after `[`, `{`, `,`
        // and a mapping's `: `.
        let mut node_start = true;
        while pos < bytes.len() {
            let b = bytes[pos];
            let next = bytes.get(pos + 1).copied();
            if let Some(q) = quote {
                match b {
                    b'\\' if q == b'"' => pos += 1,
                    b'\'' if q == b'\'' && next == Some(b'\'') => pos += 1,
                    _ if b == q => {
                        quote = None;
                        node_start = false;
                    }
                    _ => {}
                }
                pos += 1;
                continue;
            }
            match b {
                b'#' if pos == 0 || bytes[pos - 1].is_ascii_whitespace() => break,
                b'"' | b'\'' if node_start => quote = Some(b),
                b'[' | b'{' if node_start || flow > 0 => {
                    if flow == 0 {
                        flow_on_column = counted_at == Some(pos);
                    }
                    flow += 1;
                    let depth = block.len() + flow - usize::from(flow_on_column);
                    deepest = deepest.max(depth);
                    if depth > limit {
                        return (Some(TooDeep { doc, line: i + 1 }), deepest);
                    }
                    node_start = true;
                }
                b']' | b'}' if flow > 0 => {
                    flow -= 1;
                    node_start = false;
                }
                b',' if flow > 0 => node_start = true,
                b':' if next.is_none_or(|n| {
                    n.is_ascii_whitespace() || (flow > 0 && b",[]{}".contains(&n))
                }) =>
                {
                    node_start = true
                }
                b'|' | b'>' if node_start && flow == 0 => {
                    scalar = Some(BlockScalar {
                        parent: indent,
                        content: None,
                    });
                    break;
                }
                // Anchors and tags come before a node; an alias is one.
                b'&' | b'!' if node_start => {
                    pos += bytes[pos..]
                        .iter()
                        .take_while(|b| !b.is_ascii_whitespace())
                        .count();
                    continue;
                }
                b' ' | b'\t' => {}
                _ => node_start = false,
            }
            pos += 1;
        }
    }
    (None, deepest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn depth(text: &str) -> usize {
        nesting_depth(text)
    }

    #[test]
    fn structure_is_counted_and_scalars_comments_and_block_text_are_not() {
        assert_eq!(depth("a: 1\n"), 1);
        assert_eq!(depth("a:\n  b:\n    c: 1\n"), 3);
        assert_eq!(depth("a: [1, [2, {b: [3]}]]\n"), 5);
        assert_eq!(depth("- - - x\n"), 4);
        assert_eq!(depth("[[1]]\n"), 2);
        assert_eq!(depth("- [1, [2]]\n"), 3);
        assert_eq!(depth("a: [1]\n"), 2);
        assert_eq!(
            depth("a: echo [x] {y}\nb: '[[[[' # [[[[\nc: \"[[\\\"[[\"\n"),
            1
        );
        assert_eq!(
            depth("script: |\n  if [ x ]; then\n      [[[[[[\n    fi\nnext: 1\n"),
            1
        );
        assert_eq!(depth("a:\n  - b: 1\n    c:\n      - d\n"), 5);
    }

    #[test]
    fn documents_and_lines_are_numbered_as_the_parser_numbers_them() {
        let deep = "[".repeat(10);
        let text = format!("a: 1\n---\n# c\n---\nb: 1\nc: {deep}\n");
        assert_eq!(find_too_deep(&text, 5).0, Some(TooDeep { doc: 3, line: 6 }));
        let text = format!("---\na: 1\n---\n{deep}\n");
        assert_eq!(find_too_deep(&text, 5).0, Some(TooDeep { doc: 2, line: 4 }));
    }
}
