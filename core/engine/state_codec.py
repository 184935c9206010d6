"""A trial's state as data: arrays and tensors in ``.npz`` (read with ``allow_pickle=False``), the rest
as JSON. This is the checkpoint format; unlike pickle, reading it cannot run code.

A state is an object graph of plain values (None, bools, numbers, strings, bytes), containers (list,
tuple, dict, set), NumPy arrays, scalars and generators, PyTorch tensors (storage sharing kept: a
network's parameters stay views of its flat buffer), devices and dtypes, and instances of the
project's own library classes (``banditsweep.core.*``) and its registered plugins'
(``core.engine.registry.trusted_module``). Nothing else is written, and nothing else is read: a class is
looked up by name only among those (a module already imported is taken from ``sys.modules``; no
other module is ever imported) and rebuilt with ``__new__`` plus its stored attributes
(no ``__reduce__``, ``__setstate__`` or constructor runs), a NumPy bit generator only from NumPy's own
list. Of an object, the attributes its class declares are written, and read back against that
declaration (core.engine.state_declaration). Object identity is kept, as pickle keeps it: the policy and
the round loop share their environments after a restore as before it.

Stored bytes are hostile data (a results folder may come from anyone): any failure to read them
(not a zip, a compressed or oversized entry, an array header that claims more than its entry holds,
JSON nested deeper than :data:`MAX_DEPTH`, a missing entry, a wrong type, an unknown class, and
whatever else reading them raises: RecursionError, MemoryError, ...) raises :class:`StateFormatError`.

Its length is the format and, at its end, the table of where the classes a checkpoint may name live
now (``MOVED_CLASSES``, one line a class).
"""

from __future__ import annotations

import base64
import enum
import importlib
import io
import json
import re
import sys
import zipfile
from typing import Any

import numpy as np

from banditsweep.core.engine import registry
from banditsweep.core.engine.state_declaration import StateDeclarationError, attributes_to_save, declaration

FORMAT = "banditsweep-state/1"
_STATE_ENTRY = "state_json"
_BIT_GENERATORS = {"PCG64", "PCG64DXSM", "Philox", "SFC64", "MT19937"}
# The deepest nesting of the JSON structure read (the project's states nest about 20 deep): deeper is
# refused before it is parsed, so that neither json.loads nor the decoder can run out of stack.
MAX_DEPTH = 200
_JSON_TOKEN = re.compile(rb'[\[\]{}"\\]')
# Where a class stored under an earlier name lives now: a checkpoint names each object's class by the
# module it was defined in, so moving or renaming a class would otherwise orphan every checkpoint that
# holds one. Keys and values are (module, qualname); an entry is added with each move and never removed
# (the entries: at the end of this module).
MOVED_CLASSES: dict[tuple[str, str], tuple[str, str]] = {}


class StateFormatError(ValueError):
    """The bytes are not a state this project wrote (damaged, truncated, another format such as pickle)."""


def _torch():
    import torch   # only states that hold tensors need it

    return torch


def _is_pydantic(value: Any) -> bool:
    return hasattr(type(value), "model_fields") and hasattr(value, "model_fields_set")


class _Encoder:
    def __init__(self):
        self.arrays: dict[str, np.ndarray] = {}
        self.memo: dict[int, int] = {}
        self.keep: list[Any] = []        # keeps memoised objects alive, so their ids stay unique
        self.storages: dict[tuple, int] = {}

    def array(self, value: np.ndarray) -> str:
        if value.dtype.hasobject:
            raise StateFormatError(f"an array of Python objects ({value.dtype}) cannot be stored as data")
        name = f"a{len(self.arrays)}"
        self.arrays[name] = np.ascontiguousarray(value)
        return name

    def encode(self, value: Any) -> Any:
        if value is None or isinstance(value, (bool, str)):
            return value
        if type(value) is int:
            return value
        if type(value) is float:
            return {"t": "float", "v": repr(value)}   # repr round-trips exactly, NaN and inf included
        known = self.memo.get(id(value))
        if known is not None:
            return {"t": "ref", "id": known}
        node_id = len(self.memo)
        self.memo[id(value)] = node_id
        self.keep.append(value)
        node = self._encode_new(value)
        node["id"] = node_id
        return node

    def _encode_new(self, value: Any) -> dict:
        torch = _torch() if type(value).__module__.startswith("torch") else None
        if isinstance(value, np.ndarray):
            return {"t": "ndarray", "a": self.array(value)}
        if isinstance(value, np.generic):
            return {"t": "npscalar", "a": self.array(np.asarray(value))}
        if isinstance(value, np.random.Generator):
            bit_generator = value.bit_generator
            return {"t": "np_generator", "kind": type(bit_generator).__name__,
                    "state": self.encode(bit_generator.state)}
        if isinstance(value, (list, tuple, set, frozenset)):
            return {"t": type(value).__name__, "v": [self.encode(item) for item in value]}
        if type(value) is dict:
            return {"t": "dict", "v": [[self.encode(k), self.encode(v)] for k, v in value.items()]}
        if isinstance(value, bytes):
            return {"t": "bytes", "v": base64.b64encode(value).decode("ascii")}
        if torch is not None:
            return self._encode_torch(torch, value)
        cls = type(value)
        if not registry.trusted_module(cls.__module__):
            raise StateFormatError(f"a state cannot hold a {cls.__module__}.{cls.__qualname__}")
        path = [cls.__module__, cls.__qualname__]
        if isinstance(value, enum.Enum):
            return {"t": "enum", "cls": path, "v": self.encode(value.value)}
        if _is_pydantic(value):
            fields = {name: getattr(value, name) for name in cls.model_fields}
            return {"t": "model", "cls": path, "fields": self.encode(fields),
                    "set": sorted(value.model_fields_set)}
        return {"t": "object", "cls": path, "attrs": self.encode(attributes_to_save(value))}

    def _encode_torch(self, torch, value: Any) -> dict:
        if isinstance(value, torch.device):
            return {"t": "torch_device", "v": str(value)}
        if isinstance(value, torch.dtype):
            return {"t": "torch_dtype", "v": str(value).removeprefix("torch.")}
        if isinstance(value, torch.Generator):
            return {"t": "torch_generator", "device": str(value.device),
                    "state": self.array(value.get_state().numpy())}
        if type(value) not in (torch.Tensor, torch.nn.Parameter):
            raise StateFormatError(f"a state cannot hold a {type(value).__module__}.{type(value).__qualname__}")
        if value.requires_grad and not value.is_leaf:
            raise StateFormatError("a state cannot hold a tensor in the middle of a computation graph")
        storage = value.untyped_storage()
        key = (str(value.device), storage.data_ptr(), storage.nbytes())
        if key not in self.storages:
            raw = torch.empty(0, dtype=torch.uint8, device=value.device).set_(storage).cpu().numpy()
            self.storages[key] = len(self.storages)
            self.arrays[f"s{self.storages[key]}"] = raw.copy()
        return {"t": "tensor", "storage": self.storages[key], "dtype": str(value.dtype).removeprefix("torch."),
                "device": str(value.device), "offset": value.storage_offset(), "size": list(value.shape),
                "stride": list(value.stride()), "grad": value.requires_grad,
                "parameter": isinstance(value, torch.nn.Parameter)}


