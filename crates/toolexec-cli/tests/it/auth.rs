//! `[[servers]] auth.oauth` and `toolexec auth status|logout|login`
//! through the binary: configuration errors name their key, the token file
//! is reported without its tokens and refused when others can read it, and
//! a server nobody signed in to says how to sign in. (The sign-in flows
//! themselves run against the conformance suite's authorization servers in
//! toolexec-mcp's `upstream_conformance` test, through the same library.)

use crate::support;

use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::Path;

use support::{Out, TempDir, free_port, run, toml_str, toolexec};

fn tx(cwd: &Path, args: &[&str]) -> Out {
    run(&mut toolexec(cwd, args))
}

/// A config with one OAuth server (`extra` goes into its `auth.oauth`).
fn config(dir: &TempDir, url: &str, extra: &str) -> String {
    let tokens = dir.path().join("state").join("remote.json");
    format!(
        "[[servers]]\nname = \"remote\"\nurl = {}\nauth = {{ oauth = {{ token_file = {}{extra} }} }}\n",
        toml_str(url),
        toml_str(tokens.to_string_lossy()),
    )
}

#[test]
fn oauth_settings_errors_name_their_key() {
    let dir = TempDir::new("auth-config");
    for (text, key) in [
        (
            "[[servers]]\nname = \"s\"\ncommand = \"x\"\nauth = { oauth = {} }\n",
            "servers[0].auth",
        ),
        (
            "[[servers]]\nname = \"s\"\nurl = \"http://127.0.0.1:1/mcp\"\nauth = { oauth = { grant = \"password\" } }\n",
            "servers[0].auth.oauth.grant",
        ),
        (
            "[[servers]]\nname = \"s\"\nurl = \"http://127.0.0.1:1/mcp\"\nauth = { oauth = { grant = \"client_credentials\", client_id = \"c\" } }\n",
            "servers[0].auth.oauth.grant",
        ),
        (
            "[[servers]]\nname = \"s\"\nurl = \"http://127.0.0.1:1/mcp\"\nauth = { oauth = { client_secret = \"x\" } }\n",
            "servers[0].auth.oauth.client_secret",
        ),
        (
            "[[servers]]\nname = \"s\"\nurl = \"http://127.0.0.1:1/mcp\"\nbearer_token = \"t\"\nauth = { oauth = {} }\n",
            "servers[0].auth",
        ),
        (
            "[[servers]]\nname = \"s\"\nurl = \"http://127.0.0.1:1/mcp\"\nauth = { oauth = { flow = \"x\" } }\n",
            "flow",
        ),
    ] {
        dir.write("toolexec.toml", text);
        let out = tx(dir.path(), &["auth", "status"]);
        out.expect_code(2);
        assert!(out.stderr.contains(key), "{key}: {out}");
    }
}

#[test]
fn status_reports_the_token_file_without_its_tokens() {
    let dir = TempDir::new("auth-status");
    let url = format!("http://127.0.0.1:{}/mcp", free_port());
    dir.write("toolexec.toml", &config(&dir, &url, ""));
    let out = tx(dir.path(), &["--json", "auth", "status"]);
    out.expect_code(0);
    assert_eq!(out.json()[0]["signed_in"], false, "{out}");

    // A token file as a sign-in leaves it.
    let state = dir.path().join("state");
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&state)
        .unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let record = serde_json::json!({
        "format": 1,
        "server_url": url,
        "client_id": "client-7",
        "credentials": {
            "client_id": "client-7",
            "token_response": {
                "access_token": "ACCESS-SECRET",
                "token_type": "bearer",
                "expires_in": 3600,
                "refresh_token": "REFRESH-SECRET"
            },
            "granted_scopes": ["mcp:read"],
            "token_received_at": now
        }
    });
    let file = state.join("remote.json");
    std::io::Write::write_all(
        &mut std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&file)
            .unwrap(),
        record.to_string().as_bytes(),
    )
    .unwrap();
    for json in [true, false] {
        let args: &[&str] = if json {
            &["--json", "auth", "status", "remote"]
        } else {
            &["auth", "status"]
        };
        let out = tx(dir.path(), args);
        out.expect_code(0);
        let text = format!("{out}");
        assert!(
            !text.contains("ACCESS-SECRET") && !text.contains("REFRESH-SECRET"),
            "{text}"
        );
        if json {
            let s = &out.json()[0];
            assert_eq!(s["signed_in"], true);
            assert_eq!(s["refreshable"], true);
            assert_eq!(s["client_id"], "client-7");
            assert_eq!(s["scopes"], serde_json::json!(["mcp:read"]));
            let left = s["expires_in"].as_i64().unwrap();
            assert!((3500..=3600).contains(&left), "{left}");
        } else {
            assert!(out.stdout.contains("remote: signed in"), "{out}");
        }
    }

    // Readable by others: refused, with the way out.
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = tx(dir.path(), &["auth", "status", "remote"]);
    out.expect_code(1);
    assert!(out.stderr.contains("mode 0644"), "{out}");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();

    let out = tx(dir.path(), &["auth", "logout", "remote"]);
    out.expect_code(0);
    assert!(out.stdout.contains("Signed out of remote"), "{out}");
    assert!(!file.exists());
    let out = tx(dir.path(), &["auth", "logout", "remote"]);
    assert!(out.stdout.contains("had no stored tokens"), "{out}");
}

