//! The environment of a stdio upstream server: cleared, then the variables
//! a program needs to run ([`INHERITED_ENV`]) and those the configuration
//! names ([`UpstreamTransport::Stdio`](super::UpstreamTransport::Stdio)'s
//! `inherit_env`) are copied from this process, and its own `env` is set on
//! top. Anything else this process holds (the gateway's bearer token, a
//! runtime key, other servers' credentials) never reaches the server.

use std::ffi::OsString;

use toolexec::glob_match;

/// Variables every stdio server inherits from this process when set: what a
/// program (and `npx`, `node`, `python`, `uvx`) needs to find binaries,
/// caches, locale, time zone, scratch space and CA certificates. Entries may
/// end in `*` (a prefix). Credentials such as proxy URLs are not on it: name
/// them in `inherit_env`.
pub const INHERITED_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "LC_*",
    "TZ",
    "TMPDIR",
    "TERM",
    "XDG_CACHE_HOME",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "XDG_RUNTIME_DIR",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NODE_EXTRA_CA_CERTS",
];

/// The variables of `parent` a server inherits: those matching
/// [`INHERITED_ENV`] or a pattern of `extra` (names, or globs with `*`).
pub(crate) fn inherited(
    parent: impl IntoIterator<Item = (OsString, OsString)>,
    extra: &[String],
) -> Vec<(OsString, OsString)> {
    parent
        .into_iter()
        .filter(|(name, _)| {
            let Some(name) = name.to_str() else {
                return false;
            };
            INHERITED_ENV
                .iter()
                .copied()
                .chain(extra.iter().map(String::as_str))
                .any(|p| glob_match(p, name))
        })
        .collect()
}

/// Checks the `inherit_env` patterns: non-empty, no `=` or NUL.
pub(crate) fn check_patterns(patterns: &[String]) -> Result<(), toolexec::Error> {
    for (i, p) in patterns.iter().enumerate() {
        if p.is_empty() || p.contains(['=', '\0']) {
            return Err(toolexec::Error::invalid_request(
                format!("transport.inherit_env[{i}]"),
                format!("{p:?} is not a variable name or pattern"),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(names: &[&str]) -> Vec<(OsString, OsString)> {
        names.iter().map(|n| ((*n).into(), "v".into())).collect()
    }

    fn names(v: Vec<(OsString, OsString)>) -> Vec<String> {
        v.into_iter()
            .map(|(n, _)| n.into_string().unwrap())
            .collect()
    }

    #[test]
    fn only_the_allow_list_and_named_extras_pass() {
        let parent = vars(&[
            "PATH",
            "HOME",
            "LC_ALL",
            "LC_CTYPE",
            "TOOLEXEC_TOKEN",
            "TOOLEXEC_REMOTE_KEY",
            "AWS_SECRET_ACCESS_KEY",
            "HTTPS_PROXY",
            "NODE_OPTIONS",
            "MY_APP_URL",
            "MY_APP_KEY",
            "PATHX",
        ]);
        assert_eq!(
            names(inherited(parent.clone(), &[])),
            ["PATH", "HOME", "LC_ALL", "LC_CTYPE"]
        );
        assert_eq!(
            names(inherited(
                parent,
                &["HTTPS_PROXY".into(), "MY_APP_*".into()]
            )),
            [
                "PATH",
                "HOME",
                "LC_ALL",
                "LC_CTYPE",
                "HTTPS_PROXY",
                "MY_APP_URL",
                "MY_APP_KEY"
            ]
        );
    }

    #[test]
    fn bad_patterns_are_refused() {
        assert!(check_patterns(&["A".into(), "B_*".into()]).is_ok());
        for bad in ["", "A=B", "A\0"] {
            let err = check_patterns(&[bad.into()]).unwrap_err();
            assert!(
                err.to_string()
                    .starts_with("invalid_request: transport.inherit_env[0]")
            );
        }
    }
}