def encode_state(value: Any) -> bytes:
    """``value`` as ``.npz`` bytes: one JSON entry for the structure, one array per array or storage."""
    encoder = _Encoder()
    structure = {"format": FORMAT, "root": encoder.encode(value)}
    text = json.dumps(structure, separators=(",", ":"))
    buffer = io.BytesIO()
    np.savez(buffer, **{_STATE_ENTRY: np.frombuffer(text.encode(), dtype=np.uint8)}, **encoder.arrays)
    return buffer.getvalue()


def declared_attributes(cls: type, attributes: dict[str, Any]) -> dict[str, Any]:
    """The ``attributes`` stored for an object of ``cls`` that it takes back, checked against its
    declaration (core.engine.state_declaration): every declared saved one present, the transient ones left
    out (a checkpoint written before the declarations holds them), no other. A class saved whole
    takes them all."""
    try:
        found = declaration(cls)
    except StateDeclarationError as error:
        raise StateFormatError(str(error)) from None
    if found is None:
        return attributes
    missing, undeclared = found.missing(attributes), found.undeclared(attributes)
    if missing:
        raise StateFormatError(f"the stored {cls.__qualname__} lacks {', '.join(missing)}, which it declares saved")
    if undeclared:
        raise StateFormatError(f"the stored {cls.__qualname__} holds {', '.join(undeclared)}, "
                               "which it does not declare")
    return {name: value for name, value in attributes.items() if name not in found.transient}


def _project_class(path: Any) -> type:
    if not (isinstance(path, list) and len(path) == 2 and all(isinstance(p, str) for p in path)):
        raise StateFormatError(f"a class is named by [module, name], not {str(path)[:80]!r}")
    module_name, qualname = path
    if not (all(part.isidentifier() for part in module_name.split("."))
            and all(part.isidentifier() for part in qualname.split("."))):
        raise StateFormatError(f"not a class name: {module_name[:80]!r}, {qualname[:80]!r}")
    module_name, qualname = MOVED_CLASSES.get((module_name, qualname), (module_name, qualname))
    if not registry.trusted_module(module_name):
        raise StateFormatError(f"class {module_name}.{qualname} is not one of banditsweep's or its plugins'")
    registered = registry.registered_class(module_name, qualname)
    if registered is not None:   # also a class shipped by value, which its module here does not hold
        return registered
    target: Any = sys.modules.get(module_name)
    if target is None:   # only a trusted module is ever imported
        try:
            target = importlib.import_module(module_name)
        except ImportError:
            raise StateFormatError(f"no module {module_name}") from None
    for part in qualname.split("."):   # looked up in the namespaces: no module __getattr__ or descriptor runs
        namespace = getattr(target, "__dict__", None)
        target = namespace.get(part) if isinstance(namespace, (dict, type(type.__dict__))) else None
    if not isinstance(target, type) or target.__module__ != module_name:
        raise StateFormatError(f"no class {qualname} in {module_name}")
    return target


