//! A transformer's shape from its Hugging Face `config.json`: the parameter count and the
//! activations one training step keeps, per layer, from published and measured formulas.
//!
//! Two families are told apart by their fields:
//! - **Llama-style** (`num_hidden_layers`, `hidden_size`, `intermediate_size`; Llama, Mistral,
//!   Qwen, …): RMSNorm, SwiGLU MLP, grouped-query attention, no biases. Parameters: embeddings
//!   `V·h`, per layer `q,o: h²`, `k,v: h·(h·kv/heads)`, MLP `3·h·i`, two norms `2h`; a final norm
//!   `h`; an LM head `V·h` unless tied. This reproduces Llama-2-7B (6 738 415 616) and
//!   Mistral-7B (7 241 732 096) exactly (tests).
//!   Activations per layer, 16-bit: `24·sbh + 8·sbi + 8·bs + 4·abs` bytes — measured exactly on
//!   Hugging Face-style eager layers (RMSNorm upcast to fp32, SDPA attention) with torch 2.11's
//!   saved-tensor hooks, and checked against torch in `collector/tests/estimate_vs_torch.rs`.
//! - **GPT-2-style** (`n_layer`, `n_embd`, `n_head`, `n_positions`): learned position embeddings,
//!   LayerNorm, GELU MLP of `n_inner` (default `4h`), biases, tied head. Parameters reproduce
//!   GPT-2 small (124 439 808). Activations per layer with fused attention: `34·sbh` (Korthikanti
//!   et al. 2022, "Reducing Activation Recomputation in Large Transformer Models", without the
//!   `5·a·s²·b` term that fused/SDPA attention never materialises).
//!
//! With activation checkpointing on every layer, a layer keeps only its input (`2·sbh`) and one
//! layer's activations are rebuilt at a time during backward. The loss keeps the logits: `2·sbV`
//! in 16 bits plus the fp32 copy cross-entropy upcasts to (`4·sbV`; Hugging Face's `ForCausalLMLoss`
//! calls `logits.float()`), often the largest single buffer of a large-vocabulary model.

use serde::Serialize;

/// Which formulas apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Family {
    /// RMSNorm, SwiGLU, grouped-query attention (Llama, Mistral, Qwen, …).
    Llama,
    /// LayerNorm, GELU, learned positions, biases (GPT-2).
    Gpt2,
}

/// What the estimate needs of a model's `config.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ModelConfig {
    /// Which formulas apply.
    pub family: Family,
    /// Transformer layers.
    pub layers: u64,
    /// Hidden size `h`.
    pub hidden: u64,
    /// Attention heads `a`.
    pub heads: u64,
    /// Key/value heads (grouped-query attention); `heads` when not set.
    pub kv_heads: u64,
    /// MLP width `i`.
    pub intermediate: u64,
    /// Vocabulary `V`.
    pub vocab: u64,
    /// Longest sequence the model takes (`max_position_embeddings`, `n_positions`).
    pub max_positions: Option<u64>,
    /// The LM head shares the embedding matrix.
    pub tied_embeddings: bool,
}

/// Why a `config.json` could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// Not JSON.
    #[error("not a JSON model config: {0}")]
    NotJson(String),
    /// A needed field is missing.
    #[error(
        "the model config has no `{0}` (a Llama-style config needs num_hidden_layers, hidden_size, num_attention_heads, intermediate_size, vocab_size; a GPT-2 one n_layer, n_embd, n_head, vocab_size)"
    )]
    Missing(&'static str),
}

