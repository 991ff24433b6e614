//! Sentence embeddings for toolexec's semantic tool search.
//!
//! In ARCHITECTURE.md's picture this sits beside the core: the catalog
//! ([`toolexec::Catalog::set_embedder`]) asks an
//! [`Embedder`](toolexec::search::Embedder) for vectors, and this crate is
//! the one that runs a model, so candle stays out of everything else.
//!
//! [`SentenceModel`] loads a sentence-transformers model directory of the
//! BERT family (`config.json`, `model.safetensors`, `tokenizer.json`,
//! `1_Pooling/config.json`, `modules.json`, `sentence_bert_config.json`)
//! and runs it on the CPU with candle: tokenization, the encoder, the
//! pooling the model declares (mean, CLS or max), and normalisation when
//! it has a `Normalize` module. `all-MiniLM-L6-v2` is the reference model.
//! The encoder's products run in 8-bit integers where the CPU multiplies
//! them natively, in 32-bit floats elsewhere or on request ([`Precision`]).
//! [`CachedEmbedder`] keeps the vectors of passages already embedded on
//! disk, keyed by a digest of the model and the passage.
//!
//! ```no_run
//! use toolexec::search::Embedder;
//! let model = toolexec_embed::SentenceModel::load("models/all-MiniLM-L6-v2".as_ref())?;
//! let vectors = model.embed(&["get the weather for a city"])?;
//! assert_eq!(vectors[0].len(), 384);
//! # Ok::<(), toolexec::Error>(())
//! ```

mod bert;
mod cache;
mod model;

pub use cache::CachedEmbedder;
pub use model::{Precision, SentenceModel};
