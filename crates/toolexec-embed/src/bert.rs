//! The BERT encoder, with its dense layers as candle quantized matrix
//! products ([`QMatMul`]).
//!
//! candle-transformers' `BertModel` multiplies through candle's general
//! matrix product, which copies the weights into its own layout for every
//! product. A query is about ten tokens, for which that copy of 44 MB
//! costs more than the arithmetic. candle's quantized product reads the
//! weights in place: in 32-bit floats it embeds a query in 6.4 ms where
//! `BertModel` takes 11.5, and in 8-bit integers with VNNI in about half
//! that (BENCHMARKS.md, issue 17).
//! The layers, names and arithmetic are those of `BertModel` (and of
//! Hugging Face's); only the products differ.

use std::sync::Arc;

use candle_core::quantized::k_quants::QK_K;
use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{D, DType, Module, Result, Tensor};
use candle_nn::{Embedding, LayerNorm, VarBuilder};
use candle_transformers::models::bert::{Config, HiddenAct};

use crate::Precision;

/// Rows (tokens in a batch) from which a dense layer multiplies with
/// candle's general product after all: its packing pays off over many rows.
/// Measured on StableToolBench passages (2 cores): for batches of 8
/// passages (about 700 rows) the general product embeds 1.6 times as many
/// passages per second; at 11 rows (a query) the quantized one is 1.8
/// times as fast; between 64 and 128 rows they are within noise.
const GEMM_ROWS: usize = 64;

/// A dense layer. In f32, the weights go through candle's quantized
/// product (no repacking per product) under [`GEMM_ROWS`] rows and its
/// general product from there: the same numbers as `candle_nn::Linear`.
/// In int8, they are quantized at load (ggml's `Q8_0`, a scale per 32) and
/// the activations per product (`Q8K`), multiplied by candle's repacked
/// VNNI kernels; those need the inner dimension in blocks of 256, so the
/// weights are padded with zero columns and each input with zeros.
struct Linear {
    weight: QMatMul,
    bias: Tensor,
    precision: Precision,
    /// Zero columns after the inputs (int8 only).
    pad: usize,
}

impl Linear {
    fn load(inputs: usize, outputs: usize, vb: VarBuilder, precision: Precision) -> Result<Self> {
        let weight = vb.get((outputs, inputs), "weight")?;
        let bias = vb.get(outputs, "bias")?;
        let (weight, pad) = match precision {
            Precision::F32 => (QTensor::quantize(&weight, GgmlDType::F32)?, 0),
            Precision::Int8 => {
                let pad = inputs.next_multiple_of(QK_K) - inputs;
                let weight = weight.pad_with_zeros(1, 0, pad)?;
                (QTensor::quantize(&weight, GgmlDType::Q8_0)?, pad)
            }
        };
        // The variant directly: `QMatMul::from_arc` turns float formats back
        // into a plain tensor, which is the packing product again.
        Ok(Linear {
            weight: QMatMul::QTensor(Arc::new(weight)),
            bias,
            precision,
            pad,
        })
    }
}

impl Module for Linear {
    fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        if self.pad > 0 {
            let xs = xs.pad_with_zeros(D::Minus1, 0, self.pad)?;
            return xs.apply(&self.weight)?.broadcast_add(&self.bias);
        }
        let rows = xs.elem_count() / xs.dim(D::Minus1)?.max(1);
        if self.precision == Precision::F32
            && rows >= GEMM_ROWS
            && let QMatMul::QTensor(weight) = &self.weight
        {
            // A copy of the weights as a plain tensor costs a fraction of a
            // product this size, and saves keeping both forms in memory.
            let weight = weight.dequantize(xs.device())?;
            return xs.broadcast_matmul(&weight.t()?)?.broadcast_add(&self.bias);
        }
        xs.apply(&self.weight)?.broadcast_add(&self.bias)
    }
}

/// Whether candle multiplies 8-bit integers natively here (its repacked
/// `Q8_0` kernels need AVX-512 VNNI or AVX-VNNI; with AVX2 alone they are
/// no faster than 32-bit floats).
pub(crate) fn native_int8() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        (has!("avx512f") && has!("avx512vnni")) || (has!("avx2") && has!("avxvnni"))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

