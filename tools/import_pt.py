#!/usr/bin/env python3
"""Import an upstream YOLOv5 / YOLOv7 PyTorch checkpoint (.pt) into a kestrel weights file.

    python tools/import_pt.py yolov5s.pt yolov5s.safetensors [--ema | --model]

Upstream checkpoints are `torch.save` dicts ({'epoch', 'best_fitness', 'model', 'ema', 'optimizer',
'opt', ...}) that pickle whole model objects (models.yolo.Model, models.common.Conv, torch.nn...).
`torch.load` would import the upstream repository's code to rebuild them, and any pickle can run
arbitrary code while it is being loaded. This tool needs neither the upstream repositories nor torch,
and runs nothing from the file.

Safety approach
---------------
* The file is opened as torch's zip archive (`<name>/data.pkl` + `<name>/data/<storage key>`);
  anything else (legacy pre-1.6 torch files, plain pickles, garbage) is refused.
* data.pkl is read by a restricted `pickle.Unpickler`. Its `find_class` never imports anything:
  - a short allow-list maps to real, harmless objects: collections.OrderedDict, builtins set/frozenset,
    and torch's tensor rebuild functions (`torch._utils._rebuild_tensor_v2`, `_rebuild_parameter`,
    `_rebuild_parameter_with_state`, `torch._tensor._rebuild_from_type_v2`) and storage types
    (`torch.HalfStorage`, ...), which are mapped to this file's own functions that build numpy
    arrays from the archive's raw storage bytes (bounds-checked: a view can never read outside its
    storage);
  - every other global (models.yolo.Model, torch.nn.Conv2d, os.system, builtins.eval, ...) becomes an
    inert stand-in class: "calling" it (REDUCE / NEWOBJ / INST / OBJ) only records the arguments, and
    BUILD only records the state. Nothing of the file's choosing is ever called.
  - `persistent_load` accepts only ('storage', <storage type>, <key>, <location>, <numel>) records
    that name an existing storage file of the right size.
* The model object is then walked as data: an nn.Module pickles its `_parameters`, `_buffers`,
  `_non_persistent_buffers_set` and `_modules` in its state, so the state_dict keys come out as
  `module.state_dict()` would give them (parameters then persistent buffers of each module, children
  in registration order, None entries skipped).

Output: a safetensors file with the state dict (float tensors as float32, others unchanged) and the
metadata kestrel reads (src/kestrel/models/weights_file.cpp): format, model_yaml (the checkpoint's
`model.yaml` dict dumped as YAML), model_name, nc, names.

Known adaptations: a non-implicit `Detect` head's `anchor_grid` buffer (YOLOv5 <= 5.0 and YOLOv7's
Detect register it; kestrel recomputes it from `anchors`) is dropped. Fused models (Conv without bn)
and quantised checkpoints are written as they are and will not load into kestrel's unfused model.
"""
from __future__ import annotations

import argparse
import collections
import io
import json
import os
import pickle
import reprlib
import sys
import zipfile
import zlib

import numpy as np

FORMAT = "kestrel-yolo-weights-1"


class ConvertError(Exception):
    """An error that names the offending file; printed without a traceback."""


