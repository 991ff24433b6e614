//! Operating a cluster: drain, status, TLS and authentication.

use super::*;

/// SIGTERM drains a worker: the run in flight finishes and answers, the
/// worker exits 0 and withdraws its advert; `cluster status` shows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_a_worker() {
    const TEST: &str = "sigterm_drains_a_worker";
    let Some(nats) = Nats::start(TEST) else {
        return;
    };
    let Some((_ledger, ledger_port)) = ledger(TEST) else {
        return;
    };
    let dir = TempDir::new("fleet");
    let config = worker_config(&dir, &nats, "drain", ledger_port, "");
    let mut w = worker(dir.path(), &config, "d0", 2);
    let (exec, _client) = caller(&nats, "drain").await;

    let status = |dir: &Path| {
        let out = run(&mut toolexec(
            dir,
            &["--config", &config, "--json", "cluster", "status"],
        ));
        out.expect_code(0);
        out.json()
    };
    let before = status(dir.path());
    assert_eq!(before["cluster"], "drain", "{before}");
    assert_eq!(before["workers"][0]["id"], "d0", "{before}");
    assert_eq!(before["workers"][0]["capacity"], 2, "{before}");

    let slow = tokio::spawn(async move {
        exec.run_tool("ledger:hit", json!({"n": 1, "sleep_ms": 1500}))
            .await
    });
    // The run is in flight (the ledger counted it) before the signal.
    wait_for_hit(ledger_port, 1).await;
    let exit = w.signal("-TERM", Duration::from_secs(10));
    assert!(
        exit.is_some_and(|s| s.success()),
        "{exit:?}\n{}",
        w.output()
    );
    let out = slow.await.unwrap().unwrap();
    assert_eq!(out.value, json!({"n": 1, "hits": 1}));
    let after = status(dir.path());
    assert_eq!(after["workers"], json!([]), "{after}");
    let ledger_ns = after["namespaces"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["namespace"] == "ledger")
        .unwrap();
    assert_eq!(ledger_ns["pending"], 0, "{after}");
    assert_eq!(ledger_ns["running"], 0, "{after}");
}

/// A server with TLS (a CA made here) and a token: a member with the CA
/// and the token (from a secret source) joins, by library and by
/// `toolexec.toml`; a wrong token, or no CA, is a clear
/// `backend_unavailable` naming what failed, never a connection in the
/// clear, and never shows the token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_and_token_are_enforced() {
    const TEST: &str = "tls_and_token_are_enforced";
    let dir = TempDir::new("fleet-tls");
    let ca = toolexec_testkit::tls::TestCa::new("fleet test CA");
    let server = ca.issue(
        &["127.0.0.1", "localhost"],
        toolexec_testkit::tls::Usage::Server,
    );
    let cert = dir.write("server.pem", &server.cert_pem);
    let key = dir.write("server.key", &server.key_pem);
    let ca_file = dir.write("ca.pem", &ca.cert_pem);
    let token = "s3cret-fleet-token";
    let Some(nats) = Nats::start_with(
        TEST,
        &[
            "--tls",
            "--tlscert",
            cert.to_str().unwrap(),
            "--tlskey",
            key.to_str().unwrap(),
            "--auth",
            token,
        ],
    ) else {
        return;
    };
    let url = format!("tls://127.0.0.1:{}", nats.port);
    let settings = |token: &str, ca: bool| {
        let mut s = ClusterSettings::new(vec![url.clone()], "secure");
        s.security.token = Some(toolexec::Secret::new(token));
        s.security.ca_file = ca.then(|| ca_file.clone());
        s.security.require_tls = true;
        s
    };
    Cluster::connect(settings(token, true), "test")
        .await
        .unwrap();
    for (what, s) in [
        ("wrong token", settings("wrong", true)),
        ("no CA", settings(token, false)),
    ] {
        let err = Cluster::connect(s, "test").await.unwrap_err();
        assert_eq!(err.code(), ErrorCode::BackendUnavailable, "{what}: {err}");
        assert!(
            err.to_string().contains("cannot connect to NATS"),
            "{what}: {err}"
        );
        assert!(!err.to_string().contains("s3cret"), "{what}: {err}");
    }

    // The CLI: the token from the environment, the CA by path.
    let config = dir.write(
        "secure.toml",
        &format!(
            "[builtins]\nenabled = [\"math\"]\n[cluster]\nnats = {}\nname = \"secure\"\n\
             token = {{ env = \"FLEET_TOKEN\" }}\nca_file = \"ca.pem\"\nrequire_tls = true\n",
            toml_str(&url)
        ),
    );
    let config = config.to_str().unwrap();
    let _worker = {
        let mut w = Background::spawn(
            toolexec(
                dir.path(),
                &[
                    "--config",
                    config,
                    "worker",
                    "--namespace",
                    "math",
                    "--id",
                    "s0",
                ],
            )
            .env("FLEET_TOKEN", token),
        );
        w.wait_stdout_line("worker ");
        w
    };
    let out = run(toolexec(
        dir.path(),
        &["--config", config, "--json", "cluster", "status"],
    )
    .env("FLEET_TOKEN", token));
    out.expect_code(0);
    assert_eq!(out.json()["workers"][0]["id"], "s0", "{out}");
    let out = run(
        toolexec(dir.path(), &["--config", config, "cluster", "status"])
            .env("FLEET_TOKEN", "wrong-one"),
    );
    assert_ne!(out.code(), Some(0), "{out}");
    assert!(out.stderr.contains("backend_unavailable"), "{out}");
    assert!(!out.stderr.contains("wrong-one"), "{out}");
}

