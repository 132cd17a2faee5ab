"""Asynchronous actor-learner RL (A3C/IMPALA style) with ``torch.multiprocessing``:
two actor processes run the shared policy (``policy.share_memory()``) on a
vectorised synthetic environment and send each rollout, a dict of tensors,
through a ``mp.Queue``; the learner does one advantage-actor-critic update
per pair of rollouts.  The learner also appends every rollout it receives to
``archive`` "so we can train a behaviour-cloning baseline on all collected
experience at the end".

What a correct memory diagnosis says: memory grows linearly with learner
iterations (about 1 MB per iteration) until the end of the run, and it is
shared memory: tensors sent through a torch.multiprocessing queue are moved
into shared-memory segments (/dev/shm, unlinked but mapped), and the learner
keeps every received rollout alive in ``archive``, so /dev/shm usage and
the learner's RssShmem grow without bound, while the actors' private memory
and the learner's ordinary heap stay flat.  Fix: don't keep raw rollouts;
copy what must be kept into a bounded, preallocated buffer (or write it to
disk) and let the received tensors go.

EXPECT = {
    "symptom": "linear_growth",
    "unit": "iteration",
    "rate_key": "shm_rate_bytes_per_iteration",
    "rate_tolerance": 0.33,
    "holder": "archive",
    "memory_kind": "shared_memory",
    "advice": "Do not keep every received rollout; copy what is needed into a bounded preallocated buffer or to disk.",
    "findings": ["leak"],
    "absent": ["worker-private-growth", "reference-cycles", "optimizer-state-heavy", "model-copies", "eval-retains-memory"],
    "words": ["archive", "shared"],
    "no_words": ["DataLoader", "copy-on-write"],
    "holder_bytes_key": "archive_bytes",
    "flat_rate_key": "children_private_rate_bytes_per_iteration",
}
"""
import os
import queue
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np
import torch
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

import _truth

OBS, ACTIONS, N_ENVS, T = 256, 6, 8, 64


class Policy(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(OBS, 128), nn.Tanh(), nn.Linear(128, 128), nn.Tanh())
        self.pi = nn.Linear(128, ACTIONS)
        self.v = nn.Linear(128, 1)

    def forward(self, obs):
        h = self.body(obs)
        return self.pi(h), self.v(h).squeeze(-1)


class BanditGridEnv:
    """Observation = noisy one-hot of a hidden 'room'; the right action depends on the room."""

    def __init__(self, n, seed):
        self.rng = np.random.default_rng(seed)
        self.n = n
        self.proto = np.random.default_rng(7).normal(size=(ACTIONS, OBS)).astype(np.float32)
        self.room = self.rng.integers(0, ACTIONS, n)

    def observe(self):
        return self.proto[self.room] + self.rng.normal(0, 1.0, (self.n, OBS)).astype(np.float32)

    def step(self, action):
        reward = (action == self.room).astype(np.float32)
        done = self.rng.random(self.n) < 0.05
        self.room = np.where(done | (self.rng.random(self.n) < 0.2),
                             self.rng.integers(0, ACTIONS, self.n), self.room)
        return reward, done


def actor(rank, policy, traj_queue, stop):
    torch.set_num_threads(1)
    env = BanditGridEnv(N_ENVS, seed=rank)
    while not stop.is_set():
        obs = torch.empty(T, N_ENVS, OBS)
        actions = torch.empty(T, N_ENVS, dtype=torch.long)
        rewards = torch.empty(T, N_ENVS)
        dones = torch.empty(T, N_ENVS)
        logp = torch.empty(T, N_ENVS)
        with torch.no_grad():
            for t in range(T):
                o = torch.from_numpy(env.observe())
                logits, _ = policy(o)
                dist = torch.distributions.Categorical(logits=logits)
                a = dist.sample()
                r, d = env.step(a.numpy())
                obs[t], actions[t], logp[t] = o, a, dist.log_prob(a)
                rewards[t], dones[t] = torch.from_numpy(r), torch.from_numpy(d.astype(np.float32))
        traj = {"obs": obs, "actions": actions, "rewards": rewards, "dones": dones, "behaviour_logp": logp}
        while not stop.is_set():
            try:
                traj_queue.put(traj, timeout=0.1)
                break
            except queue.Full:
                pass


def a2c_loss(policy, traj, gamma=0.95):
    logits, values = policy(traj["obs"])
    returns = torch.zeros_like(traj["rewards"])
    running = values[-1].detach()
    for t in reversed(range(T)):
        running = traj["rewards"][t] + gamma * running * (1 - traj["dones"][t])
        returns[t] = running
    adv = (returns - values).detach()
    logp = torch.log_softmax(logits, -1).gather(-1, traj["actions"].unsqueeze(-1)).squeeze(-1)
    entropy = -(torch.softmax(logits, -1) * torch.log_softmax(logits, -1)).sum(-1)
    return -(logp * adv).mean() + 0.5 * F.mse_loss(values, returns) - 0.01 * entropy.mean()


def main(iterations=420, n_actors=2):
    torch.manual_seed(0)
    torch.set_num_threads(1)
    ctx = mp.get_context("fork")
    policy = Policy()
    policy.share_memory()
    opt = torch.optim.RMSprop(policy.parameters(), lr=7e-4)
    traj_queue, stop = ctx.Queue(maxsize=4), ctx.Event()
    procs = [ctx.Process(target=actor, args=(r, policy, traj_queue, stop), daemon=True) for r in range(n_actors)]
    for p in procs:
        p.start()

    archive = []
    shm0 = _truth.shm_used()
    marks = []
    for it in range(iterations):
        trajs = [traj_queue.get() for _ in range(n_actors)]
        loss = sum(a2c_loss(policy, tr) for tr in trajs) / n_actors
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(policy.parameters(), 0.5)
        opt.step()
        archive.extend(trajs)
        if it % 10 == 0:
            st = _truth.status_fields()
            marks.append((it, _truth.shm_used() - shm0, st.get("RssShmem", 0), _truth.rss(),
                          _truth.children_private()))
        if it % 100 == 0:
            mean_r = float(np.mean([tr["rewards"].mean().item() for tr in trajs]))
            print(f"iter {it}: mean reward {mean_r:.3f}, archived rollouts {len(archive)}")

    warm = [m for m in marks if m[0] >= 20]
    its = [m[0] for m in warm]
    archive_bytes = _truth.storage_bytes(_truth.walk_tensors(archive))
    facts = dict(
        iterations=iterations,
        archived_rollouts=len(archive),
        archive_bytes=archive_bytes,
        archive_bytes_per_iteration=archive_bytes / iterations,
        shm_rate_bytes_per_iteration=_truth.slope(its, [m[1] for m in warm]),
        rss_shmem_rate_bytes_per_iteration=_truth.slope(its, [m[2] for m in warm]),
        rss_rate_bytes_per_iteration=_truth.slope(its, [m[3] for m in warm]),
        shm_growth_bytes=warm[-1][1] - warm[0][1],
        children_private_growth_bytes=warm[-1][4] - warm[0][4],
        children_private_rate_bytes_per_iteration=_truth.slope(its, [m[4] for m in warm]),
        children_private_final_bytes=warm[-1][4],
        rss_shmem_final_bytes=warm[-1][2],
        series=[list(m) for m in marks[::4]],
    )
    stop.set()
    for p in procs:
        p.join(timeout=5)
    _truth.write(**facts)


if __name__ == "__main__":
    main()
