#!/usr/bin/env python3
"""Run an upstream YOLOv5 v7.0 or YOLOv7 script (val.py, test.py, detect.py, train.py) under current numpy and Pillow.

Measurement only, for bench/val_vs_upstream.sh; run with the upstream venv's Python from the upstream tree:

    cd /tmp/yolov5 && python /path/to/kestrel/bench/upstream_run.py val.py --weights ... --data ...
    cd /tmp/yolov7 && python /path/to/kestrel/bench/upstream_run.py test.py --weights ... --data ...

v7.0 (Nov 2022) calls two functions that were removed later: numpy.trapz (numpy 2.0: numpy.trapezoid,
the same trapezoidal rule under a new name; utils/metrics.py compute_ap integrates the PR curve with it)
and PIL's FreeTypeFont.getsize (Pillow 10: getbbox; utils/plots.py Annotator labels). Both are put back as
aliases before the script runs as __main__ with the remaining arguments; upstream's code is not changed.

With KESTREL_PREPROCESS=1 (to explain differences, not to measure upstream) two preprocessing choices of
upstream's validation loader (LoadImagesAndLabels: utils/dataloaders.py in YOLOv5, utils/datasets.py in
YOLOv7, whose load_image is a module function) are replaced by kestrel's, by wrapping them from outside:
  - load_image's first resize to --img on the long side: (int(w0 * r), int(h0 * r)) in v7.0, (ceil(w0 * r),
    ceil(h0 * r)) in kestrel (src/kestrel/data/augment.cpp resize_long_side; upstream master after v7.0 also
    rounds up). The wrapper hands load_image a cv2 whose resize rounds the requested size up to that.
  - --rect's sort by aspect ratio: numpy's default argsort (introsort, not stable: equal ratios in an order of
    its own) in v7.0, a stable sort (equal ratios in file order) in kestrel. The wrapper re-sorts the dataset
    stably after __init__ and recomputes batch_shapes with upstream's formula.
KESTREL_PREPROCESS=resize or =sort replaces only that one.

With KESTREL_TRAIN_DUMP=DIR (bench/train_vs_upstream.sh), train.py (YOLOv5's or YOLOv7's) also leaves the
float32 weights of its model and EMA and each iteration's losses in DIR (see _train_with_dump and
_train_with_dump_yolov7); with KESTREL_SORT_OBJ_IOU=1 too, YOLOv5's loss keeps the largest IoU where
candidates share a cell, as kestrel's; with KESTREL_STABLE_TOPK=1, YOLOv7's OTA assignment takes the earliest of
equally cheap candidates, as kestrel's (_stable_topk).

Under torch >= 2.6, whose torch.load defaults to weights_only=True, the upstream scripts' own torch.load of
their .pt files fails (v7.0's val.py on a checkpoint, YOLOv7's train.py in strip_optimizer after training,
which then exits 1): set TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 in the environment of the upstream run. (kestrel
itself never loads pickles.)
"""
import os
import runpy
import sys

import numpy as np

if not hasattr(np, 'trapz'):
    np.trapz = np.trapezoid

try:
    from PIL import ImageFont

    if not hasattr(ImageFont.FreeTypeFont, 'getsize'):
        def _getsize(self, text, *args, **kwargs):
            left, top, right, bottom = self.getbbox(text, *args, **kwargs)
            return right - left, bottom - top

        ImageFont.FreeTypeFont.getsize = _getsize
except ImportError:
    pass