/// nkey authentication: a server that knows only a user's public key
/// admits a worker whose `toolexec.toml` holds the seed (from a file, as
/// every secret), and refuses another seed with a clear error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nkey_authentication_is_enforced() {
    const TEST: &str = "nkey_authentication_is_enforced";
    let dir = TempDir::new("fleet-nkey");
    let user = nkeys::KeyPair::new_user();
    let conf = dir.write(
        "nats.conf",
        &format!(
            "authorization {{ users = [ {{ nkey: \"{}\" }} ] }}\n",
            user.public_key()
        ),
    );
    let Some(nats) = Nats::start_with(TEST, &["-c", conf.to_str().unwrap()]) else {
        return;
    };
    dir.write_private("seed", &user.seed().unwrap());
    let stranger = nkeys::KeyPair::new_user();
    dir.write_private("other-seed", &stranger.seed().unwrap());
    let config = |seed: &str| {
        dir.write(
            &format!("{seed}.toml"),
            &format!(
                "[builtins]\nenabled = [\"math\"]\n[cluster]\nnats = {}\nname = \"keyed\"\n\
                 nkey = {{ file = \"{seed}\" }}\n",
                toml_str(nats.url())
            ),
        )
    };
    let good = config("seed");
    let bad = config("other-seed");
    let _w = admits_and_refuses(
        &dir,
        good.to_str().unwrap(),
        "k0",
        bad.to_str().unwrap(),
        &stranger.seed().unwrap(),
    );
}

/// Against a server that authenticates: a worker with the `good`
/// configuration starts and `cluster status` lists it as `id`; the `bad`
/// one is refused (`backend_unavailable`, `authorization violation`)
/// without showing `secret`. Returns the worker, still serving `math`.
fn admits_and_refuses(dir: &TempDir, good: &str, id: &str, bad: &str, secret: &str) -> Background {
    let mut w = Background::spawn(&mut toolexec(
        dir.path(),
        &[
            "--config",
            good,
            "worker",
            "--namespace",
            "math",
            "--id",
            id,
        ],
    ));
    w.wait_stdout_line("worker ");
    let out = run(&mut toolexec(
        dir.path(),
        &["--config", good, "--json", "cluster", "status"],
    ));
    out.expect_code(0);
    assert_eq!(out.json()["workers"][0]["id"], id, "{out}");
    let out = run(&mut toolexec(
        dir.path(),
        &["--config", bad, "cluster", "status"],
    ));
    assert_ne!(out.code(), Some(0), "{out}");
    assert!(out.stderr.contains("backend_unavailable"), "{out}");
    assert!(out.stderr.contains("authorization violation"), "{out}");
    assert!(!out.stderr.contains(secret), "{out}");
    w
}

/// A NATS JWT (`alg: ed25519-nkey`) of `subject`, signed by `issuer`.
fn nats_jwt(issuer: &nkeys::KeyPair, subject: &str, name: &str, nats: serde_json::Value) -> String {
    use base64::Engine;
    let b64 = |v: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v);
    let header = json!({"typ": "JWT", "alg": "ed25519-nkey"});
    let claims = json!({
        // Unique per token (the server does not check how it was made).
        "jti": format!(
            "{subject}-{}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ),
        "iat": std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs(),
        "iss": issuer.public_key(),
        "name": name,
        "sub": subject,
        "nats": nats,
    });
    let signed = format!(
        "{}.{}",
        b64(header.to_string().as_bytes()),
        b64(claims.to_string().as_bytes())
    );
    let signature = issuer.sign(signed.as_bytes()).unwrap();
    format!("{signed}.{}", b64(&signature))
}