fn layer_norm(size: usize, eps: f64, vb: VarBuilder) -> Result<LayerNorm> {
    Ok(LayerNorm::new(
        vb.get(size, "weight")?,
        vb.get(size, "bias")?,
        eps,
    ))
}

fn embedding(rows: usize, size: usize, vb: VarBuilder) -> Result<Embedding> {
    Ok(Embedding::new(vb.get((rows, size), "weight")?, size))
}

struct Layer {
    query: Linear,
    key: Linear,
    value: Linear,
    attention_out: Linear,
    attention_norm: LayerNorm,
    intermediate: Linear,
    output: Linear,
    output_norm: LayerNorm,
}

impl Layer {
    fn load(vb: VarBuilder, c: &Config, p: Precision) -> Result<Self> {
        let (h, i) = (c.hidden_size, c.intermediate_size);
        let attention = vb.pp("attention");
        let this = attention.pp("self");
        Ok(Layer {
            query: Linear::load(h, h, this.pp("query"), p)?,
            key: Linear::load(h, h, this.pp("key"), p)?,
            value: Linear::load(h, h, this.pp("value"), p)?,
            attention_out: Linear::load(h, h, attention.pp("output").pp("dense"), p)?,
            attention_norm: layer_norm(
                h,
                c.layer_norm_eps,
                attention.pp("output").pp("LayerNorm"),
            )?,
            intermediate: Linear::load(h, i, vb.pp("intermediate").pp("dense"), p)?,
            output: Linear::load(i, h, vb.pp("output").pp("dense"), p)?,
            output_norm: layer_norm(h, c.layer_norm_eps, vb.pp("output").pp("LayerNorm"))?,
        })
    }
}

/// A BERT encoder: embeddings and the layers, without the pooler (sentence
/// models pool the token vectors themselves).
pub(crate) struct Bert {
    word: Embedding,
    position: Embedding,
    token_type: Embedding,
    embedding_norm: LayerNorm,
    layers: Vec<Layer>,
    heads: usize,
    head_size: usize,
    act: HiddenAct,
}

impl Bert {
    /// Loads the weights under `vb` (or under `bert.` when the file has
    /// that prefix, as `BertModel` does).
    pub(crate) fn load(vb: VarBuilder, c: &Config, precision: Precision) -> Result<Self> {
        if c.num_attention_heads == 0 || !c.hidden_size.is_multiple_of(c.num_attention_heads) {
            candle_core::bail!(
                "hidden_size {} is not a multiple of num_attention_heads {}",
                c.hidden_size,
                c.num_attention_heads
            );
        }
        let vb = if vb.contains_tensor("bert.embeddings.word_embeddings.weight") {
            vb.pp("bert")
        } else {
            vb
        };
        let e = vb.pp("embeddings");
        let h = c.hidden_size;
        let layers = (0..c.num_hidden_layers)
            .map(|n| Layer::load(vb.pp("encoder.layer").pp(n.to_string()), c, precision))
            .collect::<Result<Vec<_>>>()?;
        Ok(Bert {
            word: embedding(c.vocab_size, h, e.pp("word_embeddings"))?,
            position: embedding(c.max_position_embeddings, h, e.pp("position_embeddings"))?,
            token_type: embedding(c.type_vocab_size, h, e.pp("token_type_embeddings"))?,
            embedding_norm: layer_norm(h, c.layer_norm_eps, e.pp("LayerNorm"))?,
            layers,
            heads: c.num_attention_heads,
            head_size: h / c.num_attention_heads,
            act: c.hidden_act,
        })
    }

