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
//! Until the tch GPT example exists (issue 4) this is the README's main-job workload.

use std::time::Duration;

use oomscope_collector::probe::Probe;
use oomscope_trace::Phase;

const MIB: usize = 1 << 20;

/// Memory the program holds, touched page by page so that it is resident (RSS), not just
/// reserved address space.
fn resident(mib: usize) -> Vec<u8> {
    let mut block = vec![0u8; mib * MIB];
    for page in block.chunks_mut(4096) {
        page[0] = 1;
    }
    block
}

struct Options {
    steps: usize,
    step_ms: u64,
    params_mib: usize,
    activation_mib: usize,
    batch_size: usize,
    leak_mib: usize,
    eval_every: usize,
    eval_keep_mib: usize,
}

fn parse() -> Result<Options, String> {
    let mut o = Options {
        steps: 40,
        step_ms: 60,
        params_mib: 64,
        activation_mib: 96,
        batch_size: 8,
        leak_mib: 0,
        eval_every: 0,
        eval_keep_mib: 0,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    for pair in args.chunks(2) {
        let [flag, value] = pair else {
            return Err(format!("{} needs a value", pair[0]));
        };
        let value: usize = value
            .parse()
            .map_err(|_| format!("{flag}: `{value}` is not a number"))?;
        match flag.as_str() {
            "--steps" => o.steps = value,
            "--step-ms" => o.step_ms = value as u64,
            "--params-mib" => o.params_mib = value,
            "--activation-mib" => o.activation_mib = value,
            "--batch-size" => o.batch_size = value.max(1),
            "--leak-mib" => o.leak_mib = value,
            "--eval-every" => o.eval_every = value,
            "--eval-keep-mib" => o.eval_keep_mib = value,
            other => return Err(format!("unknown option {other}")),
        }
    }
    Ok(o)
}

fn main() {
    let o = match parse() {
        Ok(o) => o,
        Err(e) => {
            // An example's one line of usage error.
            #[allow(clippy::print_stderr)]
            {
                eprintln!("error: {e}");
            }
            std::process::exit(2);
        }
    };
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
            probe.send(&format!(
                "components parameters_bytes={} gradients_bytes={} optimizer_state_bytes={} batch_size={}\n",
                o.params_mib * MIB,
                o.params_mib * MIB,
                2 * o.params_mib * MIB,
                o.batch_size
            ));
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
