//! A small GPT-style transformer language model trained on synthetic tokens, instrumented with
//! `oomscope_collector::torch::Session`: marks at pre_forward, post_forward, pre_backward,
//! post_backward and post_optimizer_step, gradient statistics every step, logits statistics
//! every 10 steps, the model's components, and an eval phase every `--eval-every` steps.
//!
//! Faults that real training runs have, to plant on purpose:
//! - `--leak-logits`: keeps each step's logits (detached) in a Vec: a leak of exactly
//!   batch × seq × vocab × 4 bytes per step;
//! - `--leak-loss`: keeps each step's loss tensor, and with it the whole autograd graph (the
//!   classic `losses.append(loss)`);
//! - `--eval-with-grad`: evaluates with autograd on and sums the loss tensors (the graph of every
//!   eval batch stays alive until eval ends);
//! - `--seq-len N`: an oversized sequence length makes attention (batch × heads × N² floats)
//!   exceed a GPU.
//!
//! `--find-batch` searches for the largest batch that fits (on CUDA against the GPU, on CPU
//! against `--memory-limit-mib`), records every trial, prints the result, then trains with the
//! recommended batch. `--scan-batch` is the plain scan it is checked against, and
//! `--check-allocator` / `--time-snapshots` are the GPU proof's other probes
//! (`scripts/gpu-proof.sh`). `gpt --help` lists every option.
//!
//! ```sh
//! collector run -- target/release/examples/gpt --steps 200 --device cuda
//! target/release/examples/gpt --trace gpt.oomt      # records itself, no collector needed
//! target/release/examples/gpt --trace none          # uninstrumented (for overhead measurements)
//! ```

use anyhow::{Context, Result, bail};
use oomscope_collector::torch::Session;
use oomscope_format::Phase;
use tch::nn::{self, OptimizerConfig};
use tch::{Device, Kind, Tensor};

/// Trains a small GPT-style language model on synthetic tokens, instrumented with oomscope.
#[derive(Debug, Clone, clap::Parser)]
#[command(name = "gpt", version)]
struct Config {
    /// Training steps.
    #[arg(long, default_value_t = 60)]
    steps: i64,
    /// Sequences per batch.
    #[arg(long, default_value_t = 8)]
    batch: i64,
    /// Tokens per sequence (attention costs batch × heads × seq_len² floats per layer).
    #[arg(long, default_value_t = 64)]
    seq_len: i64,
    /// Vocabulary size.
    #[arg(long, default_value_t = 2048)]
    vocab: i64,
    /// Model width (a multiple of --heads).
    #[arg(long, default_value_t = 128)]
    d_model: i64,
    /// Transformer blocks.
    #[arg(long, default_value_t = 2)]
    layers: i64,
    /// Attention heads.
    #[arg(long, default_value_t = 4)]
    heads: i64,
    /// Learning rate (AdamW).
    #[arg(long, default_value_t = 3e-4)]
    lr: f64,
    /// Evaluate every N steps (0: never).
    #[arg(long, default_value_t = 20)]
    eval_every: i64,
    /// Batches per evaluation.
    #[arg(long, default_value_t = 2)]
    eval_batches: i64,
    /// auto (CUDA when available), cpu or cuda.
    #[arg(long, default_value = "auto")]
    device: String,
    /// Where a standalone run records its trace; `none` records nothing of its own (still
    /// reports to a parent `collector run`).
    #[arg(long, default_value = "gpt.oomt")]
    trace: String,
    /// Plant a leak: keep each step's logits (detached).
    #[arg(long)]
    leak_logits: bool,
    /// Plant a leak: keep each step's loss tensor and with it its autograd graph.
    #[arg(long)]
    leak_loss: bool,
    /// Evaluate with autograd on, summing the loss tensors.
    #[arg(long)]
    eval_with_grad: bool,
    /// Random seed.
    #[arg(long, default_value_t = 0)]
    seed: i64,
    /// Search for the largest batch that fits, then train with the recommended one.
    #[arg(long)]
    find_batch: bool,
    /// Instead of training: run one step at batch 1, 2, 3, … until one runs out of memory, and
    /// print the largest that ran (the plain scan the batch search is checked against).
    #[arg(long)]
    scan_batch: bool,
    /// Where the plain scan starts (1 by default): the GPU proof scans the last tenth below the
    /// search's answer, one by one, instead of every batch from 1 (hundreds of trials on a large
    /// GPU: 253 s on an H200).
    #[arg(long, value_name = "BATCH", default_value_t = 1)]
    scan_from: u64,
    /// The batch search's memory limit in MiB (required on CPU; default on CUDA: the GPU).
    #[arg(long = "memory-limit-mib", value_name = "MIB")]
    memory_limit_mib: Option<u64>,
    /// Allocator check (CUDA): mark `model_ready` once the parameters exist and print, as one
    /// JSON line, what the caching allocator must hold then (every parameter rounded up to the
    /// allocator's 512-byte blocks) next to what it reports.
    #[arg(long)]
    check_allocator: bool,
    /// Summarise the gradients every N steps (0: never).
    #[arg(long, value_name = "N", default_value_t = 1)]
    grad_stats_every: i64,
    /// Record the logits' statistics every N steps (0: never).
    #[arg(long, value_name = "N", default_value_t = 10)]
    tensor_stats_every: i64,
    /// Time N allocator snapshots (CUDA) and print the cost of one, then train.
    #[arg(long, value_name = "N", default_value_t = 0)]
    time_snapshots: u32,
    /// Write every training step's end (Unix ns) and duration (ns) to this file, one step a
    /// line, after training (nothing is written during the loop).
    #[arg(long, value_name = "PATH")]
    step_times: Option<std::path::PathBuf>,
    /// Instrument the training loop only in every other block of N steps (0: always): with
    /// `--step-times`, what the instrumentation costs, measured inside one process.
    #[arg(long, value_name = "N", default_value_t = 0)]
    instrument_alternately: i64,
}

