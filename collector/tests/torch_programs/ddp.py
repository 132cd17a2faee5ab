"""A small, real DistributedDataParallel program (gloo) for oomscope's zero-code tests, started
by torchrun: it knows nothing about oomscope. Each rank trains a two-layer MLP on its own shard
of a fixed regression task and prints its final loss. On the CPU by default; with `--device
cuda` every rank uses the same GPU (gloo reduces CUDA tensors; NCCL allows one rank per GPU),
and `--report DIR` writes each rank's own CUDA figures (its pid, the allocator's peak
reserved bytes) for the GPU proof to hold the per-rank GPU memory against."""

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--hold-rank", type=int, default=None,
                   help="this rank keeps --hold-mib of host memory from its first step on")
    p.add_argument("--hold-mib", type=int, default=256)
    p.add_argument("--device", default="cpu", help="cpu, or cuda: every rank on the same GPU")
    p.add_argument("--report", default=None, help="a directory for each rank's rank-N.json (CUDA)")
    p.add_argument("--oom-rank", type=int, default=None,
                   help="this rank asks for a petabyte at --oom-step (a real host allocation failure)")
    p.add_argument("--oom-step", type=int, default=3)
    p.add_argument("--workers", type=int, default=0, help="DataLoader workers per rank")
    p.add_argument("--load-mib", type=int, default=0,
                   help="before training, every rank torch.loads a checkpoint of this size (the "
                        "whole file into its own memory, as torch.load does without mmap) and "
                        "drops it once all ranks have it")
    args = p.parse_args()
    # One srun task per rank, no torchrun: the task's place is Slurm's, read as Lightning and many
    # a train.py read it (only inside an srun step: an sbatch batch step says PROCID 0 too).
    if "RANK" not in os.environ and "SLURM_STEP_ID" in os.environ:
        os.environ["RANK"] = os.environ["SLURM_PROCID"]
        os.environ["LOCAL_RANK"] = os.environ["SLURM_LOCALID"]
        os.environ["WORLD_SIZE"] = os.environ["SLURM_NTASKS"]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    device = torch.device(args.device)
    model = DistributedDataParallel(
        nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)).to(device))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    if args.load_mib:
        # One file per job: the ranks share their parent, torchrun's agent.
        path = os.path.join(os.environ.get("TMPDIR", "/tmp"), "oomscope-ddp-%d.pt" % os.getppid())
        if rank == 0:
            torch.save({"w": torch.ones(args.load_mib << 18)}, path)
        dist.barrier()
        state = torch.load(path)
        dist.barrier()
        time.sleep(0.3)
        dist.barrier()
        if rank == 0:
            os.remove(path)
        del state
    g = torch.Generator().manual_seed(rank)
    held = []
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(
        torch.randn(16 * args.steps, 32, generator=g)), batch_size=16, num_workers=args.workers)
    for step, (x,) in enumerate(data):
        x = x.to(device)
        if rank == args.hold_rank and not held:
            # float32: MiB × 2**18 elements, on the rank's device.
            held.append(torch.ones(args.hold_mib << 18, device=device))
        if rank == args.oom_rank and step == args.oom_step:
            torch.empty(1 << 50, dtype=torch.uint8)
        loss = ((model(x) - x.sum(1, keepdim=True)) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    print("rank %d of %d (local %s): final loss %.4f" % (
        rank, dist.get_world_size(), os.environ.get("LOCAL_RANK"), loss.item()))
    if args.report and device.type == "cuda":
        import json
        torch.cuda.synchronize()
        with open(os.path.join(args.report, "rank-%d.json" % rank), "w") as f:
            json.dump({"rank": rank, "pid": os.getpid(),
                       "max_reserved_bytes": torch.cuda.max_memory_reserved(),
                       "held_bytes": sum(t.numel() * t.element_size() for t in held)}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
