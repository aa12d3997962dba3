#!/usr/bin/env python3
"""Throughput of upstream YOLOv5's training data loader, for bench/data_cpu_vs_upstream.sh.

Measurement only: run with the upstream venv's Python; this file IMPORTS upstream's
utils.dataloaders.create_dataloader from --upstream-dir and copies none of its code. It builds the
loader with the arguments train.py (v7.0, lines 187-201) passes on one process (RANK -1, WORLD_SIZE 1):
hyp from --hyp, augment=True, cache (default 'ram'), rect=False, workers, stride 32, shuffle=True,
after train.py's init_seeds(0 + 1 + RANK = 0, deterministic=True).

Epochs of --repeat x the split: upstream's LoadImagesAndLabels keys its label cache by file name, so
a list that names the images several times collapses to one copy. One "epoch" here is therefore
--repeat passes of upstream's loader back to back (its InfiniteDataLoader keeps the same worker
processes and keeps prefetching across passes, so R passes of N images do the work of one epoch of
R x N images). images/s = images / wall time of the R passes, counted from the first request.

Upstream fills its RAM cache while it builds the dataset (a thread pool of NUM_THREADS decodes every
image), not during the first epoch as kestrel does: the build time is printed separately (label
cache read + image cache fill), and epoch 1 "with build" adds it for a like-for-like first epoch.
"""
import argparse
import json
import os
import sys
import time
from pathlib import Path


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--upstream-dir', required=True, help='yolov5 v7.0 source tree')
    ap.add_argument('--data', required=True, help='dataset YAML with an absolute path: key')
    ap.add_argument('--hyp', default=None, help='hyp YAML [UPSTREAM_DIR/data/hyps/hyp.scratch-low.yaml]')
    ap.add_argument('--img', type=int, default=640)
    ap.add_argument('--batch-size', type=int, default=16)
    ap.add_argument('--workers', type=int, default=2)
    ap.add_argument('--epochs', type=int, default=3)
    ap.add_argument('--repeat', type=int, default=4, help='passes of the split per timed epoch')
    ap.add_argument('--cache', default='ram', help="ram, disk, or '' for none")
    ap.add_argument('--json', action='store_true', help='also print one JSON line at the end')
    a = ap.parse_args()

    up = Path(a.upstream_dir).resolve()
    sys.path.insert(0, str(up))
    import torch  # first, as train.py does (utils.general then sets OMP_NUM_THREADS for later processes)
    import yaml
    from utils.dataloaders import create_dataloader
    from utils.general import NUM_THREADS, check_img_size, init_seeds
    import cv2

    hyp_path = a.hyp or str(up / 'data/hyps/hyp.scratch-low.yaml')
    with open(hyp_path, errors='ignore') as f:
        hyp = yaml.safe_load(f)
    with open(a.data, errors='ignore') as f:
        data = yaml.safe_load(f)
    root = Path(data.get('path') or '')
    if not root.is_absolute():
        sys.exit(f'{a.data}: path: must be absolute (upstream resolves it against its own folder)')
    train_path = data['train']
    train_path = [str(root / x) for x in train_path] if isinstance(train_path, list) else str(root / train_path)

    init_seeds(0, deterministic=True)
    gs = 32
    imgsz = check_img_size(a.img, gs, floor=gs * 2)
    t0 = time.perf_counter()
    loader, dataset = create_dataloader(train_path, imgsz, a.batch_size, gs, False, hyp=hyp, augment=True,
                                        cache=a.cache or None, rect=False, rank=-1, workers=a.workers,
                                        image_weights=False, quad=False, prefix='train: ', shuffle=True)
    build_s = time.perf_counter() - t0
    cached = sum(im is not None for im in dataset.ims)
    info = {'what': 'upstream_loader', 'img': imgsz, 'batch': a.batch_size, 'workers_requested': a.workers,
            'worker_processes': loader.num_workers, 'cache': a.cache or 'none', 'ram_cached_images': cached,
            'split_images': len(dataset), 'batches_per_pass': len(loader), 'passes_per_epoch': a.repeat,
            'mosaic': bool(dataset.mosaic), 'pin_memory_used': bool(loader.pin_memory and torch.cuda.is_available()),
            'main_torch_threads': torch.get_num_threads(), 'worker_torch_threads': 1,  # DataLoader workers set 1
            'cv2_threads': cv2.getNumThreads(), 'upstream_NUM_THREADS': NUM_THREADS,
            'OMP_NUM_THREADS_env': os.environ.get('OMP_NUM_THREADS'), 'build_seconds': round(build_s, 3)}
    print('upstream loader: ' + ', '.join(f'{k}={v}' for k, v in info.items() if k != 'what'), flush=True)
    if a.cache == 'ram' and cached != len(dataset):
        print(f'warning: only {cached}/{len(dataset)} images in the RAM cache (upstream found too little memory)',
              flush=True)

    rates = []
    for epoch in range(a.epochs):
        t = time.perf_counter()
        images = 0
        for _ in range(a.repeat):
            for imgs, _targets, _paths, _shapes in loader:
                images += imgs.shape[0]
        s = time.perf_counter() - t
        rates.append(images / s)
        extra = ''
        if epoch == 0:
            extra = f' (with the {build_s:.2f} s build: {images / (s + build_s):.1f} images/s)'
            info['epoch1_with_build_images_per_second'] = round(images / (s + build_s), 2)
        print(f'epoch {epoch}: {images} images in {s:.2f} s = {rates[-1]:.1f} images/s{extra}', flush=True)
    info['images_per_second'] = [round(r, 2) for r in rates]
    if a.json:
        print(json.dumps(info))


if __name__ == '__main__':
    main()
