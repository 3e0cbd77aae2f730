#!/usr/bin/python3
"""Train a small AlexNet-style CNN on random data and dump it with dumpd.

Every leaf module (Conv2d, ReLU, MaxPool2d, Linear, ...) is dumped per call under
MindSpore-style names such as ``Default/features-Sequential/0-Conv2d/Conv2d-op2``, in the
iterations the job config selects. Needs a running daemon::

    build/bin/dumpd --socket /tmp/dumpd.sock &
    PYTHONPATH=build/python /usr/bin/python3 client/python/examples/train_alexnet.py \\
        --socket /tmp/dumpd.sock --config config/examples/all_ops.json --steps 10

The defaults (batch 8, 32x32 images, 10 steps) run in a few seconds on two CPU cores.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch
from torch import nn

import dumpd
import dumpd.torch

REPO = Path(__file__).resolve().parents[3]
DEFAULT_CONFIG = REPO / "config" / "examples" / "all_ops.json"


class AlexNet(nn.Module):
    """AlexNet's layout (5 convs, 3 pools, 3 dense layers), scaled down for CPUs."""

    def __init__(self, num_classes: int = 10, width: int = 16) -> None:
        super().__init__()
        w = width
        # inplace=False: full backward hooks (--backward) reject in-place outputs.
        self.features = nn.Sequential(
            nn.Conv2d(3, w, kernel_size=5, padding=2), nn.ReLU(),
            nn.MaxPool2d(kernel_size=2),
            nn.Conv2d(w, 2 * w, kernel_size=5, padding=2), nn.ReLU(),
            nn.MaxPool2d(kernel_size=2),
            nn.Conv2d(2 * w, 3 * w, kernel_size=3, padding=1), nn.ReLU(),
            nn.Conv2d(3 * w, 3 * w, kernel_size=3, padding=1), nn.ReLU(),
            nn.Conv2d(3 * w, 2 * w, kernel_size=3, padding=1), nn.ReLU(),
            nn.MaxPool2d(kernel_size=2),
        )
        self.avgpool = nn.AdaptiveAvgPool2d((4, 4))
        self.classifier = nn.Sequential(
            nn.Dropout(p=0.5), nn.Linear(2 * w * 4 * 4, 8 * w), nn.ReLU(),
            nn.Dropout(p=0.5), nn.Linear(8 * w, 8 * w), nn.ReLU(),
            nn.Linear(8 * w, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--socket", help="dumpd socket (default $DUMPD_SOCKET, else "
                   "/run/dumpd/dumpd.sock)")
    p.add_argument("--config", default=str(DEFAULT_CONFIG),
                   help="job config, data_dump.json format (default: %(default)s)")
    p.add_argument("--path", help="override the config's dump path")
    p.add_argument("--steps", type=int, default=10, help="training steps (default 10)")
    p.add_argument("--batch", type=int, default=8, help="batch size (default 8)")
    p.add_argument("--size", type=int, default=32, help="image height and width (default 32)")
    p.add_argument("--width", type=int, default=16, help="channels of the first conv")
    p.add_argument("--backward", action="store_true", help="also dump gradients")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads (default 2)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--bf16", action="store_true",
                   help="run the forward pass under bfloat16 autocast (a mixed-precision port "
                        "to compare against the float32 run with dumpctl compare)")
    args = p.parse_args(argv)

    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    config: object = args.config
    if args.path:
        with open(args.config) as f:
            job = json.load(f)
        job["common_dump_settings"]["path"] = os.path.abspath(args.path)
        config = job  # dumpd.Client also takes the job config as a dict

    model = AlexNet(width=args.width)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    images = torch.randn(args.batch, 3, args.size, args.size)
    labels = torch.randint(0, 10, (args.batch,))

    try:
        client = dumpd.Client(config, socket=args.socket)
    except dumpd.DumpdError as e:
        print(f"train_alexnet: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    print(f"dumpd {dumpd.__version__}: dumping to {client.path}/rank_{client.rank}/"
          f"{client.net_name} (config {args.config})")
    start = time.monotonic()
    with client, dumpd.torch.attach(model, client, backward=args.backward) as handle:
        print(f"hooked {len(handle.names)} leaf modules, e.g. "
              f"{next(iter(handle.names.values()))}")
        committed = 0
        for step in dumpd.torch.steps(client, range(args.steps)):
            optimizer.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
                loss = loss_fn(model(images), labels)
            loss.backward()
            optimizer.step()
            stats = client.stats()
            new = stats["tensors_committed"] - committed
            committed = stats["tensors_committed"]
            print(f"step {step}: loss {loss.item():.4f}, "
                  + (f"dumped {new} tensors" if new else "not selected"))
        counts = client.flush()
    elapsed = time.monotonic() - start
    print(f"done in {elapsed:.2f} s: {counts['tensors_written']} tensors written "
          f"({counts['bytes_written'] / 1e6:.1f} MB), {counts['tensors_dropped']} dropped, "
          f"{counts['tensors_failed']} failed")
    if counts["last_error"]:
        print(f"last error: {counts['last_error']}", file=sys.stderr)
    return 0 if counts["tensors_failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
