//! Resource URIs across upstreams: the rewritten form of a URI two servers
//! share, and matching a URI against a server's URI templates.

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};

/// Scheme of rewritten URIs: `toolexec://<server>/<percent-encoded URI>`.
const SCHEME: &str = "toolexec://";

/// Everything but RFC 3986's unreserved characters is encoded, so the
/// original URI is one path segment.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// The URI under which `server` publishes `uri` when an earlier server
/// already lists it.
pub(super) fn rewrite(server: &str, uri: &str) -> String {
    format!("{SCHEME}{server}/{}", utf8_percent_encode(uri, SEGMENT))
}

/// The server and original URI of a rewritten URI; `None` for any other.
pub(super) fn parse_rewritten(uri: &str) -> Option<(&str, String)> {
    let rest = uri.strip_prefix(SCHEME)?;
    let (server, encoded) = rest.split_once('/')?;
    let original = percent_decode_str(encoded).decode_utf8().ok()?;
    (!server.is_empty() && !original.is_empty()).then(|| (server, original.into_owned()))
}

/// Whether `uri` can come from the RFC 6570 `template`: its literal parts
/// appear in order, each expression (`{name}`, `{+path}`, `{?q}`) standing
/// for any text, and the URI starts and ends as the template does.
pub(super) fn matches_template(template: &str, uri: &str) -> bool {
    let mut literals = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        literals.push(&rest[..open]);
        match rest[open..].find('}') {
            Some(close) => rest = &rest[open + close + 1..],
            None => return false,
        }
    }
    literals.push(rest);
    // literals: first is a prefix, last a suffix, the others in order.
    let (first, last) = (literals[0], literals[literals.len() - 1]);
    if literals.len() == 1 {
        return uri == first;
    }
    let Some(mut body) = uri.strip_prefix(first) else {
        return false;
    };
    let Some(stripped) = body.strip_suffix(last) else {
        return false;
    };
    body = stripped;
    for literal in &literals[1..literals.len() - 1] {
        match body.find(literal) {
            Some(at) => body = &body[at + literal.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewritten_uris_read_back() {
        for uri in [
            "file:///etc/hosts",
            "test://static/resource?x=1&y=2",
            "ünï://ç",
        ] {
            let r = rewrite("docs", uri);
            assert!(r.starts_with("toolexec://docs/"), "{r}");
            assert!(!r["toolexec://docs/".len()..].contains('/'), "{r}");
            assert_eq!(parse_rewritten(&r), Some(("docs", uri.to_owned())));
        }
        assert_eq!(parse_rewritten("file:///x"), None);
        assert_eq!(parse_rewritten("toolexec://docs"), None);
        assert_eq!(parse_rewritten("toolexec:///x"), None);
    }

    #[test]
    fn template_matching() {
        assert!(matches_template("greeting://{name}", "greeting://ada"));
        assert!(matches_template("file:///{+path}", "file:///a/b/c.txt"));
        assert!(matches_template(
            "db://{table}/rows/{id}",
            "db://users/rows/7"
        ));
        assert!(matches_template(
            "search://q{?query,page}",
            "search://q?query=x"
        ));
        assert!(matches_template("fixed://x", "fixed://x"));
        assert!(!matches_template("fixed://x", "fixed://y"));
        assert!(!matches_template("greeting://{name}", "other://ada"));
        assert!(!matches_template(
            "db://{table}/rows/{id}",
            "db://users/cols/7"
        ));
        assert!(!matches_template("bad://{unclosed", "bad://x"));
    }
}