# ----------------------------------------------------------------------------------------------
# Inert stand-ins for every global that is not on the allow-list
# ----------------------------------------------------------------------------------------------
class Inert:
    """Stands in for an object of a class the checkpoint names. Records, never executes."""

    _kestrel_module = "?"
    _kestrel_name = "?"

    def __new__(cls, *args, **kwargs):
        obj = object.__new__(cls)
        obj.__dict__["_kestrel_args"] = args
        obj.__dict__["_kestrel_kwargs"] = kwargs
        obj.__dict__["_kestrel_state"] = None
        return obj

    def __init__(self, *args, **kwargs):  # REDUCE calls cls(*args): nothing to do
        pass

    def __setstate__(self, state):
        self.__dict__["_kestrel_state"] = state

    # A few containers pickle their items with APPENDS / SETITEMS after NEWOBJ.
    def append(self, item):
        self.__dict__.setdefault("_kestrel_items", []).append(item)

    def extend(self, items):
        self.__dict__.setdefault("_kestrel_items", []).extend(items)

    def __setitem__(self, key, value):
        self.__dict__.setdefault("_kestrel_dict", {})[key] = value

    def __repr__(self):
        return f"<inert {self._kestrel_module}.{self._kestrel_name}>"

    # The object's attributes as the pickle recorded them (a module's __dict__).
    def kestrel_attrs(self) -> dict:
        st = self.__dict__.get("_kestrel_state")
        if isinstance(st, tuple) and len(st) == 2 and (st[0] is None or isinstance(st[0], dict)):
            merged = dict(st[0] or {})
            if isinstance(st[1], dict):
                merged.update(st[1])
            return merged
        return st if isinstance(st, dict) else {}


_inert_classes: dict[tuple[str, str], type] = {}


def inert_class(module: str, name: str) -> type:
    key = (module, name)
    if key not in _inert_classes:
        _inert_classes[key] = type(
            "Inert_" + "".join(c if c.isalnum() else "_" for c in f"{module}.{name}"),
            (Inert,),
            {"_kestrel_module": module, "_kestrel_name": name},
        )
    return _inert_classes[key]


def class_name(obj) -> str:
    return obj._kestrel_name if isinstance(obj, Inert) else type(obj).__name__


# ----------------------------------------------------------------------------------------------
# Tensors rebuilt from the archive's storages
# ----------------------------------------------------------------------------------------------
class StorageType:
    def __init__(self, name: str, dtype):
        self.name = name
        self.dtype = dtype  # numpy dtype, or "bfloat16"


BFLOAT16 = "bfloat16"
MAX_TENSOR_ELEMENTS = 1 << 31
STORAGE_TYPES = {
    "HalfStorage": np.float16, "FloatStorage": np.float32, "DoubleStorage": np.float64,
    "BFloat16Storage": BFLOAT16, "LongStorage": np.int64, "IntStorage": np.int32,
    "ShortStorage": np.int16, "CharStorage": np.int8, "ByteStorage": np.uint8,
    "BoolStorage": np.bool_, "UntypedStorage": np.uint8,
}


class Storage:
    def __init__(self, array: np.ndarray, bfloat16: bool):
        self.array = array          # 1-D; for bfloat16 the raw uint16 words
        self.bfloat16 = bfloat16


class Tensor:
    """A tensor read from the checkpoint: a numpy array (bfloat16 already widened to float32)."""

    def __init__(self, array: np.ndarray):
        self.array = array

    def __repr__(self):
        return f"Tensor{tuple(self.array.shape)}:{self.array.dtype}"


class ExpandedView:
    """An overlapping (stride-0) view: never a weight, and its copy could blow up memory. v7.0's Detect keeps
    its anchor_grid cache as one (an .expand() in a plain list attribute) in any fp32 model saved after an
    eval forward; only a state-dict entry of this kind is an error (module_state_dict)."""

    def __init__(self, numel: int, storage_size: int):
        self.numel, self.storage_size = numel, storage_size

    def __repr__(self):
        return f"tensor view of {self.numel} elements over a storage of {self.storage_size} (an expanded view)"


