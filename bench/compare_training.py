#!/usr/bin/env python3
"""Compare a `kestrel train` run with an upstream YOLOv5 or YOLOv7 train.py run of the same recipe (bench/train_vs_upstream.sh).

Measurement only; run with kestrel's venv Python (torch, safetensors, tensorboard):

    python bench/compare_training.py --upstream-dump DIR --upstream-run RUN --kestrel-run RUN [--other-upstream-dump DIR]

Reads upstream's per-iteration losses and final float32 model/EMA (bench/upstream_run.py KESTREL_TRAIN_DUMP)
and results.csv (YOLOv7, which writes none: its TensorBoard scalars, the same columns), kestrel's TensorBoard
scalars (float32 epoch losses), results.csv and weights/last.state.safetensors. With one iteration per epoch an epoch's loss is that iteration's.
Prints per epoch: the largest relative difference of the three train losses and whether the three
learning rates (x/lr0..2) agree; then the final weights' relative difference (norm of all differences
over norm of all weights) for the model and the EMA. --other-upstream-dump: a second upstream run
(e.g. another thread count) whose differences from the first show how far rounding alone moves a run.

    python bench/compare_training.py --curves RUN [RUN ...] [--window 10]

Runs with augmentation cannot be compared step by step (each side draws its own random numbers): this
prints the three train losses of each run's results.csv averaged over windows of epochs, side by side,
and per window the mean of the runs whose folder name contains "kestrel" against the others' ("upstream"),
relative to the spread between seeds of one side.
"""
import argparse
import csv
import glob
import json
import sys

import torch
from safetensors.torch import load_file


def results_rows(path):
    with open(path) as f:
        rows = list(csv.reader(f))
    head = [h.strip() for h in rows[0]]
    return [dict(zip(head, (float(x) for x in row))) for row in rows[1:]]