impl Config {
    fn parse_args() -> Result<Config> {
        let c = <Config as clap::Parser>::parse();
        if c.heads <= 0 || c.d_model % c.heads != 0 {
            <Config as clap::CommandFactory>::command()
                .error(
                    clap::error::ErrorKind::ValueValidation,
                    "--d-model must be a multiple of --heads",
                )
                .exit();
        }
        Ok(c)
    }

    fn memory_limit(&self) -> Option<u64> {
        self.memory_limit_mib.map(|m| m << 20)
    }

    fn device(&self) -> Result<Device> {
        Ok(match self.device.as_str() {
            "auto" => Device::cuda_if_available(),
            "cpu" => Device::Cpu,
            "cuda" if tch::Cuda::is_available() => Device::Cuda(0),
            "cuda" => bail!("--device cuda: CUDA is not available"),
            other => bail!("--device must be auto, cpu or cuda, not {other}"),
        })
    }
}

/// Pre-norm transformer block: causal self-attention and an MLP, each with a residual.
#[derive(Debug)]
struct Block {
    ln1: nn::LayerNorm,
    qkv: nn::Linear,
    proj: nn::Linear,
    ln2: nn::LayerNorm,
    fc: nn::Linear,
    out: nn::Linear,
    heads: i64,
}

impl Block {
    fn new(p: &nn::Path, d: i64, heads: i64) -> Block {
        Block {
            ln1: nn::layer_norm(p / "ln1", vec![d], Default::default()),
            qkv: nn::linear(p / "qkv", d, 3 * d, Default::default()),
            proj: nn::linear(p / "proj", d, d, Default::default()),
            ln2: nn::layer_norm(p / "ln2", vec![d], Default::default()),
            fc: nn::linear(p / "fc", d, 4 * d, Default::default()),
            out: nn::linear(p / "out", 4 * d, d, Default::default()),
            heads,
        }
    }

    fn forward(&self, x: &Tensor, causal: &Tensor) -> Tensor {
        let (b, t, d) = x.size3().expect("(batch, time, channels)");
        let head = d / self.heads;
        let qkv = x
            .apply(&self.ln1)
            .apply(&self.qkv)
            .view([b, t, 3, self.heads, head])
            .permute([2, 0, 3, 1, 4]);
        let (q, k, v) = (qkv.get(0), qkv.get(1), qkv.get(2));
        // Attention materialises batch × heads × t × t scores: the memory a long sequence costs.
        let scores = q.matmul(&k.transpose(-2, -1)) * (1.0 / (head as f64).sqrt());
        let weights = scores
            .masked_fill(causal, f64::NEG_INFINITY)
            .softmax(-1, Kind::Float);
        let y = weights
            .matmul(&v)
            .transpose(1, 2)
            .contiguous()
            .view([b, t, d]);
        let x = x + y.apply(&self.proj);
        let mlp = x
            .apply(&self.ln2)
            .apply(&self.fc)
            .gelu("none")
            .apply(&self.out);
        x + mlp
    }
}