impl ModelConfig {
    /// Reads a Hugging Face `config.json`.
    pub fn from_json(text: &str) -> Result<ModelConfig, ConfigError> {
        let v: serde_json::Value =
            serde_json::from_str(text).map_err(|e| ConfigError::NotJson(e.to_string()))?;
        let num = |key: &str| v.get(key).and_then(serde_json::Value::as_u64);
        let need = |key: &'static str| num(key).ok_or(ConfigError::Missing(key));
        if num("n_layer").is_some() && num("num_hidden_layers").is_none() {
            let hidden = need("n_embd")?;
            return Ok(ModelConfig {
                family: Family::Gpt2,
                layers: need("n_layer")?,
                hidden,
                heads: need("n_head")?,
                kv_heads: need("n_head")?,
                intermediate: num("n_inner").unwrap_or(4 * hidden),
                vocab: need("vocab_size")?,
                max_positions: num("n_positions").or_else(|| num("n_ctx")),
                tied_embeddings: v
                    .get("tie_word_embeddings")
                    .and_then(serde_json::Value::as_bool)
                    .unwrap_or(true),
            });
        }
        let heads = need("num_attention_heads")?;
        Ok(ModelConfig {
            family: Family::Llama,
            layers: need("num_hidden_layers")?,
            hidden: need("hidden_size")?,
            heads,
            kv_heads: num("num_key_value_heads").unwrap_or(heads),
            intermediate: need("intermediate_size")?,
            vocab: need("vocab_size")?,
            max_positions: num("max_position_embeddings"),
            tied_embeddings: v
                .get("tie_word_embeddings")
                .and_then(serde_json::Value::as_bool)
                .unwrap_or(false),
        })
    }

    /// Parameters of the whole model.
    pub fn parameters(&self) -> u64 {
        let (h, i, v, l) = (self.hidden, self.intermediate, self.vocab, self.layers);
        let head = if self.tied_embeddings { 0 } else { v * h };
        match self.family {
            Family::Llama => {
                let kv = h * self.kv_heads / self.heads.max(1);
                let per_layer = 2 * h * h + 2 * h * kv + 3 * h * i + 2 * h;
                v * h + l * per_layer + h + head
            }
            Family::Gpt2 => {
                let positions = self.max_positions.unwrap_or(1024);
                let per_layer = 2 * h // ln_1
                    + h * 3 * h + 3 * h // c_attn
                    + h * h + h // attention c_proj
                    + 2 * h // ln_2
                    + h * i + i // c_fc
                    + i * h + h; // mlp c_proj
                v * h + positions * h + l * per_layer + 2 * h + head
            }
        }
    }

    /// Bytes one layer keeps for backward at sequence length `s` and batch `b`, with activations
    /// of `element_bytes` (2 for 16-bit compute; the formulas are for 16 bits and scale).
    pub fn activations_per_layer_bytes(&self, s: u64, b: u64, element_bytes: f64) -> f64 {
        let (h, i, a) = (
            self.hidden as f64,
            self.intermediate as f64,
            self.heads as f64,
        );
        let (s, b) = (s as f64, b as f64);
        let sixteen_bit = match self.family {
            Family::Llama => 24.0 * s * b * h + 8.0 * s * b * i + 8.0 * b * s + 4.0 * a * b * s,
            Family::Gpt2 => 34.0 * s * b * h,
        };
        sixteen_bit * element_bytes / 2.0
    }

    /// What the loss keeps of the logits: the 16-bit (or compute-dtype) logits and the fp32 copy
    /// cross-entropy works on.
    pub fn logits_bytes(&self, s: u64, b: u64, element_bytes: f64) -> f64 {
        let logits = (s * b * self.vocab) as f64;
        logits * element_bytes
            + if element_bytes < 4.0 {
                logits * 4.0
            } else {
                0.0
            }
    }

    /// Outside the layers: the embedding's output and the final norm before the LM head (Llama:
    /// RMSNorm keeps its fp32 input and 16-bit output, `8·sbh` with the embedding's; GPT-2:
    /// LayerNorm and the head's input, `4·sbh`).
    pub fn outside_layers_bytes(&self, s: u64, b: u64, element_bytes: f64) -> f64 {
        let sbh = (s * b * self.hidden) as f64;
        let sixteen_bit = match self.family {
            Family::Llama => 8.0 * sbh,
            Family::Gpt2 => 4.0 * sbh,
        };
        sixteen_bit * element_bytes / 2.0
    }

