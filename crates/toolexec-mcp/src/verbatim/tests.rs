use std::sync::Arc;

use rmcp::model::{NumberOrString, RequestId};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;

/// A `resources/read` answer to `id` whose text is `text_json` (a JSON
/// string as written), with a field rmcp does not know.
fn read_answer(id: &str, text_json: &str) -> String {
    format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":{{\"contents\":[{{\"uri\":\"raw://big\",\"text\":{text_json},\"x-note\":\"kept\"}}]}}}}\n"
    )
}

/// A JSON string of about `n` bytes with escapes serde would write
/// otherwise (`\u00e9`, `\/`).
fn escaped_text(n: usize) -> String {
    format!("\"{}\"", "caf\\u00e9 \\/ ".repeat(n / 12))
}

/// A JSON string of about `n` bytes without a backslash.
fn plain_text(n: usize) -> String {
    format!("\"{}\"", "plain text ".repeat(n / 11))
}

/// Everything `reader` hands out, read in pieces of `piece` bytes.
async fn read_all(mut reader: impl tokio::io::AsyncRead + Unpin, piece: usize) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; piece];
    loop {
        let n = reader.read(&mut buf).await.unwrap();
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&buf[..n]);
    }
}

/// Writes `input` in pieces of `piece` bytes into one end of a pipe whose
/// other end `HoldingReader` reads (so lines arrive split).
async fn through_reader(input: Vec<u8>, piece: usize, wanted: Arc<Wanted>) -> Vec<u8> {
    let (mut tx, rx) = tokio::io::duplex(4096);
    let writer = tokio::spawn(async move {
        for chunk in input.chunks(piece) {
            tx.write_all(chunk).await.unwrap();
        }
    });
    let out = read_all(HoldingReader::new(rx, wanted), 8192).await;
    writer.await.unwrap();
    out
}

fn id(n: i64) -> RequestId {
    NumberOrString::Number(n)
}

const LEGACY: Verbatim = Verbatim { modern: false };
const MODERN: Verbatim = Verbatim { modern: true };

/// The reader keeps the large answer to a wanted request and hands out a
/// placeholder; the writer puts the kept bytes back, exactly as the server
/// wrote them (escapes and unknown fields included), under the client's
/// id. Every other line passes both unchanged, however the bytes arrive.
#[tokio::test]
async fn a_large_read_result_goes_through_untouched() {
    let big = read_answer("7", &escaped_text(200_000));
    let small = read_answer("8", &escaped_text(100));
    let unwanted = read_answer("9", &escaped_text(200_000));
    let note = "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{}}\n";
    let input = [note, &big, note, &small, &unwanted, note].concat();
    // This test's tokens (other tests keep results in the same process).
    let mut tokens = Vec::new();
    for piece in [1 << 20, 4096, 777] {
        let wanted = Arc::new(Wanted::default());
        wanted.add(&id(7), LEGACY);
        wanted.add(&id(8), LEGACY);
        let out = String::from_utf8(
            through_reader(input.clone().into_bytes(), piece, wanted.clone()).await,
        )
        .unwrap();
        let lines: Vec<&str> = out.split_inclusive('\n').collect();
        assert_eq!(lines.len(), 6, "{piece}");
        assert_eq!(lines[0], note);
        assert_eq!(lines[2], note);
        // Small: decoded as usual (and its id forgotten).
        assert_eq!(lines[3], small);
        assert_eq!(lines[4], unwanted);
        assert_eq!(lines[5], note);
        assert!(wanted.is_empty());
        // The placeholder, parsed as rmcp would.
        let placeholder: rmcp::model::ServerJsonRpcMessage =
            serde_json::from_str(lines[1]).unwrap();
        let rmcp::model::JsonRpcMessage::Response(response) = placeholder else {
            panic!("{}", lines[1]);
        };
        assert_eq!(response.id, id(7));
        let rmcp::model::ServerResult::ReadResourceResult(result) = response.result else {
            panic!("{}", lines[1]);
        };
        assert!(result.contents.is_empty());
        let held: Vec<String> = HELD.lock().by_token.keys().cloned().collect();
        let token = held.into_iter().find(|t| lines[1].contains(t.as_str()));
        tokens.push(token.expect("the placeholder names a kept result"));

        // The client's side: rmcp writes the placeholder under its own id.
        let mut client_side = lines[1].replacen("\"id\":7", "\"id\":\"c-1\"", 1);
        client_side.insert_str(0, note);
        client_side.push_str(note);
        let (tx, rx) = tokio::io::duplex(1 << 16);
        let reading = tokio::spawn(read_all(rx, 8192));
        let mut writer = ReleasingWriter::new(tx);
        writer.write_all(client_side.as_bytes()).await.unwrap();
        writer.flush().await.unwrap();
        // Released once: the same placeholder again is an error for its id.
        writer.write_all(lines[1].as_bytes()).await.unwrap();
        writer.shutdown().await.unwrap();
        drop(writer);
        let written = String::from_utf8(reading.await.unwrap()).unwrap();
        let written: Vec<&str> = written.split_inclusive('\n').collect();
        assert_eq!(written.len(), 4);
        assert_eq!(written[0], note);
        assert_eq!(written[1], big.replacen("\"id\":7", "\"id\":\"c-1\"", 1));
        assert_eq!(written[2], note);
        assert!(
            written[3].starts_with("{\"jsonrpc\":\"2.0\",\"id\":7,\"error\":"),
            "{}",
            written[3]
        );
    }
    let held = HELD.lock();
    assert!(tokens.iter().all(|t| !held.by_token.contains_key(t)));
}