#[derive(Debug)]
struct Gpt {
    tokens: nn::Embedding,
    positions: nn::Embedding,
    blocks: Vec<Block>,
    ln_f: nn::LayerNorm,
    head: nn::Linear,
}

impl Gpt {
    fn new(p: &nn::Path, c: &Config) -> Gpt {
        Gpt {
            tokens: nn::embedding(p / "tok", c.vocab, c.d_model, Default::default()),
            positions: nn::embedding(p / "pos", c.seq_len, c.d_model, Default::default()),
            blocks: (0..c.layers)
                .map(|i| Block::new(&(p / format!("block{i}")), c.d_model, c.heads))
                .collect(),
            ln_f: nn::layer_norm(p / "ln_f", vec![c.d_model], Default::default()),
            head: nn::linear(p / "head", c.d_model, c.vocab, Default::default()),
        }
    }

    fn forward(&self, idx: &Tensor) -> Tensor {
        let (_, t) = idx.size2().expect("(batch, time)");
        let device = idx.device();
        let positions = Tensor::arange(t, (Kind::Int64, device));
        let causal = Tensor::ones([t, t], (Kind::Bool, device)).triu(1);
        let mut x = idx.apply(&self.tokens) + positions.apply(&self.positions);
        for block in &self.blocks {
            x = block.forward(&x, &causal);
        }
        x.apply(&self.ln_f).apply(&self.head)
    }
}

/// Synthetic language: the next token is the current one plus a per-sequence stride (a pattern
/// there is to learn; memory, not accuracy, is what the example is for).
fn batch(c: &Config, device: Device) -> (Tensor, Tensor) {
    let start = Tensor::randint(c.vocab, [c.batch, 1], (Kind::Int64, device));
    let stride = Tensor::randint(7, [c.batch, 1], (Kind::Int64, device)) + 1;
    let positions = Tensor::arange(c.seq_len + 1, (Kind::Int64, device)).unsqueeze(0);
    let seq = (start + stride * positions).remainder(c.vocab);
    (seq.narrow(1, 0, c.seq_len), seq.narrow(1, 1, c.seq_len))
}

