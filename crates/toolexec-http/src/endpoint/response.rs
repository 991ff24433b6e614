//! A response as a tool output: JSON as the structured value, text as a
//! string, images and audio as content blocks, other bytes as an embedded
//! resource; a non-2xx status as `execution_failed` with the status and an
//! excerpt of the body; a body over the limit as `limit_exceeded`, found
//! without reading it whole.

use base64::Engine as _;
use reqwest::Response;
use serde_json::{Value, json};
use toolexec::error::LimitKind;
use toolexec::{Content, Error, ToolOutput};

use crate::client::Api;
use crate::tls::{error_chain, next_link};

/// Bytes of an error body kept for the message and details.
const EXCERPT_BYTES: usize = 2048;
/// Characters of that excerpt put in the message.
const MESSAGE_CHARS: usize = 300;

pub(crate) async fn read(api: &Api, tool: &str, response: Response) -> Result<ToolOutput, Error> {
    let status = response.status();
    // Without its query, which may hold an API key.
    let url = {
        let mut url = response.url().clone();
        url.set_query(None);
        url.to_string()
    };
    let media = media_type(&response);
    if !status.is_success() {
        let (bytes, cut) = body(api, response, EXCERPT_BYTES).await?;
        return Err(http_error(tool, status, media.as_deref(), &bytes, cut));
    }
    let max = api.options.max_response_bytes;
    let too_big = |len: String| Error::LimitExceeded {
        limit: LimitKind::OutputBytes,
        message: format!(
            "the response of {tool} ({len}) is larger than max_response_bytes {max}; \
             it was not read"
        ),
    };
    if let Some(len) = response.content_length()
        && len > max as u64
    {
        return Err(too_big(format!("{len} bytes")));
    }
    let (bytes, cut) = body(api, response, max).await?;
    if cut {
        return Err(too_big(format!("more than {max} bytes")));
    }
    if bytes.is_empty() {
        return Ok(ToolOutput::structured(Value::Null));
    }
    let media = media.unwrap_or_else(|| "application/octet-stream".to_owned());
    if is_json(&media) {
        return serde_json::from_slice(&bytes)
            .map(ToolOutput::structured)
            .map_err(|e| {
                Error::execution_failed(
                    tool,
                    format!("HTTP {status}: the {media} body is not JSON: {e}"),
                )
            });
    }
    if is_text(&media) {
        return Ok(ToolOutput::structured(Value::String(
            String::from_utf8_lossy(&bytes).into_owned(),
        )));
    }
    let data = base64::engine::general_purpose::STANDARD.encode(&bytes);
    let block = if media.starts_with("image/") {
        Content::Image {
            data,
            mime_type: media.clone(),
        }
    } else if media.starts_with("audio/") {
        Content::Audio {
            data,
            mime_type: media.clone(),
        }
    } else {
        Content::Resource {
            resource: json!({"uri": url, "mimeType": media, "blob": data}),
        }
    };
    Ok(ToolOutput {
        value: json!({"uri": url, "mimeType": media, "bytes": bytes.len()}),
        content: vec![block],
    })
}

/// Up to `max` bytes of the body, and whether there was more (the rest is
/// not read: the connection is dropped).
async fn body(api: &Api, mut response: Response, max: usize) -> Result<(Vec<u8>, bool), Error> {
    let mut out = Vec::new();
    loop {
        let chunk = response.chunk().await.map_err(|e| {
            Error::backend_unavailable(
                api.name(),
                format!(
                    "reading the response failed: {}",
                    error_chain(&e.without_url(), next_link)
                ),
            )
        })?;
        let Some(chunk) = chunk else {
            return Ok((out, false));
        };
        if out.len() + chunk.len() > max {
            out.extend_from_slice(&chunk[..max - out.len()]);
            return Ok((out, true));
        }
        out.extend_from_slice(&chunk);
    }
}

