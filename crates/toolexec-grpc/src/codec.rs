//! The tonic codec of messages described at run time.

use prost::Message as _;
use prost_reflect::{DynamicMessage, MessageDescriptor};
use tonic::Status;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};

/// Encodes any [`DynamicMessage`]; decodes answers as `output`.
pub(crate) struct DynamicCodec {
    output: MessageDescriptor,
}

impl DynamicCodec {
    /// A codec whose answers are `output` messages.
    pub(crate) fn new(output: MessageDescriptor) -> Self {
        DynamicCodec { output }
    }
}

impl Codec for DynamicCodec {
    type Encode = DynamicMessage;
    type Decode = DynamicMessage;
    type Encoder = DynamicEncoder;
    type Decoder = DynamicDecoder;

    fn encoder(&mut self) -> DynamicEncoder {
        DynamicEncoder
    }

    fn decoder(&mut self) -> DynamicDecoder {
        DynamicDecoder(self.output.clone())
    }
}

/// See [`DynamicCodec`].
pub(crate) struct DynamicEncoder;

impl Encoder for DynamicEncoder {
    type Item = DynamicMessage;
    type Error = Status;

    fn encode(&mut self, item: DynamicMessage, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        item.encode(dst)
            .map_err(|e| Status::internal(format!("cannot encode the request: {e}")))
    }
}

/// See [`DynamicCodec`].
pub(crate) struct DynamicDecoder(MessageDescriptor);

impl Decoder for DynamicDecoder {
    type Item = DynamicMessage;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<DynamicMessage>, Status> {
        DynamicMessage::decode(self.0.clone(), src)
            .map(Some)
            .map_err(|e| {
                Status::internal(format!(
                    "the answer is not a valid {}: {e}",
                    self.0.full_name()
                ))
            })
    }
}