def tensorboard_scalars(run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    files = glob.glob(f'{run}/events.out.tfevents.*')
    if len(files) != 1:
        raise SystemExit(f'{run}: expected one TensorBoard event file, found {len(files)}')
    ea = EventAccumulator(files[0])
    ea.Reload()
    return {tag: [e.value for e in ea.Scalars(tag)] for tag in ea.Tags()['scalars']}


def kestrel_losses(run):
    scalars = tensorboard_scalars(run)
    cols = [scalars[f'train/{n}_loss'] for n in ('box', 'obj', 'cls')]
    return [list(t) for t in zip(*cols)]


def upstream_rows(run):
    """results.csv's rows; YOLOv7's run has its per-epoch TensorBoard scalars under the same names instead."""
    if glob.glob(f'{run}/results.csv'):
        return results_rows(f'{run}/results.csv')
    scalars = tensorboard_scalars(run)
    epochs = min(len(v) for v in scalars.values())
    return [{tag: v[e] for tag, v in scalars.items()} for e in range(epochs)]


def rel_diff(a, b):
    return max(abs(x - y) / max(abs(x), 1e-12) for x, y in zip(a, b))


def weights_diff(a, b):
    num = den = 0.0
    for name, t in a.items():
        if not t.is_floating_point():
            continue
        if name not in b or b[name].shape != t.shape:
            raise SystemExit(f'{name}: missing or of another shape in the other weights')
        num += (b[name].double() - t.double()).pow(2).sum().item()
        den += t.double().pow(2).sum().item()
    if den == 0:
        raise SystemExit('no floating-point weights to compare')
    return (num / den) ** 0.5


def curves(runs, window):
    import numpy as np
    cols = ('train/box_loss', 'train/obj_loss', 'train/cls_loss')
    data = {r: np.array([[row[c] for c in cols] for row in results_rows(f'{r}/results.csv')]) for r in runs}
    epochs = min(len(v) for v in data.values())
    window = max(1, min(window, epochs))  # short runs: one window
    names = [r.rstrip('/').split('/')[-1] for r in runs]
    print(f'train losses (box obj cls) averaged over {window}-epoch windows, {epochs} epochs')
    print('epochs    ' + '  '.join(f'{n:>23s}' for n in names) + '   kestrel/upstream - 1 (box obj cls)')
    k = [r for r, n in zip(runs, names) if 'kestrel' in n]
    u = [r for r, n in zip(runs, names) if 'kestrel' not in n]
    total_k, total_u = [], []
    for w0 in range(0, epochs - window + 1, window):
        means = {r: data[r][w0:w0 + window].mean(0) for r in runs}
        line = f'{w0:3d}-{w0 + window - 1:3d}  ' + '  '.join(' '.join(f'{x:.5f}' for x in means[r]) for r in runs)
        if k and u:
            mk, mu = np.mean([means[r] for r in k], 0), np.mean([means[r] for r in u], 0)
            total_k.append(mk)
            total_u.append(mu)
            line += '   ' + ' '.join(f'{x:+.1%}' for x in mk / mu - 1)
        print(line)
    if total_k:
        mk, mu = np.mean(total_k, 0), np.mean(total_u, 0)
        print('all windows: kestrel/upstream - 1 = ' + ' '.join(f'{x:+.2%}' for x in mk / mu - 1))
        for side, group in (('kestrel', k), ('upstream', u)):
            if len(group) > 1:
                m = [data[r][:epochs - epochs % window].mean(0) for r in group]
                print(f'{side}: spread between its runs (max/min - 1 of the whole-run means): ' +
                      ' '.join(f'{x:.2%}' for x in np.max(m, 0) / np.min(m, 0) - 1))


def main():
    if '--curves' in sys.argv:
        ap = argparse.ArgumentParser(description='loss curves of several runs')
        ap.add_argument('--curves', nargs='+', required=True)
        ap.add_argument('--window', type=int, default=10)
        a = ap.parse_args()
        curves(a.curves, a.window)
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--upstream-dump', required=True)
    ap.add_argument('--upstream-run', required=True)
    ap.add_argument('--kestrel-run', required=True)
    ap.add_argument('--other-upstream-dump')
    ap.add_argument('--show', type=int, default=8, help='epochs listed from the start (then every 10th)')
    args = ap.parse_args()

    up = [it[1:] for it in json.load(open(f'{args.upstream_dump}/upstream_iters.json'))]
    other = ([it[1:] for it in json.load(open(f'{args.other_upstream_dump}/upstream_iters.json'))]
             if args.other_upstream_dump else None)
    k = kestrel_losses(args.kestrel_run)
    ur, kr = upstream_rows(args.upstream_run), results_rows(f'{args.kestrel_run}/results.csv')
    tolerance = 2e-5 if glob.glob(f'{args.upstream_run}/results.csv') else 5.01e-5
    if not (len(up) == len(k) == len(ur) == len(kr)):
        raise SystemExit(f'iterations/epochs differ: upstream {len(up)} iterations, {len(ur)} rows; '
                         f'kestrel {len(k)} epochs, {len(kr)} rows (one iteration per epoch expected)')
    lr_mismatch = []
    print('epoch  train-loss rel. diff kestrel vs upstream' + ('   upstream vs other upstream' if other else '') +
          '   x/lr0 x/lr1 x/lr2 (upstream)')
    for e in range(len(up)):
        lrs = [(ur[e][f'x/lr{g}'], kr[e][f'x/lr{g}']) for g in range(3)]
        # results.csv: 5 significant digits on both sides, or (YOLOv7) against TensorBoard's float32
        lr_ok = all(abs(a - b) <= 1e-9 + tolerance * abs(a) for a, b in lrs)
        if not lr_ok:
            lr_mismatch.append(e)
        if e < args.show or e % 10 == 0 or e == len(up) - 1 or not lr_ok:
            line = f'{e:5d}  {rel_diff(up[e], k[e]):.1e}'
            if other and e < len(other):
                line += f'                                   {rel_diff(up[e], other[e]):.1e}'
            print(line + '   ' + ' '.join(f'{a:.5g}' for a, _ in lrs) + ('' if lr_ok else '   LR DIFFERS: kestrel ' +
                                                                      ' '.join(f'{b:.5g}' for _, b in lrs)))
    print(f'learning rates: {"all epochs agree" if not lr_mismatch else "differ at epochs " + str(lr_mismatch)}')
    last = len(up) - 1
    for key in ('metrics/mAP_0.5', 'metrics/mAP_0.5:0.95', 'val/box_loss', 'val/obj_loss', 'val/cls_loss'):
        print(f'final {key}: upstream {ur[last][key]:.5g}, kestrel {kr[last][key]:.5g}')
    u = torch.load(f'{args.upstream_dump}/upstream_final.pt', weights_only=True)
    state = load_file(f'{args.kestrel_run}/weights/last.state.safetensors')
    for part in ('model', 'ema'):
        kw = {n[len(part) + 1:]: t for n, t in state.items() if n.startswith(part + '/')}
        line = f'final {part} weights: |kestrel - upstream| / |upstream| = {weights_diff(u[part], kw):.2e}'
        if args.other_upstream_dump:
            o = torch.load(f'{args.other_upstream_dump}/upstream_final.pt', weights_only=True)
            line += f'; other upstream run: {weights_diff(u[part], o[part]):.2e}'
        print(line)


if __name__ == '__main__':
    main()