def _kestrel_preprocess(resize=True, sort=True):
    import inspect
    import math
    import types

    try:
        import utils.dataloaders as dl  # upstream YOLOv5, imported from the working directory
        yolov7 = False
    except ImportError:
        import utils.datasets as dl  # YOLOv7
        yolov7 = True

    cls = dl.LoadImagesAndLabels
    orig_init = cls.__init__
    orig_load = dl.load_image if yolov7 else cls.load_image
    real_cv2 = dl.cv2
    files = 'img_files' if yolov7 else 'im_files'
    # The per-image lists each upstream reorders in its own rect sort.
    reordered = (('img_files', 'label_files', 'labels') if yolov7 else
                 ('im_files', 'label_files', 'labels', 'segments', 'npy_files', 'ims', 'im_hw0', 'im_hw'))

    def init(self, *args, **kwargs):
        orig_init(self, *args, **kwargs)
        if not self.rect:
            return
        a = inspect.signature(orig_init).bind(self, *args, **kwargs)
        a.apply_defaults()
        img_size, stride, pad = a.arguments['img_size'], a.arguments['stride'], a.arguments['pad']
        ar = self.shapes[:, 1] / self.shapes[:, 0]
        order = sorted(range(len(ar)), key=lambda i: (ar[i], getattr(self, files)[i]))  # ratio, then file order
        for name in reordered:
            v = getattr(self, name, None)
            if isinstance(v, list) and len(v) == len(order):
                setattr(self, name, [v[i] for i in order])
        self.shapes = self.shapes[order]
        ar = ar[order]
        nb = int(self.batch[-1]) + 1
        shapes = [[1, 1]] * nb
        for b in range(nb):
            ari = ar[self.batch == b]
            if ari.max() < 1:
                shapes[b] = [ari.max(), 1]
            elif ari.min() > 1:
                shapes[b] = [1, 1 / ari.min()]
        self.batch_shapes = np.ceil(np.array(shapes) * img_size / stride + pad).astype(int) * stride

    class Cv2RoundUp(types.SimpleNamespace):
        def __getattr__(self, name):
            return getattr(real_cv2, name)

    def load_image(self, i):
        def resize(im, dsize, *args, **kwargs):
            h0, w0 = im.shape[:2]
            r = self.img_size / max(h0, w0)
            if dsize == (int(w0 * r), int(h0 * r)):
                dsize = (math.ceil(w0 * r), math.ceil(h0 * r))
            return real_cv2.resize(im, dsize, *args, **kwargs)

        dl.cv2 = Cv2RoundUp(resize=resize)
        try:
            return orig_load(self, i)
        finally:
            dl.cv2 = real_cv2

    if sort:
        cls.__init__ = init
    if resize and yolov7:
        dl.load_image = load_image  # __getitem__ looks the module function up at each call
    elif resize:
        cls.load_image = load_image


