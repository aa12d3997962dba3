#!/usr/bin/env python3
"""Build an upstream YOLOv5 or YOLOv7 checkpoint (.pt) from a state dict exported by tools/export_state_dict.py.

Measurement only, for bench/val_vs_upstream.sh: run with the upstream venv's Python; this file IMPORTS
upstream's models.yolo.Model from --upstream-dir and copies none of its code. The checkpoint is laid out
as upstream's train.py saves one ({'epoch', 'best_fitness', 'model', 'ema', 'updates', 'optimizer', ...}),
with 'ema' None, so upstream's attempt_load (models/experimental.py: ckpt.get('ema') or ckpt['model'],
.float(), .fuse(), stride, names) takes 'model'. The model is stored in float32 (train.py stores float16;
val.py/detect.py widen to float32 on the CPU anyway, so float32 keeps the weights bit-identical to kestrel's).

    python bench/upstream_checkpoint_from_state_dict.py --upstream-dir /tmp/yolov5 \
        --yaml model.yaml --state-dict sd.pt --data demo.yaml --out best.pt \
        [--check-input x.f32 --check-size 320 320 --check-kestrel a.f32 b.f32]

--check-input: a raw float32 [1, 3, H, W] image tensor (H, W from --check-size); the script prints the
max abs difference between upstream's decoded predictions (the model as attempt_load returns it: fused,
eval) and each --check-kestrel file (kestrel's predictions for the same tensor, raw float32 [1, N, 5 + nc]).
"""
import argparse
import sys
from pathlib import Path


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--upstream-dir', required=True, help='yolov5 v7.0 source tree')
    ap.add_argument('--yaml', required=True, help='model YAML (export_state_dict.py --yaml)')
    ap.add_argument('--state-dict', required=True, help='state dict .pt (export_state_dict.py)')
    ap.add_argument('--data', required=True, help='dataset YAML: nc and names')
    ap.add_argument('--out', required=True, help='checkpoint to write')
    ap.add_argument('--check-input', help='raw float32 [1, 3, H, W] input to compare predictions on')
    ap.add_argument('--check-size', type=int, nargs=2, metavar=('H', 'W'), default=(320, 320))
    ap.add_argument('--check-kestrel', nargs='*', default=[], help="kestrel's raw float32 predictions")
    args = ap.parse_args()

    sys.path.insert(0, str(Path(args.upstream_dir).resolve()))
    import numpy as np
    import torch
    import yaml
    from models.experimental import attempt_load  # upstream
    from models.yolo import Model  # upstream

    data = yaml.safe_load(Path(args.data).read_text())
    names = data['names']
    names = dict(enumerate(names)) if isinstance(names, (list, tuple)) else {int(k): v for k, v in names.items()}
    nc = int(data['nc'])
    model = Model(args.yaml, ch=3, nc=nc)
    sd = torch.load(args.state_dict, map_location='cpu', weights_only=True)
    model.load_state_dict(sd, strict=True)  # every key and shape, as kestrel loads
    # YOLOv7 (no utils/dataloaders.py) indexes a list of names; YOLOv5 v7.0 keeps the dict.
    yolov7 = not (Path(args.upstream_dir) / 'utils' / 'dataloaders.py').exists()
    model.names = [names[i] for i in range(nc)] if yolov7 else names
    model.nc = nc
    model.float()
    for p in model.parameters():  # as train.py's EMA weights; YOLOv7's IDetect.fuse() updates them in place
        p.requires_grad_(False)
    ckpt = {'epoch': -1, 'best_fitness': None, 'model': model, 'ema': None, 'updates': None,
            'optimizer': None, 'opt': None, 'git': None, 'date': None}
    torch.save(ckpt, args.out)
    print(f'{args.out}: {len(sd)} tensors, nc {nc}, stride {model.stride.tolist()}')

    if args.check_input:
        h, w = args.check_size
        x = torch.from_numpy(np.fromfile(args.check_input, dtype=np.float32).reshape(1, 3, h, w))
        loaded = attempt_load(args.out, device=torch.device('cpu'), fuse=True)  # what val.py/detect.py run
        with torch.no_grad():
            up = loaded(x)[0]  # eval: (decoded [1, N, 5 + nc], raw levels)
            unfused = model.eval()(x)[0]
        print(f'upstream prediction {tuple(up.shape)}, fused vs unfused upstream: max abs diff '
              f'{(up - unfused).abs().max().item():.3g}, max |value| {up.abs().max().item():.4g}')
        for f in args.check_kestrel:
            k = torch.from_numpy(np.fromfile(f, dtype=np.float32)).reshape(up.shape)
            d = (up - k).abs()
            print(f'{f}: max abs diff vs upstream (fused) {d.max().item():.3g}; xywh {d[..., :4].max().item():.3g}, '
                  f'obj {d[..., 4].max().item():.3g}, cls {d[..., 5:].max().item():.3g}; '
                  f'vs upstream unfused {(unfused - k).abs().max().item():.3g}')


if __name__ == '__main__':
    main()
