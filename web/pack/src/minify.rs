//! The comments and the layout of the text assets, dropped before they are
//! hashed and compressed: every visit downloads them, nobody reads them
//! there (the sources in `web/static/` keep them). ~1.2 KB of the first
//! load in brotli (docs/benchmarks.md, "Yew as Yew is written").
//!
//! Deliberately small: no parsing beyond what keeps strings intact. CSS
//! loses its comments and the whitespace that is not inside a string and
//! does not separate two words; JavaScript only loses whole comment lines
//! (`// …` and `/** … */` blocks that begin a line), never inside a
//! template literal, so no statement changes.

/// `text` without comments, with each run of whitespace outside strings
/// made one space, and none around `{`, `}`, `;`, `,`.
pub(crate) fn css(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    let mut quote: Option<char> = None;
    let mut space = false;
    while let Some(c) = chars.next() {
        if let Some(q) = quote {
            out.push(c);
            if c == '\\' {
                out.extend(chars.next());
            } else if c == q {
                quote = None;
            }
            continue;
        }
        if c == '/' && chars.peek() == Some(&'*') {
            chars.next();
            let mut last = ' ';
            for c in chars.by_ref() {
                if last == '*' && c == '/' {
                    break;
                }
                last = c;
            }
            space = true;
            continue;
        }
        if c.is_whitespace() {
            space = true;
            continue;
        }
        let tight = |c: char| matches!(c, '{' | '}' | ';' | ',');
        if space && !out.is_empty() && !tight(c) && !out.ends_with(tight) {
            out.push(' ');
        }
        space = false;
        if c == '"' || c == '\'' {
            quote = Some(c);
        }
        out.push(c);
    }
    out
}

/// `text` without its whole-line comments.
pub(crate) fn js(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_template = false;
    let mut in_doc = false;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_start();
        if in_doc {
            // The comment ends on this line: what follows it stays.
            if let Some(end) = line.find("*/") {
                in_doc = false;
                let rest = &line[end + 2..];
                if !rest.trim().is_empty() {
                    out.push_str(rest);
                }
            }
            continue;
        }
        if !in_template {
            if trimmed.starts_with("//") {
                continue;
            }
            if trimmed.starts_with("/*") {
                match trimmed.find("*/") {
                    None => {
                        in_doc = true;
                        continue;
                    }
                    Some(end) if trimmed[end + 2..].trim().is_empty() => continue,
                    // Code after the comment: the line stays as it is.
                    Some(_) => {}
                }
            }
        }
        // A line with an odd number of backticks opens or closes a template
        // literal: what follows it is text, kept as it is.
        if line.matches('`').count() % 2 == 1 {
            in_template = !in_template;
        }
        out.push_str(line);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn css_keeps_strings_and_the_spaces_that_separate_words() {
        let text = "/* the page */\n:root {\n  --sans: system-ui, \"Segoe  UI\", sans-serif; /* fonts */\n}\n\
                    .a  .b:hover > c { margin: 0 auto; grid-template-areas: \"x  y\"\n \"z z\"; }\n\
                    @media (max-width: 900px) { .c { width: calc(100% - 2px) } }\n";
        assert_eq!(
            css(text),
            ":root{--sans: system-ui,\"Segoe  UI\",sans-serif;}\
             .a .b:hover > c{margin: 0 auto;grid-template-areas: \"x  y\" \"z z\";}\
             @media (max-width: 900px){.c{width: calc(100% - 2px)}}"
        );
    }

    #[test]
    fn js_loses_only_whole_comment_lines() {
        let text = "// Loads the app.\nconst a = '//not a comment';\n/**\n * doc\n */\nexport function f() {\n    // inside\n    return `x\n// kept: inside a template\n`; // trailing stays\n}\n/* one line */\n/* a */ f();\n/*\n */ g();\n";
        assert_eq!(
            js(text),
            "const a = '//not a comment';\nexport function f() {\n    return `x\n// kept: inside a template\n`; // trailing stays\n}\n/* a */ f();\n g();\n"
        );
    }
}
