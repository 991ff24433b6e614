//! The form of a resource URI that rules are matched against: what a
//! server that cleans up paths would serve, so that `..`, doubled slashes,
//! percent-escapes and letter case cannot carry a read past a rule.

/// `uri` with its scheme and authority lowercased, every percent-escape
/// in its path decoded (`%2F` too: the strictest reading), repeated
/// slashes collapsed and `.` and `..` segments resolved. Query and
/// fragment are kept as written.
///
/// ```text
/// FILE:///srv/public/../secret/key  → file:///srv/secret/key
/// file:///srv//sec%72et/x           → file:///srv/secret/x
/// ```
pub(crate) fn canonical(uri: &str) -> String {
    let (scheme, rest) = match uri.split_once(':') {
        Some((s, r))
            if !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c)) =>
        {
            (Some(s.to_ascii_lowercase()), r)
        }
        _ => (None, uri),
    };
    let (authority, rest) = match rest.strip_prefix("//") {
        Some(r) => {
            let end = r.find(['/', '?', '#']).unwrap_or(r.len());
            (Some(r[..end].to_ascii_lowercase()), &r[end..])
        }
        None => (None, rest),
    };
    let end = rest.find(['?', '#']).unwrap_or(rest.len());
    let (path, tail) = rest.split_at(end);
    let decoded = percent_encoding::percent_decode_str(path).decode_utf8_lossy();
    let absolute = decoded.starts_with('/');
    let mut segments: Vec<&str> = Vec::new();
    for segment in decoded.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                segments.pop();
            }
            s => segments.push(s),
        }
    }
    let trailing = decoded.ends_with('/') || decoded.ends_with("/.") || decoded.ends_with("/..");
    let mut out = String::with_capacity(uri.len());
    if let Some(s) = scheme {
        out.push_str(&s);
        out.push(':');
    }
    if let Some(a) = authority {
        out.push_str("//");
        out.push_str(&a);
    }
    if absolute {
        out.push('/');
    }
    out.push_str(&segments.join("/"));
    if trailing && !segments.is_empty() {
        out.push('/');
    }
    out.push_str(tail);
    out
}

#[cfg(test)]
mod tests {
    use super::canonical;

    #[test]
    fn paths_are_read_as_a_cleaning_server_would() {
        for (raw, want) in [
            ("file:///srv/public/a.txt", "file:///srv/public/a.txt"),
            ("file:///srv/public/../secret/key", "file:///srv/secret/key"),
            ("file:///srv//secret/x", "file:///srv/secret/x"),
            ("file:///srv/%73ecret/x", "file:///srv/secret/x"),
            ("file:///srv/public%2F..%2Fsecret", "file:///srv/secret"),
            ("FILE:///srv/./secret/", "file:///srv/secret/"),
            (
                "HTTPS://Docs.Example.COM/A/../B?q=%2E#f",
                "https://docs.example.com/B?q=%2E#f",
            ),
            ("test://static/text", "test://static/text"),
            ("greeting://{name}", "greeting://{name}"),
            ("file:///../../etc/passwd", "file:///etc/passwd"),
            ("urn:isbn:0451450523", "urn:isbn:0451450523"),
            ("file:///a/%zz/%4", "file:///a/%zz/%4"),
        ] {
            assert_eq!(canonical(raw), want, "{raw}");
        }
    }
}
