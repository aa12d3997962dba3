#!/usr/bin/env python3
"""Per-image comparison of two sets of detections, for bench/val_vs_upstream.sh (Python 3 with numpy;
--round-kestrel also needs OpenCV: the upstream venv has both).

    compare_detections.py json UPSTREAM.json KESTREL.json      # val --save-json predictions (COCO results)
    compare_detections.py txt UPSTREAM_LABELS_DIR KESTREL_LABELS_DIR   # detect --save-txt --save-conf files
        [--round-kestrel IMAGES_DIR]  # kestrel's boxes rounded to whole pixels first, as detect.py v7.0's

Per image, boxes of the same class are paired greedily by IoU, highest first, among pairs whose confidences
differ by less than --conf-tol; a pair matches when its IoU is above --iou (0.99); two empty boxes (clipped to zero width or height at
the border) match when their corners agree within 0.01 px (json) or 1e-5 (txt, normalised). Prints one line per image
whose sets differ (or every image with --all) and a summary: images, boxes per side, matched boxes, the
largest confidence difference and the smallest IoU among matched pairs. Exit status 0.
"""
import argparse
import collections
import json
import os

import numpy as np


def load_json(path):
    out = collections.defaultdict(list)
    if not os.path.exists(path):  # val.py writes no file when there is no prediction at all
        print(f'{path}: no such file, taken as no predictions')
        return out
    for r in json.load(open(path)):
        x, y, w, h = r['bbox']
        out[str(r['image_id'])].append((int(r['category_id']), float(r['score']), (x, y, x + w, y + h)))
    return out


def load_txt(folder, round_in=None):
    """round_in: a folder of the images (<stem>.*): boxes rounded to whole pixels of the original image first,
    as detect.py v7.0 rounds them (scale_boxes(...).round()) before writing labels."""
    sizes = {}
    if round_in:
        import cv2  # noqa: PLC0415
        for f in os.listdir(round_in):
            im = cv2.imread(os.path.join(round_in, f))
            if im is not None:
                sizes[os.path.splitext(f)[0]] = im.shape[1], im.shape[0]
    out = collections.defaultdict(list)
    for name in sorted(os.listdir(folder)):
        if not name.endswith('.txt'):
            continue
        for line in open(os.path.join(folder, name)):
            v = line.split()
            if not v:
                continue
            c, cx, cy, w, h = int(float(v[0])), *map(float, v[1:5])
            conf = float(v[5]) if len(v) > 5 else 1.0
            box = (cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2)
            if round_in:
                iw, ih = sizes[name[:-4]]
                box = tuple(round(v * g) / g for v, g in zip(box, (iw, ih, iw, ih)))  # half to even, as torch
            out[name[:-4]].append((c, conf, box))
    return out


def iou_matrix(a, b, eps):
    """IoU; two empty boxes (zero width or height, e.g. clipped at the image border) with corners within eps
    of each other count as 1."""
    a, b = np.asarray(a, float).reshape(-1, 4), np.asarray(b, float).reshape(-1, 4)
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.clip(rb - lt, 0, None).prod(2)
    area = lambda x: (x[:, 2] - x[:, 0]) * (x[:, 3] - x[:, 1])
    union = area(a)[:, None] + area(b)[None, :] - inter
    same = np.abs(a[:, None, :] - b[None, :, :]).max(2) <= eps
    return np.where(union > 0, inter / np.where(union > 0, union, 1), same.astype(float))


def match(a, b, iou_min, conf_tol, eps):
    """-> (matched pairs [(i, j, iou, dconf)])"""
    pairs = []
    if a and b:
        iou = iou_matrix([x[2] for x in a], [x[2] for x in b], eps)
        for i, x in enumerate(a):
            for j, y in enumerate(b):
                if x[0] == y[0] and abs(x[1] - y[1]) < conf_tol and iou[i, j] > iou_min:
                    pairs.append((iou[i, j], -abs(x[1] - y[1]), i, j))
    pairs.sort(reverse=True)
    used_a, used_b, out = set(), set(), []
    for v, nd, i, j in pairs:
        if i not in used_a and j not in used_b:
            used_a.add(i), used_b.add(j), out.append((i, j, v, -nd))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('kind', choices=['json', 'txt'])
    ap.add_argument('upstream')
    ap.add_argument('kestrel')
    ap.add_argument('--iou', type=float, default=0.99)
    ap.add_argument('--conf-tol', type=float, default=1e-3)
    ap.add_argument('--all', action='store_true', help='a line for every image')
    ap.add_argument('--round-kestrel', metavar='IMAGES', help='txt: round kestrel boxes to whole pixels of these images')
    args = ap.parse_args()
    if args.kind == 'json':
        up, ks = load_json(args.upstream), load_json(args.kestrel)
    else:
        up, ks = load_txt(args.upstream), load_txt(args.kestrel, args.round_kestrel)
    n_up = n_ks = n_match = same = 0
    max_dc, min_iou = 0.0, 1.0
    images = sorted(set(up) | set(ks), key=lambda s: (len(s), s))
    for img in images:
        a, b = up.get(img, []), ks.get(img, [])
        m = match(a, b, args.iou, args.conf_tol, 1e-2 if args.kind == 'json' else 1e-5)
        n_up, n_ks, n_match = n_up + len(a), n_ks + len(b), n_match + len(m)
        if m:
            max_dc = max(max_dc, max(x[3] for x in m))
            min_iou = min(min_iou, min(x[2] for x in m))
        identical = len(m) == len(a) == len(b)
        same += identical
        if args.all or not identical:
            extra = ''
            if not identical:
                ia, ib = {x[0] for x in m}, {x[1] for x in m}
                ca = sorted((round(a[i][1], 5), a[i][0]) for i in range(len(a)) if i not in ia)[-3:]
                cb = sorted((round(b[j][1], 5), b[j][0]) for j in range(len(b)) if j not in ib)[-3:]
                extra = f'; unmatched (conf, class), most confident: upstream {ca}, kestrel {cb}'
            print(f'{img}: upstream {len(a)}, kestrel {len(b)}, matched {len(m)}{extra}')
    print(f'images {len(images)} ({same} with identical sets), boxes upstream {n_up}, kestrel {n_ks}, '
          f'matched {n_match} (IoU > {args.iou}, |conf diff| < {args.conf_tol}); '
          f'matched pairs: max |conf diff| {max_dc:.3g}, min IoU {min_iou:.6f}')


if __name__ == '__main__':
    main()
