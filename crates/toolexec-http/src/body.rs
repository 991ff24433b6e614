//! Reading a response body under a size bound: a larger body is an error,
//! never a truncated read.

/// Why a bounded body could not be read.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    /// The body is larger than the bound (in bytes).
    #[error("larger than {0} bytes")]
    TooLarge(usize),
    /// The connection failed while reading.
    #[error(transparent)]
    Read(#[from] reqwest::Error),
}

/// The body of `response`, at most `max` bytes.
pub async fn read_capped(
    response: &mut reqwest::Response,
    max: usize,
) -> Result<Vec<u8>, BodyError> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        if chunk.len() > max - body.len() {
            return Err(BodyError::TooLarge(max));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}
