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
//! recommended batch.
//!
//! ```sh
//! collector run -- target/release/examples/gpt --steps 200 --device cuda
//! target/release/examples/gpt --trace gpt.oomt      # records itself, no collector needed
//! target/release/examples/gpt --trace none          # uninstrumented (for overhead measurements)
//! ```

use anyhow::{Context, Result, bail};
use oomscope_collector::torch::Session;
use oomscope_trace::Phase;
use tch::nn::{self, OptimizerConfig};
use tch::{Device, Kind, Tensor};

#[derive(Debug, Clone)]
struct Config {
    steps: i64,
    batch: i64,
    seq_len: i64,
    vocab: i64,
    d_model: i64,
    layers: i64,
    heads: i64,
    lr: f64,
    eval_every: i64,
    eval_batches: i64,
    device: String,
    trace: String,
    leak_logits: bool,
    leak_loss: bool,
    eval_with_grad: bool,
    seed: i64,
    find_batch: bool,
    memory_limit: Option<u64>,
}

impl Config {
    fn parse() -> Result<Config> {
        let mut c = Config {
            steps: 60,
            batch: 8,
            seq_len: 64,
            vocab: 2048,
            d_model: 128,
            layers: 2,
            heads: 4,
            lr: 3e-4,
            eval_every: 20,
            eval_batches: 2,
            device: "auto".into(),
            trace: "gpt.oomt".into(),
            leak_logits: false,
            leak_loss: false,
            eval_with_grad: false,
            seed: 0,
            find_batch: false,
            memory_limit: None,
        };
        let mut args = std::env::args().skip(1);
        while let Some(flag) = args.next() {
            match flag.as_str() {
                "--leak-logits" => c.leak_logits = true,
                "--leak-loss" => c.leak_loss = true,
                "--eval-with-grad" => c.eval_with_grad = true,
                "--find-batch" => c.find_batch = true,
                _ => {
                    let value = args
                        .next()
                        .with_context(|| format!("{flag} needs a value"))?;
                    let number = || {
                        value
                            .parse::<i64>()
                            .with_context(|| format!("{flag}: `{value}` is not a number"))
                    };
                    match flag.as_str() {
                        "--steps" => c.steps = number()?,
                        "--batch" => c.batch = number()?,
                        "--seq-len" => c.seq_len = number()?,
                        "--vocab" => c.vocab = number()?,
                        "--d-model" => c.d_model = number()?,
                        "--layers" => c.layers = number()?,
                        "--heads" => c.heads = number()?,
                        "--eval-every" => c.eval_every = number()?,
                        "--eval-batches" => c.eval_batches = number()?,
                        "--seed" => c.seed = number()?,
                        "--lr" => {
                            c.lr = value.parse().with_context(|| format!("--lr: `{value}`"))?;
                        }
                        "--memory-limit-mib" => c.memory_limit = Some(number()? as u64 * (1 << 20)),
                        "--device" => c.device.clone_from(&value),
                        "--trace" => c.trace.clone_from(&value),
                        other => bail!("unknown option {other}"),
                    }
                }
            }
        }
        if c.d_model % c.heads != 0 {
            bail!("--d-model must be a multiple of --heads");
        }
        Ok(c)
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
    let c = Config::parse()?;
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
    let mut c = c;
    if c.find_batch {
        let search = oomscope_collector::torch::BatchSearch {
            limit_bytes: c.memory_limit,
            ..Default::default()
        };
        let result = session.find_max_batch_size(&search, |batch_size| {
            let trial = Config {
                batch: batch_size as i64,
                ..c.clone()
            };
            let (x, y) = batch(&trial, device);
            let loss = model
                .forward(&x)
                .view([-1, c.vocab])
                .cross_entropy_for_logits(&y.reshape([-1]));
            opt.zero_grad();
            loss.backward();
            opt.step();
        });
        #[allow(clippy::print_stdout)]
        {
            println!(
                "batch search: largest that ran {:?}, smallest that did not {:?}, {:.1} MiB per sample, recommended {:?} ({} trials)",
                result.largest_fit,
                result.smallest_oom,
                result
                    .fit
                    .map_or(f64::NAN, |f| f.per_sample_bytes / f64::from(1 << 20)),
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
    for step in 0..c.steps {
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
        session.gradients(&params);
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
        if step % 10 == 0 {
            session.tensor_stats("logits", &logits);
        }
        last_loss = loss.double_value(&[]);
        if c.leak_logits {
            kept_logits.push(logits.detach());
        }
        if c.leak_loss {
            kept_losses.push(loss.shallow_clone());
        }
        if c.eval_every > 0 && (step + 1) % c.eval_every == 0 {
            evaluate(&c, &model, &session, device);
            session.phase(Phase::Train);
        }
    }
    std::hint::black_box((&kept_logits, &kept_losses));
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
