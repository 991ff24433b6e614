//! `toolexec serve --http` against hostile clients, from outside: the real
//! binary, raw sockets. Slow headers, held connections and piled-up
//! sessions are bounded by `[gateway]`; an unauthenticated server is not
//! exposed beyond loopback by one flag; token files others can read are
//! refused.

use crate::support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{Background, INITIALIZE, TempDir, free_port, post_status, run, toolexec};

const TOKEN: &str = "hostile-test-token";
const AUTH: &str = "Authorization: Bearer hostile-test-token";
/// Longest wait for the server to act; far above the configured limits.
const WAIT: Duration = Duration::from_secs(20);

/// Reads until the server closes the connection or `WAIT` passes; returns
/// what arrived and whether (and after how long) it closed.
fn read_until_closed(stream: &mut TcpStream) -> (String, Option<Duration>) {
    let start = Instant::now();
    stream.set_read_timeout(Some(WAIT)).unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match stream.read(&mut chunk) {
            Ok(0) => {
                return (
                    String::from_utf8_lossy(&buf).into_owned(),
                    Some(start.elapsed()),
                );
            }
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return (String::from_utf8_lossy(&buf).into_owned(), None);
            }
            Err(_) => {
                return (
                    String::from_utf8_lossy(&buf).into_owned(),
                    Some(start.elapsed()),
                );
            }
        }
        if start.elapsed() > WAIT {
            return (String::from_utf8_lossy(&buf).into_owned(), None);
        }
    }
}

/// The whole response to an authorized `initialize`.
fn initialize(port: u16) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{AUTH}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{INITIALIZE}",
        INITIALIZE.len()
    )
    .unwrap();
    let (text, closed) = read_until_closed(&mut s);
    assert!(closed.is_some(), "the response never ended: {text:?}");
    text
}

fn status(response: &str) -> u16 {
    response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {response:?}"))
}

/// A server on a free loopback port with `gateway` as its `[gateway]`
/// settings and a private token file.
fn serve(dir: &TempDir, gateway: &str) -> (Background, u16) {
    dir.write_private("token", &format!("{TOKEN}\n"));
    dir.write("toolexec.toml", &format!("[gateway]\n{gateway}"));
    let port = free_port();
    let mut server = Background::spawn(&mut toolexec(
        dir.path(),
        &[
            "serve",
            "--http",
            &port.to_string(),
            "--token-file",
            "token",
        ],
    ));
    server.wait_listening(port);
    (server, port)
}

/// With the default limits (`header_timeout = "10s"`).
#[test]
fn stalled_headers_are_closed() {
    let dir = TempDir::new("stall");
    let (server, port) = serve(&dir, "");
    let mut stalled = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        stalled,
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthoriz"
    )
    .unwrap();
    let (text, closed) = read_until_closed(&mut stalled);
    let after = closed.unwrap_or_else(|| {
        panic!(
            "a connection stalled in its headers was kept open {WAIT:?}: {text:?}\n{}",
            server.output()
        )
    });
    eprintln!("stalled connection closed after {after:?}");
    // The server still serves others.
    assert_eq!(post_status(port, &[AUTH], INITIALIZE), 200);
}

#[test]
fn held_connections_and_piled_up_sessions_get_503() {
    let dir = TempDir::new("greedy");
    let (_server, port) = serve(
        &dir,
        "max_connections = 3\nmax_sessions = 2\nbody_timeout = \"60s\"\n",
    );
    // Sessions: two open, the third initialize is refused with a JSON-RPC
    // error naming the limit.
    assert_eq!(status(&initialize(port)), 200);
    assert_eq!(status(&initialize(port)), 200);
    let refused = initialize(port);
    assert_eq!(status(&refused), 503, "{refused}");
    let body: Value = serde_json::from_str(refused.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.starts_with("backend_unavailable: "), "{message}");
    assert!(message.contains("gateway.max_sessions"), "{message}");

    // Connections: three clients that never finish their body hold every
    // slot; the next client gets 503 at once.
    let holders: Vec<TcpStream> = (0..3).map(|_| hold(port)).collect();
    // The holders hold the slots (each checked to be held, not turned away
    // while a connection of the requests above was still being closed).
    let start = Instant::now();
    let turned_away = loop {
        let response = initialize(port);
        if response.contains("gateway.max_connections") {
            assert_eq!(status(&response), 503, "{response}");
            assert!(
                response.to_ascii_lowercase().contains("retry-after: 1"),
                "{response}"
            );
            break start.elapsed();
        }
        assert!(start.elapsed() < WAIT, "never turned away: {response}");
        std::thread::sleep(Duration::from_millis(50));
    };
    eprintln!("connection over the cap answered 503 after {turned_away:?}");
    drop(holders);
}

#[test]
fn no_auth_is_refused_off_loopback_without_a_second_flag() {
    let dir = TempDir::new("insecure");
    let port = free_port().to_string();
    let bind = format!("0.0.0.0:{port}");
    let out = run(&mut toolexec(
        dir.path(),
        &["serve", "--http", &bind, "--insecure-no-auth"],
    ));
    out.expect_code(2);
    assert!(
        out.stderr.contains("invalid_request: insecure_no_auth"),
        "{out}"
    );
    assert!(
        out.stderr.contains("--allow-insecure-non-loopback"),
        "{out}"
    );
    // The second flag alone means nothing.
    let out = run(&mut toolexec(
        dir.path(),
        &["serve", "--http", &bind, "--allow-insecure-non-loopback"],
    ));
    out.expect_code(2);
    // Both flags: served.
    let mut server = Background::spawn(&mut toolexec(
        dir.path(),
        &[
            "serve",
            "--http",
            &bind,
            "--insecure-no-auth",
            "--allow-insecure-non-loopback",
        ],
    ));
    let port: u16 = port.parse().unwrap();
    server.wait_listening(port);
    assert_eq!(post_status(port, &[], INITIALIZE), 200);
}

#[test]
fn token_files_others_can_read_are_refused() {
    let dir = TempDir::new("token-mode");
    let token = dir.write_private("token", &format!("{TOKEN}\n"));
    let port = free_port().to_string();
    for mode in [0o644, 0o640, 0o604] {
        std::fs::set_permissions(&token, std::fs::Permissions::from_mode(mode)).unwrap();
        let out = run(&mut toolexec(
            dir.path(),
            &["serve", "--http", &port, "--token-file", "token"],
        ));
        out.expect_code(2);
        assert!(out.stderr.contains("invalid_request: token_file"), "{out}");
        assert!(out.stderr.contains(&format!("mode {mode:04o}")), "{out}");
        assert!(out.stderr.contains("token"), "{out}");
        assert!(!out.stderr.contains(TOKEN), "{out}");
    }
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    let mut server = Background::spawn(&mut toolexec(
        dir.path(),
        &["serve", "--http", &port, "--token-file", "token"],
    ));
    let port: u16 = port.parse().unwrap();
    server.wait_listening(port);
    assert_eq!(post_status(port, &[AUTH], INITIALIZE), 200);
}

/// A connection that sends a request's head and never finishes its body,
/// once the server holds it: a connection turned away (503, every slot
/// taken by connections still being closed) is made again.
fn hold(port: u16) -> TcpStream {
    let start = Instant::now();
    loop {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        write!(
            s,
            "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{AUTH}\r\nContent-Type: application/json\r\n\
             Content-Length: 1000\r\n\r\n{{"
        )
        .unwrap();
        s.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let mut byte = [0u8; 1];
        match s.read(&mut byte) {
            // Nothing said: held.
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return s;
            }
            answered => {
                assert!(start.elapsed() < WAIT, "never held: {answered:?}");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}
