#!/usr/bin/env python3
"""Upstream YOLOv5's or YOLOv7's model and loss on kestrel's first training batch (bench/kestrel_train_batch.cpp's
files), and upstream's own training sample of each of those images, compared with kestrel's.

Measurement only, for bench/train_vs_upstream.sh; run with the upstream venv's Python from the upstream tree
(this file IMPORTS upstream's utils.loss and utils.dataloaders (YOLOv7: utils.datasets) and copies none of their
code; the model is the checkpoint's):

    cd /tmp/yolov5 && python /path/to/kestrel/bench/upstream_train_batch.py --ckpt init.pt --hyp hyp.yaml --img 320 --batch DIR

Prints, for the batch:
  images:  per image, the largest pixel difference between kestrel's batch image and upstream's
           LoadImagesAndLabels(augment=True, hyp) sample of the same file (meaningful when the hyp turns
           every random augmentation off), and whether the two label sets agree;
  outputs: the largest difference between upstream's training-mode outputs and kestrel's, same input;
  loss:    upstream's ComputeLoss items (YOLOv7 with loss_ota: 1: ComputeLossOTA) on kestrel's images and
           targets (compare with the items kestrel_train_batch printed), with train.py's gain scaling for the
           model and --img.
--stable-topk: YOLOv7's OTA takes the earliest of equally cheap candidates, as kestrel's.
--half-float rounds the weights to float16 first, as train.py does before a new run's first step (kestrel
too; kestrel_train_batch does not): then the items are train.py's first iteration's.
"""
import argparse
import os
import sys
from pathlib import Path

import numpy as np


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--ckpt', required=True, help='upstream checkpoint with the same weights as kestrel used')
    ap.add_argument('--hyp', required=True)
    ap.add_argument('--img', type=int, required=True)
    ap.add_argument('--batch', required=True, help="kestrel_train_batch's output folder")
    ap.add_argument('--half-float', action='store_true', help="round the weights to float16 first, as train.py")
    ap.add_argument('--sort-obj-iou', action='store_true', help="ComputeLoss.sort_obj_iou = True (kestrel's rule)")
    ap.add_argument('--stable-topk', action='store_true',
                    help="YOLOv7's OTA: ties among equal costs in index order (kestrel's rule; upstream_run.py _stable_topk)")
    args = ap.parse_args()

    sys.path.insert(0, '.')
    import torch
    import yaml
    yolov7 = not Path('utils/dataloaders.py').exists()
    if yolov7:
        from utils.datasets import LoadImagesAndLabels  # upstream YOLOv7
        from utils.loss import ComputeLoss, ComputeLossOTA
    else:
        from utils.dataloaders import LoadImagesAndLabels  # upstream YOLOv5
        from utils.loss import ComputeLoss

    d = Path(args.batch)
    b, h, w, m = (int(v) for v in (d / 'shape.txt').read_text().split())
    images = torch.from_numpy(np.fromfile(d / 'images.u8', dtype=np.uint8).reshape(b, 3, h, w))
    targets = torch.from_numpy(np.fromfile(d / 'targets.f32', dtype=np.float32).reshape(b, m, 5))
    mask = torch.from_numpy(np.fromfile(d / 'mask.u8', dtype=np.uint8).reshape(b, m).astype(bool))
    paths = (d / 'paths.txt').read_text().splitlines()
    hyp = yaml.safe_load(Path(args.hyp).read_text())

    # upstream's targets: [n, 6] (image, class, cx, cy, w, h)
    rows = [torch.cat((torch.full((int(mask[i].sum()), 1), float(i)), targets[i][mask[i]]), 1) for i in range(b)]
    up_targets = torch.cat(rows, 0)

    # images: upstream's own sample of each file
    ds = LoadImagesAndLabels(str(Path(paths[0]).parent), args.img, b, augment=True, hyp=dict(hyp), rect=False,
                             stride=32, pad=0.0, prefix='')
    files = ds.img_files if yolov7 else ds.im_files
    for i, p in enumerate(paths):
        j = [str(Path(f).resolve()) for f in files].index(str(Path(p).resolve()))
        img, labels, _, _ = ds[j]  # [3, H, W] uint8 RGB; labels [n, 6] (0, class, cx, cy, w, h)
        same_shape = tuple(img.shape) == tuple(images[i].shape)
        pix = (img.int() - images[i].int()).abs().max().item() if same_shape else float('nan')
        k = targets[i][mask[i]]
        lab = labels[:, 1:]
        lab_diff = (lab - k).abs().max().item() if lab.shape == k.shape else float('nan')
        print(f'image {i} {Path(p).name}: shape {tuple(img.shape)} vs {tuple(images[i].shape)}, max pixel diff {pix}, '
              f'labels {lab.shape[0]} vs {k.shape[0]}, max label diff {lab_diff:.3g}')

    ckpt = torch.load(args.ckpt, map_location='cpu', weights_only=False)
    model = ckpt['model'].float()
    if args.half_float:
        model.half().float()  # what train.py does to a fresh run's model before training (train.py:224)
    nl, nc = model.model[-1].nl, model.nc  # train.py's gain scaling (train.py:229-232)
    hyp['box'] *= 3 / nl
    hyp['cls'] *= nc / 80 * 3 / nl
    hyp['obj'] *= (args.img / 640) ** 2 * 3 / nl
    hyp['label_smoothing'] = 0.0
    model.hyp = hyp
    model.gr = 1.0  # train.py's
    for p in model.parameters():
        p.requires_grad_(True)
    model.train()
    if args.sort_obj_iou:
        ComputeLoss.sort_obj_iou = True
    if args.stable_topk:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import upstream_run  # noqa: its module code runs a script only when given one
        upstream_run._stable_topk()
    ota = yolov7 and hyp.get('loss_ota', 1) == 1  # YOLOv7 train.py's choice
    compute_loss = ComputeLossOTA(model) if ota else ComputeLoss(model)
    x = images.float() / 255
    preds = model(x)
    for i, p in enumerate(preds):
        k = torch.from_numpy(np.fromfile(d / f'level{i}.f32', dtype=np.float32).reshape(p.shape))
        diff = (p.detach() - k).abs()
        print(f'level {i} {tuple(p.shape)}: max |upstream - kestrel| {diff.max().item():.3g} '
              f'(max |value| {p.detach().abs().max().item():.3g}); objectness logits {diff[..., 4].max().item():.3g}')
    _, items = compute_loss(preds, up_targets, x) if ota else compute_loss(preds, up_targets)
    print('upstream loss items (box, obj, cls) on these images and targets:', ' '.join(f'{v:.9g}' for v in items.tolist()))
    if os.environ.get('KESTREL_PER_IMAGE'):  # each image's targets alone: where two losses differ
        for i in range(b):
            t = up_targets[up_targets[:, 0] == i]
            _, items = compute_loss(preds, t, x) if ota else compute_loss(preds, t)
            print(f'image {i} alone: ' + ' '.join(f'{v:.9g}' for v in items[:3].tolist()))


if __name__ == '__main__':
    main()