fn main() -> Result<()> {
    let c = Config::parse_args()?;
    let device = c.device()?;
    tch::manual_seed(c.seed);
    // `--trace none`: no recording of our own (still reports to a parent `collector run`).
    let session = if c.trace == "none" {
        Session::from_env()
    } else {
        Session::auto(&c.trace)?
    };
    let vs = nn::VarStore::new(device);
    let model = Gpt::new(&vs.root(), &c);
    let mut opt = nn::AdamW::default().build(&vs, c.lr)?;
    let params = vs.trainable_variables();
    if c.check_allocator {
        check_allocator(&session, &vs);
    }
    if c.time_snapshots > 0 {
        time_snapshots(&session, c.time_snapshots);
    }
    let mut c = c;
    // One training step at another batch size: what the batch search and the scan try. The same
    // tensors stay alive as in the loop below (the logits until the step ends): a trial that
    // frees them earlier peaks lower than the real step, and the batch it picks then runs out of
    // memory in training (seen on an H100).
    let mut trial_step = |batch_size: u64| {
        let trial = Config {
            batch: batch_size as i64,
            ..c.clone()
        };
        let (x, y) = batch(&trial, device);
        let logits = model.forward(&x);
        let loss = logits
            .view([-1, c.vocab])
            .cross_entropy_for_logits(&y.reshape([-1]));
        opt.zero_grad();
        loss.backward();
        opt.step();
        std::hint::black_box(loss.double_value(&[]));
        drop(logits);
    };
    let search = oomscope_collector::torch::BatchSearch {
        limit_bytes: c.memory_limit(),
        ..Default::default()
    };
    if c.scan_batch {
        let scan = oomscope_collector::torch::BatchSearch {
            start: c.scan_from,
            ..search
        };
        let largest = session.scan_max_batch_size(&scan, &mut trial_step);
        #[allow(clippy::print_stdout)]
        {
            println!("batch scan: largest that ran {largest:?}");
        }
        session.finish()?;
        return Ok(());
    }
    if c.find_batch {
        let result = session.find_max_batch_size(&search, &mut trial_step);
        #[allow(clippy::print_stdout)]
        {
            println!(
                "batch search: largest that ran {:?}, smallest that did not {:?}, {:.1} MiB per sample, predicted {:?} within the margin, recommended {:?} ({} trials)",
                result.largest_fit,
                result.smallest_oom,
                result
                    .fit
                    .map_or(f64::NAN, |f| f.per_sample_bytes / f64::from(1 << 20)),
                result.fit.map(|f| f.max_batch),
                result.recommended,
                result.trials.len()
            );
        }
        if let Some(recommended) = result.recommended.filter(|b| *b > 0) {
            c.batch = recommended as i64;
        }
    }
    let mut kept_logits: Vec<Tensor> = Vec::new();
    let mut kept_losses: Vec<Tensor> = Vec::new();
    let mut last_loss = f64::NAN;
    session.phase(Phase::Train);
    let started = std::time::Instant::now();
    let mut step_times: Vec<(u128, u128, bool)> = Vec::with_capacity(c.steps.max(0) as usize);
    let uninstrumented = Session::off();
    for step in 0..c.steps {
        let step_started = std::time::Instant::now();
        let instrumented =
            c.instrument_alternately <= 0 || (step / c.instrument_alternately) % 2 == 0;
        let session = if instrumented {
            &session
        } else {
            &uninstrumented
        };
        session.step(step as u64);
        let (x, y) = batch(&c, device);
        session.mark("pre_forward");
        let logits = model.forward(&x);
        session.mark("post_forward");
        let loss = logits
            .view([-1, c.vocab])
            .cross_entropy_for_logits(&y.reshape([-1]));
        session.mark("pre_backward");
        opt.zero_grad();
        loss.backward();
        session.mark("post_backward");
        if c.check_allocator && step == 0 {
            check_gradient_norms(session, &params);
        }
        if c.grad_stats_every > 0 && step % c.grad_stats_every == 0 {
            session.gradients(&params);
        }
        if step == 0 {
            // AdamW creates its two moments at the first step: measure what that step keeps.
            // Measured when the measurement is clean; else AdamW's known size, two moments per
            // parameter in the parameters' dtype.
            let ((), created) = session.measure_allocation(|| opt.step());
            let param_bytes: u64 = params
                .iter()
                .map(oomscope_collector::torch::stats::tensor_bytes)
                .sum();
            let computed = 2 * param_bytes;
            let measured = created
                .and_then(|d| u64::try_from(d).ok())
                .filter(|d| d.abs_diff(computed) < computed / 4);
            session.mark("post_optimizer_step");
            session.components(
                &params,
                &[],
                measured.unwrap_or(computed),
                Some(c.batch as u64),
                &[],
            );
        } else {
            opt.step();
            session.mark("post_optimizer_step");
        }
        if c.tensor_stats_every > 0 && step % c.tensor_stats_every == 0 {
            session.tensor_stats("logits", &logits);
        }
        last_loss = loss.double_value(&[]);
        if c.leak_logits {
            kept_logits.push(logits.detach());
        }
        if c.leak_loss {
            kept_losses.push(loss.shallow_clone());
        }
        if c.step_times.is_some() {
            let end = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            step_times.push((end, step_started.elapsed().as_nanos(), instrumented));
        }
        if c.eval_every > 0 && (step + 1) % c.eval_every == 0 {
            evaluate(&c, &model, session, device);
            session.phase(Phase::Train);
        }
    }
    std::hint::black_box((&kept_logits, &kept_losses));
    if let Some(path) = &c.step_times {
        let lines: String = step_times
            .iter()
            .map(|(end, took, instrumented)| format!("{end} {took} {}\n", u8::from(*instrumented)))
            .collect();
        std::fs::write(path, lines).with_context(|| format!("writing {}", path.display()))?;
    }
    #[allow(clippy::print_stdout)]
    {
        println!(
            "trained {} steps on {device:?} in {:.3} s ({:.3} ms/step): loss {last_loss:.3}, {} parameters",
            c.steps,
            started.elapsed().as_secs_f64(),
            started.elapsed().as_secs_f64() * 1e3 / c.steps.max(1) as f64,
            params.iter().map(Tensor::numel).sum::<usize>()
        );
    }
    if let Some(path) = session.finish()? {
        #[allow(clippy::print_stdout)]
        {
            println!("trace written to {}", path.display());
        }
    }
    Ok(())
}