def _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad=False, backward_hooks=None,
                       metadata=None):
    if not isinstance(storage, Storage):
        raise pickle.UnpicklingError("tensor without a storage from the archive")
    for v in (storage_offset, *size, *stride):
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise pickle.UnpicklingError(f"bad tensor geometry (offset {storage_offset}, size {size}, "
                                         f"stride {stride})")
    size, stride = tuple(size), tuple(stride)
    if len(size) != len(stride):
        raise pickle.UnpicklingError(f"tensor size {size} and stride {stride} differ in rank")
    base = storage.array
    numel = 1
    for s in size:
        numel *= s
    if numel > MAX_TENSOR_ELEMENTS:
        raise pickle.UnpicklingError(f"tensor of {numel} elements is larger than any YOLO weight")
    if numel > base.size:  # only overlapping (expanded, stride-0) views can: no weight is one, and the copy would blow up
        return ExpandedView(numel, base.size)
    if numel == 0:
        out = np.zeros(size, dtype=base.dtype)
    else:
        last = storage_offset + sum((s - 1) * st for s, st in zip(size, stride))
        if last >= base.size:
            raise pickle.UnpicklingError(
                f"tensor view (offset {storage_offset}, size {size}, stride {stride}) reads past its "
                f"storage of {base.size} elements")
        item = base.itemsize
        out = np.lib.stride_tricks.as_strided(base[storage_offset:], shape=size,
                                              strides=tuple(st * item for st in stride),
                                              writeable=False).copy()
    if storage.bfloat16:
        out = (out.astype(np.uint32) << 16).view(np.float32)
    return Tensor(out)


def _rebuild_tensor(storage, storage_offset, size, stride):
    return _rebuild_tensor_v2(storage, storage_offset, size, stride)


def _rebuild_parameter(data, requires_grad=False, backward_hooks=None):
    return data


def _rebuild_parameter_with_state(data, requires_grad=False, backward_hooks=None, state=None):
    return data


def _rebuild_from_type_v2(func, new_type, args, state):
    # `func` came through find_class too, so it is one of the functions above or an inert class.
    return func(*args) if callable(func) else None


ALLOWED = {
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
    ("__builtin__", "set"): set,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
    ("torch._utils", "_rebuild_tensor"): _rebuild_tensor,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter_with_state,
    ("torch._tensor", "_rebuild_from_type_v2"): _rebuild_from_type_v2,
}


class RestrictedUnpickler(pickle.Unpickler):
    def __init__(self, file, archive: zipfile.ZipFile, prefix: str, byteorder: str, path: str):
        super().__init__(file)
        self.archive = archive
        self.prefix = prefix
        self.byteorder = byteorder
        self.path = path
        self.storages: dict[str, Storage] = {}
        self.names = set(archive.namelist())
        self.globals_seen: set[str] = set()

    def find_class(self, module, name):
        module, name = str(module), str(name)
        self.globals_seen.add(f"{module}.{name}")
        if (module, name) in ALLOWED:
            return ALLOWED[(module, name)]
        if module in ("torch", "torch.storage") and name in STORAGE_TYPES:
            return StorageType(name, STORAGE_TYPES[name])
        return inert_class(module, name)

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
            raise pickle.UnpicklingError(f"unsupported persistent id {pid!r:.100}")
        _, storage_type, key, _location, numel = pid
        if not isinstance(storage_type, StorageType):
            raise pickle.UnpicklingError(f"unsupported storage type {storage_type!r:.100}")
        if not isinstance(key, str) or not isinstance(numel, int) or numel < 0:
            raise pickle.UnpicklingError(f"bad storage record {pid!r:.100}")
        if key in self.storages:
            return self.storages[key]
        entry = f"{self.prefix}data/{key}"
        if entry not in self.names:
            raise pickle.UnpicklingError(f"storage '{key}' is missing from the archive")
        bf16 = storage_type.dtype == BFLOAT16
        dtype = np.dtype(np.uint16 if bf16 else storage_type.dtype)
        dtype = dtype.newbyteorder("<" if self.byteorder == "little" else ">")
        raw = self.archive.read(entry)
        if storage_type.name == "UntypedStorage":
            numel = len(raw)
        if len(raw) != numel * dtype.itemsize:
            raise pickle.UnpicklingError(f"storage '{key}' holds {len(raw)} bytes, expected "
                                         f"{numel} x {dtype.itemsize}")
        array = np.frombuffer(raw, dtype=dtype).astype(dtype.newbyteorder("="))
        self.storages[key] = Storage(array, bf16)
        return self.storages[key]