/// Answers that are not a complete read result of MCP's shape, or not
/// JSON, are handed out unchanged (and their ids forgotten); so is a line too long to
/// buffer, which rmcp drops itself.
#[tokio::test]
async fn other_answers_pass_unchanged() {
    // With escapes (each text scanned again) and without (skimmed).
    for text in [escaped_text(100_000), plain_text(100_000)] {
        let asking = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{{\"resultType\":\"input_required\",\"contents\":[],\"pad\":{text}}}}}\n"
        );
        let tool = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{{\"content\":[{{\"type\":\"text\",\"text\":{text}}}]}}}}\n"
        );
        let broken = format!("{{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{{\"contents\":[{text}\n");
        let error = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":4,\"error\":{{\"code\":-1,\"message\":{text}}}}}\n"
        );
        // Contents MCP would not accept: text and blob, or text not a string.
        let both = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":5,\"result\":{{\"contents\":[{{\"uri\":\"a\",\"text\":{text},\"blob\":\"AA==\"}}]}}}}\n"
        );
        let number = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":6,\"result\":{{\"contents\":[{{\"uri\":\"a\",\"text\":1,\"pad\":{text}}}]}}}}\n"
        );
        // Shapes the typed path would rewrite, or refuse: contents as an
        // array, a result nested deeper than serde_json reads, an unpaired
        // surrogate, a carriage return between tokens (a line end to some
        // clients), a 2026-07-28 result without caching hints for a 2026-07-28
        // client (rmcp adds them).
        let array = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{{\"contents\":[[\"a\",{text}]]}}}}\n"
        );
        let deep = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":8,\"result\":{{\"contents\":[{{\"uri\":\"a\",\"text\":{text}}}],\"x\":{}{}}}}}\n",
            "[".repeat(200),
            "]".repeat(200)
        );
        let lone = read_answer("9", &format!("{}\\ud800\"", &text[..text.len() - 1]));
        let carriage = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":10,\"result\":{{\"contents\":[{{\"uri\":\"a\",\"text\":{text}}}],\"x\":\r{{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{{}}}}\r}}}}\n"
        );
        let modern = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":12,\"result\":{{\"resultType\":\"complete\",\"contents\":[{{\"uri\":\"a\",\"text\":{text}}}]}}}}\n"
        );
        // A field twice (clients differ on which counts).
        let twice = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":13,\"result\":{{\"contents\":[{{\"uri\":\"a\",\"text\":{text},\"text\":\"b\"}}]}}}}\n"
        );
        let input = [
            &twice,
            asking.as_str(),
            &tool,
            &broken,
            &error,
            &both,
            &number,
            &array,
            &deep,
            &lone,
            &carriage,
            &modern,
        ]
        .concat();
        let wanted = Arc::new(Wanted::default());
        for n in 1..=11 {
            wanted.add(&id(n), LEGACY);
        }
        // A 2026-07-28 client needs the caching hints this result lacks.
        wanted.add(&id(12), MODERN);
        for n in 13..=13 {
            wanted.add(&id(n), LEGACY);
        }
        let out = through_reader(input.clone().into_bytes(), 5000, wanted.clone()).await;
        assert_eq!(String::from_utf8(out).unwrap(), input);
        // The broken line's id could not be read: still waited on.
        assert!(!wanted.is_empty());
    }

    let long = format!("{}\n{}", "x".repeat(100_000), "tail");
    let mut reader = HoldingReader::new(long.as_bytes(), Arc::new(Wanted::default()));
    reader.max_line = 1000;
    let mut out = Vec::new();
    reader.read_to_end(&mut out).await.unwrap();
    assert_eq!(String::from_utf8(out).unwrap(), long);
}