fn evaluate(c: &Config, model: &Gpt, session: &Session, device: Device) {
    session.phase(Phase::Eval);
    let run = || {
        let mut total: Option<Tensor> = None;
        for _ in 0..c.eval_batches {
            let (x, y) = batch(c, device);
            session.mark("pre_forward");
            let logits = model.forward(&x);
            session.mark("post_forward");
            let loss = logits
                .view([-1, c.vocab])
                .cross_entropy_for_logits(&y.reshape([-1]));
            // With autograd on, summing loss tensors keeps every batch's graph alive.
            total = Some(match total {
                Some(t) => t + loss,
                None => loss,
            });
        }
        total.map_or(0.0, |t| t.double_value(&[]))
    };
    if c.eval_with_grad {
        run();
    } else {
        tch::no_grad(run);
    }
}

/// `--check-allocator`: marks `model_ready` and prints what the caching allocator must hold (every
/// parameter in its own block, rounded up to 512 bytes) beside what it reports.
fn check_allocator(session: &Session, vs: &nn::VarStore) {
    const BLOCK: u64 = 512;
    session.mark("model_ready");
    let tensors = vs.variables();
    let parameters_bytes: u64 = tensors
        .values()
        .map(oomscope_collector::torch::stats::tensor_bytes)
        .sum();
    let expected: u64 = tensors
        .values()
        .map(|t| oomscope_collector::torch::stats::tensor_bytes(t).div_ceil(BLOCK) * BLOCK)
        .sum();
    let snapshot = session.allocator_stats();
    let line = serde_json::json!({
        "check": "model_ready",
        "tensors": tensors.len(),
        "parameters_bytes": parameters_bytes,
        "expected_allocated_bytes": expected,
        "allocated_bytes": snapshot.map(|s| s.allocated_bytes),
        "reserved_bytes": snapshot.map(|s| s.reserved_bytes),
    });
    #[allow(clippy::print_stdout)]
    {
        println!("{line}");
    }
}

/// `--time-snapshots N`: the cost of one allocator snapshot (what every mark pays on CUDA).
fn time_snapshots(session: &Session, calls: u32) {
    let started = std::time::Instant::now();
    for _ in 0..calls {
        std::hint::black_box(session.allocator_stats());
    }
    let ns = started.elapsed().as_nanos() as f64 / f64::from(calls);
    let line = serde_json::json!({
        "check": "snapshot_cost",
        "cuda": session.cuda_device().is_some(),
        "calls": calls,
        "ns_per_snapshot": ns,
    });
    #[allow(clippy::print_stdout)]
    {
        println!("{line}");
    }
}

/// `--check-allocator`, first step: the fused asynchronous gradient norm the session records on
/// CUDA against the exact synchronous one, printed as one JSON line.
fn check_gradient_norms(session: &Session, params: &[Tensor]) {
    use oomscope_collector::torch::{allocator, stats};
    let exact = stats::gradient_stats(params).global_norm;
    let fused =
        session.cuda_device().map(
            |device| match allocator::gradient_norms_async(params, device) {
                Ok(Some(f)) => f
                    .event
                    .wait()
                    .ok()
                    .and_then(|()| f64::try_from(&f.squares).ok())
                    .map_or(f64::NAN, f64::sqrt),
                _ => f64::NAN,
            },
        );
    let line = serde_json::json!({
        "check": "gradient_norms",
        "exact": exact,
        "fused_async": fused,
    });
    #[allow(clippy::print_stdout)]
    {
        println!("{line}");
    }
}