/// A `.creds` file: a user's JWT and its nkey seed.
fn creds(jwt: &str, seed: &str) -> String {
    format!(
        "-----BEGIN NATS USER JWT-----\n{jwt}\n------END NATS USER JWT------\n\n\
         ************************* IMPORTANT *************************\n\
         NKEY Seed printed below can be used to sign and prove identity.\n\n\
         -----BEGIN USER NKEY SEED-----\n{seed}\n------END USER NKEY SEED------\n\n\
         *************************************************************\n"
    )
}

/// Decentralized (JWT) authentication: a server in operator mode, with an
/// account whose JWT enables JetStream, admits a worker and a caller whose
/// `.creds` hold a user the account signed, and refuses a user another
/// account signed, with a clear error and without showing the seed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creds_authentication_is_enforced() {
    const TEST: &str = "creds_authentication_is_enforced";
    let dir = TempDir::new("fleet-creds");
    let operator = nkeys::KeyPair::new_operator();
    // JetStream needs the server's own (system) account.
    let system = nkeys::KeyPair::new_account();
    let account = nkeys::KeyPair::new_account();
    let user = nkeys::KeyPair::new_user();
    let operator_jwt = nats_jwt(
        &operator,
        &operator.public_key(),
        "toolexec-test",
        json!({"type": "operator", "version": 2, "system_account": system.public_key()}),
    );
    let system_jwt = nats_jwt(
        &operator,
        &system.public_key(),
        "SYS",
        json!({"type": "account", "version": 2}),
    );
    let unlimited = json!({
        "subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1,
        "wildcards": true, "conn": -1, "leaf": -1,
        "mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1,
    });
    let account_jwt = nats_jwt(
        &operator,
        &account.public_key(),
        "fleet",
        json!({"limits": unlimited, "type": "account", "version": 2}),
    );
    let user_claims = json!({"pub": {}, "sub": {}, "subs": -1, "data": -1, "payload": -1,
                             "type": "user", "version": 2});
    let user_jwt = nats_jwt(&account, &user.public_key(), "worker", user_claims.clone());
    dir.write("operator.jwt", &operator_jwt);
    let conf = dir.write(
        "nats.conf",
        &format!(
            "operator: {op}\nsystem_account: {sys}\nresolver: MEMORY\n\
             resolver_preload: {{ {sys}: \"{sys_jwt}\", {acc}: \"{jwt}\" }}\n",
            op = toml_str(dir.path().join("operator.jwt").to_str().unwrap()),
            sys = system.public_key(),
            sys_jwt = system_jwt,
            acc = account.public_key(),
            jwt = account_jwt,
        ),
    );
    let Some(nats) = Nats::start_with(TEST, &["-c", conf.to_str().unwrap()]) else {
        return;
    };
    dir.write_private("fleet.creds", &creds(&user_jwt, &user.seed().unwrap()));
    // A user of an account the server does not know.
    let stranger_account = nkeys::KeyPair::new_account();
    let stranger = nkeys::KeyPair::new_user();
    let stranger_jwt = nats_jwt(&stranger_account, &stranger.public_key(), "x", user_claims);
    dir.write_private(
        "other.creds",
        &creds(&stranger_jwt, &stranger.seed().unwrap()),
    );
    let config = |creds: &str| {
        dir.write(
            &format!("{creds}.toml"),
            &format!(
                "[builtins]\nenabled = [\"math\"]\n[cluster]\nnats = {}\nname = \"jwt\"\n\
                 namespaces = [\"math\"]\ncreds = {{ file = \"{creds}\" }}\n",
                toml_str(nats.url())
            ),
        )
    };
    let good = config("fleet.creds");
    let good = good.to_str().unwrap();
    let bad = config("other.creds");
    let _w = admits_and_refuses(
        &dir,
        good,
        "j0",
        bad.to_str().unwrap(),
        &stranger.seed().unwrap(),
    );
    let out = run(&mut toolexec(
        dir.path(),
        &[
            "--config",
            good,
            "--json",
            "run",
            "math:add",
            r#"{"a": 2, "b": 3}"#,
        ],
    ));
    out.expect_code(0);
    assert_eq!(out.json()["value"], json!({"result": 5.0}), "{out}");
}
