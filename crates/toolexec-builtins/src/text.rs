//! `text:*`: case conversion, splitting, regex replacement and counting.

use regex::RegexBuilder;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use toolexec::{LocalTool, ToolAnnotations, ToolDocs, ToolError, ToolExample};

/// Longest regular expression accepted.
const MAX_PATTERN_LEN: usize = 10_000;
/// Largest compiled regular expression.
const REGEX_SIZE_LIMIT: usize = 1 << 20;
/// Longest text a replacement may produce.
const MAX_OUTPUT_BYTES: usize = 16 << 20;

/// A target case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
enum Case {
    Upper,
    Lower,
    Title,
    Snake,
    Kebab,
    Camel,
    Pascal,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct CaseArgs {
    /// The text to convert.
    text: String,
    /// The target case: "upper" (HELLO WORLD), "lower" (hello world), "title"
    /// (Hello World), "snake" (hello_world), "kebab" (hello-world), "camel"
    /// (helloWorld) or "pascal" (HelloWorld).
    to: Case,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct SplitArgs {
    /// The text to split.
    text: String,
    /// The exact (not regex) separator; an empty separator splits into characters.
    separator: String,
    /// At most this many parts: the last part holds the unsplit rest.
    #[schemars(range(min = 1, max = 100_000))]
    limit: Option<usize>,
}

fn yes() -> bool {
    true
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct RegexReplaceArgs {
    /// The text to search.
    text: String,
    /// A regular expression (Rust `regex` syntax, similar to RE2/PCRE without
    /// look-around or backreferences). Inline flags work, e.g. `(?i)` for
    /// case-insensitive and `(?m)` for multi-line `^`/`$`.
    #[schemars(length(max = 10_000))]
    pattern: String,
    /// The replacement; `$1` or `${1}` insert a capture group, `${name}` a
    /// named group (`(?P<name>...)`), `$$` a literal dollar sign.
    replacement: String,
    /// Replace every match (default true) or only the first.
    #[serde(default = "yes")]
    all: bool,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct WordCountArgs {
    /// The text to measure.
    text: String,
}

/// Converted text.
#[derive(Serialize, JsonSchema)]
struct TextResult {
    /// The converted text.
    text: String,
}

/// Split parts.
#[derive(Serialize, JsonSchema)]
struct SplitResult {
    /// The parts, in order (empty parts are kept).
    parts: Vec<String>,
}

/// The result of a replacement.
#[derive(Serialize, JsonSchema)]
struct ReplaceResult {
    /// The text after replacement.
    text: String,
    /// How many matches were replaced.
    replacements: usize,
}

/// Counts.
#[derive(Serialize, JsonSchema)]
struct WordCount {
    /// Words: runs of non-whitespace characters.
    words: usize,
    /// Characters (Unicode scalar values, not bytes).
    characters: usize,
    /// Lines; a final line break does not start a new line, and empty text has 0.
    lines: usize,
}

/// Splits into words at non-alphanumeric characters and case changes
/// (`helloWorld`, `HTTPServer` → `HTTP`, `Server`); digits stay with the
/// letters before them.
fn words(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut words = Vec::new();
    let mut cur = String::new();
    for (i, &c) in chars.iter().enumerate() {
        if !c.is_alphanumeric() {
            if !cur.is_empty() {
                words.push(std::mem::take(&mut cur));
            }
            continue;
        }
        if !cur.is_empty() {
            let prev = chars[i - 1];
            let next_lower = chars.get(i + 1).is_some_and(|n| n.is_lowercase());
            let boundary = ((prev.is_lowercase() || prev.is_numeric()) && c.is_uppercase())
                || (prev.is_uppercase() && c.is_uppercase() && next_lower);
            if boundary {
                words.push(std::mem::take(&mut cur));
            }
        }
        cur.push(c);
    }
    if !cur.is_empty() {
        words.push(cur);
    }
    words
}

fn capitalize(word: &str) -> String {
    let mut chars = word.chars();
    match chars.next() {
        Some(first) => first
            .to_uppercase()
            .chain(chars.flat_map(char::to_lowercase))
            .collect(),
        None => String::new(),
    }
}

fn convert_case(text: &str, to: Case) -> String {
    match to {
        Case::Upper => text.to_uppercase(),
        Case::Lower => text.to_lowercase(),
        Case::Title => words(text)
            .iter()
            .map(|w| capitalize(w))
            .collect::<Vec<_>>()
            .join(" "),
        Case::Snake => words(text)
            .iter()
            .map(|w| w.to_lowercase())
            .collect::<Vec<_>>()
            .join("_"),
        Case::Kebab => words(text)
            .iter()
            .map(|w| w.to_lowercase())
            .collect::<Vec<_>>()
            .join("-"),
        Case::Camel => words(text)
            .iter()
            .enumerate()
            .map(|(i, w)| {
                if i == 0 {
                    w.to_lowercase()
                } else {
                    capitalize(w)
                }
            })
            .collect(),
        Case::Pascal => words(text).iter().map(|w| capitalize(w)).collect(),
    }
}

fn split(text: &str, separator: &str, limit: Option<usize>) -> Result<Vec<String>, ToolError> {
    let limit = match limit {
        Some(0) => return Err(ToolError::new("limit must be at least 1")),
        Some(n) => n,
        None => usize::MAX,
    };
    if separator.is_empty() {
        let mut parts: Vec<String> = Vec::new();
        let mut rest = text;
        while let Some(c) = rest.chars().next() {
            if parts.len() + 1 == limit {
                parts.push(rest.to_owned());
                return Ok(parts);
            }
            parts.push(c.to_string());
            rest = &rest[c.len_utf8()..];
        }
        return Ok(parts);
    }
    Ok(text.splitn(limit, separator).map(str::to_owned).collect())
}

fn regex_replace(args: &RegexReplaceArgs) -> Result<ReplaceResult, ToolError> {
    if args.pattern.len() > MAX_PATTERN_LEN {
        return Err(ToolError::new(format!(
            "the pattern is longer than {MAX_PATTERN_LEN} bytes"
        )));
    }
    let re = RegexBuilder::new(&args.pattern)
        .size_limit(REGEX_SIZE_LIMIT)
        .dfa_size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|e| {
            ToolError::new(format!(
                "invalid regular expression {:?}: {e}",
                args.pattern
            ))
        })?;
    let text = &args.text;
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    let mut replacements = 0;
    for caps in re.captures_iter(text) {
        let Some(m) = caps.get(0) else { continue };
        out.push_str(&text[last..m.start()]);
        caps.expand(&args.replacement, &mut out);
        last = m.end();
        replacements += 1;
        if out.len() > MAX_OUTPUT_BYTES {
            return Err(ToolError::new(format!(
                "the replaced text would be longer than {} MiB",
                MAX_OUTPUT_BYTES >> 20
            )));
        }
        if !args.all {
            break;
        }
    }
    out.push_str(&text[last..]);
    Ok(ReplaceResult {
        text: out,
        replacements,
    })
}

/// The `text:*` tools.
pub(crate) fn tools() -> Vec<LocalTool> {
    vec![
        LocalTool::new("text:case", |a: CaseArgs| async move {
            Ok::<_, ToolError>(TextResult {
                text: convert_case(&a.text, a.to),
            })
        })
        .title("Change case")
        .description(
            "Converts text to another case. \"upper\" and \"lower\" change every letter and keep \
             everything else as is. \"title\", \"snake\", \"kebab\", \"camel\" and \"pascal\" first \
             split the text into words (at spaces, punctuation, underscores, hyphens and case \
             changes, so \"parseHTTPResponse\" is parse, HTTP, Response), then join them in the \
             target style, dropping the punctuation.",
        )
        .tags(["text", "case", "string", "format", "identifier"])
        .annotations(ToolAnnotations::pure())
        .docs(
            ToolDocs::new("Converts text to upper, lower, title, snake, kebab, camel or pascal case")
                .note("Letters are Unicode-aware: \"straße\" in upper case is \"STRASSE\".")
                .note("Digits stay attached to the word before them: \"version2Beta\" in snake case is \"version2_beta\".")
                .example(
                    ToolExample::new("To snake case", json!({"text": "parseHTTPResponse", "to": "snake"}))
                        .result(json!({"text": "parse_http_response"})),
                )
                .example(
                    ToolExample::new("To camel case", json!({"text": "user first-name", "to": "camel"}))
                        .result(json!({"text": "userFirstName"})),
                )
                .example(
                    ToolExample::new("To title case", json!({"text": "the_quick brown-fox", "to": "title"}))
                        .result(json!({"text": "The Quick Brown Fox"})),
                ),
        ),
        LocalTool::new("text:split", |a: SplitArgs| async move {
            split(&a.text, &a.separator, a.limit).map(|parts| SplitResult { parts })
        })
        .title("Split text")
        .description(
            "Splits text at every occurrence of an exact separator string and returns the parts. \
             Empty parts are kept (\"a,,b\" gives \"a\", \"\", \"b\"). An empty separator splits \
             into single characters. With limit n, at most n parts are returned and the last one \
             holds the rest of the text unsplit.",
        )
        .tags(["text", "split", "string", "tokenize", "csv"])
        .annotations(ToolAnnotations::pure())
        .docs(
            ToolDocs::new("Splits text at a separator")
                .note("The separator is matched literally; use text:regex_replace for patterns.")
                .example(
                    ToolExample::new("Split a list", json!({"text": "a,b,,c", "separator": ","}))
                        .result(json!({"parts": ["a", "b", "", "c"]})),
                )
                .example(
                    ToolExample::new(
                        "Split off the first field",
                        json!({"text": "key=value=more", "separator": "=", "limit": 2}),
                    )
                    .result(json!({"parts": ["key", "value=more"]})),
                ),
        ),
        LocalTool::new("text:regex_replace", |a: RegexReplaceArgs| async move { regex_replace(&a) })
            .title("Regex replace")
            .description(
                "Replaces matches of a regular expression in text and returns the new text with the \
                 number of replacements. By default every match is replaced; set all to false to \
                 replace only the first. The replacement may refer to capture groups: $1 or ${1} \
                 by number, ${name} by name, $$ for a literal dollar sign. An invalid pattern is an \
                 error that explains what is wrong with it.",
            )
            .tags(["text", "regex", "replace", "substitute", "string"])
            .annotations(ToolAnnotations::pure())
            .docs(
                ToolDocs::new("Replaces regular expression matches in text")
                    .note(
                        "Matching is guaranteed linear time (Rust regex crate): no look-around and \
                         no backreferences in patterns.",
                    )
                    .note(
                        "Write ${1}x rather than $1x: a group name continues as long as letters, \
                         digits and underscores follow the $.",
                    )
                    .note("Use (?i) at the start of the pattern to ignore case.")
                    .example(
                        ToolExample::new(
                            "Reformat dates",
                            json!({
                                "text": "from 2024-03-10 to 2024-04-01",
                                "pattern": "(\\d{4})-(\\d{2})-(\\d{2})",
                                "replacement": "$3/$2/$1"
                            }),
                        )
                        .result(json!({"text": "from 10/03/2024 to 01/04/2024", "replacements": 2})),
                    )
                    .example(
                        ToolExample::new(
                            "Collapse whitespace once",
                            json!({"text": "a   b   c", "pattern": "\\s+", "replacement": " ", "all": false}),
                        )
                        .result(json!({"text": "a b   c", "replacements": 1})),
                    ),
            ),
        LocalTool::new("text:word_count", |a: WordCountArgs| async move {
            Ok::<_, ToolError>(WordCount {
                words: a.text.split_whitespace().count(),
                characters: a.text.chars().count(),
                lines: a.text.lines().count(),
            })
        })
        .title("Count words")
        .description(
            "Counts the words (runs of non-whitespace characters), characters (Unicode scalar \
             values, so \"é\" is 1 even though it takes 2 bytes in UTF-8) and lines of a text.",
        )
        .tags(["text", "count", "words", "length", "statistics"])
        .annotations(ToolAnnotations::pure())
        .docs(
            ToolDocs::new("Counts words, characters and lines")
                .note("Lines end at \\n or \\r\\n; a trailing line break does not add an empty line.")
                .example(
                    ToolExample::new("Two lines", json!({"text": "Hello, world!\nBye now."}))
                        .result(json!({"words": 4, "characters": 22, "lines": 2})),
                ),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cases() {
        let c = |t, to| convert_case(t, to);
        assert_eq!(c("parseHTTPResponse", Case::Snake), "parse_http_response");
        assert_eq!(c("Hello World", Case::Kebab), "hello-world");
        assert_eq!(c("hello_world", Case::Pascal), "HelloWorld");
        assert_eq!(c("version2Beta", Case::Snake), "version2_beta");
        assert_eq!(c("  --  ", Case::Camel), "");
        assert_eq!(c("straße", Case::Upper), "STRASSE");
        assert_eq!(c("ÉCOLE normale", Case::Title), "École Normale");
    }

    #[test]
    fn splitting() {
        assert_eq!(split("abc", "", None).unwrap(), ["a", "b", "c"]);
        assert_eq!(split("abc", "", Some(2)).unwrap(), ["a", "bc"]);
        assert_eq!(split("", ",", None).unwrap(), [""]);
        assert_eq!(split("a,b,c", ",", Some(1)).unwrap(), ["a,b,c"]);
        assert!(split("a", ",", Some(0)).is_err());
    }
}
