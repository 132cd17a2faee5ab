"""DQN on a small pixel-corridor environment with a ring-buffer replay memory.

The agent walks a 1-D corridor that is rendered as a noisy 32x64 "image" (2048
floats, 8 KiB per observation). Transitions go into `replay`, a ReplayBuffer
in the Stable-Baselines style: `obs` and `next_obs` tensors of shape (10 000,
2048) allocated up front with torch.empty and written round-robin. A Q-network
is trained (RMSprop) every 4 env steps on 64 sampled transitions; a target
network is synced every 1000 steps. Memory rises while the buffer fills,
because the kernel only backs a page of the two 78 MiB tensors when it is
first written: 16 KiB per env step, i.e. ~64 KiB per optimizer step (the
network is updated every 4th env step from env step 1000 on). It stops rising
at env step 10 000 (optimizer step ~2250) when the write position wraps around
and starts overwriting old rows. A correct diagnosis says memory is bounded by
the replay buffer (`replay.obs` / `replay.next_obs`, 2 x 10 000 x 8 KiB = 156
MiB), that it plateaus after ~2250 optimizer steps, and that this is not a
leak. Nothing needs to change (if memory were tight: a smaller capacity, uint8
frames, or not storing next_obs separately).

EXPECT = {
    "symptom": "bounded",
    "unit": "step",
    "rate_key": "growth_per_optimizer_step_while_filling",
    "rate_tolerance": 0.33,
    "holder": "replay.obs",
    "memory_kind": "tensors",
    "advice": None,
    "findings": [],
    "absent": ["leak", "reference-cycles", "worker-private-growth", "eval-retains-memory"],
    "words": ["replay"],
    "no_words": ["DataLoader"],
    "bound_key": "replay_bytes",
    "flat_rate_key": "growth_per_optimizer_step_after_fill",
}
"""
import random

import torch
import torch.nn as nn
import torch.nn.functional as F

import _truth

REPLAY_SIZE = 10_000
TOTAL_STEPS = 20_000
BATCH = 64
GAMMA = 0.97

torch.manual_seed(0)
random.seed(0)


class Corridor:
    """Walk right to reach the goal; observation is a rendered noisy strip."""

    def __init__(self, length=12, max_t=60, seed=0):
        self.length, self.max_t = length, max_t
        self.gen = torch.Generator().manual_seed(seed)

    def reset(self):
        self.pos, self.t = 0, 0
        return self.render()

    def render(self):
        img = torch.rand(32, 64, generator=self.gen) * 0.1
        img[:, 2 * self.pos: 2 * self.pos + 2] += 1.0
        return img.flatten()

    def step(self, action):  # 0 = left, 1 = stay, 2 = right
        self.pos = min(max(self.pos + action - 1, 0), self.length - 1)
        self.t += 1
        done = self.pos == self.length - 1 or self.t >= self.max_t
        reward = 1.0 if self.pos == self.length - 1 else -0.01
        return self.render(), reward, done


class ReplayBuffer:
    def __init__(self, capacity, obs_dim):
        self.capacity, self.pos, self.full = capacity, 0, False
        self.obs = torch.empty(capacity, obs_dim)
        self.next_obs = torch.empty(capacity, obs_dim)
        self.actions = torch.empty(capacity, dtype=torch.long)
        self.rewards = torch.empty(capacity)
        self.dones = torch.empty(capacity)

    def __len__(self):
        return self.capacity if self.full else self.pos

    def add(self, obs, action, reward, next_obs, done):
        i = self.pos
        self.obs[i], self.next_obs[i] = obs, next_obs
        self.actions[i], self.rewards[i], self.dones[i] = action, reward, float(done)
        self.pos = (self.pos + 1) % self.capacity
        self.full = self.full or self.pos == 0

    def sample(self, n):
        idx = torch.randint(len(self), (n,))
        return (self.obs[idx], self.actions[idx], self.rewards[idx],
                self.next_obs[idx], self.dones[idx])


def make_qnet():
    return nn.Sequential(nn.Linear(2048, 256), nn.ReLU(), nn.Linear(256, 3))


env = Corridor()
online, target = make_qnet(), make_qnet()
target.load_state_dict(online.state_dict())
optimizer = torch.optim.RMSprop(online.parameters(), lr=2.5e-4, alpha=0.95, eps=0.01)
replay = ReplayBuffer(REPLAY_SIZE, 2048)

rss_start = _truth.rss_bytes()
rss_trace = []
obs, episode_return, returns, updates = env.reset(), 0.0, [], 0

for step in range(1, TOTAL_STEPS + 1):
    eps = max(0.05, 1.0 - step / 8_000)
    if random.random() < eps:
        action = random.randrange(3)
    else:
        with torch.no_grad():
            action = int(online(obs).argmax())
    next_obs, reward, done = env.step(action)
    replay.add(obs, action, reward, next_obs, done)
    episode_return += reward
    obs = next_obs
    if done:
        returns.append(episode_return)
        obs, episode_return = env.reset(), 0.0

    if step % 4 == 0 and len(replay) >= 1_000:
        s, a, r, s2, d = replay.sample(BATCH)
        with torch.no_grad():
            q_next = target(s2).max(1).values
        q = online(s).gather(1, a[:, None]).squeeze(1)
        loss = F.smooth_l1_loss(q, r + GAMMA * (1 - d) * q_next)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        updates += 1

    if step % 1_000 == 0:
        target.load_state_dict(online.state_dict())
        rss_trace.append((step, updates, _truth.rss_bytes()))
        recent = sum(returns[-20:]) / max(1, len(returns[-20:]))
        print(f"step {step} eps {eps:.2f} replay {len(replay)} return {recent:.2f}")

rss_end = _truth.rss_bytes()
at = {env_step: (n_updates, rss) for env_step, n_updates, rss in rss_trace}
(u1, r1), (u_fill, rss_at_fill), (u_end, _) = at[1_000], at[REPLAY_SIZE], at[TOTAL_STEPS]
replay_bytes = _truth.storage_bytes([replay.obs, replay.next_obs, replay.actions,
                                     replay.rewards, replay.dones])
_truth.write(
    unit="optimizer_step",
    env_steps=TOTAL_STEPS,
    optimizer_steps=updates,
    replay_len=len(replay),
    replay_bytes=replay_bytes,
    fill_step=REPLAY_SIZE,
    rss_start=rss_start,
    rss_at_fill=rss_at_fill,
    rss_end=rss_end,
    env_step_updates_rss_every_1000=rss_trace,
    growth_per_env_step_while_filling=(rss_at_fill - r1) / (REPLAY_SIZE - 1_000),
    growth_per_optimizer_step_while_filling=(rss_at_fill - r1) / (u_fill - u1),
    growth_per_optimizer_step_after_fill=(rss_end - rss_at_fill) / (u_end - u_fill),
    optimizer_steps_at_fill=u_fill,
)
