"""Soft Actor-Critic on a vectorised synthetic reaching task, with the usual
``collections.deque(maxlen=...)`` replay buffer of per-transition tuples.

What a correct memory diagnosis says: resident memory climbs while the replay
buffer fills (about 1.5 KB of small numpy arrays, a tuple and a float per
stored transition, ~120 MB for the 80 000 transitions) and stops climbing
once ``self.buffer`` reaches its ``maxlen`` (about a third of the way in);
from then on the deque drops the oldest transition for every new one and
memory is flat for the rest of training.  This is bounded, by design, and not
a leak: nothing needs to change (if the plateau were too high, lower
``capacity`` or store transitions in preallocated arrays).  Networks,
optimizers and batches are small and constant.

EXPECT = {
    "symptom": "bounded",
    "unit": "step",
    "rate_key": None,
    "rate_tolerance": 0.33,
    "holder": "self.buffer",
    "memory_kind": "python_objects",
    "advice": None,
    "findings": [],
    "absent": ["leak", "reference-cycles", "optimizer-state-heavy", "model-copies", "host-memory-pressure"],
    "words": [],
    "no_words": ["DataLoader"],
    "bound_key": "plateau_growth_bytes",
    "holder_bytes_key": "buffer_bytes",
    "flat_rate_key": "rate_after_full_bytes_per_step",
}
"""
import os
import random
import sys
from collections import deque

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import _truth

torch.manual_seed(0)
random.seed(0)
np.random.seed(0)

OBS, ACT, N_ENVS = 96, 4, 32


class ReachEnv:
    """N point-masses chasing moving targets; obs = pos, vel, target, noisy sensors."""

    def __init__(self, n, rng):
        self.n, self.rng = n, rng
        self.reset_all()

    def reset_all(self):
        self.pos = self.rng.uniform(-1, 1, (self.n, 2)).astype(np.float32)
        self.vel = np.zeros((self.n, 2), np.float32)
        self.tgt = self.rng.uniform(-1, 1, (self.n, 2)).astype(np.float32)
        self.t = np.zeros(self.n, np.int64)

    def obs(self):
        sensors = self.rng.normal(0, 0.1, (self.n, OBS - 6)).astype(np.float32)
        return np.concatenate([self.pos, self.vel, self.tgt, sensors], axis=1)

    def step(self, a):
        self.vel = 0.9 * self.vel + 0.1 * a[:, :2]
        self.pos = np.clip(self.pos + 0.1 * self.vel, -2, 2)
        self.t += 1
        dist = np.linalg.norm(self.pos - self.tgt, axis=1)
        reward = -dist - 0.01 * (a ** 2).sum(1)
        done = self.t >= 200
        if done.any():
            k = int(done.sum())
            self.pos[done] = self.rng.uniform(-1, 1, (k, 2))
            self.vel[done] = 0
            self.tgt[done] = self.rng.uniform(-1, 1, (k, 2))
            self.t[done] = 0
        return self.obs(), reward.astype(np.float32), done


