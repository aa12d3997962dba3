#!/usr/bin/env python3
"""Export a kestrel weights file (.safetensors) to a plain PyTorch state_dict file (.pt).

    python tools/export_state_dict.py best.safetensors best_state_dict.pt [--half]

The output is `torch.save` of an OrderedDict {upstream key: tensor} ("model.0.conv.weight", ...) and
nothing else, so `torch.load(path, weights_only=True)` reads it without running code, and upstream's
YOLOv5/YOLOv7 model built from the same model YAML takes it with `model.load_state_dict(sd)`:

    sd = torch.load("best_state_dict.pt", weights_only=True)
    model = Model("yolov5s.yaml", nc=len(names))   # upstream models.yolo.Model
    model.load_state_dict(sd)

The model YAML and the class names are not part of a state dict; they are printed, and with
`--yaml FILE` the model YAML is written out too.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import sys


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="kestrel .safetensors weights -> plain PyTorch state_dict .pt")
    p.add_argument("weights", help="kestrel weights file (.safetensors)")
    p.add_argument("output", help="state_dict file to write (.pt)")
    p.add_argument("--half", action="store_true", help="store floating-point tensors as float16")
    p.add_argument("--yaml", metavar="FILE", help="also write the embedded model YAML to FILE")
    args = p.parse_args(argv)

    try:
        import torch  # noqa: PLC0415
        from safetensors import SafetensorError, safe_open  # noqa: PLC0415
    except ImportError as e:  # the system Python, not the project's
        print(f"error: {e.name} is not installed for {sys.executable}; run this script with the project's Python: "
              "$KESTREL_HOME/venv/bin/python, by default ~/.cache/kestrel/venv/bin/python (set up by scripts/setup.sh)",
              file=sys.stderr)
        return 1

    if not os.path.isfile(args.weights):
        print(f"error: {args.weights}: no such file", file=sys.stderr)
        return 1
    try:
        with safe_open(args.weights, "pt") as f:
            meta = f.metadata() or {}
            sd = collections.OrderedDict((k, f.get_tensor(k)) for k in f.keys())
    except (SafetensorError, OSError, ValueError) as e:
        print(f"error: {args.weights}: not a safetensors file ({e})", file=sys.stderr)
        return 1
    if meta.get("format") != "kestrel-yolo-weights-1":
        print(f"error: {args.weights}: not a kestrel weights file (no 'kestrel-yolo-weights-1' format tag)",
              file=sys.stderr)
        return 1
    # safe_open lists keys sorted; kestrel writes them in state_dict order, which the header keeps.
    with open(args.weights, "rb") as fh:
        n = int.from_bytes(fh.read(8), "little")
        header = json.loads(fh.read(n))
    order = sorted((k for k in header if k != "__metadata__"), key=lambda k: header[k]["data_offsets"][0])
    sd = collections.OrderedDict((k, sd[k]) for k in order)
    if args.half:
        sd = collections.OrderedDict((k, v.half() if v.is_floating_point() else v) for k, v in sd.items())
    try:
        names = json.loads(meta.get("names", "[]"))
    except ValueError:
        print(f"error: {args.weights}: its 'names' metadata is not JSON", file=sys.stderr)
        return 1
    # Each output whole or not at all (temporary file, renamed into place); a failure names the file.
    for target, write in ((args.output, lambda tmp: torch.save(sd, tmp)),
                          (args.yaml, lambda tmp: open(tmp, "w").write(meta.get("model_yaml", "")))):
        if not target:
            continue
        tmp = target + ".tmp"
        try:
            write(tmp)
            os.replace(tmp, target)
        except (OSError, RuntimeError) as e:  # torch.save reports a missing folder as RuntimeError
            if os.path.exists(tmp) and not os.path.isdir(tmp):
                os.remove(tmp)
            print(f"error: {target}: cannot write ({e})", file=sys.stderr)
            return 1
    print(f"{args.weights} -> {args.output}: {len(sd)} tensors, model {meta.get('model_name', '?')}, "
          f"nc {len(names)}")
    print(f"  names: {names}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