class _Decoder:
    def __init__(self, arrays: dict[str, np.ndarray]):
        self.arrays = arrays
        self.memo: dict[int, Any] = {}
        self.storages: dict[tuple[int, str], Any] = {}

    def array(self, name: Any) -> np.ndarray:
        if not isinstance(name, str) or name not in self.arrays:
            raise StateFormatError(f"missing array {name!r}")
        return self.arrays[name]

    def decode(self, node: Any) -> Any:
        if node is None or isinstance(node, (bool, str, int)) and not isinstance(node, float):
            return node
        if not isinstance(node, dict) or "t" not in node:
            raise StateFormatError(f"unexpected entry {str(node)[:80]!r}")
        kind = node["t"]
        if kind == "float":
            return float(node["v"])
        if kind == "ref":
            if node["id"] not in self.memo:
                raise StateFormatError(f"reference to an unknown entry {node['id']!r}")
            return self.memo[node["id"]]
        method = getattr(self, f"_decode_{kind}", None)
        if method is None:
            raise StateFormatError(f"unknown entry type {kind!r}")
        return method(node)

    def _register(self, node: dict, value: Any) -> Any:
        self.memo[node["id"]] = value
        return value

    def _decode_ndarray(self, node):
        return self._register(node, self.array(node["a"]).copy())

    def _decode_npscalar(self, node):
        return self._register(node, self.array(node["a"])[()])

    def _decode_np_generator(self, node):
        if node["kind"] not in _BIT_GENERATORS:
            raise StateFormatError(f"unknown bit generator {node['kind']!r}")
        bit_generator = getattr(np.random, node["kind"])()
        generator = self._register(node, np.random.Generator(bit_generator))
        bit_generator.state = self.decode(node["state"])
        return generator

    def _decode_list(self, node):
        items = self._register(node, [])
        items.extend(self.decode(item) for item in node["v"])
        return items

    def _decode_tuple(self, node):
        return self._register(node, tuple(self.decode(item) for item in node["v"]))

    def _decode_set(self, node):
        return self._register(node, {self.decode(item) for item in node["v"]})

    def _decode_frozenset(self, node):
        return self._register(node, frozenset(self.decode(item) for item in node["v"]))

    def _decode_dict(self, node):
        mapping = self._register(node, {})
        for key, value in node["v"]:
            mapping[self.decode(key)] = self.decode(value)
        return mapping

    def _decode_bytes(self, node):
        return self._register(node, base64.b64decode(node["v"], validate=True))

    def _decode_enum(self, node):
        cls = _project_class(node["cls"])
        if not issubclass(cls, enum.Enum):
            raise StateFormatError(f"{cls.__qualname__} is not an enumeration")
        return self._register(node, cls(self.decode(node["v"])))

    def _decode_model(self, node):
        cls = _project_class(node["cls"])
        if not hasattr(cls, "model_construct"):
            raise StateFormatError(f"{cls.__qualname__} is not a settings model")
        fields = self.decode(node["fields"])
        if not isinstance(fields, dict) or set(fields) != set(cls.model_fields):
            raise StateFormatError(f"the stored fields of {cls.__qualname__} are not its fields")
        return self._register(node, cls.model_construct(_fields_set=set(node["set"]), **fields))

    def _decode_object(self, node):
        cls = _project_class(node["cls"])
        value = self._register(node, cls.__new__(cls))
        attributes = self.decode(node["attrs"])
        if not isinstance(attributes, dict) or not all(isinstance(k, str) for k in attributes):
            raise StateFormatError(f"the stored attributes of {cls.__qualname__} are not a name table")
        attributes = declared_attributes(cls, attributes)
        has_dict = hasattr(value, "__dict__")
        for name, attribute in attributes.items():
            if has_dict and not any(name in getattr(k, "__slots__", ()) for k in cls.__mro__):
                value.__dict__[name] = attribute     # frozen dataclasses too: no __setattr__ runs
            else:
                object.__setattr__(value, name, attribute)
        return value

    def _decode_torch_device(self, node):
        return self._register(node, _torch().device(node["v"]))

    def _decode_torch_dtype(self, node):
        dtype = getattr(_torch(), str(node["v"]), None)
        if not isinstance(dtype, _torch().dtype):
            raise StateFormatError(f"unknown tensor type {node['v']!r}")
        return self._register(node, dtype)

    def _decode_torch_generator(self, node):
        torch = _torch()
        generator = torch.Generator(device=node["device"])
        generator.set_state(torch.from_numpy(self.array(node["state"]).copy()))
        return self._register(node, generator)

    def _decode_tensor(self, node):
        torch = _torch()
        dtype = self._decode_torch_dtype({"v": node["dtype"], "id": -1})
        key = (int(node["storage"]), str(node["device"]))
        if key not in self.storages:
            raw = self.array(f"s{key[0]}")
            if raw.dtype != np.uint8 or raw.ndim != 1:
                raise StateFormatError(f"storage s{key[0]} is not a byte array")
            self.storages[key] = torch.from_numpy(raw.copy()).to(key[1]).untyped_storage()
        storage = self.storages[key]
        size, stride, offset = list(map(int, node["size"])), list(map(int, node["stride"])), int(node["offset"])
        itemsize = torch.empty(0, dtype=dtype).element_size()
        extent = offset + sum((s - 1) * st for s, st in zip(size, stride)) + 1 if all(size) else 0
        if offset < 0 or any(st < 0 for st in stride) or extent * itemsize > storage.nbytes():
            raise StateFormatError("a tensor reaches outside its stored storage")
        tensor = torch.empty(0, dtype=dtype, device=key[1]).set_(storage, offset, size, stride)
        if node["parameter"]:
            tensor = torch.nn.Parameter(tensor, requires_grad=bool(node["grad"]))
        elif node["grad"]:
            tensor.requires_grad_(True)
        return self._register(node, tensor)


def _nesting_depth(text: bytes, limit: int) -> int:
    """How deep the JSON ``text`` nests (brackets outside its strings), counted in one pass without
    recursion; the count stops once it passes ``limit``."""
    depth = deepest = 0
    in_string, escaped = False, -1
    for token in _JSON_TOKEN.finditer(text):
        at, char = token.start(), text[token.start()]
        if in_string:
            if at == escaped:
                continue
            if char == 0x5C:          # backslash: the next character is escaped
                escaped = at + 1
            elif char == 0x22:        # quote
                in_string = False
        elif char == 0x22:
            in_string = True
        elif char in (0x5B, 0x7B):    # [ {
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > limit:
                    break
        elif char in (0x5D, 0x7D):    # ] }
            depth -= 1
    return deepest