def _write_dump(dump_dir, seen):
    """DUMP_DIR/upstream_final.pt: the float32 state of the model and of its EMA (train.py's checkpoints hold
    float16 copies) and the EMA's update count; DUMP_DIR/upstream_iters.json: the iterations' losses."""
    import json
    from pathlib import Path

    import torch

    def fp32(module):
        return {k: v.detach().float().clone() for k, v in module.state_dict().items()}

    out = Path(dump_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.save({'model': fp32(seen['model']), 'ema': fp32(seen['ema'].ema), 'ema_updates': seen['ema'].updates},
               out / 'upstream_final.pt')
    (out / 'upstream_iters.json').write_text(json.dumps(seen['iters']))


def _train_with_dump(dump_dir):
    """YOLOv5's train.py with two observers registered through its own Callbacks (train.main(opt, callbacks)):
    each iteration's running-mean losses, and at the end of training the float32 state of the model and of
    its EMA (train.py's checkpoints hold float16 copies) in DUMP_DIR/upstream_final.pt, the iterations in
    DUMP_DIR/upstream_iters.json (_write_dump). The EMA is found by subclassing the ModelEMA that train.py imported."""
    import train as upstream_train  # upstream train.py, imported from the working directory
    from utils.callbacks import Callbacks

    seen = {'model': None, 'ema': None, 'iters': []}

    class ObservedEMA(upstream_train.ModelEMA):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            seen['ema'] = self

    def batch_end(model, ni, imgs, targets, paths, mloss, *rest):
        seen['model'] = model
        seen['iters'].append([int(ni)] + [float(x) for x in mloss])

    def train_end(*args):
        _write_dump(dump_dir, seen)

    upstream_train.ModelEMA = ObservedEMA
    if os.environ.get('KESTREL_SORT_OBJ_IOU') == '1':
        # ComputeLoss's own switch (a class attribute, False in v7.0): candidates sorted by IoU before
        # tobj[b, a, gj, gi] = iou, so where several hit one cell the largest IoU is written last, which is
        # the rule kestrel's loss uses (src/kestrel/loss/yolo_loss.cpp level_loss).
        import utils.loss
        utils.loss.ComputeLoss.sort_obj_iou = True
    callbacks = Callbacks()
    callbacks.register_action('on_train_batch_end', callback=batch_end)
    callbacks.register_action('on_train_end', callback=train_end)
    upstream_train.main(upstream_train.parse_opt(), callbacks)


def _stable_topk():
    """torch.topk with ties in index order (a stable sort), for YOLOv7's OTA assignment: upstream leaves the order
    of equal costs to torch.topk, kestrel takes the earliest candidates (src/kestrel/loss/ota_loss.h). Process-wide:
    measurement only."""
    import torch

    def topk(input, k, dim=-1, largest=True, sorted=True):
        values, indices = torch.sort(input, dim=dim, descending=largest, stable=True)
        return torch.return_types.topk((values.narrow(dim, 0, k), indices.narrow(dim, 0, k)))

    torch.topk = topk


def _train_with_dump_yolov7(dump_dir):
    """YOLOv7's train.py (which has no callbacks) with the same two observers, by subclassing and wrapping from
    outside before it runs: its ModelEMA (which is handed the model) and ComputeLossOTA.__call__ (the training
    loss only: validation uses ComputeLoss), whose loss items are each iteration's (with one iteration per
    epoch also the epoch's running mean). The files are those of _train_with_dump. Needs loss_ota: 1 (the
    YOLOv7 hyps' value): with ComputeLoss for training its calls could not be told from validation's."""
    import utils.loss
    import utils.torch_utils

    seen = {'model': None, 'ema': None, 'iters': []}

    class ObservedEMA(utils.torch_utils.ModelEMA):
        def __init__(self, model, *args, **kwargs):
            super().__init__(model, *args, **kwargs)
            seen['model'], seen['ema'] = model, self

    ota_call = utils.loss.ComputeLossOTA.__call__

    def observed_call(self, p, targets, imgs):
        loss, items = ota_call(self, p, targets, imgs)
        seen['iters'].append([len(seen['iters'])] + [float(x) for x in items[:3]])
        return loss, items

    if os.environ.get('KESTREL_STABLE_TOPK') == '1':
        _stable_topk()
    utils.torch_utils.ModelEMA = ObservedEMA  # before train.py's `from utils.torch_utils import ModelEMA`
    utils.loss.ComputeLossOTA.__call__ = observed_call
    runpy.run_path('train.py', run_name='__main__')
    if not seen['iters']:
        sys.exit('KESTREL_TRAIN_DUMP: no ComputeLossOTA call (a hyp with loss_ota: 1 is needed)')
    _write_dump(dump_dir, seen)


def main():
    if len(sys.argv) < 2:
        sys.exit('usage: upstream_run.py SCRIPT.py [ARGS...]')
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path.insert(0, '.')
    _kp = os.environ.get('KESTREL_PREPROCESS', '')
    if _kp in ('1', 'resize', 'sort'):
        _kestrel_preprocess(resize=_kp != 'sort', sort=_kp != 'resize')
    elif _kp:
        sys.exit(f'KESTREL_PREPROCESS={_kp}: expected 1 (both), resize or sort')
    if os.environ.get('KESTREL_TRAIN_DUMP'):
        if script != 'train.py':
            sys.exit('KESTREL_TRAIN_DUMP: train.py only')
        if os.path.exists('utils/callbacks.py'):  # YOLOv5
            _train_with_dump(os.environ['KESTREL_TRAIN_DUMP'])
        else:
            _train_with_dump_yolov7(os.environ['KESTREL_TRAIN_DUMP'])
    else:
        runpy.run_path(script, run_name='__main__')


if __name__ == '__main__':
    main()
