#!/usr/bin/env python3
"""The seed's plain PyTorch training loop, as the baseline the C++ trainer is measured against.

torchvision's resnet50 (or resnet18), ImageNet stem, 1000-way head as the seed leaves it (or
10-way with --classes 10); CIFAR-10 through torchvision's CIFAR10 dataset class with ToTensor();
DataLoader(batch_size=32, shuffle=True); cross-entropy; SGD with momentum 0.9. The images come
from the same official-format binary batches the C++ trainer reads (data_batch_1..5.bin,
test_batch.bin), loaded into the dataset's in-memory array exactly as torchvision's CIFAR10 holds
its pickled data, so every sample takes the same per-sample path (PIL image, ToTensor).

  python_baseline.py --data DIR [--arch resnet50] [--classes 1000] [--batch-size 32]
                     [--steps N | --epochs N] [--train-limit N] [--test-limit N]
                     [--threads T] [--lr 0.01] [--device cpu] [--seed 0] [--json FILE]
                     [--compile [--compile-mode reduce-overhead]]

Prints one JSON object (and writes it to --json): images/s over the timed training steps,
seconds, steps, and per epoch the test accuracy and the time since training started.

--compile runs the model through torch.compile (mode reduce-overhead: inductor plus CUDA graphs
on a GPU), the Python user's fast path. Its first 3 steps (compilation, graph recording) are
timed apart as compile_seconds and left out of images/s and train_seconds.
"""
import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torchvision
from torchvision import transforms

import script_support


class Cifar10FromBatches(torchvision.datasets.CIFAR10):
    """torchvision's CIFAR10 (its __getitem__: PIL image from the array, then the transform),
    filled from the binary batches instead of the pickled python version."""

    def __init__(self, folder, train, limit, transform):
        self.root, self.train, self.transform, self.target_transform = str(folder), train, transform, None
        names = [f"data_batch_{i}.bin" for i in range(1, 6)] if train else ["test_batch.bin"]
        records = np.concatenate([np.fromfile(folder / n, dtype=np.uint8).reshape(-1, 3073) for n in names])
        if limit:
            records = records[:limit]
        self.targets = records[:, 0].astype(np.int64).tolist()
        self.data = records[:, 1:].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1).copy()  # HWC like torchvision


def main(argv=None):
    parser = script_support.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True, help="folder with data_batch_1..5.bin and test_batch.bin")
    parser.add_argument("--arch", default="resnet50", choices=["resnet18", "resnet50"])
    parser.add_argument("--classes", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, help="stop after this many optimizer steps")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--train-limit", type=int, default=0)
    parser.add_argument("--test-limit", type=int, default=0)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eval", action="store_true", help="evaluate on the test split after each epoch")
    parser.add_argument("--json", help="also write the result here")
    parser.add_argument("--compile", action="store_true", help="torch.compile the model")
    parser.add_argument("--compile-mode", default="reduce-overhead")
    args = parser.parse_args(argv)

    folder = script_support.path_argument("--data", args.data, "a folder of binary batches (data_batch_1..5.bin, "
                                          "test_batch.bin)", kind="folder")
    if args.json is not None:
        script_support.path_argument("--json", args.json, "a file to write the result to", must_exist=False)
    if not (folder / "data_batch_1.bin").exists():
        print(f"python_baseline: {folder}: no data_batch_1.bin (run scripts/get-data.sh --to-binary)", file=sys.stderr)
        return 2
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    train_set = Cifar10FromBatches(folder, True, args.train_limit, transforms.ToTensor())
    loader = torch.utils.data.DataLoader(train_set, batch_size=args.batch_size, shuffle=True)
    model = getattr(torchvision.models, args.arch)(num_classes=args.classes).to(device)
    forward = torch.compile(model, mode=args.compile_mode) if args.compile else model
    warmup_steps = 3 if args.compile else 0  # compilation and graph recording, timed apart
    criterion = torch.nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    def evaluate():
        test_set = Cifar10FromBatches(folder, False, args.test_limit, transforms.ToTensor())
        model.eval()
        correct = 0
        with torch.no_grad():
            for images, labels in torch.utils.data.DataLoader(test_set, batch_size=500):
                correct += (model(images.to(device)).argmax(1) == labels.to(device)).sum().item()
        model.train()
        return correct / len(test_set)

    steps, train_seconds, compile_seconds, epochs = 0, 0.0, 0.0, []
    started = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        model.train()
        epoch_start = time.perf_counter()
        for images, labels in loader:
            images, labels = images.to(device), labels.to(device)
            optimizer.zero_grad()
            loss = criterion(forward(images), labels)
            loss.backward()
            optimizer.step()
            steps += 1
            if steps == warmup_steps:
                if device.type == "cuda":
                    torch.cuda.synchronize()
                compile_seconds = time.perf_counter() - epoch_start
                epoch_start = time.perf_counter()
            if args.steps and steps >= args.steps:
                break
        if device.type == "cuda":
            torch.cuda.synchronize()
        train_seconds += time.perf_counter() - epoch_start
        record = {"epoch": epoch, "steps": steps, "train_seconds": train_seconds}
        if args.eval:
            record["test_acc"] = evaluate()
        record["elapsed_seconds"] = time.perf_counter() - started
        epochs.append(record)
        if args.steps and steps >= args.steps:
            break
    timed_steps = steps - min(warmup_steps, steps)
    result = {"implementation": "python" + (f" torch.compile({args.compile_mode})" if args.compile else ""),
              "arch": args.arch, "classes": args.classes,
              "batch_size": args.batch_size, "threads": torch.get_num_threads(), "steps": steps,
              "train_seconds": train_seconds, "compile_seconds": compile_seconds,
              "images_per_second": timed_steps * args.batch_size / train_seconds if timed_steps else 0.0,
              "epochs": epochs, "torch": torch.__version__}
    print(json.dumps(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(script_support.run("python_baseline", main))