    /// Token vectors, `(batch, tokens, hidden)`, for `ids`, `types` and
    /// `mask` of shape `(batch, tokens)`; a mask of 0 hides a token (padding)
    /// from every other.
    pub(crate) fn forward(&self, ids: &Tensor, types: &Tensor, mask: &Tensor) -> Result<Tensor> {
        let (batch, tokens) = ids.dims2()?;
        let positions = Tensor::arange(0u32, tokens as u32, ids.device())?;
        let mut xs = self
            .word
            .forward(ids)?
            .add(&self.token_type.forward(types)?)?
            .broadcast_add(&self.position.forward(&positions)?)?
            .apply(&self.embedding_norm)?;
        // 0 where the mask is 1, the lowest float where it is 0, added to
        // every head's scores: (batch, 1, 1, tokens).
        let hide = mask
            .to_dtype(DType::F32)?
            .affine(-(f32::MIN as f64), f32::MIN as f64)?
            .reshape((batch, 1, 1, tokens))?;
        let scale = 1.0 / (self.head_size as f64).sqrt();
        let heads = |t: Tensor| -> Result<Tensor> {
            t.reshape((batch, tokens, self.heads, self.head_size))?
                .transpose(1, 2)?
                .contiguous()
        };
        for layer in &self.layers {
            let q = heads(layer.query.forward(&xs)?)?;
            let k = heads(layer.key.forward(&xs)?)?;
            let v = heads(layer.value.forward(&xs)?)?;
            let scores = (q.matmul(&k.t()?)? * scale)?.broadcast_add(&hide)?;
            let probs = candle_nn::ops::softmax_last_dim(&scores)?;
            let context = probs
                .matmul(&v)?
                .transpose(1, 2)?
                .contiguous()?
                .flatten_from(D::Minus2)?;
            let attended = layer
                .attention_out
                .forward(&context)?
                .add(&xs)?
                .apply(&layer.attention_norm)?;
            let inner = layer.intermediate.forward(&attended)?;
            let inner = match self.act {
                HiddenAct::Gelu => gelu_erf(&inner)?,
                HiddenAct::GeluApproximate => inner.gelu()?,
                HiddenAct::Relu => inner.relu()?,
            };
            xs = layer
                .output
                .forward(&inner)?
                .add(&attended)?
                .apply(&layer.output_norm)?;
        }
        Ok(xs)
    }
}

/// GELU with erf, as candle's `Tensor::gelu_erf` computes it, but with a
/// rational approximation of erf (the one XLA and Eigen use for `f32`, a
/// few ulp from the exact value) in a loop the compiler vectorizes: candle
/// calls libm's `erf` element by element, a tenth of a query's embedding.
fn gelu_erf(xs: &Tensor) -> Result<Tensor> {
    let mut values: Vec<f32> = xs.flatten_all()?.to_vec1()?;
    for x in &mut values {
        *x = 0.5 * *x * (1.0 + erf(*x * std::f32::consts::FRAC_1_SQRT_2));
    }
    Tensor::from_vec(values, xs.shape(), xs.device())
}

/// erf(x) as the quotient of an odd polynomial of degree 13 and an even
/// one of degree 8 over [−4, 4]; outside, erf is ±1 in `f32`.
#[inline(always)]
fn erf(x: f32) -> f32 {
    const ALPHA: [f32; 7] = [
        -2.726_142_3e-10,
        2.770_681_4e-8,
        -2.101_024e-6,
        -5.692_506_4e-5,
        -7.349_906e-4,
        -2.9546e-3,
        -1.609_603_3e-2,
    ];
    const BETA: [f32; 5] = [
        -1.456_607_2e-5,
        -2.133_740_6e-4,
        -1.682_827e-3,
        -7.373_329e-3,
        -1.426_474e-2,
    ];
    let x = x.clamp(-4.0, 4.0);
    let x2 = x * x;
    let p = ALPHA.iter().fold(0.0f32, |acc, a| acc * x2 + a) * x;
    let q = BETA.iter().fold(0.0f32, |acc, b| acc * x2 + b);
    p / q
}

#[cfg(test)]
mod tests {
    use candle_core::Device;
    use candle_transformers::models::bert::BertModel;

    use super::*;

    /// The largest absolute difference between two tensors' elements.
    fn largest_difference(a: &Tensor, b: &Tensor) -> f32 {
        (a - b)
            .unwrap()
            .abs()
            .unwrap()
            .max_all()
            .unwrap()
            .to_scalar::<f32>()
            .unwrap()
    }