def load_checkpoint(path: str):
    """The unpickled top-level object of a torch zip checkpoint, with inert stand-ins for classes."""
    if not os.path.isfile(path):
        raise ConvertError(f"{path}: no such file")
    if not zipfile.is_zipfile(path):
        with open(path, "rb") as f:
            head = f.read(8)
        hint = (" (it looks like a legacy pre-1.6 torch file or a plain pickle: load it with torch and "
                "re-save it with torch.save, which writes the zip format)" if head[:1] == b"\x80" else "")
        raise ConvertError(f"{path}: not a PyTorch checkpoint (torch.save zip archive){hint}")
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as e:
        raise ConvertError(f"{path}: not a readable zip archive ({e})") from None
    with archive:
        pkls = [n for n in archive.namelist() if n.endswith("/data.pkl") and n.count("/") == 1]
        if len(pkls) != 1:
            raise ConvertError(f"{path}: a zip archive but not a torch checkpoint (no <name>/data.pkl)")
        prefix = pkls[0][: -len("data.pkl")]
        byteorder = "little"
        try:  # a damaged member (bad CRC, cut out bytes) is a damaged file, not a traceback
            if prefix + "byteorder" in archive.namelist():
                byteorder = archive.read(prefix + "byteorder").decode(errors="replace").strip()
            data = archive.read(pkls[0])
        except (zipfile.BadZipFile, OSError, EOFError, zlib.error) as e:
            raise ConvertError(f"{path}: damaged zip archive ({type(e).__name__}: {e})") from None
        if byteorder not in ("little", "big"):
            raise ConvertError(f"{path}: unknown byte order '{byteorder}'")
        unpickler = RestrictedUnpickler(io.BytesIO(data), archive, prefix, byteorder, path)
        try:
            obj = unpickler.load()
        except ConvertError:
            raise
        except Exception as e:  # noqa: BLE001 - any malformed pickle is reported the same way
            raise ConvertError(f"{path}: cannot read the checkpoint's pickle: {type(e).__name__}: {e}") from None
    return obj, unpickler.globals_seen


# ----------------------------------------------------------------------------------------------
# Walking the model object
# ----------------------------------------------------------------------------------------------
def is_module(obj) -> bool:
    return isinstance(obj, Inert) and "_modules" in obj.kestrel_attrs()


def module_state_dict(module, path: str, prefix: str = "", out=None, dropped=None, depth=0):
    if out is None:
        out = collections.OrderedDict()
    if dropped is None:
        dropped = []
    if depth > 200:
        raise ConvertError(f"{path}: module tree deeper than 200 levels")
    attrs = module.kestrel_attrs()
    params = attrs.get("_parameters") or {}
    buffers = attrs.get("_buffers") or {}
    non_persistent = attrs.get("_non_persistent_buffers_set") or set()
    children = attrs.get("_modules") or {}
    for container, what in ((params, "_parameters"), (buffers, "_buffers"), (children, "_modules")):
        if not isinstance(container, dict):
            raise ConvertError(f"{path}: module '{prefix[:-1] or '<root>'}' has a malformed {what}")
    implicit_free_detect = class_name(module) == "Detect" and "ia" not in children
    for name, t in list(params.items()) + [(k, v) for k, v in buffers.items() if k not in non_persistent]:
        if t is None:
            continue
        key = prefix + str(name)
        if isinstance(t, ExpandedView):
            raise ConvertError(f"{path}: '{key}' is a {t!r}, not a weight")
        if not isinstance(t, Tensor) or not isinstance(getattr(t, "array", None), np.ndarray):
            raise ConvertError(f"{path}: '{key}' is not a tensor ({t!r:.80})")
        if implicit_free_detect and name == "anchor_grid":
            dropped.append(key)
            continue
        out[key] = t
    for name, child in children.items():
        if child is None:
            continue
        if not is_module(child):
            raise ConvertError(f"{path}: submodule '{prefix}{name}' is not a module object ({child!r:.80})")
        module_state_dict(child, path, prefix + str(name) + ".", out, dropped, depth + 1)
    return out, dropped