def _check_archive(data: bytes) -> None:
    """What ``encode_state`` writes (``np.savez``: stored, uncompressed ``.npy`` entries), before
    NumPy allocates anything: no entry may unpack to more than the bytes given, and no array header
    may claim more data than its entry holds."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        for info in archive.infolist():
            if not info.filename.endswith(".npy"):
                raise StateFormatError(f"entry {info.filename[:80]!r} is not an array")
            if info.compress_type != zipfile.ZIP_STORED or info.file_size > len(data):
                raise StateFormatError(f"entry {info.filename[:80]!r} is compressed or larger than the state")
            with archive.open(info) as entry:
                version = np.lib.format.read_magic(entry)
                if version == (1, 0):
                    shape, _, dtype = np.lib.format.read_array_header_1_0(entry)
                elif version == (2, 0):
                    shape, _, dtype = np.lib.format.read_array_header_2_0(entry)
                else:
                    raise StateFormatError(f"entry {info.filename[:80]!r}: array format {version} is not written here")
                if dtype.hasobject:
                    raise StateFormatError(f"entry {info.filename[:80]!r} holds Python objects")
                count = 1
                for extent in shape:
                    count *= extent
                if count * dtype.itemsize > info.file_size - entry.tell():
                    raise StateFormatError(f"entry {info.filename[:80]!r} claims more data than it holds")


def decode_state(data: bytes) -> Any:
    """The object ``encode_state`` was given; :class:`StateFormatError` for anything else: whatever
    reading hostile bytes raises (RecursionError, MemoryError, ...) becomes one, with a short reason."""
    try:
        return _decode_state(data)
    except StateFormatError as error:
        raise StateFormatError(str(error)[:500]) from None
    except Exception as error:   # hostile bytes: every failure is the state's
        raise StateFormatError(f"damaged state ({type(error).__name__}: {str(error)[:200]})") from None


def _decode_state(data: bytes) -> Any:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise StateFormatError(f"a state is bytes, not {type(data).__name__}")
    try:
        _check_archive(data)
        with np.load(io.BytesIO(data), allow_pickle=False) as stored:
            arrays = {name: stored[name] for name in stored.files}
        entry = arrays.pop(_STATE_ENTRY)
        if entry.dtype != np.uint8 or entry.ndim != 1:
            raise StateFormatError("the structure entry is not text")
        text = entry.tobytes()
        if _nesting_depth(text, MAX_DEPTH) > MAX_DEPTH:
            raise StateFormatError(f"the structure nests deeper than {MAX_DEPTH}")
        structure = json.loads(text.decode())
    except StateFormatError:
        raise
    except Exception as error:
        raise StateFormatError(f"not a stored state ({type(error).__name__}: {str(error)[:200]})") from None
    if not isinstance(structure, dict) or structure.get("format") != FORMAT:
        raise StateFormatError(f"not a {FORMAT} state")
    if "root" not in structure:
        raise StateFormatError("the state has no root")
    return _Decoder(arrays).decode(structure["root"])


# ---- where classes moved (MOVED_CLASSES, above) -----------------------------------------------------
# core's modules laid out in rooms (engine, baselines, neural, kernel): every class a checkpoint may hold
# (its exceptions aside), from the module it was defined in then to the one that defines it now. A later
# move of one of these classes rewrites its value (where it lives now), never its key.
MOVED_CLASSES[("banditsweep.core.contracts", "TrialContent")] = ("banditsweep.core.engine.contracts", "TrialContent")
MOVED_CLASSES[("banditsweep.core.contracts", "Config")] = ("banditsweep.core.engine.contracts", "Config")
MOVED_CLASSES[("banditsweep.core.contracts", "Problem")] = ("banditsweep.core.engine.contracts", "Problem")
MOVED_CLASSES[("banditsweep.core.contracts", "Decision")] = ("banditsweep.core.engine.contracts", "Decision")
MOVED_CLASSES[("banditsweep.core.contracts", "BatchDecision")] = ("banditsweep.core.engine.contracts", "BatchDecision")
MOVED_CLASSES[("banditsweep.core.contracts", "Feedback")] = ("banditsweep.core.engine.contracts", "Feedback")
MOVED_CLASSES[("banditsweep.core.contracts", "Environment")] = ("banditsweep.core.engine.contracts", "Environment")
MOVED_CLASSES[("banditsweep.core.contracts", "BatchedPolicy")] = ("banditsweep.core.engine.contracts", "BatchedPolicy")
MOVED_CLASSES[("banditsweep.core.contracts", "Policy")] = ("banditsweep.core.engine.contracts", "Policy")
MOVED_CLASSES[("banditsweep.core.contracts", "PolicyBatch")] = ("banditsweep.core.engine.contracts", "PolicyBatch")
MOVED_CLASSES[("banditsweep.core.trial", "TrialSpec")] = ("banditsweep.core.engine.trial", "TrialSpec")
MOVED_CLASSES[("banditsweep.core.trial", "TrialRun")] = ("banditsweep.core.engine.trial", "TrialRun")
MOVED_CLASSES[("banditsweep.core.round_loop", "TrialResult")] = ("banditsweep.core.engine.round_loop", "TrialResult")
MOVED_CLASSES[("banditsweep.core.round_loop", "TrialRecorder")] = ("banditsweep.core.engine.round_loop", "TrialRecorder")
MOVED_CLASSES[("banditsweep.core.round_loop", "Played")] = ("banditsweep.core.engine.round_loop", "Played")
MOVED_CLASSES[("banditsweep.core.round_loop", "RoundLoop")] = ("banditsweep.core.engine.round_loop", "RoundLoop")
MOVED_CLASSES[("banditsweep.core.round_loop", "Checkpoints")] = ("banditsweep.core.engine.round_loop", "Checkpoints")
MOVED_CLASSES[("banditsweep.core.state_declaration", "Declaration")] = ("banditsweep.core.engine.state_declaration", "Declaration")
MOVED_CLASSES[("banditsweep.core.networks", "StackedNetwork")] = ("banditsweep.core.neural.networks", "StackedNetwork")
MOVED_CLASSES[("banditsweep.core.networks", "ArmParameters")] = ("banditsweep.core.neural.networks", "ArmParameters")
MOVED_CLASSES[("banditsweep.core.training", "History")] = ("banditsweep.core.neural.training", "History")
MOVED_CLASSES[("banditsweep.core.training", "_Bucket")] = ("banditsweep.core.neural.training", "_Bucket")
MOVED_CLASSES[("banditsweep.core.z_matrix", "ZMatrix")] = ("banditsweep.core.neural.z_matrix", "ZMatrix")
MOVED_CLASSES[("banditsweep.core.datasets", "DatasetInfo")] = ("banditsweep.core.neural.datasets", "DatasetInfo")
MOVED_CLASSES[("banditsweep.core.datasets", "Dataset")] = ("banditsweep.core.neural.datasets", "Dataset")
MOVED_CLASSES[("banditsweep.core.environments.classification", "ClassificationConfig")] = ("banditsweep.core.neural.classification", "ClassificationConfig")
MOVED_CLASSES[("banditsweep.core.environments.classification", "ClassificationBandit")] = ("banditsweep.core.neural.classification", "ClassificationBandit")
MOVED_CLASSES[("banditsweep.core.algorithms.neural_base", "NeuralParams")] = ("banditsweep.core.neural.algorithms.neural_base", "NeuralParams")
MOVED_CLASSES[("banditsweep.core.algorithms.neural_base", "BiasedParams")] = ("banditsweep.core.neural.algorithms.neural_base", "BiasedParams")
MOVED_CLASSES[("banditsweep.core.algorithms.neural_base", "BaselineParams")] = ("banditsweep.core.neural.algorithms.neural_base", "BaselineParams")
MOVED_CLASSES[("banditsweep.core.algorithms.neural_base", "NeuralPolicy")] = ("banditsweep.core.neural.algorithms.neural_base", "NeuralPolicy")
MOVED_CLASSES[("banditsweep.core.algorithms.neural_base", "GradientExplorationPolicy")] = ("banditsweep.core.neural.algorithms.neural_base", "GradientExplorationPolicy")
MOVED_CLASSES[("banditsweep.core.algorithms.neural_ucb", "NeuralUCBParams")] = ("banditsweep.core.neural.algorithms.neural_ucb", "NeuralUCBParams")
MOVED_CLASSES[("banditsweep.core.algorithms.neural_ucb", "NeuralUCB")] = ("banditsweep.core.neural.algorithms.neural_ucb", "NeuralUCB")
MOVED_CLASSES[("banditsweep.core.algorithms.neural_ts", "NeuralTSParams")] = ("banditsweep.core.neural.algorithms.neural_ts", "NeuralTSParams")
MOVED_CLASSES[("banditsweep.core.algorithms.neural_ts", "NeuralTS")] = ("banditsweep.core.neural.algorithms.neural_ts", "NeuralTS")
MOVED_CLASSES[("banditsweep.core.algorithms.deep_fpl", "DeepFPLParams")] = ("banditsweep.core.neural.algorithms.deep_fpl", "DeepFPLParams")
MOVED_CLASSES[("banditsweep.core.algorithms.deep_fpl", "DeepFPL")] = ("banditsweep.core.neural.algorithms.deep_fpl", "DeepFPL")
MOVED_CLASSES[("banditsweep.core.algorithms.bootstrapped_nn", "BootstrappedNNParams")] = ("banditsweep.core.neural.algorithms.bootstrapped_nn", "BootstrappedNNParams")
MOVED_CLASSES[("banditsweep.core.algorithms.bootstrapped_nn", "BootstrappedNN")] = ("banditsweep.core.neural.algorithms.bootstrapped_nn", "BootstrappedNN")
MOVED_CLASSES[("banditsweep.core.algorithms.neural_eps_greedy", "NeuralEpsGreedyParams")] = ("banditsweep.core.neural.algorithms.neural_eps_greedy", "NeuralEpsGreedyParams")
MOVED_CLASSES[("banditsweep.core.algorithms.neural_eps_greedy", "NeuralEpsGreedy")] = ("banditsweep.core.neural.algorithms.neural_eps_greedy", "NeuralEpsGreedy")
MOVED_CLASSES[("banditsweep.core.algorithms.neural_rbmle_ga", "NeuralRBMLEGAParams")] = ("banditsweep.core.neural.algorithms.neural_rbmle_ga", "NeuralRBMLEGAParams")
MOVED_CLASSES[("banditsweep.core.algorithms.neural_rbmle_ga", "NeuralRBMLEGA")] = ("banditsweep.core.neural.algorithms.neural_rbmle_ga", "NeuralRBMLEGA")
MOVED_CLASSES[("banditsweep.core.algorithms.neural_rbmle_pc", "NeuralRBMLEPCParams")] = ("banditsweep.core.neural.algorithms.neural_rbmle_pc", "NeuralRBMLEPCParams")
MOVED_CLASSES[("banditsweep.core.algorithms.neural_rbmle_pc", "NeuralRBMLEPC")] = ("banditsweep.core.neural.algorithms.neural_rbmle_pc", "NeuralRBMLEPC")
MOVED_CLASSES[("banditsweep.core.kernels", "Kernel")] = ("banditsweep.core.kernel.kernels", "Kernel")
MOVED_CLASSES[("banditsweep.core.domains", "GridDomain")] = ("banditsweep.core.kernel.domains", "GridDomain")
MOVED_CLASSES[("banditsweep.core.domains", "ContinuousDomain")] = ("banditsweep.core.kernel.domains", "ContinuousDomain")
MOVED_CLASSES[("banditsweep.core.domains", "UniformDomain")] = ("banditsweep.core.kernel.domains", "UniformDomain")
MOVED_CLASSES[("banditsweep.core.exp3", "ExponentialWeights")] = ("banditsweep.core.kernel.exp3", "ExponentialWeights")
MOVED_CLASSES[("banditsweep.core.exp3", "Inversion")] = ("banditsweep.core.kernel.exp3", "Inversion")
MOVED_CLASSES[("banditsweep.core.exp3", "Exp3Schedule")] = ("banditsweep.core.kernel.exp3", "Exp3Schedule")
MOVED_CLASSES[("banditsweep.core.exp3", "APGSchedule")] = ("banditsweep.core.kernel.exp3", "APGSchedule")
MOVED_CLASSES[("banditsweep.core.exp3", "DesignStep")] = ("banditsweep.core.kernel.exp3", "DesignStep")
MOVED_CLASSES[("banditsweep.core.exp3", "DesignPoints")] = ("banditsweep.core.kernel.exp3", "DesignPoints")
MOVED_CLASSES[("banditsweep.core.exp3", "_Features")] = ("banditsweep.core.kernel.exp3", "_Features")
MOVED_CLASSES[("banditsweep.core.exp3", "Exp3Policy")] = ("banditsweep.core.kernel.exp3", "Exp3Policy")
MOVED_CLASSES[("banditsweep.core.exp3", "Exp3Batch")] = ("banditsweep.core.kernel.exp3", "Exp3Batch")
MOVED_CLASSES[("banditsweep.core.nystrom", "NystromSample")] = ("banditsweep.core.kernel.nystrom", "NystromSample")
MOVED_CLASSES[("banditsweep.core.algorithms.kernel_exp3", "Exp3ScheduleParams")] = ("banditsweep.core.kernel.algorithms.kernel_exp3", "Exp3ScheduleParams")
MOVED_CLASSES[("banditsweep.core.algorithms.kernel_exp3", "KernelExp3Params")] = ("banditsweep.core.kernel.algorithms.kernel_exp3", "KernelExp3Params")
MOVED_CLASSES[("banditsweep.core.algorithms.kernel_exp3", "KernelExp3")] = ("banditsweep.core.kernel.algorithms.kernel_exp3", "KernelExp3")
MOVED_CLASSES[("banditsweep.core.algorithms.rls_kernel_exp3", "RLSKernelExp3Params")] = ("banditsweep.core.kernel.algorithms.rls_kernel_exp3", "RLSKernelExp3Params")
MOVED_CLASSES[("banditsweep.core.algorithms.rls_kernel_exp3", "RLSKernelExp3")] = ("banditsweep.core.kernel.algorithms.rls_kernel_exp3", "RLSKernelExp3")
MOVED_CLASSES[("banditsweep.core.algorithms.rls_kernel_exp3", "RLSKernelExp3AMVR")] = ("banditsweep.core.kernel.algorithms.rls_kernel_exp3", "RLSKernelExp3AMVR")
MOVED_CLASSES[("banditsweep.core.algorithms.rls_kernel_exp3", "Landmarks")] = ("banditsweep.core.kernel.algorithms.rls_kernel_exp3", "Landmarks")
MOVED_CLASSES[("banditsweep.core.algorithms.rls_kernel_exp3", "RLSKernelExp3Slice")] = ("banditsweep.core.kernel.algorithms.rls_kernel_exp3", "RLSKernelExp3Slice")
MOVED_CLASSES[("banditsweep.core.algorithms.rls_kernel_exp3", "ShardedRLSKernelExp3")] = ("banditsweep.core.kernel.algorithms.rls_kernel_exp3", "ShardedRLSKernelExp3")
MOVED_CLASSES[("banditsweep.core.algorithms.apg_exp3", "APGExp3Params")] = ("banditsweep.core.kernel.algorithms.apg_exp3", "APGExp3Params")
MOVED_CLASSES[("banditsweep.core.algorithms.apg_exp3", "APGExp3")] = ("banditsweep.core.kernel.algorithms.apg_exp3", "APGExp3")
MOVED_CLASSES[("banditsweep.core.algorithms.apg_exp3", "APGExp3Slice")] = ("banditsweep.core.kernel.algorithms.apg_exp3", "APGExp3Slice")
MOVED_CLASSES[("banditsweep.core.algorithms.apg_exp3", "ShardedDesign")] = ("banditsweep.core.kernel.algorithms.apg_exp3", "ShardedDesign")
MOVED_CLASSES[("banditsweep.core.algorithms.apg_exp3", "ShardedAPGExp3")] = ("banditsweep.core.kernel.algorithms.apg_exp3", "ShardedAPGExp3")
MOVED_CLASSES[("banditsweep.core.algorithms.random_policy", "RandomParams")] = ("banditsweep.core.kernel.algorithms.random_policy", "RandomParams")
MOVED_CLASSES[("banditsweep.core.algorithms.random_policy", "RandomPolicy")] = ("banditsweep.core.kernel.algorithms.random_policy", "RandomPolicy")
MOVED_CLASSES[("banditsweep.core.algorithms.random_policy", "ShardedRandom")] = ("banditsweep.core.kernel.algorithms.random_policy", "ShardedRandom")
MOVED_CLASSES[("banditsweep.core.environments.adversarial_kernel", "KernelDomainConfig")] = ("banditsweep.core.kernel.adversarial_kernel", "KernelDomainConfig")
MOVED_CLASSES[("banditsweep.core.environments.adversarial_kernel", "AdversarialKernelConfig")] = ("banditsweep.core.kernel.adversarial_kernel", "AdversarialKernelConfig")
MOVED_CLASSES[("banditsweep.core.environments.adversarial_kernel", "CandidateFunctions")] = ("banditsweep.core.kernel.adversarial_kernel", "CandidateFunctions")
MOVED_CLASSES[("banditsweep.core.environments.adversarial_kernel", "GridSlice")] = ("banditsweep.core.kernel.adversarial_kernel", "GridSlice")
MOVED_CLASSES[("banditsweep.core.environments.adversarial_kernel", "KernelDomainEnvironment")] = ("banditsweep.core.kernel.adversarial_kernel", "KernelDomainEnvironment")
MOVED_CLASSES[("banditsweep.core.environments.adversarial_kernel", "RegretTally")] = ("banditsweep.core.kernel.adversarial_kernel", "RegretTally")
MOVED_CLASSES[("banditsweep.core.environments.adversarial_kernel", "AdversarialKernelBandit")] = ("banditsweep.core.kernel.adversarial_kernel", "AdversarialKernelBandit")
MOVED_CLASSES[("banditsweep.core.environments.kernel_lower_bound", "KernelLowerBoundConfig")] = ("banditsweep.core.kernel.kernel_lower_bound", "KernelLowerBoundConfig")
MOVED_CLASSES[("banditsweep.core.environments.kernel_lower_bound", "KernelLowerBound")] = ("banditsweep.core.kernel.kernel_lower_bound", "KernelLowerBound")
MOVED_CLASSES[("banditsweep.core.sharded.algorithm", "Round")] = ("banditsweep.core.kernel.sharded.algorithm", "Round")
MOVED_CLASSES[("banditsweep.core.sharded.algorithm", "AlgorithmSlice")] = ("banditsweep.core.kernel.sharded.algorithm", "AlgorithmSlice")
MOVED_CLASSES[("banditsweep.core.sharded.algorithm", "ShardedAlgorithm")] = ("banditsweep.core.kernel.sharded.algorithm", "ShardedAlgorithm")
MOVED_CLASSES[("banditsweep.core.sharded.algorithm", "ShardedExp3")] = ("banditsweep.core.kernel.sharded.algorithm", "ShardedExp3")
MOVED_CLASSES[("banditsweep.core.sharded.coordinator", "ShardedKernelTrial")] = ("banditsweep.core.kernel.sharded.coordinator", "ShardedKernelTrial")
MOVED_CLASSES[("banditsweep.core.sharded.protocol", "Request")] = ("banditsweep.core.kernel.sharded.protocol", "Request")
MOVED_CLASSES[("banditsweep.core.sharded.protocol", "Answering")] = ("banditsweep.core.kernel.sharded.protocol", "Answering")
MOVED_CLASSES[("banditsweep.core.sharded.protocol", "ShardGroup")] = ("banditsweep.core.kernel.sharded.protocol", "ShardGroup")
MOVED_CLASSES[("banditsweep.core.sharded.protocol", "LocalShards")] = ("banditsweep.core.kernel.sharded.protocol", "LocalShards")
MOVED_CLASSES[("banditsweep.core.sharded.protocol", "Candidate")] = ("banditsweep.core.kernel.sharded.protocol", "Candidate")
MOVED_CLASSES[("banditsweep.core.sharded.protocol", "Tied")] = ("banditsweep.core.kernel.sharded.protocol", "Tied")
MOVED_CLASSES[("banditsweep.core.sharded.protocol", "Ties")] = ("banditsweep.core.kernel.sharded.protocol", "Ties")
MOVED_CLASSES[("banditsweep.core.sharded.protocol", "Partition")] = ("banditsweep.core.kernel.sharded.protocol", "Partition")
MOVED_CLASSES[("banditsweep.core.sharded.protocol", "Moved")] = ("banditsweep.core.kernel.sharded.protocol", "Moved")
MOVED_CLASSES[("banditsweep.core.sharded.protocol", "Updated")] = ("banditsweep.core.kernel.sharded.protocol", "Updated")
MOVED_CLASSES[("banditsweep.core.sharded.protocol", "Description")] = ("banditsweep.core.kernel.sharded.protocol", "Description")
MOVED_CLASSES[("banditsweep.core.sharded.protocol", "Describe")] = ("banditsweep.core.kernel.sharded.protocol", "Describe")
MOVED_CLASSES[("banditsweep.core.sharded.protocol", "UniformSums")] = ("banditsweep.core.kernel.sharded.protocol", "UniformSums")
MOVED_CLASSES[("banditsweep.core.sharded.protocol", "Play")] = ("banditsweep.core.kernel.sharded.protocol", "Play")
MOVED_CLASSES[("banditsweep.core.sharded.protocol", "Value")] = ("banditsweep.core.kernel.sharded.protocol", "Value")
MOVED_CLASSES[("banditsweep.core.sharded.protocol", "Point")] = ("banditsweep.core.kernel.sharded.protocol", "Point")
MOVED_CLASSES[("banditsweep.core.sharded.protocol", "PointAt")] = ("banditsweep.core.kernel.sharded.protocol", "PointAt")
MOVED_CLASSES[("banditsweep.core.sharded.protocol", "PivotCandidate")] = ("banditsweep.core.kernel.sharded.protocol", "PivotCandidate")
MOVED_CLASSES[("banditsweep.core.sharded.protocol", "Row")] = ("banditsweep.core.kernel.sharded.protocol", "Row")
MOVED_CLASSES[("banditsweep.core.sharded.protocol", "PivotRow")] = ("banditsweep.core.kernel.sharded.protocol", "PivotRow")
MOVED_CLASSES[("banditsweep.core.sharded.protocol", "PivotAdd")] = ("banditsweep.core.kernel.sharded.protocol", "PivotAdd")
MOVED_CLASSES[("banditsweep.core.sharded.protocol", "PivotsDone")] = ("banditsweep.core.kernel.sharded.protocol", "PivotsDone")
MOVED_CLASSES[("banditsweep.core.sharded.protocol", "SetExploration")] = ("banditsweep.core.kernel.sharded.protocol", "SetExploration")
MOVED_CLASSES[("banditsweep.core.sharded.protocol", "DesignStart")] = ("banditsweep.core.kernel.sharded.protocol", "DesignStart")
MOVED_CLASSES[("banditsweep.core.sharded.protocol", "DesignInformation")] = ("banditsweep.core.kernel.sharded.protocol", "DesignInformation")
MOVED_CLASSES[("banditsweep.core.sharded.protocol", "Leverage")] = ("banditsweep.core.kernel.sharded.protocol", "Leverage")
MOVED_CLASSES[("banditsweep.core.sharded.protocol", "DesignLeverage")] = ("banditsweep.core.kernel.sharded.protocol", "DesignLeverage")
MOVED_CLASSES[("banditsweep.core.sharded.protocol", "DesignMove")] = ("banditsweep.core.kernel.sharded.protocol", "DesignMove")
MOVED_CLASSES[("banditsweep.core.sharded.protocol", "DesignDone")] = ("banditsweep.core.kernel.sharded.protocol", "DesignDone")
MOVED_CLASSES[("banditsweep.core.sharded.protocol", "LogPartition")] = ("banditsweep.core.kernel.sharded.protocol", "LogPartition")
MOVED_CLASSES[("banditsweep.core.sharded.protocol", "Distributed")] = ("banditsweep.core.kernel.sharded.protocol", "Distributed")
MOVED_CLASSES[("banditsweep.core.sharded.protocol", "Distribution")] = ("banditsweep.core.kernel.sharded.protocol", "Distribution")
MOVED_CLASSES[("banditsweep.core.sharded.protocol", "Located")] = ("banditsweep.core.kernel.sharded.protocol", "Located")
MOVED_CLASSES[("banditsweep.core.sharded.protocol", "Locate")] = ("banditsweep.core.kernel.sharded.protocol", "Locate")
MOVED_CLASSES[("banditsweep.core.sharded.protocol", "LinearEstimate")] = ("banditsweep.core.kernel.sharded.protocol", "LinearEstimate")
MOVED_CLASSES[("banditsweep.core.sharded.protocol", "LevelCounts")] = ("banditsweep.core.kernel.sharded.protocol", "LevelCounts")
MOVED_CLASSES[("banditsweep.core.sharded.protocol", "Members")] = ("banditsweep.core.kernel.sharded.protocol", "Members")
MOVED_CLASSES[("banditsweep.core.sharded.protocol", "LevelMembers")] = ("banditsweep.core.kernel.sharded.protocol", "LevelMembers")
MOVED_CLASSES[("banditsweep.core.sharded.protocol", "Scores")] = ("banditsweep.core.kernel.sharded.protocol", "Scores")
MOVED_CLASSES[("banditsweep.core.sharded.protocol", "LevelScores")] = ("banditsweep.core.kernel.sharded.protocol", "LevelScores")
MOVED_CLASSES[("banditsweep.core.sharded.protocol", "LevelKeep")] = ("banditsweep.core.kernel.sharded.protocol", "LevelKeep")
MOVED_CLASSES[("banditsweep.core.sharded.protocol", "Embedded")] = ("banditsweep.core.kernel.sharded.protocol", "Embedded")
MOVED_CLASSES[("banditsweep.core.sharded.protocol", "Embed")] = ("banditsweep.core.kernel.sharded.protocol", "Embed")
MOVED_CLASSES[("banditsweep.core.sharded.protocol", "NystromEstimate")] = ("banditsweep.core.kernel.sharded.protocol", "NystromEstimate")
MOVED_CLASSES[("banditsweep.core.sharded.protocol", "Part")] = ("banditsweep.core.kernel.sharded.protocol", "Part")
MOVED_CLASSES[("banditsweep.core.sharded.protocol", "SavePart")] = ("banditsweep.core.kernel.sharded.protocol", "SavePart")
MOVED_CLASSES[("banditsweep.core.sharded.protocol", "CheckPart")] = ("banditsweep.core.kernel.sharded.protocol", "CheckPart")
MOVED_CLASSES[("banditsweep.core.sharded.protocol", "LoadPart")] = ("banditsweep.core.kernel.sharded.protocol", "LoadPart")
MOVED_CLASSES[("banditsweep.core.sharded.protocol", "DiscardPart")] = ("banditsweep.core.kernel.sharded.protocol", "DiscardPart")
MOVED_CLASSES[("banditsweep.core.sharded.shard", "KernelShard")] = ("banditsweep.core.kernel.sharded.shard", "KernelShard")
MOVED_CLASSES[("banditsweep.core.algorithms.linear", "RidgeStatistics")] = ("banditsweep.core.baselines.linear", "RidgeStatistics")
MOVED_CLASSES[("banditsweep.core.algorithms.linear", "LinearParams")] = ("banditsweep.core.baselines.linear", "LinearParams")
MOVED_CLASSES[("banditsweep.core.algorithms.linear", "_LinearPolicy")] = ("banditsweep.core.baselines.linear", "_LinearPolicy")
MOVED_CLASSES[("banditsweep.core.algorithms.linear", "LinUCB")] = ("banditsweep.core.baselines.linear", "LinUCB")
MOVED_CLASSES[("banditsweep.core.algorithms.linear", "LinTS")] = ("banditsweep.core.baselines.linear", "LinTS")
MOVED_CLASSES[("banditsweep.core.algorithms.linear", "LinRBMLE")] = ("banditsweep.core.baselines.linear", "LinRBMLE")
MOVED_CLASSES[("banditsweep.core.environments.synthetic", "SyntheticConfig")] = ("banditsweep.core.baselines.synthetic", "SyntheticConfig")
MOVED_CLASSES[("banditsweep.core.environments.synthetic", "SyntheticBandit")] = ("banditsweep.core.baselines.synthetic", "SyntheticBandit")