#[test]
fn unknown_servers_and_missing_sign_ins_say_what_to_do() {
    let dir = TempDir::new("auth-missing");
    let url = format!("http://127.0.0.1:{}/mcp", free_port());
    dir.write(
        "toolexec.toml",
        &(config(&dir, &url, "")
            + "\n[[servers]]\nname = \"plain\"\nurl = \"http://127.0.0.1:1/mcp\"\nlazy = true\n"),
    );
    let out = tx(dir.path(), &["auth", "login", "nope"]);
    out.expect_code(2);
    assert!(
        out.stderr.contains("servers with auth.oauth: remote"),
        "{out}"
    );
    let out = tx(dir.path(), &["auth", "login", "plain"]);
    out.expect_code(2);
    assert!(out.stderr.contains("plain has no auth.oauth"), "{out}");
    // Using the server before anyone signed in.
    let out = tx(dir.path(), &["tools", "list"]);
    assert!(
        out.stderr.contains("not signed in to remote")
            && out.stderr.contains("toolexec auth login remote"),
        "{out}"
    );
}

/// `toolexec auth login` end to end against the MCP conformance suite's
/// authorization and MCP servers (`auth/metadata-default`): a person's
/// sign-in (the driver opens the printed URL as a browser would), then
/// `auth status` and tool calls that use the stored token.
#[test]
fn login_against_the_conformance_authorization_server() {
    let test = "login_against_the_conformance_authorization_server";
    let Some(deps) = support::deps(
        test,
        &[
            "TOOLEXEC_NODE22",
            "TOOLEXEC_MCP_CONFORMANCE",
            "TOOLEXEC_PYTHON",
        ],
    ) else {
        return;
    };
    let (node, cli, python) = (&deps[0], &deps[1], &deps[2]);
    let dir = TempDir::new("auth-login");
    let out_dir = dir.path().join("results");
    let driver = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/auth_login_driver.py"
    );
    let command = format!(
        "{python} {driver} {} {}",
        env!("CARGO_BIN_EXE_toolexec"),
        dir.path().display()
    );
    let out = run(std::process::Command::new(node)
        .arg(cli)
        .args(["client", "--scenario", "auth/metadata-default", "--command"])
        .arg(&command)
        .arg("-o")
        .arg(&out_dir)
        .current_dir(dir.path()));
    let result = std::fs::read_dir(out_dir.join("auth"))
        .ok()
        .and_then(|mut d| d.next())
        .and_then(Result::ok)
        .map(|e| e.path())
        .unwrap_or_else(|| panic!("no results: {out}"));
    let checks: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(result.join("checks.json")).unwrap())
            .unwrap();
    let failed: Vec<&serde_json::Value> = checks
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] == "FAILURE")
        .collect();
    let stdout = std::fs::read_to_string(result.join("stdout.txt")).unwrap_or_default();
    let stderr = std::fs::read_to_string(result.join("stderr.txt")).unwrap_or_default();
    assert!(failed.is_empty(), "{failed:?}\n{stdout}\n{stderr}");
    let report: serde_json::Value = stdout
        .lines()
        .find_map(|l| l.strip_prefix("DRIVER "))
        .map(|l| serde_json::from_str(l).unwrap())
        .unwrap_or_else(|| panic!("no driver report:\n{stdout}\n{stderr}"));
    assert_eq!(report["login"]["code"], 0, "{report}");
    assert!(
        report["login"]["stdout"]
            .as_str()
            .unwrap()
            .contains("Signed in to remote"),
        "{report}"
    );
    assert_eq!(report["status"][0]["signed_in"], true, "{report}");
    let calls = report["calls"].as_array().unwrap();
    assert!(!calls.is_empty(), "{report}");
    assert!(calls.iter().all(|c| c["code"] == 0), "{report}");
    // The token file is the owner's alone.
    let mode = std::fs::metadata(dir.path().join("state").join("remote.json"))
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600);
}