    /// Activations of one step: every layer's (or, with checkpointing, every layer's input plus
    /// one layer rebuilt in backward), the embedding output and final norm, and the logits.
    pub fn activations_bytes(
        &self,
        s: u64,
        b: u64,
        element_bytes: f64,
        checkpointing: bool,
    ) -> f64 {
        let layer = self.activations_per_layer_bytes(s, b, element_bytes);
        let layers = self.layers as f64;
        let kept = if checkpointing {
            layers * (s * b * self.hidden) as f64 * element_bytes + layer
        } else {
            layers * layer
        };
        kept + self.outside_layers_bytes(s, b, element_bytes)
            + self.logits_bytes(s, b, element_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LLAMA_2_7B: &str = r#"{"architectures": ["LlamaForCausalLM"], "hidden_size": 4096,
        "intermediate_size": 11008, "max_position_embeddings": 4096, "num_attention_heads": 32,
        "num_hidden_layers": 32, "num_key_value_heads": 32, "vocab_size": 32000,
        "tie_word_embeddings": false, "torch_dtype": "float16"}"#;
    const MISTRAL_7B: &str = r#"{"hidden_size": 4096, "intermediate_size": 14336,
        "max_position_embeddings": 32768, "num_attention_heads": 32, "num_hidden_layers": 32,
        "num_key_value_heads": 8, "vocab_size": 32000, "tie_word_embeddings": false}"#;
    const GPT2: &str = r#"{"n_ctx": 1024, "n_embd": 768, "n_head": 12, "n_layer": 12,
        "n_positions": 1024, "vocab_size": 50257}"#;

    #[test]
    fn parameter_counts_match_the_published_models() {
        assert_eq!(
            ModelConfig::from_json(LLAMA_2_7B).unwrap().parameters(),
            6_738_415_616
        );
        assert_eq!(
            ModelConfig::from_json(MISTRAL_7B).unwrap().parameters(),
            7_241_732_096
        );
        let gpt2 = ModelConfig::from_json(GPT2).unwrap();
        assert_eq!(gpt2.family, Family::Gpt2);
        assert_eq!(gpt2.parameters(), 124_439_808);
    }

    #[test]
    fn activations_follow_the_formulas() {
        // Llama-2-7B, s = 4096, b = 1, bf16: 24·sbh + 8·sbi per layer ≈ 0.375 + 0.336 GiB.
        let llama = ModelConfig::from_json(LLAMA_2_7B).unwrap();
        let layer = llama.activations_per_layer_bytes(4096, 1, 2.0);
        let expected =
            24.0 * 4096.0 * 4096.0 + 8.0 * 4096.0 * 11008.0 + 8.0 * 4096.0 + 4.0 * 32.0 * 4096.0;
        assert_eq!(layer, expected);
        // Logits: 4096 × 32000 in bf16 plus the fp32 copy = 6 bytes each.
        assert_eq!(llama.logits_bytes(4096, 1, 2.0), 6.0 * 4096.0 * 32000.0);
        // Checkpointing keeps 2·sbh per layer plus one layer.
        let full = llama.activations_bytes(4096, 1, 2.0, false);
        let ckpt = llama.activations_bytes(4096, 1, 2.0, true);
        assert_eq!(
            ckpt,
            32.0 * 2.0 * 4096.0 * 4096.0
                + layer
                + 8.0 * 4096.0 * 4096.0
                + llama.logits_bytes(4096, 1, 2.0)
        );
        // 32 layers of 0.71 GiB against 32 inputs of 32 MiB and one layer: about 9× less.
        assert!(full > 8.0 * ckpt, "{full} {ckpt}");
        // GPT-2 small: 34·sbh per layer (Korthikanti et al.), s = 1024, b = 8.
        let gpt2 = ModelConfig::from_json(GPT2).unwrap();
        assert_eq!(
            gpt2.activations_per_layer_bytes(1024, 8, 2.0),
            34.0 * 1024.0 * 8.0 * 768.0
        );
    }

    #[test]
    fn bad_configs_say_what_is_missing() {
        assert!(matches!(
            ModelConfig::from_json("{"),
            Err(ConfigError::NotJson(_))
        ));
        let e = ModelConfig::from_json(r#"{"hidden_size": 8}"#).unwrap_err();
        assert_eq!(e, ConfigError::Missing("num_attention_heads"));
    }
}
