#!/usr/bin/env python3
"""Upstream YOLOv7's training step on a synthetic batch, with its plain loss or its OTA loss.

Measurement helper for bench/ota_cpu_vs_upstream.sh: not part of kestrel's build or tests. It only
imports upstream's code (models.yolo.Model, utils.loss.ComputeLoss / ComputeLossOTA,
utils.torch_utils.ModelEMA) from --upstream-dir (WongKinYiu/yolov7); nothing of upstream is copied here.

The set-up follows upstream train.py for a from-scratch run:
  * Model(cfg, ch=3, nc=80, anchors=hyp.get('anchors')), train mode, fp32 on the CPU (train.py's
    autocast and GradScaler are enabled only with CUDA);
  * hyp['box'] *= 3 / nl, hyp['cls'] *= nc / 80 * 3 / nl, hyp['obj'] *= (img / 640) ** 2 * 3 / nl,
    model.nc, model.hyp = hyp, model.gr = 1.0, then ComputeLoss(model) / ComputeLossOTA(model);
  * SGD (momentum hyp['momentum'], nesterov) over three groups: BatchNorm weights and implicit
    knowledge tensors without decay, other weights with hyp['weight_decay'] scaled as train.py scales
    it, biases without decay; lr hyp['lr0'];
  * ModelEMA updated after every optimiser step, as train.py does.
One step = forward, loss, backward, optimiser step, zero_grad, EMA update, every step: kestrel's
`bench train` also steps the optimiser and the EMA on every batch (train.py would accumulate 64 / batch
batches before stepping; that changes how often the optimiser runs, not the per-batch work timed here).

Synthetic batch, as kestrel's `bench train`: images uniform in 0..1, TARGETS boxes per image with a
uniform class, a uniform centre and sides uniform in 2-40 % of the image, in upstream's target format
[image, class, x, y, w, h] (normalised). The batch is the same tensor every step.

Output: one line per timed step ("step i: ... ms, loss ... ms"), then
  result: loss=<plain|ota> ms_per_step=<mean> images_per_second=<...> loss_ms_per_step=<mean> ...
where loss_ms is the time of the loss call alone (the CPU is synchronous, so it is wall time of that
call: target assignment and the loss terms, without their backward).
"""
import argparse
import math
import os
import platform
import sys
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--upstream-dir', required=True, help='WongKinYiu/yolov7 source tree')
    ap.add_argument('--cfg', default='cfg/training/yolov7-tiny.yaml', help='relative to --upstream-dir')
    ap.add_argument('--hyp', default='data/hyp.scratch.tiny.yaml', help='relative to --upstream-dir')
    ap.add_argument('--loss', choices=['plain', 'ota'], required=True)
    ap.add_argument('--nc', type=int, default=80)
    ap.add_argument('--batch-size', type=int, default=8)
    ap.add_argument('--img', type=int, default=320)
    ap.add_argument('--targets', type=int, default=32, help='boxes per image')
    ap.add_argument('--steps', type=int, default=4, help='timed steps')
    ap.add_argument('--warmup', type=int, default=1, help='untimed steps first')
    ap.add_argument('--seed', type=int, default=0)
    ap.add_argument('--no-ema', action='store_true', help='leave out the EMA update')
    a = ap.parse_args()

    up = os.path.abspath(a.upstream_dir)
    sys.path.insert(0, up)
    os.chdir(up)  # upstream resolves some paths against its own folder

    import numpy as np
    # numpy 2 removed the deprecated scalar aliases; older upstream code may still name them.
    for name, typ in (('int', int), ('float', float), ('bool', bool)):
        if not hasattr(np, name):
            setattr(np, name, typ)
    import torch
    import yaml
    from models.yolo import Model
    from utils.loss import ComputeLoss, ComputeLossOTA
    from utils.torch_utils import ModelEMA

    torch.manual_seed(a.seed)
    with open(a.hyp) as f:
        hyp = yaml.safe_load(f)
    model = Model(a.cfg, ch=3, nc=a.nc, anchors=hyp.get('anchors'))  # CPU, fp32
    model.train()
    nl = model.model[-1].nl
    stride = int(model.stride.max())
    if a.img % max(stride, 32):
        sys.exit(f'--img {a.img} must be a multiple of {max(stride, 32)}')

    # hyperparameters as train.py scales and attaches them
    nbs = 64
    accumulate = max(round(nbs / a.batch_size), 1)
    hyp['weight_decay'] *= a.batch_size * accumulate / nbs
    hyp['box'] *= 3. / nl
    hyp['cls'] *= a.nc / 80. * 3. / nl
    hyp['obj'] *= (a.img / 640) ** 2 * 3. / nl
    model.nc = a.nc
    model.hyp = hyp
    model.gr = 1.0

    # optimiser groups: no decay (BatchNorm weights, implicit tensors), decay (other weights), biases
    no_decay, decay, biases = [], [], []
    for m in model.modules():
        if isinstance(getattr(m, 'bias', None), torch.nn.Parameter):
            biases.append(m.bias)
        if isinstance(m, torch.nn.BatchNorm2d):
            no_decay.append(m.weight)
        elif isinstance(getattr(m, 'weight', None), torch.nn.Parameter):
            decay.append(m.weight)
        if isinstance(getattr(m, 'implicit', None), torch.nn.Parameter):
            no_decay.append(m.implicit)
    grouped = {id(p) for p in no_decay + decay + biases}
    left = [n for n, p in model.named_parameters() if id(p) not in grouped]
    if left:
        sys.exit(f'parameters in no optimiser group: {left}')
    opt = torch.optim.SGD(no_decay, lr=hyp['lr0'], momentum=hyp['momentum'], nesterov=True)
    opt.add_param_group({'params': decay, 'weight_decay': hyp['weight_decay']})
    opt.add_param_group({'params': biases})
    ema = None if a.no_ema else ModelEMA(model)

    compute_loss = ComputeLoss(model) if a.loss == 'plain' else ComputeLossOTA(model)

    # synthetic batch
    g = torch.Generator().manual_seed(a.seed)
    b, n = a.batch_size, a.targets
    imgs = torch.rand(b, 3, a.img, a.img, generator=g)
    image_index = torch.arange(b, dtype=torch.float32).repeat_interleave(n)[:, None]
    cls = torch.randint(0, a.nc, (b * n, 1), generator=g).float()
    xy = torch.rand(b * n, 2, generator=g)
    wh = torch.rand(b * n, 2, generator=g) * 0.38 + 0.02
    targets = torch.cat([image_index, cls, xy, wh], 1)

    def step():
        t0 = time.perf_counter()
        pred = model(imgs)
        t1 = time.perf_counter()
        if a.loss == 'plain':
            loss, items = compute_loss(pred, targets)
        else:
            loss, items = compute_loss(pred, targets, imgs)
        t2 = time.perf_counter()
        loss.backward()
        opt.step()
        opt.zero_grad()
        if ema:
            ema.update(model)
        t3 = time.perf_counter()
        return t3 - t0, t2 - t1, float(loss.detach())

    print(f'upstream yolov7 {a.cfg}, hyp {a.hyp}, loss {a.loss}, batch {b}, {a.img} px, {n} boxes/image, '
          f'python {platform.python_version()}, torch {torch.__version__}, numpy {np.__version__}, '
          f'{torch.get_num_threads()} torch threads, EMA {"off" if a.no_ema else "on"}', flush=True)
    for i in range(a.warmup):
        s, l, v = step()
        print(f'warm-up {i + 1}: {s * 1000:.0f} ms, loss call {l * 1000:.0f} ms, loss {v:.4f}', flush=True)
    total = total_loss = 0.0
    for i in range(a.steps):
        s, l, v = step()
        total += s
        total_loss += l
        if not math.isfinite(v):
            sys.exit(f'step {i + 1}: loss is {v}')
        print(f'step {i + 1}: {s * 1000:.0f} ms, loss call {l * 1000:.0f} ms, loss {v:.4f}', flush=True)
    print(f'result: loss={a.loss} ms_per_step={total * 1000 / a.steps:.1f} '
          f'images_per_second={b * a.steps / total:.2f} loss_ms_per_step={total_loss * 1000 / a.steps:.1f} '
          f'steps={a.steps} torch_threads={torch.get_num_threads()}', flush=True)


if __name__ == '__main__':
    main()
