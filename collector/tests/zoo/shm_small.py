"""DataLoader workers in a container's small `/dev/shm` (Docker's default is 64 MB): 4 workers
hand 8 MiB batches to the main process through POSIX shared memory, 2 prefetched each, 64 MiB
in flight on a 64 MiB tmpfs. A worker whose batch does not fit fails in its queue's feeder
thread with PyTorch's own words ("RuntimeError: unable to allocate shared memory(shm) for file
</torch_...>"), the batch never arrives, and the loop waits until the DataLoader's `timeout`
(15 s here; without one it waits forever). Memory the run uses outside any process: oomscope must
measure `/dev/shm` and say it was full, with the fix (a larger `--shm-size`, fewer workers or a
lower prefetch_factor).
The program writes the size of its `/dev/shm` and the batches it got before dying.

EXPECT = {
    "shm_mib": 64,
    "exit_code": 1,
    "findings": ["shm-pressure"],
    "absent": ["leak", "worker-private-growth"],
    "words": ["/dev/shm", "--shm-size", 'the program said so: "RuntimeError: unable to allocate shared memory(shm)'],
}
"""

import argparse
import os

import torch

import _truth


class Big(torch.utils.data.Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        return torch.full((2048, 1024), float(i))  # 8 MiB


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--workers", type=int, default=4)
    a = p.parse_args()
    torch.set_num_threads(1)
    st = os.statvfs("/dev/shm")
    loader = torch.utils.data.DataLoader(Big(), batch_size=None, num_workers=a.workers,
                                         prefetch_factor=2, multiprocessing_context="fork",
                                         timeout=15)
    got = 0
    _truth.write(shm_size_bytes=st.f_blocks * st.f_frsize, batches=0)
    for batch in loader:
        got += 1
        _truth.write(shm_size_bytes=st.f_blocks * st.f_frsize, batches=got)
    print("batches %d" % got)


if __name__ == "__main__":
    main()