def mlp(i, o, h=128):
    return nn.Sequential(nn.Linear(i, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU(), nn.Linear(h, o))


class SAC:
    def __init__(self, capacity=80_000, batch_size=128, gamma=0.99, tau=0.005):
        self.actor = mlp(OBS, 2 * ACT)
        self.q1, self.q2 = mlp(OBS + ACT, 1), mlp(OBS + ACT, 1)
        self.q1_t, self.q2_t = mlp(OBS + ACT, 1), mlp(OBS + ACT, 1)
        self.q1_t.load_state_dict(self.q1.state_dict())
        self.q2_t.load_state_dict(self.q2.state_dict())
        self.log_alpha = torch.zeros(1, requires_grad=True)
        self.pi_opt = torch.optim.Adam(self.actor.parameters(), 3e-4)
        self.q_opt = torch.optim.Adam(list(self.q1.parameters()) + list(self.q2.parameters()), 3e-4)
        self.a_opt = torch.optim.Adam([self.log_alpha], 3e-4)
        self.buffer = deque(maxlen=capacity)
        self.batch_size, self.gamma, self.tau = batch_size, gamma, tau

    def policy(self, obs):
        mu, log_std = self.actor(obs).chunk(2, -1)
        std = log_std.clamp(-5, 2).exp()
        u = mu + std * torch.randn_like(mu)
        a = torch.tanh(u)
        logp = (-0.5 * ((u - mu) / std) ** 2 - std.log() - 0.9189).sum(-1)
        logp = logp - torch.log(1 - a.pow(2) + 1e-6).sum(-1)
        return a, logp

    def remember(self, obs, act, rew, next_obs, done):
        # copy the rows: the vector env hands out fresh batch arrays each step
        for i in range(len(obs)):
            self.buffer.append((obs[i].copy(), act[i].copy(), float(rew[i]), next_obs[i].copy(), bool(done[i])))

    def update(self):
        batch = random.sample(self.buffer, self.batch_size)
        o, a, r, o2, d = zip(*batch)
        o, a, o2 = (torch.from_numpy(np.stack(x)) for x in (o, a, o2))
        r = torch.tensor(r).unsqueeze(1)
        d = torch.tensor(d, dtype=torch.float32).unsqueeze(1)
        alpha = self.log_alpha.exp().detach()
        with torch.no_grad():
            a2, logp2 = self.policy(o2)
            x2 = torch.cat([o2, a2], 1)
            q_t = torch.min(self.q1_t(x2), self.q2_t(x2)) - alpha * logp2.unsqueeze(1)
            y = r + self.gamma * (1 - d) * q_t
        x = torch.cat([o, a], 1)
        q_loss = F.mse_loss(self.q1(x), y) + F.mse_loss(self.q2(x), y)
        self.q_opt.zero_grad(set_to_none=True)
        q_loss.backward()
        self.q_opt.step()

        a_new, logp = self.policy(o)
        xn = torch.cat([o, a_new], 1)
        pi_loss = (alpha * logp - torch.min(self.q1(xn), self.q2(xn)).squeeze(1)).mean()
        self.pi_opt.zero_grad(set_to_none=True)
        pi_loss.backward()
        self.pi_opt.step()

        a_loss = -(self.log_alpha * (logp.detach() + ACT).mean())
        self.a_opt.zero_grad(set_to_none=True)
        a_loss.backward()
        self.a_opt.step()
        with torch.no_grad():
            for net, tgt in ((self.q1, self.q1_t), (self.q2, self.q2_t)):
                for p, pt in zip(net.parameters(), tgt.parameters()):
                    pt.mul_(1 - self.tau).add_(p, alpha=self.tau)
        return q_loss.item()


def main(total_steps=7000, warmup=20, train_every=2):
    env = ReachEnv(N_ENVS, np.random.default_rng(0))
    agent = SAC()
    obs = env.obs()
    steps, rss, ep_return = [], [], np.zeros(N_ENVS)
    returns = deque(maxlen=100)
    rss0 = None
    full_at = None
    for step in range(total_steps):
        with torch.no_grad():
            act, _ = agent.policy(torch.from_numpy(obs))
        act = act.numpy()
        next_obs, rew, done = env.step(act)
        agent.remember(obs, act, rew, next_obs, done)
        ep_return += rew
        for i in np.nonzero(done)[0]:
            returns.append(ep_return[i])
            ep_return[i] = 0
        obs = next_obs
        if step >= warmup and step % train_every == 0:
            agent.update()
        if full_at is None and len(agent.buffer) == agent.buffer.maxlen:
            full_at = step
        if step == warmup:
            rss0 = _truth.rss()
        if step % 100 == 0:
            steps.append(step)
            rss.append(_truth.rss())
        if step % 3000 == 0:
            print(f"step {step} buffer {len(agent.buffer)} mean return {np.mean(returns) if returns else 0:.1f}")

    # bytes the buffer keeps: tuples, floats, bools and the numpy row copies
    final_rss = _truth.rss()
    nbytes = sys.getsizeof(agent.buffer)
    for tr in agent.buffer:
        nbytes += sys.getsizeof(tr) + sys.getsizeof(tr[2])
        nbytes += sum(sys.getsizeof(arr) for arr in (tr[0], tr[1], tr[3]))
    after = [(s, r) for s, r in zip(steps, rss) if full_at is not None and s >= full_at + 200]
    before = [(s, r) for s, r in zip(steps, rss) if s > warmup and (full_at is None or s < full_at)]
    plateau = sum(r for _, r in after[-10:]) / max(1, len(after[-10:]))
    _truth.write(
        capacity=agent.buffer.maxlen,
        buffer_len=len(agent.buffer),
        full_at_step=full_at,
        buffer_bytes=nbytes,
        bytes_per_transition=nbytes / max(1, len(agent.buffer)),
        rss_at_warmup_bytes=rss0,
        plateau_rss_bytes=plateau,
        plateau_growth_bytes=plateau - rss0,
        fill_rate_bytes_per_step=_truth.slope(*zip(*before)) if len(before) > 2 else None,
        rate_after_full_bytes_per_step=_truth.slope(*zip(*after)) if len(after) > 2 else None,
        total_steps=total_steps,
        rss_series=[[s, r] for s, r in zip(steps, rss)],
        final_rss_bytes=final_rss,
    )


if __name__ == "__main__":
    main()
