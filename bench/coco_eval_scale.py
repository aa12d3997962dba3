"""COCO-sized inputs for bench/coco_eval_scale.sh, and pycocotools' side of it.

  python coco_eval_scale.py make DIR IMAGES DETS   writes DIR/ann.json and DIR/res.json
  python coco_eval_scale.py pycocotools DIR        evaluates them with pycocotools, timed

The annotations: IMAGES images of 640x480, a Poisson(7.3) number of boxes each (COCO val2017 has 7.3 a
image), 80 categories, 1 % crowd boxes. The results: DETS per image, the first 3 per ground-truth box
jittered copies of it (80 % with its category, scores 0.3-1), the rest random boxes with scores 0.001-0.5.
Seeded: the same files every time.
"""
import json
import sys
import time

import numpy as np


def make(folder, n_images, dets_per_image):
    rng = np.random.default_rng(0)
    images, annotations, results = [], [], []
    for image_id in range(1, n_images + 1):
        width, height = 640, 480
        images.append({"id": image_id, "width": width, "height": height, "file_name": f"{image_id}.jpg"})
        truth = []
        for _ in range(rng.poisson(7.3)):
            w, h = rng.uniform(5, 300), rng.uniform(5, 300)
            x, y = rng.uniform(0, width - w), rng.uniform(0, height - h)
            category = int(rng.integers(1, 81))
            annotations.append({"id": len(annotations) + 1, "image_id": image_id, "category_id": category,
                                "bbox": [x, y, w, h], "area": w * h, "iscrowd": int(rng.random() < 0.01)})
            truth.append((x, y, w, h, category))
        for d in range(dets_per_image):
            if truth and d < 3 * len(truth):
                x, y, w, h, category = truth[d % len(truth)]
                jitter = rng.normal(0, 0.1, 4) * [w, h, w, h]
                box = [x + jitter[0], y + jitter[1], max(1, w + jitter[2]), max(1, h + jitter[3])]
                if rng.random() >= 0.8:
                    category = int(rng.integers(1, 81))
                score = rng.uniform(0.3, 1.0)
            else:
                box = [rng.uniform(0, width - 1), rng.uniform(0, height - 1), rng.uniform(2, 400), rng.uniform(2, 400)]
                category = int(rng.integers(1, 81))
                score = rng.uniform(0.001, 0.5)
            results.append({"image_id": image_id, "category_id": category, "bbox": [round(float(v), 3) for v in box],
                            "score": round(float(score), 5)})
    categories = [{"id": c, "name": str(c)} for c in range(1, 81)]
    with open(f"{folder}/ann.json", "w") as f:
        json.dump({"images": images, "annotations": annotations, "categories": categories}, f)
    with open(f"{folder}/res.json", "w") as f:
        json.dump(results, f)
    print(f"{len(images)} images, {len(annotations)} boxes, {len(results)} detections")


def evaluate(folder):
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval
    start = time.time()
    truth = COCO(f"{folder}/ann.json")
    detections = truth.loadRes(f"{folder}/res.json")
    read = time.time()
    e = COCOeval(truth, detections, "bbox")
    e.evaluate()
    e.accumulate()
    e.summarize()
    print(f"read {read - start:.2f} s, evaluate {time.time() - read:.2f} s")


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        evaluate(sys.argv[2])