def module_activations(module, out=None, depth=0):
    """The activations of the model's layers (children named `act`, as upstream's Conv, RepConv and
    BottleneckCSP have), as model YAML text: {"nn.SiLU()", "nn.LeakyReLU(0.1)", ...}; Identity left out."""
    if out is None:
        out = set()
    if depth > 200:
        return out
    children = module.kestrel_attrs().get("_modules") or {}
    act = children.get("act") if isinstance(children, dict) else None
    if is_module(act) and class_name(act) != "Identity":
        if class_name(act) == "LeakyReLU":
            slope = act.kestrel_attrs().get("negative_slope", 0.01)
            out.add(f"nn.LeakyReLU({slope!r})")
        else:
            out.add(f"nn.{class_name(act)}()")
    for child in (children.values() if isinstance(children, dict) else []):
        if is_module(child):
            module_activations(child, out, depth + 1)
    return out


def default_activation(model, cfg: dict, path: str):
    """The `activation:` key the imported YAML needs, or None. Checkpoints before YOLOv5 v4.0 (and YOLOv3
    v9.5.0's) hard-code their activation in the Conv class (LeakyReLU(0.1), Hardswish), not in the YAML,
    which kestrel would build with SiLU. YAMLs that name activations themselves (a default, or per row as
    YOLOv7-tiny's) are taken as written."""
    def names_one(v):
        return isinstance(v, str) and v.startswith("nn.") or isinstance(v, list) and any(names_one(x) for x in v)
    rows = [row for row in cfg["backbone"] + cfg["head"] if isinstance(row, list) and len(row) > 3]
    if cfg.get("activation") is not None or any(names_one(row[3]) for row in rows):  # a row's arguments
        return None
    acts = module_activations(model)
    if len(acts) > 1:
        raise ConvertError(f"{path}: the model's layers use {', '.join(sorted(acts))}, and its model.yaml names no "
                           "activation; kestrel builds one default activation for every layer and cannot import it")
    act = next(iter(acts), "nn.SiLU()")
    return None if act == "nn.SiLU()" else act


def plain(obj, path: str, what: str, depth: int = 0):
    """A pickled value as plain YAML/JSON data (dicts, lists, str, numbers, bools, None)."""
    if depth > 50:  # a model YAML is a few levels deep; a value that contains itself never ends
        raise ConvertError(f"{path}: {what} is nested more than 50 levels deep (or contains itself)")
    if obj is None or isinstance(obj, (str, bool, int, float)):
        return obj
    if isinstance(obj, dict):
        return {plain(k, path, what, depth + 1): plain(v, path, what, depth + 1) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain(v, path, what, depth + 1) for v in obj]
    raise ConvertError(f"{path}: {what} holds a value that is not plain data ({obj!r:.80})")


MAX_CLASSES = 1_000_000  # kestrel's dataset limit


def class_names(raw, nc, path: str):
    if raw is None:
        if nc > MAX_CLASSES:
            raise ConvertError(f"{path}: model.yaml says nc={nc}, above the limit of {MAX_CLASSES} classes")
        print(f"warning: {path}: the model has no class names; using '0'..'{nc - 1}'", file=sys.stderr)
        return [str(i) for i in range(nc)]
    if isinstance(raw, dict):
        try:
            keys = sorted(int(k) for k in raw)
        except (TypeError, ValueError):
            raise ConvertError(f"{path}: model.names is a dict with non-integer keys") from None
        if keys != list(range(len(keys))):
            raise ConvertError(f"{path}: model.names keys are not 0..{len(keys) - 1}")
        by_int = {int(k): v for k, v in raw.items()}
        raw = [by_int[i] for i in keys]
    if not isinstance(raw, (list, tuple)) or not all(isinstance(n, (str, int, float)) for n in raw):
        raise ConvertError(f"{path}: model.names is neither a list nor a dict of names ({raw!r:.80})")
    return [str(n) for n in raw]