fn http_error(
    tool: &str,
    status: reqwest::StatusCode,
    media: Option<&str>,
    bytes: &[u8],
    cut: bool,
) -> Error {
    let text = String::from_utf8_lossy(bytes);
    let json_body = media
        .filter(|m| is_json(m))
        .and_then(|_| serde_json::from_slice::<Value>(bytes).ok());
    let summary = match media {
        Some(m) if m.contains("html") => format!("({m} page) {}", squeeze(&strip_tags(&text))),
        _ => squeeze(&text),
    };
    let mut message = format!("HTTP {status}");
    if !summary.is_empty() {
        message.push_str(": ");
        message.extend(summary.chars().take(MESSAGE_CHARS));
        if summary.chars().count() > MESSAGE_CHARS || cut {
            message.push('…');
        }
    }
    let data = json!({
        "status": status.as_u16(),
        "content_type": media,
        "body": json_body.unwrap_or_else(|| Value::String(text.into_owned())),
        "truncated": cut,
    });
    Error::ExecutionFailed {
        tool: tool.to_owned(),
        message,
        data: Some(data),
        panicked: false,
    }
}

/// The media type without parameters, lowercase.
fn media_type(response: &Response) -> Option<String> {
    let value = response
        .headers()
        .get(http::header::CONTENT_TYPE)?
        .to_str()
        .ok()?;
    let essence = value.split(';').next()?.trim().to_ascii_lowercase();
    (!essence.is_empty()).then_some(essence)
}

pub(crate) fn is_json(media: &str) -> bool {
    media == "application/json" || media.ends_with("+json")
}

fn is_text(media: &str) -> bool {
    media.starts_with("text/")
        || media.ends_with("+xml")
        || matches!(
            media,
            "application/xml" | "application/javascript" | "application/x-www-form-urlencoded"
        )
}

/// Whitespace runs become one space.
fn squeeze(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The text of an HTML page, roughly: tags, scripts and styles removed.
fn strip_tags(html: &str) -> String {
    let mut out = String::with_capacity(html.len());
    let mut rest = html;
    while let Some(start) = rest.find('<') {
        out.push_str(&rest[..start]);
        out.push(' ');
        let after = &rest[start..];
        let lower = after.get(..8).unwrap_or(after).to_ascii_lowercase();
        let end_tag = if lower.starts_with("<script") {
            "</script>"
        } else if lower.starts_with("<style") {
            "</style>"
        } else {
            ">"
        };
        rest = match after.to_ascii_lowercase().find(end_tag) {
            Some(i) => &after[i + end_tag.len()..],
            None => "",
        };
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_error_pages_become_their_text() {
        let page = "<html><head><style>p{}</style><title>500</title></head>\
                    <body><h1>Internal  Server\nError</h1><script>x()</script></body></html>";
        assert_eq!(squeeze(&strip_tags(page)), "500 Internal Server Error");
        let e = http_error(
            "api:boom",
            reqwest::StatusCode::INTERNAL_SERVER_ERROR,
            Some("text/html"),
            page.as_bytes(),
            false,
        );
        assert_eq!(e.code().as_str(), "execution_failed");
        assert!(
            e.to_string().contains(
                "HTTP 500 Internal Server Error: (text/html page) 500 Internal Server Error"
            ),
            "{e}"
        );
    }

    #[test]
    fn json_error_bodies_are_kept_as_json() {
        let e = http_error(
            "api:get",
            reqwest::StatusCode::NOT_FOUND,
            Some("application/problem+json"),
            br#"{"detail": "no pet 7"}"#,
            false,
        );
        let details = e.to_body().details.unwrap();
        assert_eq!(details["data"]["body"]["detail"], "no pet 7", "{details}");
        assert_eq!(details["data"]["status"], 404);
    }

    #[test]
    fn media_kinds() {
        assert!(is_json("application/vnd.api+json"));
        assert!(is_text("text/csv"));
        assert!(!is_text("application/octet-stream"));
    }
}