/// The check of nesting, surrogates and carriage returns, on its own.
#[test]
fn plain_json_refuses_what_serde_json_or_clients_would() {
    let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
    assert!(plain_json(deep(128).as_bytes()));
    assert!(!plain_json(deep(129).as_bytes()));
    // Brackets inside strings do not count.
    assert!(plain_json(format!("[\"{}\"]", "[".repeat(500)).as_bytes()));
    assert!(plain_json(br#"["\ud83d\ude00 \" \\ \u00e9"]"#));
    assert!(!plain_json(br#"["\ud83d"]"#));
    assert!(!plain_json(br#"["\ud83d\u0041"]"#));
    assert!(!plain_json(br#"["\ude00"]"#));
    assert!(plain_json(b"[1,\t2]"));
    assert!(!plain_json(b"[1,\r2]"));
}

/// A placeholder whose result is no longer kept (expired, or released
/// already) is answered with a JSON-RPC error for its request, never
/// written out empty; a short line that only mentions the key is left.
#[tokio::test]
async fn a_placeholder_without_its_result_becomes_an_error() {
    assert_eq!(MARKER_KEY, format!("\"{MARKER}\":\"").as_bytes());
    let (tx, rx) = tokio::io::duplex(1 << 16);
    let reading = tokio::spawn(read_all(rx, 4096));
    let mut writer = ReleasingWriter::new(tx);
    let gone =
        String::from_utf8(placeholder("\"c-9\"", "00112233445566778899aabbccddeeff")).unwrap();
    let mention =
        format!("{{\"jsonrpc\":\"2.0\",\"method\":\"x\",\"params\":{{\"{MARKER}\":1}}}}\n");
    writer.write_all(gone.as_bytes()).await.unwrap();
    writer.write_all(mention.as_bytes()).await.unwrap();
    writer.shutdown().await.unwrap();
    drop(writer);
    let written = String::from_utf8(reading.await.unwrap()).unwrap();
    let lines: Vec<&str> = written.split_inclusive('\n').collect();
    assert_eq!(lines.len(), 2, "{written}");
    let error: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(error["id"], "c-9");
    assert_eq!(error["error"]["code"], -32603, "{error}");
    assert_eq!(lines[1], mention);
}

/// Which revision's results are kept for which client: a 2026-07-28
/// client's only with `resultType` `complete` and the caching hints; an
/// earlier client's with or without them. Hints rmcp would refuse (a
/// fractional `ttlMs`, an unknown `cacheScope`) are never kept.
#[tokio::test]
async fn results_are_kept_for_the_client_s_revision() {
    // With escapes (each text scanned again) and without (skimmed).
    for text in [escaped_text(100_000), plain_text(100_000)] {
        let hinted = |n: u32, ttl: &str, scope: &str| {
            format!(
                "{{\"jsonrpc\":\"2.0\",\"id\":{n},\"result\":{{\"contents\":[{{\"uri\":\"a\",\"text\":{text}}}],\"resultType\":\"complete\",\"ttlMs\":{ttl},\"cacheScope\":{scope}}}}}\n"
            )
        };
        let good = |n: u32| hinted(n, "0", "\"private\"");
        let plain = read_answer("3", &text);
        let refused = [
            hinted(4, "1.5", "\"private\""),
            hinted(5, "0", "\"bogus\""),
            hinted(6, "-1", "\"public\""),
        ];
        let input = [good(1), good(2), plain.clone()].concat() + &refused.concat();
        let wanted = Arc::new(Wanted::default());
        wanted.add(&id(1), MODERN);
        wanted.add(&id(2), LEGACY);
        wanted.add(&id(3), MODERN);
        wanted.add(&id(4), MODERN);
        wanted.add(&id(5), LEGACY);
        wanted.add(&id(6), MODERN);
        let out =
            String::from_utf8(through_reader(input.into_bytes(), 9000, wanted).await).unwrap();
        let lines: Vec<&str> = out.split_inclusive('\n').collect();
        assert_eq!(lines.len(), 6);
        for (line, n) in lines[..2].iter().zip(1..) {
            assert!(line.len() < 200 && line.contains(MARKER), "{n}: {line}");
            let token = line.split(&format!("\"{MARKER}\":\"")).nth(1).unwrap();
            let kept = release(&token[..32]).unwrap();
            assert!(kept.line == good(n).as_bytes(), "{n}: not the line read");
            assert!(kept.line[kept.result.clone()].starts_with(b"{\"contents\""));
        }
        assert_eq!(lines[2], plain);
        for (line, sent) in lines[3..].iter().zip(&refused) {
            assert_eq!(line, sent);
        }
    }
}

/// A pipe's buffer size (Linux).
#[cfg(target_os = "linux")]
fn pipe_size(fd: std::os::fd::RawFd) -> i32 {
    // SAFETY: F_GETPIPE_SZ reads the size of the open pipe `fd`.
    unsafe { libc::fcntl(fd, libc::F_GETPIPE_SZ) }
}

/// The reader widens the server's pipe once a large message came through
/// it, not before, to fit the largest so far (a power of two, at most
/// 1 MiB); the writer the client's, before it writes a large one.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn pipes_are_widened_to_fit_large_messages() {
    use std::os::fd::AsRawFd;
    use tokio::net::unix::pipe;

    let (mut tx, rx) = pipe::pipe().unwrap();
    let fd = rx.as_raw_fd();
    let default = pipe_size(fd);
    assert_eq!(default, 64 * 1024);
    let mut reader = HoldingReader::new(rx, Arc::default()).widening(crate::pipes::Widen::pipe(fd));
    let mut buf = vec![0u8; 1 << 16];
    for (text, size) in [
        (None, default),
        (Some(MIN_BYTES + 10), 128 * 1024),
        (Some(700 * 1024), 1 << 20),
        (Some(3 << 20), 1 << 20),
    ] {
        let line = match text {
            None => "{\"small\":1}\n".to_owned(),
            Some(n) => read_answer("1", &escaped_text(n)),
        };
        let writing = tokio::spawn(async move {
            tx.write_all(line.as_bytes()).await.unwrap();
            tx
        });
        let mut out = Vec::new();
        while !out.contains(&b'\n') {
            let n = reader.read(&mut buf).await.unwrap();
            out.extend_from_slice(&buf[..n]);
        }
        tx = writing.await.unwrap();
        assert_eq!(pipe_size(fd), size, "after a line of {text:?}");
    }

    let (tx, _rx) = pipe::pipe().unwrap();
    let fd = tx.as_raw_fd();
    let mut writer = ReleasingWriter::new(tx).widening(fd);
    writer.write_all(b"{\"small\":1}\n").await.unwrap();
    writer.flush().await.unwrap();
    assert_eq!(pipe_size(fd), default);
    // A large message widens the pipe before it is written.
    writer.write_all(&vec![b'x'; 200 * 1024]).await.unwrap();
    assert_eq!(pipe_size(fd), 256 * 1024);
}