SAFETENSORS_DTYPES = {np.dtype(np.float32): "F32", np.dtype(np.float64): "F64", np.dtype(np.float16): "F16",
                      np.dtype(np.int64): "I64", np.dtype(np.int32): "I32", np.dtype(np.int16): "I16",
                      np.dtype(np.int8): "I8", np.dtype(np.uint8): "U8", np.dtype(np.bool_): "BOOL"}


def write_safetensors(path: str, arrays: dict, metadata: dict):
    """A safetensors file with the tensors stored in the given (state_dict) order, written atomically."""
    header, offset, blobs = {"__metadata__": metadata}, 0, []
    for key, a in arrays.items():
        a = np.asarray(a)
        blob = a.astype(a.dtype.newbyteorder("<")).tobytes(order="C")
        header[key] = {"dtype": SAFETENSORS_DTYPES[a.dtype.newbyteorder("=")], "shape": list(a.shape),
                       "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    tmp = path + ".tmp"
    try:
        with open(tmp, "wb") as out:
            out.write(len(head).to_bytes(8, "little"))
            out.write(head)
            for blob in blobs:
                out.write(blob)
        os.replace(tmp, path)
    except OSError as e:  # no such folder, a folder of that name, a read-only disk: nothing half-written is left
        if os.path.exists(tmp):
            os.remove(tmp)
        raise ConvertError(f"{path}: cannot write ({e.strerror or e})") from None


def dump_model_yaml(cfg: dict) -> str:
    """The config dict as YAML in upstream's layout: one flow-style line per layer and anchor level."""
    import yaml  # noqa: PLC0415

    class Flow(list):
        pass

    class Dumper(yaml.SafeDumper):
        pass

    Dumper.add_representer(Flow, lambda d, v: d.represent_sequence("tag:yaml.org,2002:seq", v, flow_style=True))
    out = dict(cfg)
    for key in ("backbone", "head", "anchors"):
        if isinstance(out.get(key), list):
            out[key] = [Flow(row) if isinstance(row, list) else row for row in out[key]]
    return yaml.dump(out, Dumper=Dumper, sort_keys=False, default_flow_style=False, width=1000)


def convert(path: str, out_path: str, which: str | None):

    ckpt, _ = load_checkpoint(path)
    if is_module(ckpt):
        ckpt = {"model": ckpt}
    if not isinstance(ckpt, dict):
        raise ConvertError(f"{path}: expected a checkpoint dict with a 'model' entry, found {ckpt!r:.80}")
    if ckpt and all(isinstance(v, Tensor) for v in ckpt.values()):
        raise ConvertError(f"{path}: a bare state_dict without the model's config; kestrel needs the model "
                           "YAML too (train from it with `kestrel train --cfg` instead)")
    if which is None:
        which = "ema" if ckpt.get("ema") is not None else "model"
    model = ckpt.get(which)
    if model is None:
        have = ", ".join(sorted(str(k) for k in ckpt if ckpt[k] is not None))
        raise ConvertError(f"{path}: no model under '{which}' (entries: {have or 'none'})")
    if isinstance(model, dict) and all(isinstance(v, Tensor) for v in model.values()):
        raise ConvertError(f"{path}: '{which}' is a bare state_dict without the model's config; kestrel "
                           "needs the model YAML too (load it into kestrel with `kestrel train --cfg` instead)")
    if not is_module(model):
        raise ConvertError(f"{path}: '{which}' is not a model object ({reprlib.repr(model):.80})")

    attrs = model.kestrel_attrs()
    tensors, dropped = module_state_dict(model, path)
    if not tensors:
        raise ConvertError(f"{path}: the model under '{which}' has no parameters")

    cfg = attrs.get("yaml")
    if not isinstance(cfg, dict):
        raise ConvertError(f"{path}: the model has no 'yaml' config dict (class {class_name(model)}); "
                           "is this a YOLOv5/YOLOv7 checkpoint?")
    cfg = plain(cfg, path, "model.yaml")
    for key in ("backbone", "head"):
        if key not in cfg:
            raise ConvertError(f"{path}: model.yaml has no '{key}' section")
        if not isinstance(cfg[key], list):
            raise ConvertError(f"{path}: model.yaml's '{key}' is not a list of layers")
    nc_yaml = cfg.get("nc")
    names = class_names(attrs.get("names"), int(nc_yaml) if isinstance(nc_yaml, int) else 0, path)
    if not names:
        raise ConvertError(f"{path}: the model has no classes")
    if isinstance(nc_yaml, int) and nc_yaml != len(names):
        raise ConvertError(f"{path}: model.yaml says nc={nc_yaml} but the model has {len(names)} names")
    cfg["nc"] = len(names)
    activation = default_activation(model, cfg, path)
    if activation is not None:
        cfg["activation"] = activation
    model_yaml = dump_model_yaml(cfg)

    yaml_file = attrs.get("yaml_file")
    stem = os.path.splitext(os.path.basename(yaml_file if isinstance(yaml_file, str) and yaml_file else path))[0]

    arrays = collections.OrderedDict()
    for key, t in tensors.items():
        a = t.array
        if np.issubdtype(a.dtype, np.floating) and not np.isfinite(a).all():  # kestrel refuses such weights at load
            raise ConvertError(f"{path}: tensor {key} holds NaN or infinite values (a run that diverged?)")
        arrays[key] = a.astype(np.float32) if np.issubdtype(a.dtype, np.floating) else a
    metadata = {
        "format": FORMAT,
        "model_yaml": model_yaml,
        "model_name": stem,
        "nc": str(len(names)),
        "names": json.dumps(names),
        "source": os.path.basename(path),
        "source_entry": which,
    }
    if isinstance(ckpt.get("epoch"), int) and not isinstance(ckpt.get("epoch"), bool):
        metadata["epoch"] = str(ckpt["epoch"])
    write_safetensors(out_path, arrays, metadata)
    return {"keys": len(arrays), "nc": len(names), "names": names, "model_name": stem, "entry": which,
            "class": class_name(model), "dropped": dropped, "activation": activation,
            "params": int(sum(t.array.size for t in tensors.values()))}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="Import a YOLOv5/YOLOv7 .pt checkpoint into a kestrel "
                                "weights file (.safetensors) without running code from the file.")
    p.add_argument("checkpoint", help="upstream .pt file (torch.save zip format)")
    p.add_argument("output", help="kestrel weights file to write (.safetensors)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--ema", dest="which", action="store_const", const="ema",
                   help="take the EMA model (default when the checkpoint has one)")
    g.add_argument("--model", dest="which", action="store_const", const="model",
                   help="take the raw 'model' entry")
    args = p.parse_args(argv)
    try:
        s = convert(args.checkpoint, args.output, args.which)
    except ConvertError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except RecursionError:  # objects nested thousands deep: no checkpoint looks like that
        print(f"error: {args.checkpoint}: its objects are nested too deeply to read (a damaged or crafted file)",
              file=sys.stderr)
        return 1
    shown = ", ".join(s["names"][:10]) + (", ..." if len(s["names"]) > 10 else "")
    print(f"{args.checkpoint} ['{s['entry']}', {s['class']}] -> {args.output}")
    print(f"  keys: {s['keys']} ({s['params']} values)")
    print(f"  model yaml: {s['model_name']}")
    print(f"  nc: {s['nc']}")
    print(f"  names: [{shown}]")
    if s["activation"]:
        print(f"  activation: {s['activation']} (the checkpoint's layers; written into the model yaml)")
    if s["dropped"]:
        print(f"  dropped (recomputed by kestrel): {', '.join(s['dropped'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
