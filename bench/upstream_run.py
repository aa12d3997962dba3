#!/usr/bin/env python3
"""Run an upstream YOLOv5 v7.0 or YOLOv7 script (val.py, test.py, detect.py) under current numpy and Pillow.

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
runpy.run_path(script, run_name='__main__')
