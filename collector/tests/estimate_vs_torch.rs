//! `collector estimate` against what torch really keeps: a Llama-style model built in plain
//! torch (`torch_programs/llama_memory.py`) at three sizes reports its parameter count, the
//! bytes autograd saves in a training step and AdamW's state; the estimate from the same
//! `config.json` must agree (parameters and optimizer state exactly, activations within 5%).
//! Needs the torch venv (`scripts/setup-torch.sh`), as the zero-code hook tests do.

mod support;

use oomscope_testkit::Scratch;
use support::run;

#[test]
fn the_estimate_from_a_config_matches_torch_at_three_sizes() {
    let s = Scratch::new("estimate-vs-torch");
    let program = format!(
        "{}/tests/torch_programs/llama_memory.py",
        std::env::var("CARGO_MANIFEST_DIR").unwrap()
    );
    // (hidden, layers, heads, kv heads, intermediate, vocab, seq, batch)
    // Small: bf16 matrix products are emulated on most CPUs (seconds each).
    let sizes = [
        (256, 2, 4, 2, 688, 1000, 128, 2),
        (384, 2, 6, 3, 1024, 2000, 96, 2),
        (512, 2, 8, 2, 1408, 4000, 64, 3),
    ];
    for (n, (h, l, a, kv, i, v, seq, batch)) in sizes.into_iter().enumerate() {
        let config = s.script(
            &format!("config{n}.json"),
            &format!(
                r#"{{"hidden_size": {h}, "num_hidden_layers": {l}, "num_attention_heads": {a},
                "num_key_value_heads": {kv}, "intermediate_size": {i}, "vocab_size": {v},
                "max_position_embeddings": 4096, "tie_word_embeddings": false}}"#
            ),
        );
        let measured = std::process::Command::new(support::torch_python())
            .args([
                "-W",
                "ignore",
                program.as_str(),
                config.to_str().unwrap(),
                &seq.to_string(),
                &batch.to_string(),
            ])
            .output()
            .unwrap();
        assert!(measured.status.success(), "{measured:?}");
        let torch: serde_json::Value = serde_json::from_slice(&measured.stdout).unwrap();
        let out = run(&[
            "estimate",
            "--model-config",
            config.to_str().unwrap(),
            "--seq-len",
            &seq.to_string(),
            "--batch",
            &batch.to_string(),
            "--precision",
            "bf16",
            "--gpu-memory",
            "80GiB",
            "--json",
        ]);
        assert!(out.status.success(), "{out:?}");
        let e: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(e["parameters"], torch["parameters"], "size {n}");
        assert_eq!(e["optimizer_bytes"], torch["optimizer_bytes"], "size {n}");
        let estimated = e["activations_bytes"].as_f64().unwrap();
        let real = torch["activations_bytes"].as_f64().unwrap();
        let error = (estimated - real).abs() / real;
        assert!(
            error < 0.05,
            "size {n}: estimated {estimated} vs torch {real} ({:.1}%)",
            error * 100.0
        );
    }
}
