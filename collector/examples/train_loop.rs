//! An example workload for `collector run`: a training loop that really allocates host memory
//! the way a model does (parameters, gradients, optimizer state, activations that grow in
//! forward and are freed by backward) and says where it is through `Probe`. Faults can be
//! planted: a per-step leak (`--leak-mib`, like `losses.append(loss)`), and evaluation that
//! keeps its outputs (`--eval-keep-mib`).
//!
//! ```sh
//! collector run -- target/release/examples/train_loop --steps 40 --leak-mib 4 --eval-every 10
//! ```
//!
//! It needs no libtorch: the collector's tests run it anywhere (docs/development.md).

use std::time::Duration;

use oomscope_collector::probe::Probe;
use oomscope_format::protocol::Message;
use oomscope_format::{ComponentBreakdown, Phase, Record};

const MIB: usize = oomscope_format::units::MIB as usize;

/// Memory the program holds, touched page by page so that it is resident (RSS), not just
/// reserved address space.
fn resident(mib: usize) -> Vec<u8> {
    let mut block = vec![0u8; mib * MIB];
    for page in block.chunks_mut(4096) {
        page[0] = 1;
    }
    block
}

/// A training loop that allocates host memory like a model and marks its stages.
#[derive(Debug, clap::Parser)]
#[command(name = "train_loop")]
struct Options {
    /// Training steps.
    #[arg(long, default_value_t = 40)]
    steps: usize,
    /// Milliseconds per step.
    #[arg(long, default_value_t = 60)]
    step_ms: u64,
    /// Parameters (and gradients, and each of Adam's two moments), MiB.
    #[arg(long, default_value_t = 64)]
    params_mib: usize,
    /// Activations of one step, MiB.
    #[arg(long, default_value_t = 96)]
    activation_mib: usize,
    /// Batch size reported with the components.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..))]
    batch_size: u64,
    /// Memory kept every step (a planted leak), MiB.
    #[arg(long, default_value_t = 0)]
    leak_mib: usize,
    /// Evaluate every N steps (0: never).
    #[arg(long, default_value_t = 0)]
    eval_every: usize,
    /// Memory each evaluation keeps (its outputs), MiB.
    #[arg(long, default_value_t = 0)]
    eval_keep_mib: usize,
}

fn main() {
    let o = <Options as clap::Parser>::parse();
    let probe = Probe::from_env();
    let pause = Duration::from_millis(o.step_ms / 6);
    let params = resident(o.params_mib);
    let mut grads: Option<Vec<u8>> = None;
    let mut optimizer_state: Option<Vec<u8>> = None;
    let mut leaked: Vec<Vec<u8>> = Vec::new();
    let mut eval_outputs: Vec<Vec<u8>> = Vec::new();
    probe.phase(Phase::Train);
    for step in 0..o.steps {
        probe.step(step as u64);
        probe.mark("pre_forward");
        std::thread::sleep(pause);
        // Forward: activations for the whole batch.
        let activations = resident(o.activation_mib);
        probe.mark("post_forward");
        std::thread::sleep(pause);
        // Backward: gradients appear (kept across steps), activations are freed.
        probe.mark("pre_backward");
        std::thread::sleep(pause); // backward computes before it frees
        grads.get_or_insert_with(|| resident(o.params_mib));
        drop(activations);
        probe.mark("post_backward");
        std::thread::sleep(pause);
        // Optimizer: Adam's two moments, created at the first step.
        optimizer_state.get_or_insert_with(|| resident(2 * o.params_mib));
        if o.leak_mib > 0 {
            leaked.push(resident(o.leak_mib));
        }
        probe.mark("post_optimizer_step");
        if step == 1 {
            let params_bytes = (o.params_mib * MIB) as u64;
            probe.send_message(&Message::record(Record::Components(ComponentBreakdown {
                batch_size: Some(o.batch_size),
                parameters_bytes: params_bytes,
                gradients_bytes: params_bytes,
                optimizer_state_bytes: 2 * params_bytes,
                ..ComponentBreakdown::default()
            })));
        }
        std::thread::sleep(pause);
        if o.eval_every > 0 && (step + 1) % o.eval_every == 0 {
            probe.phase(Phase::Eval);
            for _ in 0..2 {
                probe.mark("pre_forward");
                let outputs = resident(o.activation_mib / 2);
                probe.mark("post_forward");
                std::thread::sleep(pause);
                if o.eval_keep_mib > 0 {
                    eval_outputs.push(resident(o.eval_keep_mib));
                }
                drop(outputs);
            }
            probe.phase(Phase::Train);
        }
    }
    std::hint::black_box((&params, &grads, &optimizer_state, &leaked, &eval_outputs));
}
