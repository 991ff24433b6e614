//! [`SentenceModel`]: a sentence-transformers model of the BERT family, run
//! by candle on the CPU.

use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::Config;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};
use toolexec::Error;
use toolexec::search::Embedder;

use crate::bert::{Bert, native_int8};

/// Longest input when the model directory does not say
/// (`sentence_bert_config.json` `max_seq_length`).
const DEFAULT_MAX_TOKENS: usize = 256;
/// Passages run through the encoder at once. Measured on StableToolBench
/// passages (2 cores): 8 embeds about 30% more passages per second than 32,
/// whose activations and attention scores (tens of MB per step) miss the
/// caches and fault in fresh pages; 1 to 16 are within a few percent.
const BATCH: usize = 8;

/// How token vectors become one sentence vector (`1_Pooling/config.json`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pooling {
    Mean,
    Cls,
    Max,
}

#[derive(Deserialize)]
struct PoolingConfig {
    #[serde(default)]
    pooling_mode_cls_token: bool,
    #[serde(default)]
    pooling_mode_mean_tokens: bool,
    #[serde(default)]
    pooling_mode_max_tokens: bool,
}

#[derive(Deserialize)]
struct SentenceConfig {
    max_seq_length: Option<usize>,
}

#[derive(Deserialize)]
struct Module {
    #[serde(rename = "type")]
    kind: String,
}

/// How a [`SentenceModel`] multiplies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Precision {
    /// 8-bit integer weights and activations, where the CPU multiplies
    /// them natively (AVX-512 VNNI or AVX-VNNI); 32-bit floats elsewhere.
    /// A query embeds in about half the time of `F32`; vectors stay within
    /// a cosine of 0.998 of the exact ones, and StableToolBench's figures
    /// are the same within 0.005 (BENCHMARKS.md, issue 17).
    #[default]
    Int8,
    /// 32-bit floats throughout: the model's own numbers.
    F32,
}

impl Precision {
    /// `int8` or `f32`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Precision::Int8 => "int8",
            Precision::F32 => "f32",
        }
    }
}

/// A loaded model: the encoder, its tokenizer, its pooling and whether it
/// normalises.
pub struct SentenceModel {
    model: Bert,
    tokenizer: Tokenizer,
    pooling: Pooling,
    normalize: bool,
    id: String,
    dim: usize,
    precision: Precision,
}

impl std::fmt::Debug for SentenceModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SentenceModel")
            .field("id", &self.id)
            .field("pooling", &self.pooling)
            .field("normalize", &self.normalize)
            .field("precision", &self.precision)
            .finish_non_exhaustive()
    }
}

impl SentenceModel {
    /// Loads the model in `dir` at the default [`Precision`]. A missing or
    /// unreadable file, or a model this crate cannot run, is
    /// `invalid_request` at `search.model` naming the file and what is
    /// wrong.
    pub fn load(dir: &Path) -> Result<SentenceModel, Error> {
        SentenceModel::load_with(dir, Precision::default())
    }