    /// The fast GELU against candle's (libm's erf) over the range that
    /// matters and past both clamps.
    #[test]
    fn gelu_matches_candles() {
        let xs: Vec<f32> = (-12_000..12_000).map(|i| i as f32 * 0.001).collect();
        let xs = Tensor::from_vec(xs, (3, 8_000), &Device::Cpu).unwrap();
        let ours = gelu_erf(&xs).unwrap();
        let theirs = xs.gelu_erf().unwrap();
        assert_eq!(ours.dims(), theirs.dims());
        let worst = largest_difference(&ours, &theirs);
        assert!(worst < 2e-6, "largest difference {worst}");
        assert_eq!(erf(0.0), 0.0);
        assert!((erf(10.0) - 1.0).abs() < 1e-6 && (erf(-10.0) + 1.0).abs() < 1e-6);
    }

    /// The same token vectors as candle-transformers' `BertModel` in f32
    /// (through both of its products) and close ones in int8, for batches
    /// with padding (the mask matters), with the real all-MiniLM-L6-v2.
    #[test]
    fn matches_candle_transformers_bert() {
        let Some(dir) = toolexec_testkit::dep(
            "bert::tests::matches_candle_transformers_bert",
            "TOOLEXEC_EMBED_MODEL",
        ) else {
            return;
        };
        let dir = std::path::Path::new(&dir);
        let config: Config =
            serde_json::from_slice(&std::fs::read(dir.join("config.json")).unwrap()).unwrap();
        let weights = std::fs::read(dir.join("model.safetensors")).unwrap();
        let vb = VarBuilder::from_buffered_safetensors(weights, DType::F32, &Device::Cpu).unwrap();
        let ours = Bert::load(vb.clone(), &config, Precision::F32).unwrap();
        let int8 = Bert::load(vb.clone(), &config, Precision::Int8).unwrap();
        let reference = BertModel::load(vb, &config).unwrap();
        // 7 tokens, and 4 tokens then 3 of padding.
        let full = [101u32, 2054, 2097, 1996, 4633, 2022, 102];
        let padded = [101u32, 7592, 2088, 102, 0, 0, 0];
        // 2 rows (14 tokens, the quantized product) and 10 (70 tokens, past
        // GEMM_ROWS: the general one).
        for rows in [2, 10] {
            let ids: Vec<u32> = (0..rows)
                .flat_map(|r| if r % 2 == 0 { full } else { padded })
                .collect();
            let ids = Tensor::from_vec(ids, (rows, 7), &Device::Cpu).unwrap();
            let mask = ids.ne(0u32).unwrap().to_dtype(DType::U32).unwrap();
            let types = ids.zeros_like().unwrap();
            let a = ours.forward(&ids, &types, &mask).unwrap();
            let b = reference.forward(&ids, &types, Some(&mask)).unwrap();
            let c = int8.forward(&ids, &types, &mask).unwrap();
            assert_eq!(a.dims(), b.dims());
            // Only the unpadded tokens: padding's vectors are never pooled.
            for row in 0..rows {
                let len = if row % 2 == 0 { 7 } else { 4 };
                let tokens = |t: &Tensor| t.get(row).unwrap().narrow(0, 0, len).unwrap();
                let (x, y, z) = (tokens(&a), tokens(&b), tokens(&c));
                let diff = largest_difference(&x, &y);
                assert!(
                    diff < 1e-4,
                    "{rows} rows, row {row}: largest difference {diff}"
                );
                // 8-bit products: each token's vector close in angle.
                let dot = (&z * &y).unwrap().sum(1).unwrap();
                let norms = (z.sqr().unwrap().sum(1).unwrap().sqrt().unwrap()
                    * y.sqr().unwrap().sum(1).unwrap().sqrt().unwrap())
                .unwrap();
                let worst = (dot / norms)
                    .unwrap()
                    .min(0)
                    .unwrap()
                    .to_scalar::<f32>()
                    .unwrap();
                assert!(worst > 0.99, "int8, {rows} rows, row {row}: cosine {worst}");
            }
        }
    }
}