    /// Loads the model in `dir` to run at `precision` (`Int8` where the CPU
    /// has no native 8-bit product is `F32`: [`SentenceModel::precision`]
    /// says which).
    pub fn load_with(dir: &Path, precision: Precision) -> Result<SentenceModel, Error> {
        let precision = match precision {
            Precision::Int8 if !native_int8() => {
                tracing::info!(
                    "int8 embeddings need AVX-512 VNNI or AVX-VNNI, which this CPU lacks; using f32"
                );
                Precision::F32
            }
            p => p,
        };
        let file = |name: &str| dir.join(name);
        let read = |path: PathBuf| {
            std::fs::read(&path).map_err(|e| bad(format!("cannot read {}: {e}", path.display())))
        };
        let config_bytes = read(file("config.json"))?;
        let config: Config = serde_json::from_slice(&config_bytes).map_err(|e| {
            bad(format!(
                "{}: not a BERT-family configuration this build can run: {e}",
                file("config.json").display()
            ))
        })?;
        let weights = read(file("model.safetensors"))?;
        let tokenizer_bytes = read(file("tokenizer.json"))?;
        let mut tokenizer = Tokenizer::from_bytes(&tokenizer_bytes)
            .map_err(|e| bad(format!("{}: {e}", file("tokenizer.json").display())))?;
        let pooling = match std::fs::read(file("1_Pooling/config.json")) {
            Ok(bytes) => {
                let p: PoolingConfig = serde_json::from_slice(&bytes).map_err(|e| {
                    bad(format!("{}: {e}", file("1_Pooling/config.json").display()))
                })?;
                match (
                    p.pooling_mode_mean_tokens,
                    p.pooling_mode_cls_token,
                    p.pooling_mode_max_tokens,
                ) {
                    (true, false, false) => Pooling::Mean,
                    (false, true, false) => Pooling::Cls,
                    (false, false, true) => Pooling::Max,
                    _ => {
                        return Err(bad(format!(
                            "{}: one pooling mode (mean, cls or max) is supported",
                            file("1_Pooling/config.json").display()
                        )));
                    }
                }
            }
            Err(_) => Pooling::Mean,
        };
        let normalize = match std::fs::read(file("modules.json")) {
            Ok(bytes) => serde_json::from_slice::<Vec<Module>>(&bytes)
                .map_err(|e| bad(format!("{}: {e}", file("modules.json").display())))?
                .iter()
                .any(|m| m.kind.ends_with(".Normalize")),
            Err(_) => false,
        };
        let max_tokens = std::fs::read(file("sentence_bert_config.json"))
            .ok()
            .and_then(|b| serde_json::from_slice::<SentenceConfig>(&b).ok())
            .and_then(|c| c.max_seq_length)
            .unwrap_or(DEFAULT_MAX_TOKENS)
            .min(config.max_position_embeddings);
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: max_tokens,
                ..TruncationParams::default()
            }))
            .map_err(|e| bad(format!("tokenizer truncation: {e}")))?;
        tokenizer.with_padding(Some(PaddingParams {
            strategy: PaddingStrategy::BatchLongest,
            ..PaddingParams::default()
        }));
        let mut digest = Sha256::new();
        for part in [&config_bytes, &tokenizer_bytes, &weights] {
            digest.update((part.len() as u64).to_le_bytes());
            digest.update(part);
        }
        // The precision is part of the id: vectors of one precision are
        // never cached as, or mixed with, the other's.
        let id = format!(
            "{}-{}{}",
            dir.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            hex(&digest.finalize()[..8]),
            match precision {
                Precision::F32 => "",
                Precision::Int8 => "-int8",
            }
        );
        let vb = VarBuilder::from_buffered_safetensors(weights, DType::F32, &Device::Cpu)
            .map_err(|e| bad(format!("{}: {e}", file("model.safetensors").display())))?;
        let model = Bert::load(vb, &config, precision).map_err(|e| {
            bad(format!(
                "{}: not a BERT model this build can run: {e}",
                file("model.safetensors").display()
            ))
        })?;
        Ok(SentenceModel {
            model,
            tokenizer,
            pooling,
            normalize,
            id,
            dim: config.hidden_size,
            precision,
        })
    }

    /// The precision it runs at.
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// Length of the vectors.
    pub fn dimension(&self) -> usize {
        self.dim
    }

    fn embed_batch(&self, passages: &[&str]) -> Result<Vec<Vec<f32>>, Error> {
        let encodings = self
            .tokenizer
            .encode_batch(passages.to_vec(), true)
            .map_err(|e| failed(format!("tokenizing: {e}")))?;
        let rows = encodings.len();
        let cols = encodings.first().map_or(0, |e| e.get_ids().len());
        let flat = |f: &dyn Fn(&tokenizers::Encoding) -> &[u32]| -> Vec<u32> {
            encodings
                .iter()
                .flat_map(|e| f(e).iter().copied())
                .collect()
        };
        let tensor = |v: Vec<u32>| {
            Tensor::from_vec(v, (rows, cols), &Device::Cpu).map_err(|e| failed(e.to_string()))
        };
        let ids = tensor(flat(&|e| e.get_ids()))?;
        let types = tensor(flat(&|e| e.get_type_ids()))?;
        let mask = tensor(flat(&|e| e.get_attention_mask()))?;
        let run = || -> candle_core::Result<Tensor> {
            let hidden = self.model.forward(&ids, &types, &mask)?;
            let pooled = match self.pooling {
                Pooling::Cls => hidden.narrow(1, 0, 1)?.squeeze(1)?,
                Pooling::Mean => {
                    let m = mask.to_dtype(DType::F32)?.unsqueeze(2)?;
                    let sum = hidden.broadcast_mul(&m)?.sum(1)?;
                    let count = m.sum(1)?.clamp(1e-9, f32::MAX)?;
                    sum.broadcast_div(&count)?
                }
                Pooling::Max => {
                    let m = mask.to_dtype(DType::F32)?.unsqueeze(2)?;
                    // Padding never wins: -1e9 added where the mask is 0.
                    hidden.broadcast_add(&m.affine(1e9, -1e9)?)?.max(1)?
                }
            };
            if self.normalize {
                let norm = pooled
                    .sqr()?
                    .sum_keepdim(1)?
                    .sqrt()?
                    .clamp(1e-12, f32::MAX)?;
                pooled.broadcast_div(&norm)
            } else {
                Ok(pooled)
            }
        };
        run()
            .and_then(|t| t.to_vec2::<f32>())
            .map_err(|e| failed(format!("running the model: {e}")))
    }
}

impl Embedder for SentenceModel {
    fn model_id(&self) -> &str {
        &self.id
    }

    /// Batches passages of similar length (by bytes), so a batch pads
    /// little; the vectors come back in the passages' order.
    fn embed(&self, passages: &[&str]) -> Result<Vec<Vec<f32>>, Error> {
        let mut order: Vec<usize> = (0..passages.len()).collect();
        order.sort_by_key(|&i| passages[i].len());
        let mut out = vec![Vec::new(); passages.len()];
        for chunk in order.chunks(BATCH) {
            let texts: Vec<&str> = chunk.iter().map(|&i| passages[i]).collect();
            for (&i, vector) in chunk.iter().zip(self.embed_batch(&texts)?) {
                out[i] = vector;
            }
        }
        Ok(out)
    }

    /// Each passage on its own: a query's passages (the whole request and
    /// its sentences) differ in length, and padding them to the longest
    /// costs more than batching saves at a few rows each.
    fn embed_query(&self, passages: &[&str]) -> Result<Vec<Vec<f32>>, Error> {
        let mut out = Vec::with_capacity(passages.len());
        for passage in passages {
            out.extend(self.embed_batch(&[passage])?);
        }
        Ok(out)
    }
}

fn bad(message: String) -> Error {
    Error::invalid_request("search.model", message)
}

fn failed(message: String) -> Error {
    Error::backend_unavailable("embeddings", message)
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
